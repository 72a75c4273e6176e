"""Table-driven tests of the TrainingJob state machine (``kubeforge.lifecycle.plan_training``).

Small builders (tests/training_builders.py) make a job record from a dict the way the
operator does, Pods and Nodes of the shared object model, and one TrainingContext; each test
states one rule. The rules new in the rewrite (admission writing the placement, spec change,
refused creates, the startup timeout, maxPreemptions...) are in test_lifecycle_startup.py;
the object model's own rules (pod_from_k8s, pod_requests, interruption_reason,
current_attempt) in test_objects.py; pool fallback, now admission's, in test_admission_plan.py.
"""

from __future__ import annotations

import json
import pytest

from kubeforge.objects import parse_time, rfc3339
from kubeforge.objects import Node, Pod, Taint, current_attempt
from training_builders import (
    NAME, NOW, NS, SPOT, T0, admitted, cond, deleted, event_reasons, job, merged, nodes, placement, plan, pod,
    pods, quiet, restarts,
)

# --------------------------------------------------------------------------- admission / create / legacy gates


def test_not_admitted_creates_nothing_and_stays_pending():
    p = plan(job(status={}))
    assert p.create_ranks == [] and p.ungate == [] and p.delete_pods == []
    assert not p.release
    assert (p.status or {}).get("phase", "Pending") == "Pending"


def test_a_new_job_gets_no_status_write_before_admission_decides():
    # The first write of a gang is its placement (or why it waits), not phase Pending alone.
    assert plan(job(status={})).status is None


@pytest.mark.parametrize("phase", ["Running", "Pending"])
def test_not_admitted_phase_becomes_pending(phase):
    # A job whose placement was dropped (e.g. by hand) waits for admission again.
    p = plan(job(status={"phase": phase}))
    assert p.create_ranks == []
    if phase == "Pending":
        assert p.status is None
    else:
        assert p.status["phase"] == "Pending"


def test_not_admitted_during_backoff_requeues_until_restart_not_before():
    st = {"phase": "Restarting", "restarts": restarts(failures=1), "restartNotBefore": rfc3339(NOW + 25)}
    p = plan(job(status=st))
    assert p.create_ranks == []
    assert p.requeue_after == pytest.approx(25)


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_admitted_without_pods_creates_every_rank_and_ungates_none(replicas):
    p = plan(job(replicas, status=admitted(replicas)), [], nodes(replicas))
    assert p.create_ranks == list(range(replicas))
    assert p.ensure_claim and p.ensure_service  # the volume claim and the workers Service come first
    assert p.ungate == []
    assert p.delete_pods == []
    assert not p.release


def test_admitted_with_some_pods_creates_only_missing_ranks_and_ungates_none():
    # Workers are now created ungated; pods made gated by kubeforge 0.1 are lifted only once
    # nothing is left to create (the old "ungate together" rule, kept for those pods).
    existing = [pod(0, phase="Pending", legacy_gate=True), pod(2, phase="Pending", legacy_gate=True)]
    p = plan(job(4, status=admitted(4)), existing, nodes(4))
    assert p.create_ranks == [1, 3]
    assert p.ungate == []


def test_all_legacy_gated_ranks_are_ungated_in_rank_order():
    # Rule changed on purpose: there is no "ungate all ranks" step for new gangs any more; a
    # gang made before the upgrade (every worker carrying kubeforge.io/gang) is lifted whole.
    existing = [pod(r, phase="Pending", legacy_gate=True) for r in (3, 1, 0, 2)]
    p = plan(job(4, status=admitted(4)), existing, nodes(4))
    assert p.create_ranks == []
    assert p.ungate == [f"{NAME}-worker-{r}-0" for r in range(4)]


def test_only_legacy_gang_gates_are_lifted():
    # Only kubeforge's own legacy gate is ours to lift; a pod without it, or with someone
    # else's gate only, is left alone.
    existing = [pod(0, phase="Pending"), pod(1, phase="Pending", legacy_gate=True),
                pod(2, phase="Pending", gates=("example.com/other",))]
    p = plan(job(3, status=admitted(3)), existing, nodes(3))
    assert p.ungate == [f"{NAME}-worker-1-0"]


# --------------------------------------------------------------------------- running


def test_all_running_sets_phase_start_time_conditions_and_event():
    p = plan(job(2, status=admitted(2)), pods(2), nodes(2))
    st = p.status
    assert st["phase"] == "Running"
    assert st["startTime"] == rfc3339(NOW)
    assert st["runningSince"] == rfc3339(NOW)
    for type_ in ("Running", "Ready"):
        c = cond(st, type_)
        assert c["status"] == "True" and c["reason"] == "AllWorkersRunning"
        assert c["lastTransitionTime"] == rfc3339(NOW) and c["observedGeneration"] == 3
    assert ("Normal", "Running") in [(e[0], e[1]) for e in p.events]
    assert st["replicas"] == {"active": 2, "ready": 2, "succeeded": 0, "failed": 0}
    assert p.create_ranks == [] and p.ungate == [] and p.delete_pods == [] and not p.release


def test_running_keeps_existing_start_time():
    st = admitted(2, phase="Restarting", startTime=rfc3339(T0))
    p = plan(job(2, status=st), pods(2), nodes(2))
    assert p.status["phase"] == "Running"
    assert p.status["startTime"] == rfc3339(T0)


def test_running_again_after_preemption_clears_preempted_condition():
    first = plan(job(2, status=admitted(2, phase="Running")), pods(2, disruption="PreemptionByScheduler"), nodes(2),
                 now=T0)
    body = merged(job(2, status=admitted(2, phase="Running")), first, placement=placement(2))  # admitted again
    p = plan(body, pods(2, attempt=1), nodes(2))
    assert p.status["phase"] == "Running"
    assert cond(p.status, "Preempted")["status"] == "False"
    assert cond(p.status, "Preempted")["reason"] == "Recovered"


def test_partially_running_gang_is_not_running():
    existing = [pod(0), pod(1, phase="Pending")]
    p = plan(job(2, status=admitted(2)), existing, nodes(2))
    assert (p.status or {}).get("phase") in (None, "Pending")
    assert cond(p.status, "Running") is None and cond(p.status, "Ready") is None


# --------------------------------------------------------------------------- disruption


def _assert_preempted(p, *, preemptions=1, failures=0, attempt=1):
    st = p.status
    assert st["phase"] == "Restarting"
    assert st["restarts"] == restarts(failures=failures, preemptions=preemptions)
    assert st["placement"] is None
    assert st["attempt"] == attempt  # the new attempt is written before any pod is deleted
    assert p.release
    assert cond(st, "Preempted")["status"] == "True" and cond(st, "Preempted")["reason"] == "Preempted"
    assert cond(st, "Running")["status"] == "False"
    assert cond(st, "Ready")["status"] == "False"
    assert "Preempted" in event_reasons(p)
    assert st.get("restartNotBefore") is None  # preemption restarts at once, no backoff


@pytest.mark.parametrize(
    "reason",
    ["PreemptionByScheduler", "DeletionByTaintManager", "EvictionByEvictionAPI", "DeletionByPodGC", "TerminationByKubelet"],
)
def test_disruption_target_pod_is_a_preemption(reason):
    existing = [pod(0), pod(1, phase="Failed", exit_code=143, disruption=reason)]
    p = plan(job(2, status=admitted(2, phase="Running")), existing, nodes(2))
    _assert_preempted(p)
    # Rule changed on purpose: a stop deletes the live pods only; the terminal one is kept for its logs.
    assert p.delete_pods == [f"{NAME}-worker-0-0"]
    assert reason in cond(p.status, "Preempted")["message"]


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
    ns = nodes(2, **{"ib0-nvl0-1": Node("ib0-nvl0-1", taints=(Taint("foo/bar"), Taint(taint, effect="NoExecute")))})
    p = plan(job(2, status=admitted(2, phase="Running")), pods(2), ns)
    _assert_preempted(p)
    assert sorted(p.delete_pods) == [f"{NAME}-worker-0-0", f"{NAME}-worker-1-0"]
    assert taint in cond(p.status, "Preempted")["message"]


@pytest.mark.parametrize("taint", ["node.kubernetes.io/unschedulable", "nvidia.com/gpu", "example.com/spot"])
def test_other_taints_are_not_interruptions(taint):
    ns = nodes(2, **{"ib0-nvl0-1": Node("ib0-nvl0-1", taints=(Taint(taint),))})
    p = plan(job(2, status=admitted(2, phase="Running")), pods(2), ns)
    assert quiet(p)


def test_missing_node_is_a_preemption():
    p = plan(job(2, status=admitted(2, phase="Running")), pods(2), nodes(2, **{"ib0-nvl0-0": None}))
    _assert_preempted(p)
    assert "node ib0-nvl0-0 deleted" in cond(p.status, "Preempted")["message"]


@pytest.mark.parametrize(
    "not_ready_for, grace, preempted",
    [(0, 60, False), (30, 60, False), (59.9, 60, False), (61, 60, True), (600, 60, True), (100, 300, False),
     (301, 300, True)],
)
def test_not_ready_node_is_a_preemption_only_after_grace(not_ready_for, grace, preempted):
    ns = nodes(2, **{"ib0-nvl0-1": Node("ib0-nvl0-1", ready=False, ready_changed=NOW - not_ready_for)})
    p = plan(job(2, status=admitted(2, phase="Running")), pods(2), ns, not_ready_grace=grace)
    if preempted:
        _assert_preempted(p)
        assert "NotReady" in cond(p.status, "Preempted")["message"]
    else:
        assert quiet(p)


def test_not_ready_node_within_grace_requeues_when_grace_ends():
    ns = nodes(2, **{"ib0-nvl0-1": Node("ib0-nvl0-1", ready=False, ready_changed=NOW - 20)})
    p = plan(job(2, status=admitted(2, phase="Running")), pods(2), ns, not_ready_grace=60)
    assert p.requeue_after == pytest.approx(40)


def test_pod_deleted_by_someone_else_is_a_preemption():
    existing = [pod(0), pod(1, deleting=True)]
    p = plan(job(2, status=admitted(2, phase="Running")), existing, nodes(2))
    _assert_preempted(p)
    # pods already being deleted are not deleted again
    assert p.delete_pods == [f"{NAME}-worker-0-0"]


def test_pod_of_running_gang_that_vanished_is_a_preemption():
    st = admitted(2, phase="Running", startTime=rfc3339(T0), runningSince=rfc3339(T0))
    p = plan(job(2, status=st), [pod(0)], nodes(2))
    assert p.create_ranks == []
    assert p.status["phase"] == "Restarting"
    assert p.status["restarts"]["preemptions"] == 1


def test_preemption_keeps_failure_count_and_adds_one_preemption():
    st = admitted(2, phase="Running", attempt=3, restarts=restarts(failures=2, preemptions=1))
    existing = pods(2, attempt=3)
    existing[0] = pod(0, attempt=3, disruption="PreemptionByScheduler")
    p = plan(job(2, status=st), existing, nodes(2))
    _assert_preempted(p, preemptions=2, failures=2, attempt=4)


def test_preemption_of_finished_gang_is_ignored():
    # Every worker succeeded; the node going away afterwards does not restart anything.
    p = plan(job(2, status=admitted(2, phase="Running")), pods(2, phase="Succeeded"), nodes(2, **{"ib0-nvl0-0": None}))
    assert p.status["phase"] == "Succeeded"


def test_preemption_closes_the_running_segment_into_gpu_hours_and_cost():
    # Rule changed on purpose: cost is summed per running segment at that segment's pool price
    # (the 1.0 GPU-hour before cost 2.5 here), not total GPU-hours x today's price.
    st = admitted(2, phase="Running", runningSince=rfc3339(NOW - 1800), gpuHours=1.0, cost=2.5)
    p = plan(job(2, 8, status=st), pods(2, disruption="EvictionByEvictionAPI"), nodes(2), pool_prices={SPOT: 2.5})
    # 0.5h * 2 replicas * 8 GPUs = 8 GPU-hours more, at 2.5 each
    assert p.status["gpuHours"] == pytest.approx(9.0)
    assert p.status["cost"] == pytest.approx(22.5)
    assert p.status["runningSince"] is None


# --------------------------------------------------------------------------- failure


@pytest.mark.parametrize("failures_before, expected_delay", [(0, 10), (1, 20), (2, 40)])
def test_failed_pod_restarts_after_exponential_backoff(failures_before, expected_delay):
    st = admitted(2, phase="Running", attempt=failures_before, restarts=restarts(failures=failures_before))
    existing = [pod(0, attempt=failures_before), pod(1, attempt=failures_before, phase="Failed", exit_code=1)]
    p = plan(job(2, status=st), existing, nodes(2))
    s = p.status
    assert s["phase"] == "Restarting"
    assert s["restarts"] == restarts(failures=failures_before + 1)
    assert s["placement"] is None
    assert s["attempt"] == failures_before + 1
    assert parse_time(s["restartNotBefore"]) == pytest.approx(NOW + expected_delay)
    assert p.requeue_after == pytest.approx(expected_delay)
    assert p.release
    assert cond(s, "Running")["status"] == "False" and cond(s, "Running")["reason"] == "WorkerFailed"
    assert cond(s, "Ready")["status"] == "False"
    assert cond(s, "Preempted") is None
    assert "WorkerFailed" in event_reasons(p)
    # the running pod is deleted; the failed one is kept for its logs
    assert p.delete_pods == [f"{NAME}-worker-0-{failures_before}"]


def test_failure_restart_deletes_every_live_pod_of_any_attempt():
    # Rule changed on purpose: the stop deletes every non-terminal pod the job still has
    # (a straggler of an older attempt too), never a terminal one.
    st = admitted(3, phase="Running", attempt=1, restarts=restarts(failures=1))
    existing = [pod(0, attempt=1), pod(1, attempt=1, phase="Failed", exit_code=1), pod(2, attempt=1, phase="Succeeded"),
                pod(2, attempt=0, phase="Running"), pod(1, attempt=0, phase="Failed")]
    p = plan(job(3, status=st), existing, nodes(3))
    assert p.status["phase"] == "Restarting"
    assert p.delete_pods == [f"{NAME}-worker-0-1", f"{NAME}-worker-2-0"]
    assert p.delete_grace_seconds is None  # the pods' own grace period: SIGTERM, then checkpoint


@pytest.mark.parametrize(
    "failures_after, base, cap, expected",
    [(1, 10, 600, 10), (2, 10, 600, 20), (3, 10, 600, 40), (4, 10, 600, 80), (6, 10, 600, 320),
     (7, 10, 600, 600), (20, 10, 600, 600), (3, 5, 15, 15), (1, 0, 600, 0)],
)
def test_backoff_doubles_and_is_capped(failures_after, base, cap, expected):
    fp = {"maxRestarts": 100, "backoffSeconds": base, "maxBackoffSeconds": cap, "preemptionsBeforeFallback": 2}
    a = failures_after - 1
    st = admitted(1, phase="Running", attempt=a, restarts=restarts(failures=a))
    p = plan(job(1, status=st, failurePolicy=fp), [pod(0, attempt=a, phase="Failed", exit_code=2)], nodes(1))
    assert p.status["restarts"]["failures"] == failures_after
    assert parse_time(p.status["restartNotBefore"]) == pytest.approx(NOW + expected)


@pytest.mark.parametrize("max_restarts", [0, 1, 3])
def test_failure_past_max_restarts_fails_the_job_naming_the_pod(max_restarts):
    fp = {"maxRestarts": max_restarts, "backoffSeconds": 10, "maxBackoffSeconds": 600, "preemptionsBeforeFallback": 2}
    a = max_restarts + 1
    st = admitted(2, phase="Running", attempt=a, restarts=restarts(failures=max_restarts, preemptions=1))
    existing = [pod(0, attempt=a), pod(1, attempt=a, phase="Failed", exit_code=137)]
    p = plan(job(2, status=st, failurePolicy=fp), existing, nodes(2))
    s = p.status
    assert s["phase"] == "Failed"
    assert s["completionTime"] == rfc3339(NOW)
    assert s["placement"] is None and p.release
    assert "attempt" not in s  # a final stop keeps the attempt
    c = cond(s, "Failed")
    assert c["status"] == "True" and c["reason"] == "BackoffLimitExceeded"
    assert f"{NAME}-worker-1-{a}" in c["message"] and "137" in c["message"]
    assert s.get("restarts", st["restarts"])["failures"] == max_restarts
    assert p.requeue_after is None
    assert p.delete_pods == [f"{NAME}-worker-0-{a}"]


def test_failure_names_lowest_failed_rank():
    existing = [pod(0), pod(1, phase="Failed", exit_code=3), pod(2, phase="Failed", exit_code=4)]
    existing.reverse()
    p = plan(job(3, status=admitted(3, phase="Running")), existing, nodes(3))
    assert f"{NAME}-worker-1-0" in cond(p.status, "Running")["message"]


def test_disruption_wins_over_failure():
    # The killed worker ends Failed; with DisruptionTarget it is a preemption, never a failure.
    existing = [pod(0, phase="Failed", exit_code=143, disruption="DeletionByTaintManager"),
                pod(1, phase="Failed", exit_code=1)]
    p = plan(job(2, status=admitted(2, phase="Running")), existing, nodes(2))
    _assert_preempted(p)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_job_only_releases_its_placement(phase):
    p = plan(job(2, status=admitted(2, phase=phase)), pods(2, phase="Failed", exit_code=1), nodes(2))
    assert p.status == {"placement": None} and p.release
    assert p.create_ranks == [] and p.delete_pods == []
    p = plan(job(2, status={"phase": phase}))
    assert p.status is None and not p.release


# --------------------------------------------------------------------------- success


def test_all_succeeded_is_success_with_completion_time():
    st = admitted(2, phase="Running", startTime=rfc3339(T0), runningSince=rfc3339(T0))
    p = plan(job(2, status=st), pods(2, phase="Succeeded", exit_code=0), nodes(2))
    s = p.status
    assert s["phase"] == "Succeeded"
    assert s["completionTime"] == rfc3339(NOW)
    assert s["placement"] is None and p.release
    assert cond(s, "Succeeded")["status"] == "True"
    assert cond(s, "Running")["status"] == "False"
    assert cond(s, "Ready")["status"] == "False"
    assert s["gpuHours"] == pytest.approx(16.0)  # 1h * 2 * 8
    assert "Succeeded" in event_reasons(p)


def test_some_succeeded_others_running_waits():
    st = admitted(2, phase="Running", startTime=rfc3339(T0))
    existing = [pod(0, phase="Succeeded", exit_code=0), pod(1)]
    p = plan(job(2, status=st), existing, nodes(2))
    assert (p.status or {}).get("phase") != "Succeeded"
    assert p.create_ranks == [] and p.delete_pods == [] and not p.release


def test_some_succeeded_others_running_keeps_phase_running():
    st = admitted(2, phase="Running", startTime=rfc3339(T0))
    existing = [pod(0, phase="Succeeded", exit_code=0), pod(1)]
    p = plan(job(2, status=st), existing, nodes(2))
    assert (p.status or {}).get("phase", "Running") == "Running"


# --------------------------------------------------------------------------- suspend / resume


@pytest.mark.parametrize("phase", ["Pending", "Running", "Restarting"])
def test_suspend_deletes_pods_and_releases(phase):
    st = admitted(2, phase=phase, runningSince=rfc3339(NOW - 3600)) if phase == "Running" else admitted(2, phase=phase)
    existing = pods(2) + [Pod(namespace=NS, name="already-going", rank=0, attempt=0, deleting=True)]
    p = plan(job(2, status=st, suspend=True), existing, nodes(2))
    s = p.status
    assert s["phase"] == "Suspended" and s["placement"] is None and p.release
    assert s["attempt"] == 1
    assert sorted(p.delete_pods) == [f"{NAME}-worker-0-0", f"{NAME}-worker-1-0"]
    assert cond(s, "Suspended")["status"] == "True"
    assert cond(s, "Admitted")["status"] == "False" and cond(s, "Ready")["status"] == "False"
    assert p.create_ranks == [] and p.ungate == []
    assert "Suspended" in event_reasons(p)
    if phase == "Running":
        assert s["gpuHours"] == pytest.approx(16.0) and s["runningSince"] is None


def test_suspend_keeps_status_counters_and_checkpoint():
    st = admitted(2, phase="Running", attempt=2, restarts=restarts(failures=1, preemptions=1),
                  lastCheckpoint={"step": 5, "path": "/c/5"})
    p = plan(job(2, status=st, suspend=True), pods(2, attempt=2), nodes(2))
    assert "restarts" not in p.status and "lastCheckpoint" not in p.status


def test_already_suspended_is_steady():
    st = {"phase": "Suspended", "placement": None}
    p = plan(job(2, status=st, suspend=True))
    assert p.status is None and p.delete_pods == [] and not p.release and p.events == []


def test_resume_goes_back_to_pending():
    st = {"phase": "Suspended", "conditions": []}
    p = plan(job(2, status=st, suspend=False))
    assert p.status["phase"] == "Pending"
    assert cond(p.status, "Suspended")["status"] == "False"
    assert p.create_ranks == [] and not p.release
    assert "Resumed" in event_reasons(p)


# --------------------------------------------------------------------------- stale pods


@pytest.mark.parametrize("admitted_now", [False, True])
def test_stale_pods_of_older_attempt_are_deleted(admitted_now):
    # No status.attempt: a status written before the field existed, attempt = failures + preemptions.
    st = {"phase": "Restarting", "restarts": restarts(failures=1, preemptions=1)}
    if admitted_now:
        st["placement"] = placement(2)
    existing = [
        pod(0, attempt=0),                                    # stale, running: delete
        pod(1, attempt=1, phase="Pending", legacy_gate=True),  # stale, pending: delete
        pod(0, attempt=1, phase="Failed", exit_code=1),       # stale, terminal: kept for logs
        pod(1, attempt=0, deleting=True),                     # already going
    ]
    p = plan(job(2, status=st), existing, nodes(2))
    assert sorted(p.delete_pods) == [f"{NAME}-worker-0-0", f"{NAME}-worker-1-1"]
    if admitted_now:
        assert p.create_ranks == [0, 1]  # attempt 2 is still empty
    else:
        assert p.create_ranks == []
    assert current_attempt(st) == 2


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
        ([json.dumps({"step": -1, "path": "/c/neg"})], None),
    ],
)
def test_checkpoint_from_termination_messages(messages, expected):
    existing = [Pod(namespace=NS, name=f"p{i}", rank=i % 2, attempt=0, phase="Running", message=m)
                for i, m in enumerate(messages)]
    p = plan(job(2, status=admitted(2, phase="Running")), existing, nodes(2))
    got = (p.status or {}).get("lastCheckpoint")
    assert got == expected
    assert ("CheckpointReported" in event_reasons(p)) == (expected is not None)


@pytest.mark.parametrize("stored_step, reported_step, updated", [(50, 100, True), (100, 100, False), (200, 100, False)])
def test_checkpoint_only_moves_forward(stored_step, reported_step, updated):
    st = admitted(2, phase="Running", lastCheckpoint={"step": stored_step, "path": f"/c/{stored_step}"})
    msg = json.dumps({"step": reported_step, "path": f"/c/{reported_step}"})
    existing = [pod(0, message=msg), pod(1)]
    p = plan(job(2, status=st), existing, nodes(2))
    if updated:
        assert p.status["lastCheckpoint"]["step"] == reported_step
    else:
        assert "lastCheckpoint" not in (p.status or {})


def test_checkpoint_read_from_pods_of_older_attempts_and_on_preemption():
    msg = json.dumps({"step": 900, "path": "/c/900"})
    existing = [pod(0, disruption="TerminationByKubelet", phase="Failed", exit_code=143, message=msg), pod(1)]
    p = plan(job(2, status=admitted(2, phase="Running")), existing, nodes(2))
    assert p.status["phase"] == "Restarting"
    assert p.status["lastCheckpoint"] == {"step": 900, "path": "/c/900"}
    # and from a pod of an older attempt, while the new gang is still being placed
    older = [pod(0, attempt=0, phase="Failed", message=json.dumps({"step": 950, "path": "/c/950"}))]
    p = plan(job(2, status={"phase": "Restarting", "attempt": 1}), older)
    assert p.status["lastCheckpoint"] == {"step": 950, "path": "/c/950"}


# --------------------------------------------------------------------------- idempotence, conditions


SCENARIOS = {
    "not-admitted": (dict(status={}), [], {}),
    "create": (dict(status=admitted(2)), [], nodes(2)),
    "legacy-gate": (dict(status=admitted(2)), pods(2, phase="Pending", legacy_gate=True), nodes(2)),
    "running": (dict(status=admitted(2)), pods(2), nodes(2)),
    "preempted": (dict(status=admitted(2, phase="Running")), pods(2, disruption="PreemptionByScheduler"), nodes(2)),
    "node-gone": (dict(status=admitted(2, phase="Running")), pods(2), nodes(2, **{"ib0-nvl0-1": None})),
    "failed": (dict(status=admitted(2, phase="Running")), [pod(0), pod(1, phase="Failed", exit_code=1)], nodes(2)),
    "succeeded": (dict(status=admitted(2, phase="Running")), pods(2, phase="Succeeded"), nodes(2)),
    "suspend": (dict(status=admitted(2, phase="Running"), suspend=True), pods(2), nodes(2)),
    "resume": (dict(status={"phase": "Suspended"}), [], {}),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_inputs_same_plan(name):
    kw, ps, ns = SCENARIOS[name]
    j = job(2, **kw)
    snapshot = json.dumps(j.status, sort_keys=True)
    a = plan(j, ps, ns)
    b = plan(j, ps, ns)
    assert a == b
    assert json.dumps(j.status, sort_keys=True) == snapshot  # the job is not mutated


@pytest.mark.parametrize("name", ["running", "preempted", "node-gone", "failed", "succeeded", "suspend", "resume"])
def test_after_applying_status_no_new_transition(name):
    """Level-based: once the plan's status is written, the same world yields no new events."""
    kw, ps, ns = SCENARIOS[name]
    j = job(2, **kw)
    first = plan(j, ps, ns)
    j2 = merged(j, first)
    second = plan(j2, deleted(ps, first.delete_pods), ns, now=NOW + 5)
    assert second.events == []
    assert second.create_ranks == [] and not second.release
    assert (second.status or {}).get("phase") in (None, j2.status.get("phase"))


def test_conditions_keep_last_transition_time_when_status_unchanged():
    old = [{"type": "Running", "status": "False", "reason": "Preempted", "message": "x",
            "lastTransitionTime": rfc3339(T0), "observedGeneration": 1},
           {"type": "Admitted", "status": "True", "reason": "Placed", "message": "ok",
            "lastTransitionTime": rfc3339(T0)}]
    st = admitted(2, phase="Running", conditions=old)
    p = plan(job(2, status=st), [pod(0), pod(1, phase="Failed", exit_code=1)], nodes(2))
    running = cond(p.status, "Running")
    assert running["status"] == "False" and running["reason"] == "WorkerFailed"
    assert running["lastTransitionTime"] == rfc3339(T0)     # status unchanged: time kept
    assert running["observedGeneration"] == 3
    admitted_c = cond(p.status, "Admitted")
    assert admitted_c["status"] == "False"
    assert admitted_c["lastTransitionTime"] == rfc3339(NOW)  # status changed: time moves


# --------------------------------------------------------------------------- found by probing


def resumed_and_readmitted():
    """A Running job suspended (its plan applied), resumed, and admitted again."""
    running = job(2, status=admitted(2, phase="Running"), suspend=True)
    p = plan(running, pods(2), nodes(2))
    st = {**running.status, **p.status}
    st.update(phase="Pending", placement=placement(2))
    return job(2, status=st)


def test_suspend_moves_to_a_new_attempt():
    body = resumed_and_readmitted()
    assert body.status["attempt"] == 1
    p = plan(body, [], nodes(2))
    assert p.create_ranks == [0, 1]


def test_resume_with_pods_still_terminating_from_suspend_is_not_a_preemption():
    body = resumed_and_readmitted()
    lingering = pods(2, deleting=True)  # deleted by the suspend, still in their grace period
    p = plan(body, lingering, nodes(2))
    assert "restarts" not in (p.status or {})
    assert (p.status or {}).get("phase") != "Restarting"


def test_resume_with_pod_killed_by_suspend_is_not_a_failure():
    body = resumed_and_readmitted()
    lingering = [pod(0, phase="Failed", exit_code=143, deleting=True), pod(1, deleting=True, phase="Failed", exit_code=143)]
    p = plan(body, lingering, nodes(2))
    assert (p.status or {}).get("restarts", {}).get("failures", 0) == 0
    assert (p.status or {}).get("phase") not in ("Restarting", "Failed")


@pytest.mark.parametrize("running_for,folded", [(30, False), (599, False), (600, True), (3600, True)])
def test_running_job_folds_gpu_hours_at_most_every_ten_minutes(running_for, folded):
    # Cost now accumulates per segment (see test_preemption_closes_the_running_segment...):
    # the 1.0 GPU-hour already on record cost 2.0.
    st = admitted(2, phase="Running", startTime=rfc3339(NOW - running_for),
                  runningSince=rfc3339(NOW - running_for), gpuHours=1.0, cost=2.0)
    p = plan(job(2, gpus=8, status=st), pods(2), nodes(2), pool_prices={SPOT: 2.0})
    new = p.status or {}
    # the next fold asks for its own reconcile: it does not wait for the resync
    assert p.requeue_after == pytest.approx(600 if folded else 600 - running_for)
    if not folded:
        assert "gpuHours" not in new and "runningSince" not in new
    else:
        expected = round(1.0 + running_for / 3600 * 16, 6)
        assert new["gpuHours"] == pytest.approx(expected)
        assert new["runningSince"] == rfc3339(NOW)
        assert new["cost"] == pytest.approx(round(expected * 2.0, 4))


@pytest.mark.parametrize("waited,replaced", [(10, False), (29.5, False), (30, True)])
def test_worker_stuck_unschedulable_places_the_gang_again(waited, replaced):
    # Rule changed on purpose: PlacementLost is now a startup failure (restarts.startupFailures,
    # with backoff, bounded by maxStartupRetries); still neither a failure nor a preemption.
    st = admitted(2, phase="Pending", attempt=0)
    stuck = pod(0, phase="Pending", node=None, ready=False, unschedulable_since=NOW - waited,
                unschedulable_message="0/3 nodes are available: 1 Insufficient nvidia.com/gpu")
    p = plan(job(2, status=st), [stuck, pod(1)], nodes(2), schedule_timeout=30)
    if not replaced:
        assert p.delete_pods == [] and p.requeue_after == pytest.approx(30 - waited)
        assert "placement" not in (p.status or {})
    else:
        assert p.status["placement"] is None and p.status["attempt"] == 1
        assert p.status["restarts"] == restarts(startup=1)
        assert parse_time(p.status["restartNotBefore"]) == pytest.approx(NOW + 10)
        adm = cond(p.status, "Admitted")
        assert adm["reason"] == "PlacementLost" and "Insufficient nvidia.com/gpu" in adm["message"]
        assert sorted(p.delete_pods) == sorted(x.name for x in [stuck, pod(1)]) and p.release


def test_legacy_gated_worker_is_never_taken_for_stuck():
    st = admitted(2, phase="Pending")
    gated = [pod(r, phase="Pending", node=None, legacy_gate=True, ready=False, unschedulable_since=NOW - 300)
             for r in (0, 1)]
    p = plan(job(2, status=st), gated, nodes(2))
    assert p.ungate and not p.delete_pods


def test_worker_waiting_for_its_volume_is_not_a_lost_placement():
    st = admitted(2, phase="Pending")
    slow = pod(0, phase="Pending", node=None, ready=False, unschedulable_since=NOW - 300,
               unschedulable_message='0/64 nodes are available: pod has unbound immediate PersistentVolumeClaims.')
    p = plan(job(2, status=st), [slow, pod(1)], nodes(2))
    assert not p.delete_pods and "placement" not in (p.status or {})


def test_deleting_worker_is_never_taken_for_stuck():
    # A terminating pod is the disruption policy's business, not a lost placement.
    st = admitted(2, phase="Pending")
    going = pod(0, phase="Pending", node=None, ready=False, deleting=True, unschedulable_since=NOW - 300,
                unschedulable_message="0/3 nodes are available: 1 Insufficient nvidia.com/gpu")
    p = plan(job(2, status=st), [going, pod(1)], nodes(2))
    assert cond(p.status, "Admitted")["reason"] != "PlacementLost"
    assert p.status["restarts"]["preemptions"] == 1
