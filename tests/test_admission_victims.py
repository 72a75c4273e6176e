"""Preemption on live facts (issue 27, item 2): victims are ordered by the age of the checkpoint
their workers reported (``status.lastCheckpoint``, live), a job that reported none in this run
falls back on the time since its placement, and the Victim says which (typed: ``Victim.basis``),
so the preempted job's condition and Event say what its loss was counted from."""

from __future__ import annotations

import pytest

from kubeforge.admission import (
    HIGHER_PRIORITY, LostWorkBasis, Victim, checkpoint_age, checkpoint_basis, plan_admission, preemption_message,
)
from records import NOW, iso, mk_job, mk_node, mk_pool, placed, snapshot, view


def running(name: str, node: str, *, since: float, ckpt: float | None = None, priority: int = 0, gpus: int = 8):
    """A gang of one rank running on ``node`` since ``since``, its last reported checkpoint at ``ckpt``."""
    st = {"phase": "Running", "attempt": 0, "placement": placed("p", [node], admitted_at=since)}
    if ckpt is not None:
        st["lastCheckpoint"] = {"step": 10, "path": "/c/10", "time": iso(ckpt)}
    return mk_job(name, gpus=gpus, priority=priority, status=st, created=since - 60)


@pytest.mark.parametrize("since, ckpt, age, basis", [
    (NOW - 3600, NOW - 300, 300, LostWorkBasis.CHECKPOINT),   # reported 5 min ago
    (NOW - 3600, None, 3600, LostWorkBasis.PLACEMENT),        # never reported: the fallback
    (NOW - 600, NOW - 3000, 600, LostWorkBasis.PLACEMENT),    # reported in an earlier run only
    (NOW - 600, NOW - 600, 600, LostWorkBasis.CHECKPOINT),    # a checkpoint at the placement's second
])
def test_checkpoint_basis(since, ckpt, age, basis):
    j = view(running("j", "n0", since=since, ckpt=ckpt))
    assert checkpoint_basis(j, NOW)[1] == basis
    assert checkpoint_age(j, NOW) == pytest.approx(age)


def test_victims_are_ordered_by_the_live_checkpoint_age_and_carry_their_basis():
    nodes = [mk_node(f"n{i}") for i in range(3)]
    jobs = [running("reported-old", "n0", since=NOW - 7200, ckpt=NOW - 1500),
            running("reported-fresh", "n1", since=NOW - 7200, ckpt=NOW - 120),
            running("silent", "n2", since=NOW - 1800),
            mk_job("urgent", priority=100, created=NOW - 5)]
    plan = plan_admission(snapshot([mk_pool("p")], nodes, jobs=jobs), NOW)
    [pre] = plan.preempt
    [v] = pre.victims
    assert v.key[1] == "reported-fresh" and v.basis == LostWorkBasis.CHECKPOINT
    assert v.lost_gpu_seconds == pytest.approx(120 * 8)


def test_a_job_that_never_reported_is_counted_from_its_placement_and_says_so():
    nodes = [mk_node("n0"), mk_node("n1")]
    jobs = [running("reported", "n0", since=NOW - 7200, ckpt=NOW - 1500),
            running("silent", "n1", since=NOW - 900),
            mk_job("urgent", priority=100, created=NOW - 5)]
    pool = mk_pool("p", preemption={"minRuntimeSeconds": 0})  # "silent" is 15 min old: the default protects it
    [pre] = plan_admission(snapshot([pool], nodes, jobs=jobs), NOW).preempt
    [v] = pre.victims
    assert v.key[1] == "silent" and v.basis == LostWorkBasis.PLACEMENT
    msg = preemption_message(("team-a", "urgent"), 100, v)
    assert "no checkpoint" in msg and "placement 15 min ago" in msg and "2.00 GPU-hours" in msg


def test_the_message_names_a_reported_checkpoint():
    v = Victim(("team-a", "j"), HIGHER_PRIORITY, 8 * 600.0, {"n0": 8}, LostWorkBasis.CHECKPOINT)
    msg = preemption_message(("team-a", "urgent"), 100, v)
    assert "last reported checkpoint, 10 min ago" in msg and "1.33 GPU-hours" in msg
