"""The operator image, run as a pod would run it, against the real control plane.

No container runtime here, so this test is one: it unpacks the image built by
``hack/build-image.sh``, and runs the image's own ``Entrypoint + Cmd`` (read from its OCI config)
in a private mount namespace, chrooted into an overlay of the unpacked layers with

- the root filesystem read-only and a tmpfs at ``/tmp`` (the chart's ``readOnlyRootFilesystem``
  and its ``emptyDir``), ``/proc``, and a minimal ``/dev``;
- uid/gid 65532 from the image's ``User`` (``chroot --userspec``), no capabilities;
- exactly the image's ``Env`` plus what the kubelet adds: ``KUBERNETES_SERVICE_HOST`` / ``_PORT``
  (the local API server), ``HOSTNAME``, ``HOME``, and the chart's ``POD_NAMESPACE``;
- a token of a ServiceAccount bound to the chart's rendered RBAC, ``ca.crt`` and ``namespace``
  at ``/var/run/secrets/kubernetes.io/serviceaccount`` (as the kubelet projects them), and the
  host's ``/etc/hosts``, ``/etc/resolv.conf``, ``/etc/hostname`` (as a runtime provides them).

So the operator can only use the in-cluster config. The test waits (bounded) for ``/healthz``,
``/metrics`` and a real reconcile (a GPUPool's status), then stops it. The session's operator is
stopped first and always started again afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import get_json, wait_for
from test_image import CHART, RUNTIME_FILES, built_image, discard_rootfs, report, unpacked_rootfs

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(2400)]

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# An HTTP 403 as the kubernetes clients or kopf log it (not "403" inside a timestamp).
FORBIDDEN = re.compile(r"Forbidden|forbidden|\(403\)|HTTP 403|\"code\":\s*403")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")

# Runs as root in a fresh mount namespace (unshare --mount: mounts here never reach the host and
# vanish with the process), sets up the container's filesystem, then becomes the operator.
#   $1 lower (the unpacked image, never written)  $2 scratch dir  $3 files to place  $4 user:group
#   $5 the ServiceAccount directory  $6 the runtime's files  $7... Entrypoint + Cmd + extra args
# (chroot, like a runtime, looks the Entrypoint up in the image's PATH inside the image.)
LAUNCH = r"""
set -eu
lower=$1 scratch=$2 files=$3 user=$4 SA_DIR=$5 RUNTIME_FILES=$6
shift 6
root=$scratch/merged
mkdir -p "$scratch/upper" "$scratch/work" "$root"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$scratch/upper,workdir=$scratch/work" "$root"
# Paths are resolved inside the image (its /var/run links to /run) by the image's own tools.
chroot "$root" mkdir -p "$SA_DIR"
for f in token ca.crt namespace; do
  chroot "$root" sh -c "cat > $SA_DIR/$f && chmod 0644 $SA_DIR/$f" <"$files/$f"
done
for f in $RUNTIME_FILES; do
  chroot "$root" sh -c "cat > $f && chmod 0644 $f" <"$files/$(basename "$f")"
done
mount -o remount,ro "$root"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m tmpfs "$root/tmp"
mount -t tmpfs -o nosuid,mode=0755,size=1m tmpfs "$root/dev"
for d in null zero full random urandom; do
  touch "$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
mkdir "$root/dev/shm" "$root/dev/pts"
mount -t tmpfs -o nosuid,nodev,mode=1777,size=16m shm "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mount -o remount,ro "$root/dev"
# exactly the container's environment (files/environ, NUL-separated), nothing of this shell's
mapfile -d '' envs <"$files/environ"
exec env -i "${envs[@]}" chroot --userspec="$user" "$root" "$@"
"""


@pytest.fixture(scope="session")
def image(request):
    img = built_image()
    report(request, img)
    return img


@pytest.fixture(scope="session")
def rootfs(image, tmp_path_factory):
    yield unpacked_rootfs(image, tmp_path_factory)
    discard_rootfs()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET, (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError as e:
        return 0, str(e)


def helm_rbac(cluster, release: str, namespace: str) -> list[dict]:
    """The operator's ServiceAccount and RBAC objects and its Deployment, rendered for ``release`` in
    ``namespace`` (the activator's, labelled ``app.kubernetes.io/component: activator``, left out)."""
    from kubeforge.sim.tools import tool

    proc = subprocess.run([tool("helm"), "template", release, str(CHART), "--namespace", namespace],
                          capture_output=True, text=True, timeout=120, env=cluster.env())
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout)
            if d and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "activator"]
    return [d for d in docs if d["kind"] in RBAC_KINDS], next(d for d in docs if d["kind"] == "Deployment")


def api_server(cluster) -> tuple[str, int, bytes]:
    """(host, port, CA certificate PEM) of the cluster's API server, from its kubeconfig."""
    import base64

    kc = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ctx = next(c["context"] for c in kc["contexts"] if c["name"] == kc["current-context"])
    cl = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
    url = urllib.parse.urlsplit(cl["server"])
    if "certificate-authority-data" in cl:
        ca = base64.b64decode(cl["certificate-authority-data"])
    else:
        ca = Path(cl["certificate-authority"]).read_bytes()
    return url.hostname, url.port or 443, ca


def process_status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def session_operator_healthy(cluster) -> bool:
    """The session's operator (``kubeforge.demo.start_operator``) answers on its /healthz."""
    try:
        port = json.loads((cluster.dir / "operator.ports").read_text())["health"]
    except (OSError, ValueError, KeyError):
        return False
    return http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200


def forbidden(log: str) -> list[str]:
    """403s that RBAC decided, one line each (``NamespaceTerminating`` is admission, not RBAC)."""
    records = re.split(r"\n(?=\[\d{4}-\d\d-\d\d )", log)
    return [r.splitlines()[0] for r in records if FORBIDDEN.search(r) and "NamespaceTerminating" not in r]


def test_operator_image_runs_in_cluster_as_its_serviceaccount(cluster, namespace, fleet, image, rootfs, tmp_path):
    from kubeforge.demo import start_operator, stop_operator

    if os.geteuid() != 0:
        pytest.fail("running the image needs root (unshare --mount, overlay, chroot --userspec)")
    for tool in ("unshare", "chroot", "mount"):
        assert shutil.which(tool), f"{tool} not found (util-linux / coreutils)"
    cfg = image.config["config"]
    release = f"kfimg{uuid.uuid4().hex[:5]}"
    rbac, deployment = helm_rbac(cluster, release, namespace)
    (sa,) = [d["metadata"]["name"] for d in rbac if d["kind"] == "ServiceAccount"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]

    # the files the kubelet and the runtime would give the pod
    files = tmp_path / "files"
    files.mkdir()
    host, port, ca = api_server(cluster)
    (files / "ca.crt").write_bytes(ca)
    (files / "namespace").write_text(namespace)
    for f in RUNTIME_FILES:
        shutil.copyfile(f, files / Path(f).name) if Path(f).exists() else (files / Path(f).name).write_text("")

    # the image's defaults when they are free here, else free ports passed after the image's Cmd
    extra: list[str] = []
    health, metrics = 8081, 8080
    if not (port_free(health) and port_free(metrics)):
        health, metrics = free_port(), free_port()
        extra = ["--health-address", f"0.0.0.0:{health}", "--metrics-port", str(metrics)]
    argv = [*cfg["Entrypoint"], *cfg["Cmd"], *extra]
    env = dict(image.env)
    env.update({
        "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
        "HOSTNAME": f"{release}-test", "HOME": "/nonexistent",
    })
    for e in container.get("env", []):  # the chart's own env (POD_NAMESPACE from the downward API)
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[e["name"]] = namespace

    (files / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))

    scratch = Path(tempfile.mkdtemp(prefix="kubeforge-img-", dir=tmp_path))
    log_path = tmp_path / "operator.log"
    proc: subprocess.Popen | None = None
    created_rbac = False
    stop_operator(cluster)
    try:
        docs = "\n---\n".join(yaml.safe_dump(d) for d in rbac)
        cluster.kubectl("apply", "-f", "-", input=docs)
        created_rbac = True
        token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
        (files / "token").write_text(token)

        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [shutil.which("unshare"), "--mount", "--propagation", "private", "--", "bash", "-c", LAUNCH,
                 "launch", str(rootfs), str(scratch), str(files), cfg["User"], SA_DIR, " ".join(RUNTIME_FILES),
                 *argv],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"},
                start_new_session=True,
            )

        def log_text() -> str:
            return log_path.read_text(errors="replace")

        def answers(path: str, port_: int):
            if proc.poll() is not None:
                raise AssertionError(f"the operator exited with {proc.returncode}:\n{log_text()[-4000:]}")
            status, body = http_get(f"http://127.0.0.1:{port_}{path}")
            return status == 200 and (body or "ok")

        wait_for(lambda: answers("/healthz", health), timeout=90, interval=0.5, what="the image's /healthz")
        body = wait_for(lambda: answers("/metrics", metrics), timeout=30, interval=0.5, what="the image's /metrics")
        assert "kubeforge_" in body

        # it is the image's python, as the image's user, without privileges
        st = process_status(proc.pid)
        assert st["Uid"].split() == ["65532"] * 4 and st["Gid"].split() == ["65532"] * 4, st
        assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0, st
        assert os.readlink(f"/proc/{proc.pid}/exe").endswith("/python3.11")
        its_root = Path(f"/proc/{proc.pid}/root")
        assert (its_root / "opt/kubeforge/bin/kubeforge").exists() and (its_root / "run/secrets").is_dir()
        assert (its_root / "usr/lib/os-release").read_text() == (rootfs / "usr/lib/os-release").read_text()
        env_seen = dict(kv.split("=", 1) for kv in Path(f"/proc/{proc.pid}/environ").read_text().split("\0") if kv)
        assert env_seen == env, "exactly the image's Env plus the kubelet's"

        # a real reconcile: a pool of 2 nodes x 8 GPUs gets its status from this operator
        nodes = fleet(cliques=1, nodes=2, gpus=8)

        def pool_counted():
            pool = get_json(cluster, "gpupool", namespace)
            st = pool.get("status") or {}
            ok = (st.get("observedGeneration") == pool["metadata"]["generation"]
                  and (st.get("nodes") or {}).get("total") == len(nodes)
                  and (st.get("gpus") or {}).get("allocatable") == 16)
            return ok and st
        wait_for(pool_counted, timeout=90, interval=0.5, what="the GPUPool's status from the image's operator")
        wait_for(lambda: (m := answers("/metrics", metrics)) and f'pool="{namespace}"' in m and m,
                 timeout=30, interval=0.5, what="the pool's GPUs in the image's /metrics")

        assert not forbidden(log_text()), "RBAC gap (the image's operator log):\n" + "\n".join(forbidden(log_text())[:20])

        # a clean stop: SIGTERM, as the kubelet sends it
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the operator did not stop within 30s of SIGTERM:\n{log_text()[-3000:]}")
        assert f" {scratch}" not in Path("/proc/self/mounts").read_text(), "the mount namespace left mounts behind"
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if log_path.exists():
            print("--- the image's operator log (tail) ---\n" + "\n".join(log_path.read_text(errors="replace").splitlines()[-40:]))
        if created_rbac:
            for d in rbac:
                if d["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                    cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], "--ignore-not-found", check=False)
        if f" {scratch}" not in Path("/proc/self/mounts").read_text():
            shutil.rmtree(scratch, ignore_errors=True)
        start_operator(cluster)  # the session's operator, always back
        wait_for(lambda: session_operator_healthy(cluster), timeout=60, what="the session's operator to be back")
