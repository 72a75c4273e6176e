"""Multi-node InferenceService replicas against the real control plane (issue 13), the operator
running for real: a replica of tensor 8 x pipeline 2 on 8-GPU kwok nodes is a group of 2 pods,
placed whole inside one NVLink domain by the admission round, recreated whole when a pod goes,
failed past maxGroupRestarts, scaled in whole groups, and the Service routes to leaders only.

No Prometheus answers here (``prometheusURL`` is a closed loopback port the sim's operator may
query): the autoscaler holds its count within [minReplicas, maxReplicas], so edits of those
bounds drive the scale.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

import builders as b
from conftest import apply, condition, events_for, get_json, job_pods, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster

NAME = "llm"
CLIQUE = "nvidia.com/gpu.clique"


def llm(namespace: str, replicas: int = 1, **spec) -> dict:
    """A 405B-class service: tensor 8 x pipeline 2 a replica, ``replicas`` to 4 of them inside one
    NVLink domain each, drained at once, pods gone at once, autoscaled from a Prometheus that does
    not answer; ``spec`` (camelCase) over it."""
    return (b.InferenceService(NAME).ns(namespace).without("gpusPerReplica").pools(namespace)
            .spec(parallelism={"tensor": 8, "pipeline": 2}, minReplicas=replicas, maxReplicas=4, drainSeconds=0)
            .topology("Required", "nvlink")
            .spec(autoscaling={"prometheusURL": "http://127.0.0.1:1", "pollingIntervalSeconds": 1})
            .template({"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.6.4",
                 "command": ["vllm", "serve", "meta-llama/Llama-3.1-405B-Instruct"]}]}})
            .spec(**spec).manifest())


def status(cluster, ns: str) -> dict:
    return get_json(cluster, "inferenceservice", NAME, "-n", ns).get("status") or {}


def pods(cluster, ns: str) -> list[dict]:
    return [p for p in get_json(cluster, "pods", "-n", ns, "-l", f"kubeforge.io/inference-service={NAME}")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def ready_groups(cluster, ns: str, n: int) -> dict:
    def check():
        st = status(cluster, ns)
        gs = st.get("groups") or []
        ok = len(gs) == n and all(g["phase"] == "Ready" for g in gs) and st.get("readyReplicas") == n
        return ok and st
    return wait_for(check, timeout=90, what=f"{n} Ready groups")


def clique(cluster, node: str) -> str:
    return get_json(cluster, "node", node)["metadata"]["labels"][CLIQUE]


def slice_of(cluster, ns: str) -> dict:
    out = cluster.kubectl("get", "endpointslice", f"kubeforge-{NAME}", "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def test_a_405b_replica_is_a_group_inside_one_nvlink_domain_and_the_service_routes_to_its_leader(cluster, namespace, fleet):
    fleet(cliques=2, nodes=2, gpus=8)
    apply(cluster, llm(namespace, replicas=1))
    st = ready_groups(cluster, namespace, 1)
    g = st["groups"][0]
    assert st["nodesPerReplica"] == 2 and len(g["nodes"]) == 2 and g["gpusPerPod"] == 8
    assert g["level"] == "nvlink" and len({clique(cluster, n) for n in g["nodes"]}) == 1
    ps = sorted(pods(cluster, namespace), key=lambda p: p["metadata"]["labels"]["kubeforge.io/worker-index"])
    assert [p["spec"]["nodeName"] for p in ps] == g["nodes"]  # worker w on nodes[w], leader first
    lead, worker = ps
    env = {e["name"]: e["value"] for e in worker["spec"]["containers"][0]["env"]}
    assert env["LWS_LEADER_ADDRESS"] == f"{NAME}-0.kubeforge-workers.{namespace}" and env["LWS_GROUP_SIZE"] == "2"
    assert env["LWS_WORKER_INDEX"] == "1" and lead["spec"]["hostname"] == f"{NAME}-0"
    assert "--pipeline-parallel-size 2" in lead["spec"]["containers"][0]["args"][0]
    sl = wait_for(lambda: (s := slice_of(cluster, namespace)).get("endpoints") and s, timeout=30, what="the endpoints")
    assert [e["targetRef"]["name"] for e in sl["endpoints"]] == [lead["metadata"]["name"]]  # leaders only
    assert sl["metadata"]["labels"]["kubeforge.io/endpoints"] == "replicas"
    svc = get_json(cluster, "service", NAME, "-n", namespace)
    assert not svc["spec"].get("selector")
    pool = wait_for(lambda: (p := get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {})
                    .get("allocated") == 16 and p, timeout=30, what="the pool booking the group's 16 GPUs")
    assert pool["workloads"] == [{"kind": "InferenceService", "namespace": namespace, "name": NAME, "gpus": 16}]


def test_a_deleted_worker_recreates_the_whole_group_and_max_group_restarts_fails_it(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2, gpus=8)
    apply(cluster, llm(namespace, replicas=1, multiNode={"maxGroupRestarts": 1}))
    ready_groups(cluster, namespace, 1)
    first = {p["metadata"]["name"] for p in pods(cluster, namespace)}
    worker = next(n for n in first if n.startswith(f"{NAME}-0-1-"))
    cluster.kubectl("delete", "pod", worker, "-n", namespace, "--wait=false")
    st = wait_for(lambda: (s := status(cluster, namespace)) and s["groups"] and s["groups"][0]["restarts"] == 1
                  and s["groups"][0]["phase"] == "Ready" and s, timeout=60, what="the group recreated and Ready")
    now = {p["metadata"]["name"] for p in pods(cluster, namespace)}
    assert now.isdisjoint(first) and len(now) == 2  # the leader went too: the whole group is new
    assert st["groups"][0]["attempt"] == 1
    assert any(e["reason"] == "ReplicaGroupRestarted" for e in events_for(cluster, namespace, NAME))

    lead = next(n for n in now if n.startswith(f"{NAME}-0-0-"))
    cluster.kubectl("delete", "pod", lead, "-n", namespace, "--wait=false")
    st = wait_for(lambda: (s := status(cluster, namespace)) and s["groups"] and s["groups"][0]["phase"] == "Failed" and s,
                  timeout=60, what="the group Failed past maxGroupRestarts 1")
    assert st["groups"][0]["nodes"] == [] and condition(st, "ReplicaGroupFailed")["status"] == "True"
    assert any(e["reason"] == "ReplicaGroupFailed" for e in events_for(cluster, namespace, NAME))
    wait_for(lambda: (get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {}).get("allocated") == 0,
             timeout=30, what="its GPUs released")
    wait_for(lambda: pods(cluster, namespace) == [], timeout=30, what="its pods gone")


def test_scale_up_waits_for_a_whole_domain_then_scale_down_removes_whole_groups(cluster, namespace, fleet):
    """Two NVLink domains of 2 nodes; a TrainingJob holds one node of one domain. A second
    replica needs a whole domain: ScalingLimited says so until the job goes."""
    fleet(cliques=2, nodes=2, gpus=8)
    apply(cluster, training_job("blocker", namespace, replicas=1, gpus=8, mode="None", level=None))
    wait_for(lambda: len(running_pods(cluster, namespace, "blocker")) == 1, timeout=60, what="the blocking job")
    apply(cluster, llm(namespace, replicas=2))
    lim = wait_for(lambda: (c := condition(status(cluster, namespace), "ScalingLimited")) and c["status"] == "True"
                   and c["reason"] == "InsufficientCapacity" and c, timeout=60, what="ScalingLimited InsufficientCapacity")
    assert "nvlink" in lim["message"], lim["message"]
    ready_groups(cluster, namespace, 1)
    assert len(pods(cluster, namespace)) == 2  # never a partial group

    cluster.kubectl("delete", "trainingjob", "blocker", "-n", namespace)
    st = ready_groups(cluster, namespace, 2)
    assert len({clique(cluster, g["nodes"][0]) for g in st["groups"]}) == 2
    assert all(len({clique(cluster, n) for n in g["nodes"]}) == 1 for g in st["groups"])

    # no metric: the autoscaler holds its count, so maxReplicas brings it down
    cluster.kubectl("patch", "inferenceservice", NAME, "-n", namespace, "--type=merge", "-p",
                    '{"spec":{"minReplicas":1,"maxReplicas":1}}')
    st = ready_groups(cluster, namespace, 1)
    wait_for(lambda: len(pods(cluster, namespace)) == 2, timeout=30, what="the removed group's two pods gone")
    assert any(e["reason"] == "Draining" for e in events_for(cluster, namespace, NAME))


def test_a_scale_down_during_a_rollout_removes_the_draining_group_instead_of_recreating_it(cluster, namespace, fleet):
    """Issue 32.1, the user's steps: 3 replicas of tensor 8 x pipeline 2, drainSeconds 30; the
    template is edited (a rollout: one group drains), then 3 s later min and max go to 2. The
    group draining for the rollout is the one removed: 2 groups (4 pods) once its drain ends,
    instead of 3 groups (48 GPUs) held until the whole rollout ended (88 s before the fix)."""
    fleet(cliques=3, nodes=2, gpus=8)
    body = llm(namespace, replicas=3, maxReplicas=3, drainSeconds=30)
    apply(cluster, body)
    ready_groups(cluster, namespace, 3)
    body["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]
    apply(cluster, body)
    wait_for(lambda: any(g.get("drainFor") == "Rollout" for g in status(cluster, namespace).get("groups") or []),
             timeout=30, what="a group draining for the rollout")
    draining = next(g["index"] for g in status(cluster, namespace)["groups"] if g.get("drainFor") == "Rollout")
    assert next(g for g in status(cluster, namespace)["groups"] if g["index"] == draining)["phase"] == "Draining"
    time.sleep(3)
    body["spec"]["minReplicas"] = body["spec"]["maxReplicas"] = 2
    apply(cluster, body)
    wait_for(lambda: any(g.get("drainFor") == "ScaleDown" and g["index"] == draining
                         for g in status(cluster, namespace).get("groups") or []), timeout=30,
             what="the rollout drain turned into the scale-down's")
    st = wait_for(lambda: (s := status(cluster, namespace)) and len(s.get("groups") or []) == 2 and s, timeout=50,
                  what="2 groups once the drain ends (not after the whole rollout)")
    assert draining not in {g["index"] for g in st["groups"]}
    wait_for(lambda: len(pods(cluster, namespace)) == 4, timeout=30, what="4 pods")


def test_a_gang_and_a_group_competing_for_one_domain_never_overcommit_a_node(cluster, namespace, fleet):
    nodes = fleet(cliques=1, nodes=2, gpus=8)
    apply(cluster, training_job("gang", namespace, replicas=2, gpus=8))
    apply(cluster, llm(namespace, replicas=1))
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        held: dict[str, int] = {}
        for p in get_json(cluster, "pods", "-n", namespace)["items"]:
            n = p["spec"].get("nodeName")
            if n in nodes and p["status"].get("phase") not in ("Succeeded", "Failed"):
                held[n] = held.get(n, 0) + sum(int((c.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
                                               for c in p["spec"]["containers"])
        assert all(v <= 8 for v in held.values()), f"a node over-committed: {held}"
        time.sleep(0.5)
    gang_running = len(running_pods(cluster, namespace, "gang")) == 2
    group_ready = (status(cluster, namespace).get("readyReplicas") or 0) == 1
    assert gang_running != group_ready, "exactly one of them holds the domain"


def test_a_replica_its_own_template_keeps_off_its_node_fails_at_once_with_its_gpus_released(cluster, namespace, fleet):
    """(A bound replica that is slow to load is never cut short: kwok marks pods Ready at once, so
    that rule is tested on the pure plan, tests/test_serving.py.)"""
    fleet(cliques=1, nodes=2, gpus=8)
    picky = llm(namespace, replicas=1, parallelism=None, gpusPerReplica=2, topology={"mode": "None"})
    picky["spec"]["template"]["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "nowhere"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    apply(cluster, picky)
    st = wait_for(lambda: (s := status(cluster, namespace)) and s.get("groups") and s["groups"][0]["phase"] == "Failed"
                  and s, timeout=60, what="the group failed on its own podAffinity")
    g = st["groups"][0]
    assert g["startupFailures"] == 0 and g["nodes"] == [] and "podAffinity" in g["message"]
    assert [e for e in events_for(cluster, namespace, NAME) if e["reason"] == "UnschedulableTemplate"]
    assert "podAffinity" in condition(st, "ReplicaGroupFailed")["message"]
    wait_for(lambda: (get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {}).get("allocated") == 0,
             timeout=30, what="its GPUs released")


def test_operator_killed_while_groups_are_created_leaves_no_partial_group(cluster, namespace, fleet):
    from kubeforge.demo import start_operator

    fleet(cliques=4, nodes=2, gpus=8)
    pid = int((cluster.dir / "operator.pid").read_text())
    apply(cluster, llm(namespace, replicas=4))
    time.sleep(1.0)
    os.killpg(pid, signal.SIGKILL)  # mid-admission / mid-create
    time.sleep(2.0)
    start_operator(cluster)
    st = ready_groups(cluster, namespace, 4)
    by_group: dict[str, list[dict]] = {}
    for p in pods(cluster, namespace):
        by_group.setdefault(p["metadata"]["labels"]["kubeforge.io/group-index"], []).append(p)
    assert sorted(by_group) == ["0", "1", "2", "3"] and all(len(v) == 2 for v in by_group.values())
    pool = wait_for(lambda: (p := get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {})
                    .get("allocated") == 64 and p, timeout=30, what="the pool booking exactly the 4 groups")
    assert all(len({clique(cluster, n) for n in g["nodes"]}) == 1 for g in st["groups"])
    assert pool["gpus"]["free"] == 0
