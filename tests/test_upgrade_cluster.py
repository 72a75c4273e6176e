"""Upgrade in place (issue 31, item 3): kubeforge v0.1.0, installed with Helm and running 100
TrainingJobs and a multi-node InferenceService, upgraded to the working tree (chart, CRDs,
operator). After the upgrade: 0 restarted jobs, 0 recreated groups, 0 GPUs double-booked, the
ledger equal to the pods, 0 lost objects.

It runs on a cluster of its own (``<KUBEFORGE_TEST_CLUSTER>-upgrade``), started and deleted here:
the session cluster already has the working tree's CRDs, and an honest upgrade starts from
v0.1.0's. The v0.1.0 tree is a ``git worktree`` of the tag. As everywhere in the sim no container
runs: Helm installs and upgrades the chart (its CRDs, RBAC and Deployments), and the operator
that acts is a local ``kubeforge run``, v0.1.0's (``PYTHONPATH=<worktree>/operator``, the same
venv) and then the working tree's, one after the other, as a Deployment's rollout would swap them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import builders as b
from conftest import TEST_CLUSTER, apply, get_json, training_job, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
TAG = "v0.1.0"
# The commit the tag names (CHANGELOG.md): a clone made without tags (CI's) still has it in main's history.
RELEASE_COMMIT = "9059826e339ad46274a2c42d920e73c349b39221"
RELEASE, RELEASE_NS, NS = "kubeforge", "kubeforge-system", "upgrade"
GPU = "nvidia.com/gpu"
JOBS = 100
SERVICE = "llama-405b"
SETTLE_SECONDS = 60.0
# Helm installs the chart's Deployments; their pods never run anything here (no image pull).
CHART_ARGS = ["--set", "image.repository=registry.invalid/kubeforge", "--set", "replicaCount=1",
              "--set", "leaderElection.enabled=false"]


def say(msg: str) -> None:
    print(f"[upgrade] {msg}", flush=True)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def helm(c, *args: str) -> str:
    proc = subprocess.run([str(c.bin_dir / "helm"), *args], capture_output=True, text=True, env=c.env(), timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory):
    """A git worktree of v0.1.0 (removed afterwards): the tag where the clone has it, else its commit."""
    def known(ref: str) -> bool:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "-q", "--verify", ref],
                              capture_output=True).returncode == 0

    if known(f"refs/tags/{TAG}"):
        assert git("rev-parse", f"{TAG}^{{commit}}").strip() == RELEASE_COMMIT, f"{TAG} moved"
    if not known(f"{RELEASE_COMMIT}^{{commit}}"):
        pytest.fail(f"{TAG}'s commit {RELEASE_COMMIT[:12]} is not in {ROOT} (a shallow clone?): "
                    "the upgrade starts from it (git fetch --unshallow --tags)")
    path = tmp_path_factory.mktemp("release") / TAG
    git("worktree", "add", "--detach", str(path), RELEASE_COMMIT)
    yield path
    git("worktree", "remove", "--force", str(path))


@pytest.fixture(scope="module")
def fresh_cluster():
    """A cluster of this module's own, deleted afterwards (operators stopped, logs' tails printed)."""
    from kubeforge.demo import stop_operator
    from kubeforge.sim.cluster import Cluster

    c = Cluster(f"{TEST_CLUSTER}-upgrade")
    c.down(log=say)
    c.up(None, log=say)
    try:
        yield c
    finally:
        for name in ("operator-old", "operator"):
            stop_operator(c, name)
            log = c.dir / f"{name}.log"
            if log.exists():
                print(f"--- {name}.log (tail) ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        c.down(log=say)


def start_old_operator(c, tree: Path) -> None:
    """``kubeforge run`` of the v0.1.0 tree with v0.1.0's flags (its demo.start_operator's)."""
    from kubeforge.sim import free_port, start_detached

    env = {**c.env(), "PYTHONPATH": str(tree / "operator")}
    probe = subprocess.run([sys.executable, "-c", "import kubeforge; print(kubeforge.__version__, kubeforge.__file__)"],
                           capture_output=True, text=True, env=env, check=True).stdout.split()
    assert probe[0] == "0.1.0" and probe[1].startswith(str(tree)), probe  # the old code, not the working tree's
    health = free_port()
    (c.dir / "operator-old.ports").write_text(json.dumps({"health": health}))
    start_detached(c.dir / "operator-old.pid", c.dir / "operator-old.log",
                   ["kubeforge", "run", "--health-address", f"127.0.0.1:{health}",
                    "--metrics-address", "127.0.0.1", "--metrics-port", str(free_port())], env=env)
    wait_healthy(c, "operator-old")


def wait_healthy(c, name: str) -> None:
    import httpx

    port = json.loads((c.dir / f"{name}.ports").read_text())["health"]

    def ok() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
    wait_for(ok, timeout=90, interval=0.5, what=f"{name} /healthz")


def make_fleet(c) -> None:
    """Pool ``train``: 4 NVLink cliques x 7 nodes x 8 GPUs (224); pool ``serve``: 2 cliques x 2 nodes x 8."""
    from kubeforge.sim.fleet import Fleet, node_manifests

    groups = [{"name": f"{pool}-c{i}", "count": n, "gpu": {"count": 8},
               "labels": {"kubeforge.io/test-fleet": pool, "nvidia.com/gpu.clique": f"{pool}.c{i}"}}
              for pool, cliques, n in (("train", 4, 7), ("serve", 2, 2)) for i in range(cliques)]
    nodes = node_manifests(Fleet.model_validate({"name": "upgrade", "groups": groups}))
    c.apply_nodes(nodes)
    for pool in ("train", "serve"):
        apply(c, b.GPUPool(pool).selector({"matchLabels": {"kubeforge.io/test-fleet": pool}}).manifest())


def workloads() -> list[dict]:
    """100 jobs (even: 1 x 2 GPUs, odd: a gang of 2 x 1 GPU in one NVLink clique) and a 405B-class
    service: tensor 8 x pipeline 2 (2-node groups), 2 replicas."""
    jobs = [training_job(f"j-{i:03d}", NS, replicas=1 + i % 2, gpus=2 - i % 2, pools=["train"]) for i in range(JOBS)]
    svc = (b.InferenceService(SERVICE).ns(NS).pools("serve").gpus(None).topology("Required", "nvlink")
           .spec(parallelism={"tensor": 8, "pipeline": 2}, minReplicas=2, maxReplicas=2)
           .template({"spec": {"terminationGracePeriodSeconds": 0, "containers": [
               {"name": "vllm", "image": "vllm/vllm-openai:v0.6.4",
                "command": ["vllm", "serve", "meta-llama/Llama-3.1-405B-Instruct"]}]}}).manifest())
    return jobs + [svc]


def live_pods(c) -> list[dict]:
    return [p for p in get_json(c, "pods", "-A")["items"]
            if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") not in ("Succeeded", "Failed")]


def gpus_of(pod: dict) -> int:
    return sum(int((ct.get("resources") or {}).get("requests", {}).get(GPU, 0)) for ct in pod["spec"]["containers"])


def snapshot(c) -> dict:
    """What must not change: each job's attempt, restarts, placement and pods; each group's attempt,
    nodes and pods."""
    jobs = {j["metadata"]["name"]: j for j in get_json(c, "trainingjobs", "-n", NS)["items"]}
    svc = get_json(c, "inferenceservice", SERVICE, "-n", NS)
    pods = [p for p in live_pods(c) if p["metadata"]["namespace"] == NS]
    by_job: dict[str, list] = {}
    for p in pods:
        owner = p["metadata"]["labels"].get("kubeforge.io/job-name") or p["metadata"]["labels"].get("kubeforge.io/inference-service")
        by_job.setdefault(owner, []).append((p["metadata"]["name"], p["metadata"]["uid"], p["spec"].get("nodeName")))
    st = lambda o: o.get("status") or {}  # noqa: E731
    return {
        "jobs": {n: {"phase": st(j).get("phase"), "attempt": st(j).get("attempt", 0), "replicas": j["spec"]["replicas"],
                     "restarts": {k: v for k, v in (st(j).get("restarts") or {}).items() if v},  # a new counter at 0 is no restart
                     "nodes": sorted((st(j).get("placement") or {}).get("nodes") or []), "pods": sorted(by_job.get(n, []))}
                 for n, j in jobs.items()},
        "groups": {g["index"]: {"phase": g.get("phase"), "attempt": g.get("attempt", 0), "nodes": sorted(g.get("nodes") or [])}
                   for g in st(svc).get("groups") or []},
        "service_pods": sorted(by_job.get(SERVICE, [])),
        "claims": sorted(v["metadata"]["uid"] for v in get_json(c, "pvc", "-n", NS)["items"]),
    }


def all_running(c) -> dict | bool:
    s = snapshot(c)
    jobs_ok = len(s["jobs"]) == JOBS and all(
        j["phase"] == "Running" and len(j["pods"]) == j["replicas"] and j["nodes"] for j in s["jobs"].values())
    groups_ok = len(s["groups"]) == 2 and all(g["phase"] == "Ready" for g in s["groups"].values())
    return jobs_ok and groups_ok and len(s["service_pods"]) == 4 and s


def ledger(c) -> dict:
    """Per node: GPUs held by live pods vs allocatable; per pool: status.gpus.allocated vs its pods."""
    nodes = {n["metadata"]["name"]: n for n in get_json(c, "nodes")["items"]}
    held: dict[str, int] = {}
    for p in live_pods(c):
        if p["spec"].get("nodeName"):
            held[p["spec"]["nodeName"]] = held.get(p["spec"]["nodeName"], 0) + gpus_of(p)
    over = {n: (h, int(nodes[n]["status"]["allocatable"].get(GPU, 0))) for n, h in held.items()
            if h > int(nodes[n]["status"]["allocatable"].get(GPU, 0))}
    pools = {}
    for pool in ("train", "serve"):
        members = {n for n, node in nodes.items() if node["metadata"]["labels"].get("kubeforge.io/test-fleet") == pool}
        status = (get_json(c, "gpupool", pool).get("status") or {}).get("gpus") or {}
        pools[pool] = (status.get("allocated"), sum(held.get(n, 0) for n in members))
    return {"over": over, "pools": pools}


def ledger_agrees(c) -> dict | bool:
    led = ledger(c)
    return not led["over"] and all(a == b for a, b in led["pools"].values()) and led


@pytest.mark.timeout(1200)
def test_upgrade_from_v0_1_0_restarts_nothing(fresh_cluster, old_tree):
    c = fresh_cluster
    t0 = time.monotonic()
    helm(c, "install", RELEASE, str(old_tree / "charts" / "kubeforge"), "-n", RELEASE_NS, "--create-namespace",
         *CHART_ARGS, "--set", "image.tag=0.1.0")
    c.kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=kubeforge", "--timeout=60s")
    assert "maxRunSeconds" not in c.kubectl("get", "crd", "trainingjobs.kubeforge.io", "-o", "json").stdout  # v0.1.0's CRDs
    make_fleet(c)
    start_old_operator(c, old_tree)
    c.kubectl("create", "namespace", NS)
    wait_for(lambda: c.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0,
             timeout=30, what="default ServiceAccount")
    t_create = time.monotonic()
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": workloads()}), timeout=300)
    before = wait_for(lambda: all_running(c), timeout=480, interval=2, what="v0.1.0: 100 jobs Running, 2 groups Ready")
    converge = time.monotonic() - t_create
    led_before = wait_for(lambda: ledger_agrees(c), timeout=60, interval=1, what="v0.1.0's pool status to agree with the pods")
    say(f"v0.1.0: {JOBS} jobs ({sum(len(j['pods']) for j in before['jobs'].values())} pods) Running and 2 groups Ready "
        f"{converge:.1f}s after creation; pools allocated/pods {led_before['pools']}")

    from kubeforge.demo import start_operator, stop_operator

    stop_operator(c, "operator-old")
    t_up = time.monotonic()
    # v0.1.0 installed its CRDs from the chart's crds/, which Helm never owns: adopt them once (docs/install.md)
    helm(c, "upgrade", RELEASE, str(ROOT / "charts" / "kubeforge"), "-n", RELEASE_NS, "--take-ownership",
         *CHART_ARGS, "--set", "image.tag=0.2.0.dev0")
    helm_s = time.monotonic() - t_up
    crd = get_json(c, "crd", "trainingjobs.kubeforge.io")
    assert "maxRunSeconds" in json.dumps(crd["spec"])  # the chart upgraded the CRDs
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    start_operator(c)
    wait_healthy(c, "operator")
    time.sleep(SETTLE_SECONDS)
    after = snapshot(c)
    led_after = wait_for(lambda: ledger_agrees(c), timeout=60, interval=1, what="the new operator's pool status to agree with the pods")
    report_and_check(c, before, after, led_after, helm_s, time.monotonic() - t0)
    took_over(c)
    admits_beside_the_old_jobs(c)
    uninstall_keeps_everything(c)


def report_and_check(c, before: dict, after: dict, led: dict, helm_s: float, total_s: float) -> None:
    restarted = sorted(n for n, j in before["jobs"].items() if after["jobs"].get(n) != j)
    recreated = sorted(i for i, g in before["groups"].items() if after["groups"].get(i) != g)
    lost = {"jobs": JOBS - len(after["jobs"]), "groups": len(before["groups"]) - len(after["groups"]),
            "service pods": len(before["service_pods"]) - len(after["service_pods"]),
            "claims": len(set(before["claims"]) - set(after["claims"]))}
    log = (c.dir / "operator.log").read_text(errors="replace")
    say(f"after helm upgrade ({helm_s:.1f}s) and {SETTLE_SECONDS:.0f}s of the new operator: "
        f"{len(restarted)} restarted jobs, {len(recreated)} recreated groups, "
        f"{sum(h - a for h, a in led['over'].values())} GPUs double-booked, ledger (allocated, pods' GPUs) {led['pools']}, "
        f"lost {lost}, {log.count('Traceback')} tracebacks in its log; test {total_s:.0f}s")
    for n in restarted[:5]:
        say(f"  {n}: before {before['jobs'][n]}\n           after  {after['jobs'].get(n)}")
    for i in recreated:
        say(f"  group {i}: before {before['groups'][i]}, after {after['groups'].get(i)}")
    assert not restarted and not recreated
    assert after["service_pods"] == before["service_pods"] and after["claims"] == before["claims"]
    assert not any(lost.values())
    assert not led["over"] and all(a == b for a, b in led["pools"].values())
    assert "Traceback" not in log


def operator_metrics(c) -> dict[tuple[str, str], float]:
    """The working tree's operator's counters: {(name, labels): value}."""
    import httpx

    port = json.loads((c.dir / "operator.ports").read_text())["metrics"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {(m[0], m[1]): float(m[2]) for m in re.findall(r"^(kubeforge_\w+)\{([^}]*)\} (\S+)$", text, re.M)}


def took_over(c) -> None:
    """The new operator read every job and the service and found nothing to redo: it reconciled
    them, counts 100 Running jobs, and created or deleted no pod and no claim."""
    m = operator_metrics(c)

    def total(name: str, **labels: str) -> float:
        return sum(v for (n, lab), v in m.items() if n == name and all(f'{k}="{x}"' in lab for k, x in labels.items()))
    reconciled = {kind: total("kubeforge_reconciles_total", kind=kind, result="success") for kind in ("trainingjobs", "inferenceservices")}
    writes = {f"{verb} {res}": total("kubeforge_api_requests_total", verb=verb, resource=res)
              for verb in ("POST", "DELETE") for res in ("pods", "persistentvolumeclaims")}
    say(f"the new operator: reconciles {reconciled}, Running jobs {total('kubeforge_trainingjobs', phase='Running'):.0f}, "
        f"pod and claim writes {writes}")
    assert reconciled["trainingjobs"] >= JOBS and reconciled["inferenceservices"] >= 1
    assert total("kubeforge_trainingjobs", phase="Running") == JOBS
    assert not any(writes.values())


def admits_beside_the_old_jobs(c) -> None:
    """A job created after the upgrade is placed on the GPUs v0.1.0's jobs left free, never on theirs."""
    t = time.monotonic()
    apply(c, training_job("after-upgrade", NS, replicas=2, gpus=2, mode="Preferred", pools=["train"]))
    wait_for(lambda: (get_json(c, "trainingjob", "after-upgrade", "-n", NS).get("status") or {}).get("phase") == "Running",
             timeout=120, interval=1, what="a job created after the upgrade to run")
    led = wait_for(lambda: ledger_agrees(c), timeout=60, interval=1, what="the ledger with the new job")
    say(f"a 2 x 2-GPU job created after the upgrade Running in {time.monotonic() - t:.1f}s; ledger {led['pools']}")
    assert led["pools"]["train"][0] == 200 + 4


def uninstall_keeps_everything(c) -> None:
    """crds.keep (the default): helm uninstall leaves the CRDs, so every job and its pods stay."""
    helm(c, "uninstall", RELEASE, "-n", RELEASE_NS, "--wait")
    assert len(get_json(c, "crds", "-l", "app.kubernetes.io/part-of=kubeforge")["items"]) == len(list((ROOT / "crds").glob("*.yaml")))
    assert len(get_json(c, "trainingjobs", "-n", NS)["items"]) == JOBS + 1
