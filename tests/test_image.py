"""The operator image: what ``hack/build-image.sh`` builds agrees with the Dockerfile and the chart.

The image is built (or, with unchanged inputs, reused from ``~/.cache/kubeforge/image``) once per
session by :func:`built_image`; building needs root, mmdebstrap and umoci (the script installs
both from Debian's archive when missing), and fails with the script's own message otherwise.
The Dockerfile cannot be built here (no Docker engine), so it is parsed: its final stage's user,
entrypoint, cmd, env, ports and labels must be exactly the built image's OCI config, and its base
and packages those of the script. The chart's Deployment must run what the image declares.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
SCRIPT = ROOT / "hack" / "build-image.sh"
CHART = ROOT / "charts" / "kubeforge"
# A cold build (Debian packages and wheels downloaded, two layers) takes 2 to 4 minutes on 2 cores;
# a rebuild after a change to operator/ reuses the cached base and takes seconds.
BUILD_TIMEOUT = 1800
# The first test that needs the image may build it cold.
pytestmark = [pytest.mark.system, pytest.mark.timeout(BUILD_TIMEOUT + 300)]
# What the image's /dev, /etc/hosts, /etc/resolv.conf and /etc/hostname would be given by a runtime.
RUNTIME_FILES = ("/etc/hosts", "/etc/resolv.conf", "/etc/hostname")


# --- the Dockerfile, parsed ---------------------------------------------------------------------


@dataclass
class Stage:
    """One ``FROM`` stage of a Dockerfile: its base, name and instructions in order."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instr: str) -> list[str]:
        """The arguments of every ``instr`` instruction of the stage, in order."""
        return [args for name, args in self.instructions if name == instr]

    def last(self, instr: str) -> str | None:
        found = self.all(instr)
        return found[-1] if found else None


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: continuation lines joined, comments and directives dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as Docker does
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        instr, _, args = buf.strip().partition(" ")
        out.append((instr.upper(), args.strip()))
        buf = ""
    assert not buf, "the Dockerfile ends inside a continued line"
    return out


def parse_dockerfile(text: str) -> list[Stage]:
    """The stages of a Dockerfile, with ``ARG`` defaults declared before the first ``FROM``
    substituted into each base."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for instr, rest in dockerfile_instructions(text):
        if instr == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif instr == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, f"FROM {rest}"
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda v: args[v.group(1) or v.group(2)], m.group(1))
            stages.append(Stage(base=base, name=m.group(2)))
        else:
            assert stages, f"{instr} before FROM"
            stages[-1].instructions.append((instr, rest))
    return stages


def key_values(args: str) -> dict[str, str]:
    """``KEY=value KEY2="value 2"`` (LABEL, ENV) as a dict; also the legacy ``ENV KEY value``."""
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


def apt_packages(run: str) -> set[str]:
    """The packages a ``RUN ... apt-get install ... PKG...`` installs."""
    found: set[str] = set()
    for m in re.finditer(r"apt-get\s+install\s+(.*?)(?:&&|;|$)", run):
        found |= {w for w in m.group(1).split() if not w.startswith("-")}
    return found


def dockerfile_image_config() -> dict:
    """The OCI image config (``config`` object) that ``docker build`` gives the final stage.

    The base image's own settings are left out: the final stage sets every one of them
    (PATH included, literally), which :func:`test_dockerfile_sets_everything_itself` checks.
    """
    final = parse_dockerfile(DOCKERFILE.read_text())[-1]
    env: dict[str, str] = {}
    for e in final.all("ENV"):
        env.update(key_values(e))
    labels: dict[str, str] = {}
    for lbl in final.all("LABEL"):
        labels.update(key_values(lbl))
    ports = {p if "/" in p else f"{p}/tcp" for e in final.all("EXPOSE") for p in e.split()}
    return {
        "User": final.last("USER"),
        "Entrypoint": json.loads(final.last("ENTRYPOINT") or "null"),
        "Cmd": json.loads(final.last("CMD") or "null"),
        "Env": env,
        "ExposedPorts": ports,
        "Labels": labels,
        "WorkingDir": final.last("WORKDIR") or "",
    }


def script_var(name: str) -> str:
    """A ``NAME=value`` assignment at the start of a line of hack/build-image.sh."""
    m = re.search(rf"^{name}=(\S+)", SCRIPT.read_text(), re.M)
    assert m, f"{name}= not found in {SCRIPT}"
    return m.group(1)


# --- the built image ------------------------------------------------------------------------------


@dataclass
class Image:
    """An image in an OCI layout, as ``hack/build-image.sh`` leaves it."""

    layout: Path
    tag: str
    manifest: dict
    config: dict  # the whole config blob: architecture, os, config, rootfs, history
    build: dict  # build.json
    seconds: float  # this call of the script
    cached: bool  # the script found the image cached

    @property
    def ref(self) -> str:
        """``layout:tag`` as umoci and skopeo (``oci:``) take it."""
        return f"{self.layout}:{self.tag}"

    @property
    def env(self) -> dict[str, str]:
        return dict(e.split("=", 1) for e in self.config["config"].get("Env") or [])


def blob(layout: Path, digest: str) -> bytes:
    algo, _, hexdigest = digest.partition(":")
    return (layout / "blobs" / algo / hexdigest).read_bytes()


def read_layout(layout: Path) -> tuple[str, dict, dict]:
    """(tag, manifest, config) of the one image tagged in an OCI layout."""
    index = json.loads((layout / "index.json").read_text())
    (desc,) = index["manifests"]
    tag = desc["annotations"]["org.opencontainers.image.ref.name"]
    manifest = json.loads(blob(layout, desc["digest"]))
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    return tag, manifest, config


_BUILT: dict[str, object] = {}


def built_image() -> Image:
    """Run ``hack/build-image.sh`` once per session (a no-op when its inputs are unchanged).

    A failure is remembered too, so the next test does not build again for another half hour.

    Raises:
        pytest.fail.Exception: the script failed; its last output says why (not root, a tool
            that apt-get could not install, a download that failed or timed out).
    """
    if "image" in _BUILT:
        return _BUILT["image"]  # type: ignore[return-value]
    if "error" in _BUILT:
        pytest.fail(str(_BUILT["error"]), pytrace=False)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        _BUILT["error"] = f"hack/build-image.sh did not finish in {BUILD_TIMEOUT}s"
        pytest.fail(str(_BUILT["error"]), pytrace=False)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        _BUILT["error"] = (f"hack/build-image.sh failed (exit {proc.returncode}) after {seconds:.0f}s:\n"
                           f"{proc.stderr[-4000:]}")
        pytest.fail(str(_BUILT["error"]), pytrace=False)
    layout = Path(proc.stdout.strip().splitlines()[-1])
    tag, manifest, config = read_layout(layout)
    build = json.loads((layout.parent / "build.json").read_text())
    image = Image(layout, tag, manifest, config, build, seconds, cached="cached:" in proc.stderr)
    _BUILT["image"] = image
    return image


def report(request, image: Image) -> None:
    """Say on the terminal how long the build took (whatever pytest captures), once a session."""
    if _BUILT.get("reported") is image:
        return
    _BUILT["reported"] = image
    plugins = request.config.pluginmanager
    tr, capman = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    size = image.build["compressedBytes"] / 2**20
    how = (f"reused from the cache in {image.seconds:.1f}s (built in {image.build['buildSeconds']}s)"
           if image.cached else f"built in {image.seconds:.0f}s")
    line = f"[image] oci:{image.ref} {how}, {size:.0f} MiB compressed"
    if tr is None or capman is None:
        print(line)
        return
    with capman.global_and_fixture_disabled():
        tr.write_line("")
        tr.write_line(line)


def unpack(image: Image, dest: Path) -> Path:
    """Unpack the image's layers into ``dest`` (``umoci raw unpack``, as root); returns ``dest``."""
    proc = subprocess.run(["umoci", "raw", "unpack", "--image", image.ref, str(dest)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"umoci raw unpack failed: {proc.stderr[-2000:]}"
    return dest


def in_root(root: Path, path: str) -> Path:
    """``path`` inside the tree ``root``, following its symlinks as a chroot would.

    Never leaves ``root``: an absolute link such as Debian's ``/var/run -> /run`` resolves
    inside it, not on the host.
    """
    comps: list[str] = []
    todo = [p for p in path.split("/") if p]
    hops = 0
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            if comps:
                comps.pop()
            continue
        cand = root.joinpath(*comps, part)
        if cand.is_symlink():
            hops += 1
            assert hops < 40, f"symlink loop resolving {path} in {root}"
            target = os.readlink(cand)
            if target.startswith("/"):
                comps = []
            todo = [p for p in target.split("/") if p] + todo
            continue
        comps.append(part)
    return root.joinpath(*comps)


@pytest.fixture(scope="session")
def image(request) -> Image:
    img = built_image()
    report(request, img)
    return img


def unpacked_rootfs(image: Image, tmp_path_factory) -> Path:
    """The image's root filesystem, unpacked once per session and never written to: the cluster
    test runs the operator in an overlay of it (see tests/test_image_cluster.py)."""
    if "rootfs" not in _BUILT:
        t0 = time.monotonic()
        _BUILT["rootfs"] = unpack(image, tmp_path_factory.mktemp("image") / "rootfs")
        print(f"[image] unpacked in {time.monotonic() - t0:.0f}s")
    return _BUILT["rootfs"]  # type: ignore[return-value]


def discard_rootfs() -> None:
    """Delete the unpacked root filesystem (at the end of the session; 250 MiB)."""
    root = _BUILT.pop("rootfs", None)
    if root is not None:
        assert f" {root}" not in Path("/proc/self/mounts").read_text(), f"something is still mounted under {root}"
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def rootfs(image, tmp_path_factory):
    yield unpacked_rootfs(image, tmp_path_factory)
    discard_rootfs()


# --- the Dockerfile alone -------------------------------------------------------------------------


def test_dockerfile_parser_on_a_sample():
    text = """# syntax=docker/dockerfile:1
ARG BASE=debian:bookworm-slim
FROM ${BASE} AS build
RUN apt-get update \\
 # a comment inside a continuation
 && apt-get install -y --no-install-recommends python3 python3-venv
FROM $BASE
LABEL a="x y" b=z
ENV PATH=/opt/bin:/usr/bin \\
    K=1
ENV LEGACY some value
EXPOSE 8080 9090/udp
USER 1:2
ENTRYPOINT ["app"]
CMD ["run", "--x"]
"""
    build, final = parse_dockerfile(text)
    assert (build.base, build.name, final.base, final.name) == ("debian:bookworm-slim", "build", "debian:bookworm-slim", None)
    assert apt_packages(build.all("RUN")[0]) == {"python3", "python3-venv"}
    assert key_values(final.all("LABEL")[0]) == {"a": "x y", "b": "z"}
    assert key_values(final.all("ENV")[0]) == {"PATH": "/opt/bin:/usr/bin", "K": "1"}
    assert key_values(final.all("ENV")[1]) == {"LEGACY": "some value"}
    assert json.loads(final.last("CMD")) == ["run", "--x"]


def test_dockerfile_sets_everything_itself():
    """The final stage names its user, entrypoint, cmd and a literal PATH, so that neither image
    inherits a setting from its base (the script's base has none)."""
    cfg = dockerfile_image_config()
    assert cfg["User"] and cfg["Entrypoint"] and cfg["Cmd"]
    assert "$" not in cfg["Env"]["PATH"], "PATH must be literal: the script's image has no base PATH to extend"
    assert cfg["Env"]["PATH"].startswith("/opt/kubeforge/bin:")


def test_dockerfile_and_script_use_the_same_debian_and_packages():
    stages = parse_dockerfile(DOCKERFILE.read_text())
    suite = script_var("SUITE")
    for st in stages:
        assert re.fullmatch(rf"debian:{suite}(-[\w.]+)?(@sha256:[0-9a-f]{{64}})?", st.base), (
            f"the Dockerfile's stages must be Debian {suite} like hack/build-image.sh, not {st.base}")
    final_pkgs = set().union(*(apt_packages(r) for r in stages[-1].all("RUN")))
    assert final_pkgs == set(script_var("PACKAGES").split(",")), "the final stage installs the script's PACKAGES"
    assert "python3" in set().union(*(apt_packages(r) for r in stages[0].all("RUN")))


# --- the built image against the Dockerfile and the chart ----------------------------------------


def test_image_config_is_the_dockerfiles(image):
    cfg = image.config["config"]
    assert cfg.get("User") == "65532:65532"
    built = {
        "User": cfg.get("User"),
        "Entrypoint": cfg.get("Entrypoint"),
        "Cmd": cfg.get("Cmd"),
        "Env": image.env,
        "ExposedPorts": set(cfg.get("ExposedPorts") or {}),
        "Labels": cfg.get("Labels") or {},
        "WorkingDir": cfg.get("WorkingDir") or "",
    }
    assert built == dockerfile_image_config()
    assert (image.config["os"], image.config["architecture"]) == ("linux", "amd64")


def test_image_is_small_and_layered(image):
    layers = image.manifest["layers"]
    assert len(layers) == 2, "a base layer (Debian, python3, dependencies) and the kubeforge layer"
    assert all(lyr["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip" for lyr in layers)
    assert layers[1]["size"] < 5 * 2**20, "the application layer holds only the kubeforge wheel's files"
    total = sum(lyr["size"] for lyr in layers)
    assert total < 150 * 2**20, f"{total / 2**20:.0f} MiB compressed"
    assert len(image.config["rootfs"]["diff_ids"]) == 2


def test_chart_runs_what_the_image_declares(image):
    from kubeforge.sim.tools import tool

    out = subprocess.run([tool("helm"), "template", "kf", str(CHART), "--namespace", "kubeforge-system"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    deps = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
            for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"}
    assert sorted(deps) == ["activator", "operator"]  # the same image runs both
    cfg = image.config["config"]
    for component, dep in deps.items():
        pod = dep["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        assert c["command"] == cfg["Entrypoint"]
        if component == "operator":
            assert c["args"][: len(cfg["Cmd"])] == cfg["Cmd"]
            assert {f"{p['containerPort']}/{p.get('protocol', 'TCP').lower()}" for p in c["ports"]} == set(cfg["ExposedPorts"])
        else:
            assert c["args"][0] == "activator"
        uid, gid = (int(x) for x in cfg["User"].split(":"))
        for sc in (pod["securityContext"], c["securityContext"]):
            assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == (uid, gid, True)
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        for e in c.get("env", []):  # what both set, they set alike
            if e["name"] in image.env and "value" in e:
                assert e["value"] == image.env[e["name"]], e


def test_rootfs_has_the_user_the_venv_and_nothing_else(image, rootfs):
    passwd = in_root(rootfs, "/etc/passwd").read_text().splitlines()
    assert "kubeforge:x:65532:65532::/nonexistent:/usr/sbin/nologin" in passwd
    assert "kubeforge:x:65532:" in in_root(rootfs, "/etc/group").read_text().splitlines()
    assert "bookworm" in in_root(rootfs, "/etc/os-release").read_text()

    venv = in_root(rootfs, "/opt/kubeforge")
    assert os.readlink(venv / "bin" / "python3") == "/usr/bin/python3"  # Debian's python3
    assert (venv / "bin" / "kubeforge").read_text().splitlines()[0] == "#!/opt/kubeforge/bin/python"
    site = next(venv.glob("lib/python3.*/site-packages"))
    names = {p.name.lower() for p in site.iterdir()}
    assert not {n for n in names if n.startswith(("pip", "setuptools"))}, "no pip in the image"
    assert {"kubeforge", "kopf"} <= names
    for p in (site / "kubeforge").glob("__pycache__/*.pyc"):
        flags = struct.unpack("<I", p.read_bytes()[4:8])[0]
        assert flags == 1, f"{p.name}: unchecked-hash .pyc expected (flags {flags})"

    # nothing a build or a runtime leaves: caches, docs, device nodes, host files
    assert not list(in_root(rootfs, "/var/lib/apt/lists").glob("*_Packages*"))
    assert not list(in_root(rootfs, "/var/cache/apt").glob("*.bin"))
    assert not list(in_root(rootfs, "/root").glob(".cache")) and not list(rootfs.glob("tmp/*"))
    assert not [p for p in in_root(rootfs, "/usr/share/doc").rglob("*") if p.is_file() and p.name != "copyright"]
    assert not list(in_root(rootfs, "/usr/share/man").glob("*"))
    assert not list(in_root(rootfs, "/dev").iterdir())
    for f in RUNTIME_FILES[1:]:
        assert not in_root(rootfs, f).exists(), f"{f} comes from the runtime, not the image"


def test_entrypoint_runs_as_the_image_user(image, rootfs):
    """``ENTRYPOINT + CMD + --help`` in the image's root as 65532, with only the image's env:
    the venv is on PATH, the console script and the interpreter resolve, imports work."""
    if os.geteuid() != 0:
        pytest.fail("chroot needs root (the image build needs it too)")
    cfg = image.config["config"]
    argv = ["chroot", f"--userspec={cfg['User']}", str(rootfs), *cfg["Entrypoint"], *cfg["Cmd"], "--help"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=image.env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--health-address" in proc.stdout and "--metrics-port" in proc.stdout
    who = subprocess.run(["chroot", f"--userspec={cfg['User']}", str(rootfs), "python3", "-c",
                          "import os, sys; print(os.getuid(), os.getgid(), sys.prefix, sys.flags.dont_write_bytecode)"],
                         capture_output=True, text=True, timeout=60, env=image.env)
    assert who.stdout.split() == ["65532", "65532", "/opt/kubeforge", "1"], who.stderr


def test_activator_runs_from_the_image(image, rootfs):
    """The chart's activator Deployment runs ``kubeforge activator`` from the same image: its
    command parses and its modules (aiohttp, kubernetes_asyncio) import there."""
    if os.geteuid() != 0:
        pytest.fail("chroot needs root (the image build needs it too)")
    cfg = image.config["config"]
    root = ["chroot", f"--userspec={cfg['User']}", str(rootfs)]
    proc = subprocess.run([*root, *cfg["Entrypoint"], "activator", "--help"], capture_output=True, text=True,
                          timeout=60, env=image.env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--backend-override" in proc.stdout and "--max-body-bytes" in proc.stdout
    imp = subprocess.run([*root, "python3", "-c", "import kubeforge.activator._main"], capture_output=True, text=True,
                         timeout=60, env=image.env)
    assert imp.returncode == 0, imp.stderr[-2000:]
