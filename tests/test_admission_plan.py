"""Pool fallback in kubeforge.admission's plan (admission/_plan.py: ``first_pool_index``, ``candidate_pools``;
``plan_admission``'s own rules are in test_admission.py), moved there from the lifecycle
(``current_pool``): preemptions move a job down
``spec.pools``, and so does waiting ``fallbackAfterSeconds`` for room. Ported from
test_lifecycle.py, plus the waiting rule new in the rewrite."""

from __future__ import annotations

import pytest

from kubeforge.admission import JobView, candidate_pools, first_pool_index
from kubeforge.objects import rfc3339
from training_builders import NOW, OD, SPOT, admitted, job, merged, nodes, placement, plan, pods, restarts

# --------------------------------------------------------------------------- preemptions


def _spec(pools, per_pool):
    fp = {"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600, "preemptionsBeforeFallback": per_pool}
    return job(pools=pools, failurePolicy=fp).spec


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
        # Rule changed on purpose: 0 no longer means "never fall back"; 0 and 1 both move the
        # job at the first preemption (was "spot" for 50 preemptions).
        (["spot", "od"], 0, 1, "od"),
        (["spot", "od"], 0, 50, "od"),
        (["only"], 2, 10, "only"),
    ],
)
def test_first_pool_index_falls_back_with_preemptions(pools, per_pool, preemptions, expected):
    # Moved from lifecycle.current_pool to kubeforge.admission.first_pool_index.
    spec = _spec(pools, per_pool)
    status = {"restarts": {"failures": 7, "preemptions": preemptions, "startupFailures": 9}}
    assert spec.pools[first_pool_index(spec, status)] == expected


def test_first_pool_index_ignores_failures_and_missing_status():
    spec = job(pools=["spot", "od"]).spec
    assert first_pool_index(spec, {}) == 0
    assert first_pool_index(spec, {"restarts": {"failures": 10, "preemptions": 0, "startupFailures": 10}}) == 0


def test_two_preemptions_move_the_job_to_the_fallback_pool():
    body = job(2, status=admitted(2, phase="Running"))
    for i in range(2):
        assert body.spec.pools[first_pool_index(body.spec, body.status)] == SPOT
        p = plan(body, pods(2, attempt=i, disruption="PreemptionByScheduler"), nodes(2), now=NOW + i)
        body = merged(body, p, placement=placement(2), phase="Running")
    assert body.status["restarts"] == restarts(preemptions=2)
    assert body.spec.pools[first_pool_index(body.spec, body.status)] == OD


def waiting_since(seconds_ago, preemptions=0):
    return {"phase": "Pending", "restarts": restarts(preemptions=preemptions), "conditions": [
        {"type": "Admitted", "status": "False", "reason": "InsufficientGPUs", "message": "short",
         "lastTransitionTime": rfc3339(NOW - seconds_ago)}]}


@pytest.mark.parametrize(
    "fallback_after, waited, preemptions, expected",
    [
        (300, 0, 0, ["a"]),
        (300, 299, 0, ["a"]),
        (300, 300, 0, ["a", "b"]),
        (300, 600, 0, ["a", "b", "c"]),
        (300, 100_000, 0, ["a", "b", "c"]),
        (0, 0, 0, ["a", "b", "c"]),          # 0: every pool at once, as Kueue tries its flavors
        (300, 0, 2, ["b"]),                  # two preemptions moved the start
        (300, 300, 2, ["b", "c"]),
        (300, 0, 9, ["c"]),
    ],
)
def test_candidate_pools_widen_with_waiting(fallback_after, waited, preemptions, expected):
    j = job(pools=["a", "b", "c"], fallbackAfterSeconds=fallback_after, status=waiting_since(waited, preemptions))
    assert candidate_pools(JobView(j, j.status), NOW) == expected


def test_candidate_pools_count_from_creation_when_never_refused():
    j = job(pools=["a", "b"], fallbackAfterSeconds=300, status={})
    assert j.created == NOW - 7200  # the builders' creationTimestamp
    assert candidate_pools(JobView(j, j.status), j.created + 299) == ["a"]
    assert candidate_pools(JobView(j, j.status), j.created + 300) == ["a", "b"]
