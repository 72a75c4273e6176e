"""TrainingJob against the real control plane, with the operator running for real.

Each test builds its own kwok fleet and GPUPool (see the ``fleet`` fixture), so what the
API server, kube-scheduler and the garbage collector decide is what is asserted.
"""

from __future__ import annotations

import pytest

from conftest import (
    apply, condition, events_for, get_json, job_pods, job_status, running_pods, training_job, wait_for,
)

pytestmark = pytest.mark.cluster


def clique_of(cluster, node: str) -> str:
    return get_json(cluster, "node", node)["metadata"]["labels"]["nvidia.com/gpu.clique"]


def test_gang_runs_inside_one_nvlink_domain_with_pvc_service_and_env(cluster, namespace, fleet):
    fleet(cliques=2, nodes=2)
    apply(cluster, training_job("llm", namespace, replicas=2, gpus=8))
    pods = wait_for(lambda: (p := running_pods(cluster, namespace, "llm")) and len(p) == 2 and p, timeout=60,
                    what="2 running workers")
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert len({clique_of(cluster, n) for n in nodes}) == 1, f"gang split across NVLink domains: {nodes}"

    st = wait_for(lambda: (s := job_status(cluster, namespace, "llm")).get("phase") == "Running" and s, timeout=30)
    assert st["placement"]["level"] == "nvlink"
    assert sorted(st["placement"]["nodes"]) == nodes
    assert condition(st, "Admitted")["status"] == "True"
    assert condition(st, "Running")["observedGeneration"] == 1

    for p in pods:
        rank = p["metadata"]["labels"]["kubeforge.io/replica-index"]
        c = p["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "8" and env["PET_NODE_RANK"] == rank
        assert env["MASTER_ADDR"] == f"llm-worker-0.kubeforge-workers.{namespace}.svc"
        assert p["spec"]["hostname"] == f"llm-worker-{rank}" and p["spec"]["subdomain"] == "kubeforge-workers"
        assert env["KUBEFORGE_CHECKPOINT_DIR"] == "/checkpoints"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert p["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
        assert p["spec"]["nodeName"] == st["placement"]["nodes"][int(rank)]  # ranks follow the placement
        assert not p["spec"].get("schedulingGates")
        claim = next(v for v in p["spec"]["volumes"] if v["name"] == "checkpoint")["persistentVolumeClaim"]["claimName"]
        assert claim == "llm-checkpoint"
    pvc = get_json(cluster, "pvc", "llm-checkpoint", "-n", namespace)
    assert pvc["status"]["phase"] == "Bound"
    svc = get_json(cluster, "service", "kubeforge-workers", "-n", namespace)  # one per namespace, for every job
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True

    pool = wait_for(lambda: (p := get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {}).get("allocated") == 16 and p,
                    timeout=30, what="pool status counting the job's GPUs")
    assert pool["gpus"]["allocatable"] == 32 and pool["gpus"]["free"] == 16
    assert [l["name"] for l in pool["topologyLevels"]] == ["nvlink", "block"]
    assert {l["source"] for l in pool["topologyLevels"]} == {"Detected"}
    frees = sorted(d["gpus"]["free"] for d in pool["domains"] if d["level"] == "nvlink")
    assert frees == [0, 16]
    assert pool["workloads"] == [{"kind": "TrainingJob", "namespace": namespace, "name": "llm", "gpus": 16}]


def test_unplaceable_and_missing_pool_stay_pending_and_others_still_run(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("huge", namespace, replicas=1, gpus=16))
    apply(cluster, training_job("nopool", namespace, pools=["does-not-exist"]))
    apply(cluster, training_job("fine", namespace, replicas=1, gpus=8))
    wait_for(lambda: len(running_pods(cluster, namespace, "fine")) == 1, timeout=60, what="the valid job to run")

    st = wait_for(lambda: (s := job_status(cluster, namespace, "huge")) and condition(s, "Admitted") and s, timeout=30)
    adm = condition(st, "Admitted")
    assert st["phase"] == "Pending" and adm["status"] == "False" and adm["reason"] == "Unschedulable"
    assert "16" in adm["message"] and "8" in adm["message"], adm["message"]
    assert job_pods(cluster, namespace, "huge") == []
    assert any(e["reason"] == "Unschedulable" for e in events_for(cluster, namespace, "huge"))

    st = wait_for(lambda: (s := job_status(cluster, namespace, "nopool")) and condition(s, "Admitted") and s, timeout=30)
    assert condition(st, "Admitted")["reason"] == "PoolNotFound"
    assert "does-not-exist" in condition(st, "Admitted")["message"]
    assert any(e["reason"] == "PoolNotFound" for e in events_for(cluster, namespace, "nopool"))


def test_gang_waits_until_a_domain_frees_then_starts(cluster, namespace, fleet):
    fleet(cliques=2, nodes=2)
    for name in ("a", "b"):
        apply(cluster, training_job(name, namespace))
    for name in ("a", "b"):
        wait_for(lambda: len(running_pods(cluster, namespace, name)) == 2, timeout=60, what=f"job {name} running")
    apply(cluster, training_job("c", namespace))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "c")) and condition(s, "Admitted") and s, timeout=30)
    adm = condition(st, "Admitted")
    assert adm["status"] == "False" and adm["reason"] == "WaitingForCapacity"
    assert "nvlink" in adm["message"] and "short" in adm["message"], adm["message"]
    assert job_pods(cluster, namespace, "c") == []  # no partial gang, not even gated pods

    cluster.kubectl("delete", "trainingjob", "a", "-n", namespace)
    wait_for(lambda: len(running_pods(cluster, namespace, "c")) == 2, timeout=60, what="job c to start once a frees its domain")
    wait_for(lambda: job_status(cluster, namespace, "c").get("phase") == "Running", timeout=30, what="job c Running")


def test_two_jobs_submitted_together_never_double_book(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)  # room for exactly one 2x8 gang
    both = "\n---\n".join(__import__("json").dumps(training_job(n, namespace)) for n in ("x", "y"))
    cluster.kubectl("apply", "-f", "-", input=both)

    def settled():
        sx, sy = job_status(cluster, namespace, "x"), job_status(cluster, namespace, "y")
        return sx.get("phase") and sy.get("phase") and sorted([sx.get("phase"), sy.get("phase")]) == ["Pending", "Running"]
    wait_for(settled, timeout=60, what="one job Running and one Pending")
    for _ in range(3):  # and it stays that way: no partial gang appears for the loser
        pods = job_pods(cluster, namespace, "x") + job_pods(cluster, namespace, "y")
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
        assert len({p["metadata"]["labels"]["kubeforge.io/job-name"] for p in pods}) == 1
    pool = wait_for(lambda: (p := get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {}).get("allocated") == 16 and p, timeout=30)
    assert pool["gpus"]["allocated"] <= pool["gpus"]["allocatable"]


def test_spot_interruption_restarts_gang_elsewhere_counting_a_preemption(cluster, namespace, fleet):
    fleet(cliques=2, nodes=2, spot=True)
    apply(cluster, training_job("spot", namespace, checkpoint={"deletionPolicy": "Retain"}))
    first = wait_for(lambda: (p := running_pods(cluster, namespace, "spot")) and len(p) == 2 and p, timeout=60)
    pvc_uid = get_json(cluster, "pvc", "spot-checkpoint", "-n", namespace)["metadata"]["uid"]
    old_nodes = sorted(p["spec"]["nodeName"] for p in first)
    cluster.kubectl("taint", "node", old_nodes[0], "aws-node-termination-handler/spot-itn=true:NoSchedule")

    def restarted():
        s = job_status(cluster, namespace, "spot")
        pods = running_pods(cluster, namespace, "spot")
        return s.get("phase") == "Running" and (s.get("restarts") or {}).get("preemptions") == 1 and len(pods) == 2 and (s, pods)
    st, pods = wait_for(restarted, timeout=90, what="gang restarted after the spot notice")
    assert st["restarts"]["failures"] == 0
    new_nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert old_nodes[0] not in new_nodes
    assert len({clique_of(cluster, n) for n in new_nodes}) == 1
    assert all(p["metadata"]["labels"]["kubeforge.io/restart-attempt"] == "1" for p in pods)
    assert get_json(cluster, "pvc", "spot-checkpoint", "-n", namespace)["metadata"]["uid"] == pvc_uid
    assert condition(st, "Preempted") is not None
    assert any(e["reason"] == "Preempted" for e in events_for(cluster, namespace, "spot"))


def _fail_pod(cluster, namespace: str, pod: str) -> None:
    status = {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "trainer", "ready": False, "restartCount": 0, "image": "example.com/train:1", "imageID": "",
        "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": '{"step": 42, "path": "/checkpoints/step-42"}'}}}]}}
    cluster.kubectl("patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge", "-p", __import__("json").dumps(status))


def test_repeated_worker_failure_ends_failed_after_max_restarts(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("flaky", namespace, failurePolicy={"maxRestarts": 1, "backoffSeconds": 0}))
    for attempt in (0, 1):
        pods = wait_for(lambda: (p := [x for x in running_pods(cluster, namespace, "flaky")
                                       if x["metadata"]["labels"]["kubeforge.io/restart-attempt"] == str(attempt)]) and len(p) == 2 and p,
                        timeout=60, what=f"attempt {attempt} running")
        _fail_pod(cluster, namespace, pods[1]["metadata"]["name"])
    st = wait_for(lambda: (s := job_status(cluster, namespace, "flaky")).get("phase") == "Failed" and s, timeout=60)
    assert st["restarts"] == {"failures": 1, "preemptions": 0, "startupFailures": 0}
    failed = condition(st, "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and "flaky-worker-" in failed["message"]
    assert st["lastCheckpoint"]["step"] == 42
    assert any(e["reason"] == "Failed" for e in events_for(cluster, namespace, "flaky"))


@pytest.mark.parametrize("policy,kept", [("Retain", True), ("Delete", False)])
def test_delete_removes_pods_and_service_and_keeps_pvc_as_asked(cluster, namespace, fleet, policy, kept):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("gone", namespace, checkpoint={"deletionPolicy": policy}))
    wait_for(lambda: len(running_pods(cluster, namespace, "gone")) == 2, timeout=60)
    cluster.kubectl("delete", "trainingjob", "gone", "-n", namespace)
    wait_for(lambda: job_pods(cluster, namespace, "gone") == [], timeout=60, what="pods garbage-collected")
    wait_for(lambda: cluster.kubectl("get", "service", "gone", "-n", namespace, check=False).returncode != 0, timeout=60)
    if kept:
        for _ in range(3):
            assert cluster.kubectl("get", "pvc", "gone-checkpoint", "-n", namespace, check=False).returncode == 0
    else:
        wait_for(lambda: cluster.kubectl("get", "pvc", "gone-checkpoint", "-n", namespace, check=False).returncode != 0,
                 timeout=60, what="PVC deleted with the job")


def test_suspend_deletes_pods_keeps_pvc_and_resume_places_again(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("pause", namespace))
    wait_for(lambda: len(running_pods(cluster, namespace, "pause")) == 2, timeout=60)
    cluster.kubectl("patch", "trainingjob", "pause", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: job_status(cluster, namespace, "pause").get("phase") == "Suspended" and not running_pods(cluster, namespace, "pause"),
             timeout=60, what="suspended with no pods")
    assert cluster.kubectl("get", "pvc", "pause-checkpoint", "-n", namespace, check=False).returncode == 0
    cluster.kubectl("patch", "trainingjob", "pause", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    st = wait_for(lambda: (s := job_status(cluster, namespace, "pause")).get("phase") == "Running" and s, timeout=60)
    assert st["restarts"] == {"failures": 0, "preemptions": 0, "startupFailures": 0}


def test_operator_restart_mid_admission_creates_no_duplicate_pods(cluster, namespace, fleet):
    from kubeforge.demo import start_operator, stop_operator

    fleet(cliques=2, nodes=2)
    apply(cluster, training_job("r1", namespace))
    wait_for(lambda: (condition(job_status(cluster, namespace, "r1"), "Admitted") or {}).get("status") == "True",
             timeout=30, what="admission")
    stop_operator(cluster)  # killed between admission and (some of) the pod creation
    apply(cluster, training_job("r2", namespace))
    start_operator(cluster)
    for name in ("r1", "r2"):
        wait_for(lambda: len(running_pods(cluster, namespace, name)) == 2, timeout=90, what=f"{name} running after restart")
    for name in ("r1", "r2"):
        pods = job_pods(cluster, namespace, name)
        assert sorted(p["metadata"]["name"] for p in pods) == [f"{name}-worker-0-0", f"{name}-worker-1-0"]
    nodes = [p["spec"]["nodeName"] for n in ("r1", "r2") for p in job_pods(cluster, namespace, n)]
    assert len(nodes) == len(set(nodes)), "two gangs share a node: double-booked after restart"


def test_after_enough_preemptions_the_job_falls_back_to_the_next_pool(cluster, namespace, fleet):
    spot, ondemand = f"{namespace}-spot", f"{namespace}-od"
    spot_nodes = fleet(cliques=1, nodes=2, spot=True, pool=spot)
    fleet(cliques=1, nodes=2, pool=ondemand)
    apply(cluster, training_job("fb", namespace, pools=[spot, ondemand],
                                failurePolicy={"preemptionsBeforeFallback": 1}))
    wait_for(lambda: len(running_pods(cluster, namespace, "fb")) == 2, timeout=60, what="running on spot")
    assert job_status(cluster, namespace, "fb")["placement"]["pool"] == spot
    cluster.kubectl("taint", "node", spot_nodes[0], "karpenter.sh/disrupted=true:NoSchedule")

    def on_demand():
        s = job_status(cluster, namespace, "fb")
        pods = running_pods(cluster, namespace, "fb")
        return s.get("phase") == "Running" and (s.get("placement") or {}).get("pool") == ondemand and len(pods) == 2 and (s, pods)
    st, pods = wait_for(on_demand, timeout=90, what="the gang running in the on-demand pool")
    assert st["restarts"] == {"failures": 0, "preemptions": 1, "startupFailures": 0}
    assert all(p["spec"]["nodeName"].startswith(ondemand) for p in pods)


def test_disruption_target_condition_restarts_the_gang_as_a_preemption(cluster, namespace, fleet):
    fleet(cliques=2, nodes=2)
    apply(cluster, training_job("dt", namespace))
    pods = wait_for(lambda: (p := running_pods(cluster, namespace, "dt")) and len(p) == 2 and p, timeout=60)
    victim = pods[0]["metadata"]["name"]
    conds = pods[0]["status"].get("conditions") or []
    # Stamped now: kube-controller-manager's disruption controller resets a DisruptionTarget
    # older than 2 minutes on a pod that is not being deleted.
    now = __import__("datetime").datetime.now(__import__("datetime").timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    conds.append({"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                  "message": "preempted by a higher-priority pod", "lastTransitionTime": now})
    cluster.kubectl("patch", "pod", victim, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", __import__("json").dumps({"status": {"conditions": conds}}))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "dt")).get("phase") == "Running"
                  and (s.get("restarts") or {}).get("preemptions") == 1 and len(running_pods(cluster, namespace, "dt")) == 2 and s,
                  timeout=90, what="the gang restarted after DisruptionTarget")
    assert st["restarts"]["failures"] == 0
    assert "PreemptionByScheduler" in condition(st, "Preempted")["message"]
    assert victim not in {p["metadata"]["name"] for p in job_pods(cluster, namespace, "dt")}
