"""Throttling (issue 31, item 4): the operator against an API server that answers 429.

A cluster of this module's own (``<KUBEFORGE_TEST_CLUSTER>-throttle``), started and deleted here,
whose kube-apiserver runs with a low ``--max-requests-inflight`` / ``--max-mutating-requests-inflight``
(15 seats in all), and an API Priority and Fairness level for the operator's ServiceAccount as a
cluster admin would cap a controller: one seat, a queue of 4, no borrowing, so whatever the
operator sends beyond that is refused with 429 and Retry-After. The operator runs as a local
process with the chart's ServiceAccount token (the kubeconfig's admin is in ``system:masters``,
which APF and the max-in-flight filter never throttle), so it also runs on the chart's RBAC.

A burst of TrainingJobs is created at once. Asserted: the API server rejected the operator's
requests (its own APF counter) and the operator saw 429s (``kubeforge_api_requests_total``); every
job is admitted and Running with all its pods, the pool's ledger equals the pods, no traceback in
the log, and once the burst is placed the 429s stop (it backs off, no retry storm).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import builders as b
from conftest import TEST_CLUSTER, apply, get_json, training_job, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
RELEASE, RELEASE_NS, NS, POOL = "kubeforge", "kubeforge-system", "burst", "throttled"
JOBS = 60
GPU = "nvidia.com/gpu"
APISERVER_FLAGS = ("kube-apiserver=max-requests-inflight=10", "kube-apiserver=max-mutating-requests-inflight=5")
LEVEL = "kubeforge-operator"


def say(msg: str) -> None:
    print(f"[throttle] {msg}", flush=True)


@pytest.fixture(scope="module")
def throttled():
    """The cluster, the chart installed (CRDs, ServiceAccount, RBAC) and the APF level for the
    operator's ServiceAccount; deleted afterwards."""
    from kubeforge.demo import stop_operator
    from kubeforge.sim.cluster import Cluster

    c = Cluster(f"{TEST_CLUSTER}-throttle")
    c.down(log=say)
    c.up(None, log=say, extra_args=APISERVER_FLAGS)
    try:
        helm = subprocess.run([str(c.bin_dir / "helm"), "install", RELEASE, str(ROOT / "charts" / "kubeforge"),
                               "-n", RELEASE_NS, "--create-namespace", "--set", "image.repository=registry.invalid/kubeforge",
                               "--set", "replicaCount=1", "--set", "leaderElection.enabled=false"],
                              capture_output=True, text=True, env=c.env(), timeout=300)
        assert helm.returncode == 0, helm.stderr
        c.kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=kubeforge", "--timeout=60s")
        c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": apf_objects()}))
        yield c
    finally:
        stop_operator(c)
        log = c.dir / "operator.log"
        if log.exists():
            print("--- operator.log (tail) ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        c.down(log=say)


def apf_objects() -> list[dict]:
    """A PriorityLevelConfiguration of one seat (queue 4, no lending or borrowing) and the
    FlowSchema that puts the operator's ServiceAccount on it, ahead of the built-in schemas."""
    everything = {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True,
                                     "namespaces": ["*"]}],
                  "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}
    return [
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": {"name": LEVEL},
         "spec": {"type": "Limited", "limited": {
             "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
             "limitResponse": {"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 4}}}}},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": LEVEL},
         "spec": {"priorityLevelConfiguration": {"name": LEVEL}, "matchingPrecedence": 500,
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [{"kind": "ServiceAccount",
                                           "serviceAccount": {"name": RELEASE, "namespace": RELEASE_NS}}], **everything}]}},
    ]


def service_account_kubeconfig(c) -> Path:
    """A kubeconfig for the chart's ServiceAccount (a 2-hour token from the TokenRequest API)."""
    token = c.kubectl("create", "token", RELEASE, "-n", RELEASE_NS, "--duration=2h").stdout.strip()
    cfg = yaml.safe_load(Path(c.kubeconfig).read_text())
    user = cfg["contexts"][0]["context"]["user"]
    cfg["users"] = [{"name": user, "user": {"token": token}}]
    path = c.dir / "operator-sa.kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def make_fleet(c) -> None:
    """4 NVLink cliques x 4 nodes x 8 GPUs (128 GPUs) in pool ``throttled``."""
    from kubeforge.sim.fleet import Fleet, node_manifests

    groups = [{"name": f"c{i}", "count": 4, "gpu": {"count": 8},
               "labels": {"kubeforge.io/test-fleet": POOL, "nvidia.com/gpu.clique": f"{POOL}.c{i}"}} for i in range(4)]
    c.apply_nodes(node_manifests(Fleet.model_validate({"name": POOL, "groups": groups})))
    apply(c, b.GPUPool(POOL).selector({"matchLabels": {"kubeforge.io/test-fleet": POOL}}).manifest())


def operator_429s(c) -> int:
    """``kubeforge_api_requests_total{code="429"}`` summed, from the operator's /metrics."""
    import httpx

    port = json.loads((c.dir / "operator.ports").read_text())["metrics"]
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return int(sum(float(v) for v in re.findall(r'^kubeforge_api_requests_total\{[^}]*code="429"[^}]*\} (\S+)$', text, re.M)))


def apiserver_rejections(c) -> int:
    """The API server's own count of the operator's requests it refused (APF, our level)."""
    text = c.kubectl("get", "--raw", "/metrics").stdout
    pattern = rf'^apiserver_flowcontrol_rejected_requests_total\{{[^}}]*priority_level="{LEVEL}"[^}}]*\}} (\S+)$'
    return int(sum(float(v) for v in re.findall(pattern, text, re.M)))


def running(c) -> dict | bool:
    jobs = get_json(c, "trainingjobs", "-n", NS)["items"]
    pods = [p for p in get_json(c, "pods", "-n", NS)["items"]
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    placed = sum(1 for j in jobs if (j.get("status") or {}).get("phase") == "Running")
    want = sum(j["spec"]["replicas"] for j in jobs)
    return len(jobs) == JOBS and placed == JOBS and len(pods) == want and {"pods": pods, "jobs": jobs}


@pytest.mark.timeout(900)
def test_a_burst_against_a_throttled_api_server_is_placed_whole(throttled):
    from kubeforge.demo import start_operator

    c = throttled
    make_fleet(c)
    start_operator(c, extra_env={"KUBECONFIG": str(service_account_kubeconfig(c))})
    c.kubectl("create", "namespace", NS)
    wait_for(lambda: c.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0,
             timeout=30, what="default ServiceAccount")
    # 30 jobs of 1 x 2 GPUs and 30 gangs of 2 x 1 GPU: 120 of the pool's 128 GPUs
    jobs = [training_job(f"b-{i:03d}", NS, replicas=1 + i % 2, gpus=2 - i % 2, pools=[POOL]) for i in range(JOBS)]
    t0 = time.monotonic()
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs}), timeout=300)
    done = wait_for(lambda: running(c), timeout=600, interval=2, what=f"{JOBS} jobs Running with all their pods")
    converge = time.monotonic() - t0
    pool = wait_for(lambda: (a := (get_json(c, "gpupool", POOL).get("status") or {}).get("gpus", {}).get("allocated"))
                    == sum(gpus(p) for p in done["pods"]) and a, timeout=60, what="the pool's ledger to equal the pods")
    seen, rejected = operator_429s(c), apiserver_rejections(c)
    time.sleep(15)  # placed: no retry storm, so no more 429s
    seen_later, rejected_later = operator_429s(c), apiserver_rejections(c)
    log = (c.dir / "operator.log").read_text(errors="replace")
    say(f"{JOBS} jobs ({len(done['pods'])} pods, {pool} GPUs) Running {converge:.1f}s after creation; "
        f"API server rejected {rejected} of the operator's requests (APF level {LEVEL}), the operator counted "
        f"{seen} 429s; 15 s later {rejected_later - rejected} more rejected, {seen_later - seen} more 429s; "
        f"{log.count('Traceback')} tracebacks in its log")
    assert rejected > 0 and seen > 0  # it was throttled
    assert rejected_later - rejected <= 2  # and backs off once there is nothing to do
    assert "Traceback" not in log
    restarts = [j["metadata"]["name"] for j in done["jobs"] if (j["status"].get("attempt") or 0) > 0]
    assert not restarts  # a refused write never cost a gang its run


def gpus(pod: dict) -> int:
    return sum(int((ct.get("resources") or {}).get("requests", {}).get(GPU, 0)) for ct in pod["spec"]["containers"])
