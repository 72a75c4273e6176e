"""Table-driven tests of the TrainingJob state machine (kubeforge.lifecycle.training).

Small builders make a job body with the defaults the API server applies, pod views of one
attempt, and node views; each test states one rule of the module docstring.
"""

from __future__ import annotations

import copy
import json

import pytest

from kubeforge.builders.common import parse_time, rfc3339
from kubeforge.lifecycle.training import (
    NodeView,
    PodView,
    current_pool,
    interruption_reason,
    plan_training,
    pod_view,
    restart_attempt,
)

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
T0 = NOW - 3600.0
NAME, NS = "llm", "team-a"


# --------------------------------------------------------------------------- builders


def job(replicas=2, gpus=8, status=None, **spec_overrides):
    """A TrainingJob body with the API server's defaults; ``spec_overrides`` replace spec keys."""
    spec = {
        "pools": ["h100-spot", "h100-od"],
        "replicas": replicas,
        "gpusPerReplica": gpus,
        "topology": {"mode": "Required", "level": "nvlink"},
        "checkpoint": {
            "size": "10Gi",
            "accessModes": ["ReadWriteMany"],
            "mountPath": "/checkpoints",
            "deletionPolicy": "Retain",
        },
        "failurePolicy": {
            "maxRestarts": 3,
            "backoffSeconds": 10,
            "maxBackoffSeconds": 600,
            "preemptionsBeforeFallback": 2,
        },
        "suspend": False,
        "priority": 0,
        "template": {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}]}},
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "kubeforge.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-1234", "generation": 3},
        "spec": spec,
        "status": copy.deepcopy(status) if status is not None else {},
    }


def node_names(n):
    return [f"ib0-nvl0-{i}" for i in range(n)]


def placement(n=2, pool="h100-spot"):
    return {"pool": pool, "level": "nvlink", "domain": "sim-ib0.0", "nodes": node_names(n)}


def admitted(n=2, phase="Pending", **extra):
    st = {"phase": phase, "placement": placement(n), "restarts": {"failures": 0, "preemptions": 0}}
    st.update(extra)
    return st


def pod(rank, attempt=0, phase="Running", **kw):
    kw.setdefault("node", f"ib0-nvl0-{rank}" if phase != "Pending" or not kw.get("gated") else None)
    kw.setdefault("ready", phase == "Running")
    return PodView(name=f"{NAME}-worker-{rank}-{attempt}", rank=rank, attempt=attempt, phase=phase, **kw)


def pods(n=2, attempt=0, phase="Running", **kw):
    return [pod(r, attempt, phase, **kw) for r in range(n)]


def nodes(n=2, **overrides):
    """Ready nodes for the placement; ``overrides`` maps node name -> NodeView or None (gone)."""
    out = {name: NodeView(name) for name in node_names(n)}
    for k, v in overrides.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def cond(status, type_):
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def merged(body, plan):
    """The job after the plan's status merge patch is applied (None deletes a key)."""
    out = copy.deepcopy(body)
    st = out.setdefault("status", {})
    for k, v in (plan.status or {}).items():
        if v is None:
            st.pop(k, None)
        else:
            st[k] = copy.deepcopy(v)
    return out


def quiet(plan):
    """Nothing happens beyond bookkeeping: no phase change, no restart, nothing deleted or released."""
    st = plan.status or {}
    return (plan.delete_pods == [] and not plan.release and plan.events == [] and plan.create_ranks == []
            and not {"phase", "restarts", "placement"} & set(st))


def event_reasons(plan):
    return [e[1] for e in plan.events]


# --------------------------------------------------------------------------- admission / create / ungate


def test_not_admitted_creates_nothing_and_stays_pending():
    plan = plan_training(job(status={}), [], {}, NOW)
    assert plan.create_ranks == [] and plan.ungate == [] and plan.delete_pods == []
    assert not plan.release
    assert (plan.status or {}).get("phase", "Pending") == "Pending"


@pytest.mark.parametrize("phase", ["Running", "Pending"])
def test_not_admitted_phase_becomes_pending(phase):
    # A job whose placement was dropped (e.g. by hand) waits for admission again.
    plan = plan_training(job(status={"phase": phase}), [], {}, NOW)
    assert plan.create_ranks == []
    if phase == "Pending":
        assert plan.status is None
    else:
        assert plan.status["phase"] == "Pending"


def test_not_admitted_during_backoff_requeues_until_restart_not_before():
    st = {"phase": "Restarting", "restarts": {"failures": 1, "preemptions": 0}, "restartNotBefore": rfc3339(NOW + 25)}
    plan = plan_training(job(status=st), [], {}, NOW)
    assert plan.create_ranks == []
    assert plan.requeue_after == pytest.approx(25)


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_admitted_without_pods_creates_every_rank_and_ungates_none(replicas):
    plan = plan_training(job(replicas, status=admitted(replicas)), [], nodes(replicas), NOW)
    assert plan.create_ranks == list(range(replicas))
    assert plan.ungate == []
    assert plan.delete_pods == []
    assert not plan.release


def test_admitted_with_some_pods_creates_only_missing_ranks_and_ungates_none():
    existing = [pod(0, phase="Pending", gated=True), pod(2, phase="Pending", gated=True)]
    plan = plan_training(job(4, status=admitted(4)), existing, nodes(4), NOW)
    assert plan.create_ranks == [1, 3]
    assert plan.ungate == []


def test_all_ranks_gated_are_ungated_in_rank_order():
    existing = [pod(r, phase="Pending", gated=True) for r in (3, 1, 0, 2)]
    plan = plan_training(job(4, status=admitted(4)), existing, nodes(4), NOW)
    assert plan.create_ranks == []
    assert plan.ungate == [f"{NAME}-worker-{r}-0" for r in range(4)]


def test_only_gated_pods_are_ungated():
    existing = [pod(0, phase="Pending", gated=False), pod(1, phase="Pending", gated=True)]
    plan = plan_training(job(2, status=admitted(2)), existing, nodes(2), NOW)
    assert plan.ungate == [f"{NAME}-worker-1-0"]


# --------------------------------------------------------------------------- running


def test_all_running_sets_phase_start_time_condition_and_event():
    plan = plan_training(job(2, status=admitted(2)), pods(2), nodes(2), NOW)
    st = plan.status
    assert st["phase"] == "Running"
    assert st["startTime"] == rfc3339(NOW)
    assert st["runningSince"] == rfc3339(NOW)
    c = cond(st, "Running")
    assert c["status"] == "True" and c["reason"] == "AllWorkersRunning"
    assert c["lastTransitionTime"] == rfc3339(NOW) and c["observedGeneration"] == 3
    assert ("Normal", "Running") in [(e[0], e[1]) for e in plan.events]
    assert st["replicas"] == {"active": 2, "ready": 2, "succeeded": 0, "failed": 0}
    assert plan.create_ranks == [] and plan.ungate == [] and plan.delete_pods == [] and not plan.release


def test_running_keeps_existing_start_time():
    st = admitted(2, phase="Restarting", startTime=rfc3339(T0))
    plan = plan_training(job(2, status=st), pods(2), nodes(2), NOW)
    assert plan.status["phase"] == "Running"
    assert plan.status["startTime"] == rfc3339(T0)


def test_running_again_after_preemption_clears_preempted_condition():
    first = plan_training(job(2, status=admitted(2, phase="Running")),
                          pods(2, disruption="PreemptionByScheduler"), nodes(2), T0)
    body = merged(job(2), first)
    body["status"]["placement"] = placement(2)  # admitted again
    plan = plan_training(body, pods(2, attempt=1), nodes(2), NOW)
    assert plan.status["phase"] == "Running"
    assert cond(plan.status, "Preempted")["status"] == "False"
    assert cond(plan.status, "Preempted")["reason"] == "Recovered"


def test_partially_running_gang_is_not_running():
    existing = [pod(0), pod(1, phase="Pending", gated=False)]
    plan = plan_training(job(2, status=admitted(2)), existing, nodes(2), NOW)
    assert (plan.status or {}).get("phase") in (None, "Pending")
    assert cond(plan.status or {}, "Running") is None


# --------------------------------------------------------------------------- disruption


def _assert_preempted(plan, body, *, preemptions=1, failures=0):
    st = plan.status
    assert st["phase"] == "Restarting"
    assert st["restarts"] == {"failures": failures, "preemptions": preemptions}
    assert st["placement"] is None
    assert plan.release
    assert cond(st, "Preempted")["status"] == "True" and cond(st, "Preempted")["reason"] == "Preempted"
    assert cond(st, "Running")["status"] == "False"
    assert "Preempted" in event_reasons(plan)
    assert "restartNotBefore" not in st  # preemption restarts at once, no backoff


@pytest.mark.parametrize(
    "reason",
    ["PreemptionByScheduler", "DeletionByTaintManager", "EvictionByEvictionAPI", "DeletionByPodGC", "TerminationByKubelet"],
)
def test_disruption_target_pod_is_a_preemption(reason):
    body = job(2, status=admitted(2, phase="Running"))
    existing = [pod(0), pod(1, phase="Failed", exit_code=143, disruption=reason)]
    plan = plan_training(body, existing, nodes(2), NOW)
    _assert_preempted(plan, body)
    assert sorted(plan.delete_pods) == sorted(p.name for p in existing)
    assert reason in cond(plan.status, "Preempted")["message"]


@pytest.mark.parametrize(
    "taint",
    [
        "aws-node-termination-handler/spot-itn",
        "aws-node-termination-handler/rebalance-recommendation",
        "karpenter.sh/disrupted",
        "cloud.google.com/impending-node-termination",
        "node.kubernetes.io/out-of-service",
    ],
)
def test_interruption_taint_on_node_is_a_preemption(taint):
    body = job(2, status=admitted(2, phase="Running"))
    ns = nodes(2, **{"ib0-nvl0-1": NodeView("ib0-nvl0-1", taint_keys=("foo/bar", taint))})
    plan = plan_training(body, pods(2), ns, NOW)
    _assert_preempted(plan, body)
    assert sorted(plan.delete_pods) == [f"{NAME}-worker-0-0", f"{NAME}-worker-1-0"]
    assert taint in cond(plan.status, "Preempted")["message"]


@pytest.mark.parametrize("taint", ["node.kubernetes.io/unschedulable", "nvidia.com/gpu", "example.com/spot"])
def test_other_taints_are_not_interruptions(taint):
    ns = nodes(2, **{"ib0-nvl0-1": NodeView("ib0-nvl0-1", taint_keys=(taint,))})
    plan = plan_training(job(2, status=admitted(2, phase="Running")), pods(2), ns, NOW)
    assert quiet(plan)


def test_missing_node_is_a_preemption():
    body = job(2, status=admitted(2, phase="Running"))
    plan = plan_training(body, pods(2), nodes(2, **{"ib0-nvl0-0": None}), NOW)
    _assert_preempted(plan, body)
    assert "node deleted" in cond(plan.status, "Preempted")["message"]


@pytest.mark.parametrize(
    "not_ready_for, grace, preempted",
    [(0, 60, False), (30, 60, False), (59.9, 60, False), (61, 60, True), (600, 60, True), (100, 300, False), (301, 300, True)],
)
def test_not_ready_node_is_a_preemption_only_after_grace(not_ready_for, grace, preempted):
    body = job(2, status=admitted(2, phase="Running"))
    ns = nodes(2, **{"ib0-nvl0-1": NodeView("ib0-nvl0-1", ready=False, not_ready_since=NOW - not_ready_for)})
    plan = plan_training(body, pods(2), ns, NOW, not_ready_grace=grace)
    if preempted:
        _assert_preempted(plan, body)
        assert "NotReady" in cond(plan.status, "Preempted")["message"]
    else:
        assert quiet(plan)


def test_not_ready_node_within_grace_requeues_when_grace_ends():
    ns = nodes(2, **{"ib0-nvl0-1": NodeView("ib0-nvl0-1", ready=False, not_ready_since=NOW - 20)})
    plan = plan_training(job(2, status=admitted(2, phase="Running")), pods(2), ns, NOW, not_ready_grace=60)
    assert plan.requeue_after == pytest.approx(40)


def test_pod_deleted_by_someone_else_is_a_preemption():
    body = job(2, status=admitted(2, phase="Running"))
    existing = [pod(0), pod(1, deleting=True)]
    plan = plan_training(body, existing, nodes(2), NOW)
    _assert_preempted(plan, body)
    # pods already being deleted are not deleted again
    assert plan.delete_pods == [f"{NAME}-worker-0-0"]


def test_pod_of_running_gang_that_vanished_is_a_preemption():
    body = job(2, status=admitted(2, phase="Running", startTime=rfc3339(T0), runningSince=rfc3339(T0)))
    plan = plan_training(body, [pod(0)], nodes(2), NOW)
    assert plan.create_ranks == []
    assert plan.status["phase"] == "Restarting"
    assert plan.status["restarts"]["preemptions"] == 1


def test_preemption_keeps_failure_count_and_adds_one_preemption():
    st = admitted(2, phase="Running", restarts={"failures": 2, "preemptions": 1})
    body = job(2, status=st)
    existing = pods(2, attempt=3)
    existing[0] = pod(0, attempt=3, disruption="PreemptionByScheduler")
    plan = plan_training(body, existing, nodes(2), NOW)
    _assert_preempted(plan, body, preemptions=2, failures=2)


def test_preemption_of_finished_gang_is_ignored():
    # Every worker succeeded; the node going away afterwards does not restart anything.
    body = job(2, status=admitted(2, phase="Running"))
    plan = plan_training(body, pods(2, phase="Succeeded"), nodes(2, **{"ib0-nvl0-0": None}), NOW)
    assert plan.status["phase"] == "Succeeded"


def test_preemption_closes_the_running_segment_into_gpu_hours_and_cost():
    st = admitted(2, phase="Running", runningSince=rfc3339(NOW - 1800), gpuHours=1.0)
    plan = plan_training(job(2, 8, status=st), pods(2, disruption="EvictionByEvictionAPI"), nodes(2), NOW,
                         price_per_gpu_hour=2.5)
    # 0.5h * 2 replicas * 8 GPUs = 8 GPU-hours more
    assert plan.status["gpuHours"] == pytest.approx(9.0)
    assert plan.status["cost"] == pytest.approx(22.5)
    assert plan.status["runningSince"] is None


# --------------------------------------------------------------------------- failure


@pytest.mark.parametrize(
    "failures_before, expected_delay",
    [(0, 10), (1, 20), (2, 40)],
)
def test_failed_pod_restarts_after_exponential_backoff(failures_before, expected_delay):
    st = admitted(2, phase="Running", restarts={"failures": failures_before, "preemptions": 0})
    existing = [pod(0, attempt=failures_before), pod(1, attempt=failures_before, phase="Failed", exit_code=1)]
    plan = plan_training(job(2, status=st), existing, nodes(2), NOW)
    s = plan.status
    assert s["phase"] == "Restarting"
    assert s["restarts"] == {"failures": failures_before + 1, "preemptions": 0}
    assert s["placement"] is None
    assert parse_time(s["restartNotBefore"]) == pytest.approx(NOW + expected_delay)
    assert plan.requeue_after == pytest.approx(expected_delay)
    assert plan.release
    assert cond(s, "Running")["status"] == "False" and cond(s, "Running")["reason"] == "WorkerFailed"
    assert cond(s, "Preempted") is None
    assert "WorkerFailed" in event_reasons(plan)
    # the running pod is deleted; the failed one is kept for its logs
    assert plan.delete_pods == [f"{NAME}-worker-0-{failures_before}"]


@pytest.mark.parametrize(
    "failures_after, base, cap, expected",
    [(1, 10, 600, 10), (2, 10, 600, 20), (3, 10, 600, 40), (4, 10, 600, 80), (6, 10, 600, 320),
     (7, 10, 600, 600), (20, 10, 600, 600), (3, 5, 15, 15), (1, 0, 600, 0)],
)
def test_backoff_doubles_and_is_capped(failures_after, base, cap, expected):
    fp = {"maxRestarts": 100, "backoffSeconds": base, "maxBackoffSeconds": cap, "preemptionsBeforeFallback": 2}
    a = failures_after - 1
    st = admitted(1, phase="Running", restarts={"failures": a, "preemptions": 0})
    plan = plan_training(job(1, status=st, failurePolicy=fp), [pod(0, attempt=a, phase="Failed", exit_code=2)],
                         nodes(1), NOW)
    assert plan.status["restarts"]["failures"] == failures_after
    assert parse_time(plan.status["restartNotBefore"]) == pytest.approx(NOW + expected)


@pytest.mark.parametrize("max_restarts", [0, 1, 3])
def test_failure_past_max_restarts_fails_the_job_naming_the_pod(max_restarts):
    fp = {"maxRestarts": max_restarts, "backoffSeconds": 10, "maxBackoffSeconds": 600, "preemptionsBeforeFallback": 2}
    st = admitted(2, phase="Running", restarts={"failures": max_restarts, "preemptions": 1})
    a = max_restarts + 1
    existing = [pod(0, attempt=a), pod(1, attempt=a, phase="Failed", exit_code=137)]
    plan = plan_training(job(2, status=st, failurePolicy=fp), existing, nodes(2), NOW)
    s = plan.status
    assert s["phase"] == "Failed"
    assert s["completionTime"] == rfc3339(NOW)
    assert s["placement"] is None and plan.release
    c = cond(s, "Failed")
    assert c["status"] == "True" and c["reason"] == "BackoffLimitExceeded"
    assert f"{NAME}-worker-1-{a}" in c["message"] and "137" in c["message"]
    assert s.get("restarts", st["restarts"])["failures"] == max_restarts
    assert plan.requeue_after is None
    assert plan.delete_pods == [f"{NAME}-worker-0-{a}"]


def test_failure_names_lowest_failed_rank():
    existing = [pod(0), pod(1, phase="Failed", exit_code=3), pod(2, phase="Failed", exit_code=4)]
    existing.reverse()
    plan = plan_training(job(3, status=admitted(3, phase="Running")), existing, nodes(3), NOW)
    assert f"{NAME}-worker-1-0" in cond(plan.status, "Running")["message"]


def test_disruption_wins_over_failure():
    # The killed worker ends Failed; with DisruptionTarget it is a preemption, never a failure.
    body = job(2, status=admitted(2, phase="Running"))
    existing = [pod(0, phase="Failed", exit_code=143, disruption="DeletionByTaintManager"),
                pod(1, phase="Failed", exit_code=1)]
    plan = plan_training(body, existing, nodes(2), NOW)
    _assert_preempted(plan, body)


def test_terminal_job_only_releases_its_placement():
    for ph in ("Succeeded", "Failed"):
        plan = plan_training(job(2, status=admitted(2, phase=ph)), pods(2, phase="Failed", exit_code=1), nodes(2), NOW)
        assert plan.status == {"placement": None} and plan.release
        assert plan.create_ranks == [] and plan.delete_pods == []
        plan = plan_training(job(2, status={"phase": ph}), [], {}, NOW)
        assert plan.status is None and not plan.release


# --------------------------------------------------------------------------- success


def test_all_succeeded_is_success_with_completion_time():
    st = admitted(2, phase="Running", startTime=rfc3339(T0), runningSince=rfc3339(T0))
    plan = plan_training(job(2, status=st), pods(2, phase="Succeeded", exit_code=0), nodes(2), NOW)
    s = plan.status
    assert s["phase"] == "Succeeded"
    assert s["completionTime"] == rfc3339(NOW)
    assert s["placement"] is None and plan.release
    assert cond(s, "Succeeded")["status"] == "True"
    assert cond(s, "Running")["status"] == "False"
    assert s["gpuHours"] == pytest.approx(16.0)  # 1h * 2 * 8
    assert "Succeeded" in event_reasons(plan)


def test_some_succeeded_others_running_waits():
    st = admitted(2, phase="Running", startTime=rfc3339(T0))
    existing = [pod(0, phase="Succeeded", exit_code=0), pod(1)]
    plan = plan_training(job(2, status=st), existing, nodes(2), NOW)
    assert (plan.status or {}).get("phase") != "Succeeded"
    assert plan.create_ranks == [] and plan.delete_pods == [] and not plan.release


def test_some_succeeded_others_running_keeps_phase_running():
    st = admitted(2, phase="Running", startTime=rfc3339(T0))
    existing = [pod(0, phase="Succeeded", exit_code=0), pod(1)]
    plan = plan_training(job(2, status=st), existing, nodes(2), NOW)
    assert (plan.status or {}).get("phase", "Running") == "Running"


# --------------------------------------------------------------------------- suspend / resume


@pytest.mark.parametrize("phase", ["Pending", "Running", "Restarting"])
def test_suspend_deletes_pods_and_releases(phase):
    st = admitted(2, phase=phase, runningSince=rfc3339(NOW - 3600)) if phase == "Running" else admitted(2, phase=phase)
    existing = pods(2) + [PodView(name="already-going", rank=0, attempt=0, deleting=True)]
    plan = plan_training(job(2, status=st, suspend=True), existing, nodes(2), NOW)
    s = plan.status
    assert s["phase"] == "Suspended" and s["placement"] is None and plan.release
    assert sorted(plan.delete_pods) == [f"{NAME}-worker-0-0", f"{NAME}-worker-1-0"]
    assert cond(s, "Suspended")["status"] == "True"
    assert plan.create_ranks == [] and plan.ungate == []
    assert "Suspended" in event_reasons(plan)
    if phase == "Running":
        assert s["gpuHours"] == pytest.approx(16.0) and s["runningSince"] is None


def test_suspend_keeps_status_counters_and_checkpoint():
    st = admitted(2, phase="Running", restarts={"failures": 1, "preemptions": 1}, lastCheckpoint={"step": 5, "path": "/c/5"})
    plan = plan_training(job(2, status=st, suspend=True), pods(2, attempt=2), nodes(2), NOW)
    assert "restarts" not in plan.status and "lastCheckpoint" not in plan.status


def test_already_suspended_is_steady():
    st = {"phase": "Suspended", "placement": None}
    plan = plan_training(job(2, status=st, suspend=True), [], {}, NOW)
    assert plan.status is None and plan.delete_pods == [] and not plan.release and plan.events == []


def test_resume_goes_back_to_pending():
    st = {"phase": "Suspended", "conditions": []}
    plan = plan_training(job(2, status=st, suspend=False), [], {}, NOW)
    assert plan.status["phase"] == "Pending"
    assert cond(plan.status, "Suspended")["status"] == "False"
    assert plan.create_ranks == [] and not plan.release
    assert "Resumed" in event_reasons(plan)


# --------------------------------------------------------------------------- stale pods


@pytest.mark.parametrize("admitted_now", [False, True])
def test_stale_pods_of_older_attempt_are_deleted(admitted_now):
    st = admitted(2, phase="Restarting", restarts={"failures": 1, "preemptions": 1}) if admitted_now else \
        {"phase": "Restarting", "restarts": {"failures": 1, "preemptions": 1}}
    existing = [
        pod(0, attempt=0),                                    # stale, running: delete
        pod(1, attempt=1, phase="Pending", gated=True),       # stale, pending: delete
        pod(0, attempt=1, phase="Failed", exit_code=1),       # stale, terminal: kept for logs
        pod(1, attempt=0, deleting=True),                     # already going
    ]
    plan = plan_training(job(2, status=st), existing, nodes(2), NOW)
    assert sorted(plan.delete_pods) == [f"{NAME}-worker-0-0", f"{NAME}-worker-1-1"]
    if admitted_now:
        assert plan.create_ranks == [0, 1]  # attempt 2 is still empty
    else:
        assert plan.create_ranks == []
    assert restart_attempt(st) == 2


@pytest.mark.parametrize(
    "status, expected",
    [(None, 0), ({}, 0), ({"restarts": {}}, 0), ({"restarts": {"failures": 2}}, 2),
     ({"restarts": {"failures": 2, "preemptions": 3}}, 5)],
)
def test_restart_attempt(status, expected):
    assert restart_attempt(status) == expected


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize(
    "messages, expected",
    [
        ([json.dumps({"step": 100, "path": "/checkpoints/100"})], {"step": 100, "path": "/checkpoints/100"}),
        ([json.dumps({"step": 100, "path": "/c/100"}), json.dumps({"step": 300, "path": "/c/300"}),
          json.dumps({"step": 200, "path": "/c/200"})], {"step": 300, "path": "/c/300"}),
        (["log line\nanother\n" + json.dumps({"step": 7, "path": "/c/7", "time": "2027-01-01T00:00:00Z"})],
         {"step": 7, "path": "/c/7", "time": "2027-01-01T00:00:00Z"}),
        (["not json", "{broken", "[1, 2]", json.dumps({"path": "/no-step"}), json.dumps({"step": "abc"}),
          json.dumps({"step": None}), "   ", ""], None),
        (["garbage", json.dumps({"step": 42, "path": "/c/42"}), "{}"], {"step": 42, "path": "/c/42"}),
        ([json.dumps({"step": "12", "path": "/c/12"})], {"step": 12, "path": "/c/12"}),
    ],
)
def test_checkpoint_from_termination_messages(messages, expected):
    existing = [PodView(name=f"p{i}", rank=i % 2, attempt=0, phase="Running", termination_message=m)
                for i, m in enumerate(messages)]
    plan = plan_training(job(2, status=admitted(2, phase="Running")), existing, nodes(2), NOW)
    got = (plan.status or {}).get("lastCheckpoint")
    assert got == expected
    assert ("CheckpointReported" in event_reasons(plan)) == (expected is not None)


@pytest.mark.parametrize("stored_step, reported_step, updated", [(50, 100, True), (100, 100, False), (200, 100, False)])
def test_checkpoint_only_moves_forward(stored_step, reported_step, updated):
    st = admitted(2, phase="Running", lastCheckpoint={"step": stored_step, "path": f"/c/{stored_step}"})
    msg = json.dumps({"step": reported_step, "path": f"/c/{reported_step}"})
    existing = [pod(0, termination_message=msg), pod(1)]
    plan = plan_training(job(2, status=st), existing, nodes(2), NOW)
    if updated:
        assert plan.status["lastCheckpoint"]["step"] == reported_step
    else:
        assert "lastCheckpoint" not in (plan.status or {})


def test_checkpoint_read_from_pods_of_older_attempts_and_on_preemption():
    msg = json.dumps({"step": 900, "path": "/c/900"})
    existing = [pod(0, disruption="TerminationByKubelet", phase="Failed", exit_code=143, termination_message=msg), pod(1)]
    plan = plan_training(job(2, status=admitted(2, phase="Running")), existing, nodes(2), NOW)
    assert plan.status["phase"] == "Restarting"
    assert plan.status["lastCheckpoint"] == {"step": 900, "path": "/c/900"}


# --------------------------------------------------------------------------- pool fallback


@pytest.mark.parametrize(
    "pools, per_pool, preemptions, expected",
    [
        (["spot", "od"], 2, 0, "spot"),
        (["spot", "od"], 2, 1, "spot"),
        (["spot", "od"], 2, 2, "od"),
        (["spot", "od"], 2, 9, "od"),
        (["a", "b", "c"], 1, 0, "a"),
        (["a", "b", "c"], 1, 1, "b"),
        (["a", "b", "c"], 1, 2, "c"),
        (["a", "b", "c"], 1, 5, "c"),
        (["a", "b", "c"], 3, 5, "b"),
        (["spot", "od"], 0, 0, "spot"),
        (["spot", "od"], 0, 50, "spot"),
        (["only"], 2, 10, "only"),
    ],
)
def test_current_pool_fallback(pools, per_pool, preemptions, expected):
    spec = job(pools=pools, failurePolicy={"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600,
                                           "preemptionsBeforeFallback": per_pool})["spec"]
    status = {"restarts": {"failures": 7, "preemptions": preemptions}}
    assert current_pool(spec, status) == expected


def test_current_pool_ignores_failures_and_missing_status():
    spec = job(pools=["spot", "od"])["spec"]
    assert current_pool(spec, None) == "spot"
    assert current_pool(spec, {"restarts": {"failures": 10, "preemptions": 0}}) == "spot"


def test_two_preemptions_move_the_job_to_the_fallback_pool():
    body = job(2, status=admitted(2, phase="Running"))
    for i in range(2):
        assert current_pool(body["spec"], body["status"]) == "h100-spot"
        plan = plan_training(body, pods(2, attempt=i, disruption="PreemptionByScheduler"), nodes(2), NOW + i)
        body = merged(body, plan)
        body["status"]["placement"] = placement(2)
    assert body["status"]["restarts"] == {"failures": 0, "preemptions": 2}
    assert current_pool(body["spec"], body["status"]) == "h100-od"


# --------------------------------------------------------------------------- interruption_reason


@pytest.mark.parametrize(
    "node, expected",
    [
        (None, "node deleted"),
        (NodeView("n"), None),
        (NodeView("n", ready=False, not_ready_since=None), None),
        (NodeView("n", ready=False, not_ready_since=NOW - 10), None),
        (NodeView("n", ready=False, not_ready_since=NOW - 120), "NotReady"),
        (NodeView("n", ready=True, not_ready_since=NOW - 120), None),
        (NodeView("n", taint_keys=("karpenter.sh/disrupted",)), "karpenter.sh/disrupted"),
        (NodeView("n", taint_keys=("aws-node-termination-handler/spot-itn",)), "spot-itn"),
        (NodeView("n", taint_keys=("node.kubernetes.io/not-ready",)), None),
    ],
)
def test_interruption_reason(node, expected):
    got = interruption_reason(node, NOW, 60.0)
    if expected is None:
        assert got is None
    else:
        assert got is not None and expected in got


# --------------------------------------------------------------------------- pod_view


def k8s_pod(rank=1, attempt=2, phase="Running", conditions=(), container_statuses=(), gates=None,
            deleting=False, containers=("trainer",)):
    p = {
        "metadata": {"name": f"{NAME}-worker-{rank}-{attempt}",
                     "labels": {"kubeforge.io/replica-index": str(rank), "kubeforge.io/restart-attempt": str(attempt)}},
        "spec": {"nodeName": "n1", "containers": [{"name": c} for c in containers]},
        "status": {"phase": phase, "conditions": list(conditions), "containerStatuses": list(container_statuses)},
    }
    if gates:
        p["spec"]["schedulingGates"] = gates
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    return p


def test_pod_view_basic_fields():
    v = pod_view(k8s_pod(conditions=[{"type": "Ready", "status": "True"}]))
    assert (v.name, v.rank, v.attempt, v.phase, v.node) == (f"{NAME}-worker-1-2", 1, 2, "Running", "n1")
    assert v.ready and not v.gated and not v.deleting and v.disruption is None and v.exit_code is None


def test_pod_view_gate_deletion_and_disruption():
    v = pod_view(k8s_pod(phase="Pending", gates=[{"name": "kubeforge.io/gang"}], deleting=True,
                         conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
                                     {"type": "Ready", "status": "False"}]))
    assert v.gated and v.deleting and not v.ready and v.disruption == "PreemptionByScheduler"
    v = pod_view(k8s_pod(conditions=[{"type": "DisruptionTarget", "status": "False", "reason": "X"}]))
    assert v.disruption is None
    v = pod_view(k8s_pod(conditions=[{"type": "DisruptionTarget", "status": "True"}]))
    assert v.disruption == "DisruptionTarget"


def test_pod_view_reads_gpu_container_termination():
    cs = [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "message": "sidecar"}}},
        {"name": "trainer", "state": {"terminated": {"exitCode": 3, "message": '{"step": 5, "path": "/c/5"}'}}},
    ]
    v = pod_view(k8s_pod(phase="Failed", container_statuses=cs, containers=("sidecar", "trainer")))
    assert v.exit_code == 3 and v.termination_message == '{"step": 5, "path": "/c/5"}'
    v = pod_view(k8s_pod(phase="Failed", container_statuses=list(reversed(cs)), containers=("sidecar", "trainer")))
    assert v.exit_code == 3 and v.termination_message == '{"step": 5, "path": "/c/5"}'


def test_pod_view_defaults_on_empty_pod():
    v = pod_view({})
    assert (v.name, v.rank, v.attempt, v.phase) == ("", 0, 0, "Pending")


# --------------------------------------------------------------------------- idempotence, conditions


SCENARIOS = {
    "not-admitted": (job(2, status={}), [], {}),
    "create": (job(2, status=admitted(2)), [], nodes(2)),
    "ungate": (job(2, status=admitted(2)), pods(2, phase="Pending", gated=True), nodes(2)),
    "running": (job(2, status=admitted(2)), pods(2), nodes(2)),
    "preempted": (job(2, status=admitted(2, phase="Running")), pods(2, disruption="PreemptionByScheduler"), nodes(2)),
    "node-gone": (job(2, status=admitted(2, phase="Running")), pods(2), nodes(2, **{"ib0-nvl0-1": None})),
    "failed": (job(2, status=admitted(2, phase="Running")), [pod(0), pod(1, phase="Failed", exit_code=1)], nodes(2)),
    "succeeded": (job(2, status=admitted(2, phase="Running")), pods(2, phase="Succeeded"), nodes(2)),
    "suspend": (job(2, status=admitted(2, phase="Running"), suspend=True), pods(2), nodes(2)),
    "resume": (job(2, status={"phase": "Suspended"}), [], {}),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_inputs_same_plan(name):
    body, ps, ns = SCENARIOS[name]
    snapshot = copy.deepcopy(body)
    a = plan_training(body, ps, ns, NOW)
    b = plan_training(body, ps, ns, NOW)
    assert a == b
    assert body == snapshot  # the job is not mutated


@pytest.mark.parametrize("name", ["running", "preempted", "node-gone", "failed", "succeeded", "suspend", "resume"])
def test_after_applying_status_no_new_transition(name):
    """Level-based: once the plan's status is written, the same world yields no new events."""
    body, ps, ns = SCENARIOS[name]
    first = plan_training(body, ps, ns, NOW)
    body2 = merged(body, first)
    deleted = set(first.delete_pods)
    ps2 = [PodView(**{**p.__dict__, "deleting": p.deleting or p.name in deleted}) for p in ps]
    second = plan_training(body2, ps2, ns, NOW + 5)
    assert second.events == []
    assert second.create_ranks == [] and not second.release
    assert (second.status or {}).get("phase") in (None, body2["status"].get("phase"))


def test_conditions_keep_last_transition_time_when_status_unchanged():
    old = [{"type": "Running", "status": "False", "reason": "Preempted", "message": "x",
            "lastTransitionTime": rfc3339(T0), "observedGeneration": 1},
           {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok",
            "lastTransitionTime": rfc3339(T0)}]
    st = admitted(2, phase="Running", conditions=old)
    plan = plan_training(job(2, status=st), [pod(0), pod(1, phase="Failed", exit_code=1)], nodes(2), NOW)
    running = cond(plan.status, "Running")
    assert running["status"] == "False" and running["reason"] == "WorkerFailed"
    assert running["lastTransitionTime"] == rfc3339(T0)     # status unchanged: time kept
    assert running["observedGeneration"] == 3
    admitted_c = cond(plan.status, "Admitted")
    assert admitted_c["status"] == "False"
    assert admitted_c["lastTransitionTime"] == rfc3339(NOW)  # status changed: time moves


# --------------------------------------------------------------------------- found by probing


def resumed_and_readmitted():
    """A Running job suspended (its plan applied), resumed, and admitted again."""
    running = job(2, status=admitted(2, phase="Running"))
    running["spec"]["suspend"] = True
    plan = plan_training(running, pods(2), nodes(2), NOW)
    st = {**running["status"], **plan.status}
    st.update(phase="Pending", placement=placement(2))
    return job(2, status=st)


def test_suspend_moves_to_a_new_attempt():
    body = resumed_and_readmitted()
    assert body["status"]["attempt"] == 1
    plan = plan_training(body, [], nodes(2), NOW)
    assert plan.create_ranks == [0, 1]


def test_resume_with_pods_still_terminating_from_suspend_is_not_a_preemption():
    body = resumed_and_readmitted()
    lingering = pods(2, deleting=True)  # deleted by the suspend, still in their grace period
    plan = plan_training(body, lingering, nodes(2), NOW)
    assert "restarts" not in (plan.status or {})
    assert (plan.status or {}).get("phase") != "Restarting"


def test_resume_with_pod_killed_by_suspend_is_not_a_failure():
    body = resumed_and_readmitted()
    lingering = [pod(0, phase="Failed", exit_code=143, deleting=True), pod(1, deleting=True, phase="Failed", exit_code=143)]
    plan = plan_training(body, lingering, nodes(2), NOW)
    assert (plan.status or {}).get("restarts", {}).get("failures", 0) == 0
    assert (plan.status or {}).get("phase") not in ("Restarting", "Failed")


def test_pod_view_does_not_take_sidecar_message_for_gpu_container():
    cs = [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "message": '{"step": 999, "path": "/side"}'}}},
        {"name": "trainer", "state": {"terminated": {"exitCode": 1}}},
    ]
    v = pod_view(k8s_pod(phase="Failed", container_statuses=cs, containers=("sidecar", "trainer")))
    assert v.exit_code == 1
    assert v.termination_message is None


@pytest.mark.parametrize("running_for,folded", [(30, False), (60, True), (3600, True)])
def test_running_job_folds_gpu_hours_at_most_once_a_minute(running_for, folded):
    st = admitted(2, phase="Running", startTime=rfc3339(NOW - running_for),
                  runningSince=rfc3339(NOW - running_for), gpuHours=1.0)
    plan = plan_training(job(2, gpus=8, status=st), pods(2), nodes(2), NOW, price_per_gpu_hour=2.0)
    new = plan.status or {}
    if not folded:
        assert "gpuHours" not in new and "runningSince" not in new
    else:
        expected = round(1.0 + running_for / 3600 * 16, 6)
        assert new["gpuHours"] == pytest.approx(expected)
        assert new["runningSince"] == rfc3339(NOW)
        assert new["cost"] == pytest.approx(round(expected * 2.0, 4))


@pytest.mark.parametrize("waited,replaced", [(10, False), (30, True)])
def test_ungated_worker_stuck_unschedulable_places_the_gang_again(waited, replaced):
    st = admitted(2, phase="Pending", attempt=0)
    stuck = pod(0, phase="Pending", node=None, ready=False, unschedulable_since=NOW - waited,
                unschedulable_message="0/3 nodes are available: 1 Insufficient nvidia.com/gpu")
    plan = plan_training(job(2, status=st), [stuck, pod(1)], nodes(2), NOW, schedule_timeout=30)
    if not replaced:
        assert plan.delete_pods == [] and plan.requeue_after == pytest.approx(20)
        assert "placement" not in (plan.status or {})
    else:
        assert plan.status["placement"] is None and plan.status["attempt"] == 1
        assert "restarts" not in plan.status  # neither a failure nor a preemption
        adm = cond(plan.status, "Admitted")
        assert adm["reason"] == "PlacementLost" and "Insufficient nvidia.com/gpu" in adm["message"]
        assert sorted(plan.delete_pods) == sorted(p.name for p in [stuck, pod(1)]) and plan.release


def test_gated_worker_is_never_taken_for_stuck():
    st = admitted(2, phase="Pending")
    gated = [pod(r, phase="Pending", node=None, gated=True, ready=False, unschedulable_since=NOW - 300) for r in (0, 1)]
    plan = plan_training(job(2, status=st), gated, nodes(2), NOW)
    assert plan.ungate and not plan.delete_pods


def test_worker_waiting_for_its_volume_is_not_a_lost_placement():
    st = admitted(2, phase="Pending")
    slow = pod(0, phase="Pending", node=None, ready=False, unschedulable_since=NOW - 300,
               unschedulable_message='0/64 nodes are available: pod has unbound immediate PersistentVolumeClaims.')
    plan = plan_training(job(2, status=st), [slow, pod(1)], nodes(2), NOW)
    assert not plan.delete_pods and "placement" not in (plan.status or {})
