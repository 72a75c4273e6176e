"""The time limit, ``spec.maxRunSeconds`` (``kubeforge.lifecycle._time_limit``): run time counted
from each placement's ``admittedAt``, summed over attempts in ``status.runSeconds``, enforced with
``Failed=True`` / ``MaxRunSecondsExceeded``, and a requeue for the deadline so no resync is needed."""

from __future__ import annotations

import pytest

from kubeforge.objects import rfc3339
from kubeforge.lifecycle import run_seconds
from kubeforge.objects import MAX_RUN_SECONDS_EXCEEDED, WARNING, PlacementRecord
from training_builders import NOW, admitted, cond, event_reasons, job, merged, nodes, placement, plan, pods, restarts


def placed(since: float, run: float = 0.0, phase: str = "Running") -> dict:
    """A running job placed at ``since`` whose earlier attempts ran ``run`` seconds."""
    st = admitted(2, phase=phase, placement=placement(2, admittedAt=rfc3339(since)))
    if run:
        st["runSeconds"] = run
    return st


@pytest.mark.parametrize("status, expected", [
    ({}, 0.0),
    ({"runSeconds": 120.0}, 120.0),
    ({"placement": placement(2, admittedAt=rfc3339(NOW - 30))}, 30.0),
    ({"runSeconds": 100, "placement": placement(2, admittedAt=rfc3339(NOW - 30))}, 130.0),
    ({"runSeconds": 100, "placement": placement(2)}, 100.0),  # no admittedAt (an old object): not counted
])
def test_run_seconds_adds_the_placement_held_now(status, expected):
    assert run_seconds(status, NOW) == pytest.approx(expected)


def test_no_limit_no_requeue_for_it():
    p = plan(job(status=placed(NOW - 100)), pods(2), nodes(2))
    assert MAX_RUN_SECONDS_EXCEEDED not in event_reasons(p)
    assert p.requeue_after is None or p.requeue_after >= 500  # only the GPU-hours fold's


def test_placed_with_time_left_requeues_at_the_deadline():
    # 600 s limit, 100 s used before, placed 200 s ago: 300 s left.
    p = plan(job(status=placed(NOW - 200, run=100), maxRunSeconds=600), pods(2), nodes(2))
    assert not p.release and MAX_RUN_SECONDS_EXCEEDED not in event_reasons(p)
    assert p.requeue_after == pytest.approx(300)


def test_reached_fails_the_job_with_a_warning_and_releases():
    j = job(status=placed(NOW - 500, run=100), maxRunSeconds=600)
    p = plan(j, pods(2), nodes(2))
    st = p.status or {}
    assert st["phase"] == "Failed" and p.release and sorted(p.delete_pods) == sorted(x.name for x in pods(2))
    failed = cond(st, "Failed")
    assert failed["status"] == "True" and failed["reason"] == MAX_RUN_SECONDS_EXCEEDED
    assert "600" in failed["message"]
    assert (WARNING, MAX_RUN_SECONDS_EXCEEDED) in [(t, r) for t, r, _ in p.events]
    assert st["runSeconds"] == pytest.approx(600)  # the attempt's 500 s folded in
    assert "placement" in st and st["placement"] is None


def test_a_job_that_succeeds_at_its_deadline_succeeds():
    p = plan(job(status=placed(NOW - 600), maxRunSeconds=600), pods(2, phase="Succeeded"), nodes(2))
    assert (p.status or {})["phase"] == "Succeeded"


def test_a_restart_folds_the_attempt_into_run_seconds():
    # A worker fails after 250 s: the attempt's 250 s go to runSeconds; waiting does not count.
    j = job(status=placed(NOW - 250, run=50), maxRunSeconds=3600)
    failed = [pods(2)[0], pods(2, phase="Failed", exit_code=1)[1]]
    p = plan(j, failed, nodes(2))
    assert (p.status or {})["phase"] == "Restarting"
    assert p.status["runSeconds"] == pytest.approx(300)
    later = merged(j, p)
    q = plan(later, [], nodes(2), now=NOW + 900)  # backing off / waiting: no time counted
    assert (q.status or {}).get("runSeconds") is None and (q.status or {}).get("phase") != "Failed"


def test_a_waiting_job_out_of_time_fails_instead_of_being_admitted_again():
    st = {"phase": "Restarting", "attempt": 1, "restarts": restarts(preemptions=1), "runSeconds": 700.0}
    p = plan(job(status=st, maxRunSeconds=600), [], {},
             assumed=PlacementRecord("h100-spot", ("a", "b"), None, None, "fits"))
    assert (p.status or {})["phase"] == "Failed" and p.forget_assumed
    assert cond(p.status, "Failed")["reason"] == MAX_RUN_SECONDS_EXCEEDED


def test_admission_writes_the_placement_and_requeues_for_the_limit():
    st = {"phase": "Restarting", "attempt": 1, "restarts": restarts(preemptions=1), "runSeconds": 100.0}
    p = plan(job(status=st, maxRunSeconds=600), [], nodes(2),
             assumed=PlacementRecord("h100-spot", tuple(nodes(2)), "nvlink", "d", "fits"))
    assert p.admitted and p.requeue_after == pytest.approx(500)


def test_suspend_folds_the_run_and_resume_keeps_it():
    j = job(status=placed(NOW - 120, run=30), maxRunSeconds=600, suspend=True)
    p = plan(j, pods(2), nodes(2))
    assert p.status["phase"] == "Suspended" and p.status["runSeconds"] == pytest.approx(150)
