"""Table-driven tests of the TrainingJob rules once a gang is placed, split from
tests/test_lifecycle_startup.py: maxPreemptions and evictions, the Ready condition, GPU-hours and
cost per pool, replica counts and specs the model refuses, the attempt number. Builders:
tests/training_builders.py.
"""

from __future__ import annotations

import pytest

from kubeforge.builders.training import spec_hash
from kubeforge.objects import Pod, rfc3339
from test_lifecycle_startup import ASSUMED, startup
from training_builders import (
    GENERATION, NAME, NOW, NS, OD, SPOT, admitted, cond, deleted, event_reasons, job, job_body, merged, nodes,
    placement, plan, pod, pods, record, restarts,
)


# --------------------------------------------------------------------------- preemptions: limit, evictions


@pytest.mark.parametrize("before, limit, fails", [(0, 100, False), (0, 0, True), (1, 2, False), (2, 2, True),
                                                  (5, 3, True)])
def test_max_preemptions(before, limit, fails):
    fp = {"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600, "maxPreemptions": limit}
    st = admitted(2, phase="Running", attempt=before, restarts=restarts(failures=1, preemptions=before))
    p = plan(job(2, status=st, failurePolicy=fp), pods(2, attempt=before, disruption="PreemptionByScheduler"),
             nodes(2))
    s = p.status
    assert s["restarts"] == restarts(failures=1, preemptions=before + 1)
    assert s["placement"] is None and p.release
    if fails:
        assert s["phase"] == "Failed" and s["completionTime"] == rfc3339(NOW) and "attempt" not in s
        c = cond(s, "Failed")
        assert c["reason"] == "PreemptionLimitExceeded" and f"maxPreemptions {limit}" in c["message"]
        assert cond(s, "Ready")["reason"] == "Failed"
    else:
        assert s["phase"] == "Restarting" and s["attempt"] == before + 1
        assert cond(s, "Failed") is None


@pytest.mark.parametrize("reason, preempted", [("Evicted", True), ("Preempting", True), ("Error", False)])
def test_evicted_worker_is_a_preemption_not_a_failure(reason, preempted):
    # The kubelet's node-pressure eviction ends a pod Failed with reason Evicted and no
    # DisruptionTarget condition (it has one only since 1.26 with the feature on).
    existing = [pod(0), pod(1, phase="Failed", reason=reason, exit_code=137)]
    p = plan(job(2, status=admitted(2, phase="Running")), existing, nodes(2))
    s = p.status
    if preempted:
        assert s["phase"] == "Restarting" and s["restarts"] == restarts(preemptions=1)
        assert f"pod {NAME}-worker-1-0 {reason}" in cond(s, "Preempted")["message"]
    else:
        assert s["restarts"]["preemptions"] == 0


# --------------------------------------------------------------------------- the Ready condition


def _scenarios():
    running = admitted(2, phase="Running")
    return {
        "waiting": (job(2, status={}), [], {}, dict(waiting=("InsufficientGPUs", "short")), "False", "NotAdmitted"),
        "all-running": (job(2, status=admitted(2)), pods(2), nodes(2), {}, "True", "AllWorkersRunning"),
        "worker-failed": (job(2, status=running), [pod(0), pod(1, phase="Failed", exit_code=1)], nodes(2), {},
                          "False", "WorkerFailed"),
        "preempted": (job(2, status=running), pods(2), nodes(2, **{"ib0-nvl0-0": None}), {}, "False", "Preempted"),
        "succeeded": (job(2, status=running), pods(2, phase="Succeeded"), nodes(2), {}, "False", "Succeeded"),
        "suspended": (job(2, status=running, suspend=True), pods(2), nodes(2), {}, "False", "JobSuspended"),
        "spec-changed": (job(2, status=startup(2, phase="Running")), pods(2), nodes(2), dict(spec_hash="h2"),
                         "False", "SpecChanged"),
        "startup-timeout": (job(2, status=startup(2, admitted_ago=600)), [], nodes(2), dict(spec_hash="h1"),
                            "False", "StartupTimeout"),
        "preemption-limit": (job(2, status=running, failurePolicy={"maxPreemptions": 0}),
                             pods(2, disruption="EvictionByEvictionAPI"), nodes(2), {}, "False", "Failed"),
    }


@pytest.mark.parametrize("name", sorted(_scenarios()))
def test_ready_condition(name):
    j, ps, ns, ctx, status, reason = _scenarios()[name]
    p = plan(j, ps, ns, **ctx)
    ready = cond(p.status, "Ready")
    assert (ready["status"], ready["reason"]) == (status, reason)
    assert ready["observedGeneration"] == GENERATION


# --------------------------------------------------------------------------- GPU-hours and cost per pool


@pytest.mark.parametrize("prices, cost", [({SPOT: 1.0, OD: 3.0}, 64.0), ({SPOT: 1.0}, 16.0), ({OD: 3.0}, 48.0),
                                          ({}, None)])
def test_cost_is_summed_per_pool_across_a_fallback(prices, cost):
    """1 h on spot, preempted, 1 h on on-demand, done: each hour at its own pool's price."""
    j = job(2, 8, status=admitted(2, phase="Running", runningSince=rfc3339(NOW - 7200)))
    p = plan(j, pods(2, disruption="PreemptionByScheduler"), nodes(2), now=NOW - 3600, pool_prices=prices)
    j = merged(j, p, placement=placement(2, pool=OD))  # admitted again, in the fallback pool
    p = plan(j, pods(2, attempt=1), nodes(2), now=NOW - 3600, pool_prices=prices)
    assert p.status["phase"] == "Running" and p.status["runningSince"] == rfc3339(NOW - 3600)
    j = merged(j, p)
    p = plan(j, pods(2, attempt=1, phase="Succeeded"), nodes(2), pool_prices=prices)
    s = merged(j, p).status
    assert s["phase"] == "Succeeded"
    assert s["gpuHours"] == pytest.approx(32.0)
    assert s.get("cost") == (pytest.approx(cost) if cost is not None else None)


# --------------------------------------------------------------------------- replica counts, invalid specs


def test_replica_counts_are_written_only_with_another_change():
    st = admitted(2, phase="Running", replicas={"active": 2, "ready": 2, "succeeded": 0, "failed": 0})
    not_ready = [pod(0), pod(1, ready=False)]
    assert plan(job(2, status=st), not_ready, nodes(2)).status is None  # a count alone is no write
    msg = '{"step": 10, "path": "/c/10"}'
    p = plan(job(2, status=st), [pod(0, message=msg), pod(1, ready=False)], nodes(2))
    assert p.status["lastCheckpoint"]["step"] == 10
    assert p.status["replicas"] == {"active": 2, "ready": 1, "succeeded": 0, "failed": 0}


def invalid_job(status):
    body = job_body(2, status=status)
    body["spec"]["replicas"] = 0
    return record(body)


def test_invalid_spec_is_said_once_and_holds_no_placement():
    j = invalid_job(admitted(2, phase="Running"))
    assert j.spec is None and "replicas" in j.spec_error
    p = plan(j, pods(2), nodes(2))
    s = p.status
    adm = cond(s, "Admitted")
    assert (adm["status"], adm["reason"], adm["message"]) == ("False", "InvalidSpec", j.spec_error)
    assert adm["observedGeneration"] == GENERATION
    assert s["placement"] is None and s["attempt"] == 1 and s["phase"] == "Running" and p.release
    assert "InvalidSpec" in event_reasons(p) and p.create_ranks == []
    again = plan(merged(j, p), pods(2), nodes(2), now=NOW + 5)
    assert again.status is None and again.events == [] and not again.release


def test_invalid_spec_deletes_the_live_pods_it_releases():
    p = plan(invalid_job(admitted(2, phase="Running")), pods(2), nodes(2))
    assert sorted(p.delete_pods) == [f"{NAME}-worker-0-0", f"{NAME}-worker-1-0"]


# --------------------------------------------------------------------------- the attempt number


@pytest.mark.parametrize("what", ["preemption", "failure"])
def test_first_restart_of_a_fresh_job_is_attempt_one(what):
    j = job(2, status={})
    j = merged(j, plan(j, [], nodes(2), assumed=ASSUMED, spec_hash="h1"))
    j = merged(j, plan(j, pods(2), nodes(2), spec_hash="h1"))
    assert j.status["phase"] == "Running"
    broken = pods(2, disruption="PreemptionByScheduler") if what == "preemption" else \
        [pod(0), pod(1, phase="Failed", exit_code=1)]
    p = plan(j, broken, nodes(2), now=NOW + 60, spec_hash="h1")
    assert p.status["attempt"] == 1


def test_attempt_moves_by_one_when_the_status_carries_it():
    j = job(2, status=admitted(2, phase="Running", attempt=0))
    for i, broken in enumerate([pods(2, attempt=0, disruption="PreemptionByScheduler"),
                                [pod(0, attempt=1), pod(1, attempt=1, phase="Failed", exit_code=1)]]):
        p = plan(j, broken, nodes(2), now=NOW + i)
        assert p.status["attempt"] == i + 1
        j = merged(j, p, placement=placement(2), phase="Running")
    assert j.status["restarts"] == restarts(failures=1, preemptions=1)


def test_lingering_pods_of_a_stopped_attempt_do_not_count_again():
    j = job(2, status=admitted(2, phase="Running", attempt=0))
    p = plan(j, pods(2, disruption="PreemptionByScheduler"), nodes(2))
    j = merged(j, p, placement=placement(2))
    lingering = deleted(pods(2, disruption="PreemptionByScheduler"), p.delete_pods)
    again = plan(j, lingering + [Pod(namespace=NS, name="x", rank=0, attempt=1, phase="Pending")], nodes(2), now=NOW + 1)
    assert "restarts" not in (again.status or {}) and again.create_ranks == [1]
