"""Preemption for a reservation (issue 27, item 3; opt-in ``spec.reservations.preemptAfterSeconds``):
a reserved gang that waited long enough stops jobs on its reserved domain only, of a priority <= its
own, never one younger than ``minRuntimeSeconds``, those with the freshest checkpoint first, and only
as many as it needs; off by default."""

from __future__ import annotations

import pytest

from kubeforge.admission import FOR_RESERVATION, plan_admission, preemption_message
from kubeforge.api import PoolReservations
from kubeforge.objects import ADMITTED, CAPACITY_RESERVED, PREEMPTING, PREEMPTION_REASONS
import builders as b
from records import CLIQUE, NOW, iso, mk_job, mk_node, placed, snapshot

REQUIRED = {"mode": "Required", "level": "nvlink"}
OLD = NOW - 7200  # placed two hours ago: past the default minRuntimeSeconds (1800)


def fleet() -> list:
    """Two NVLink domains of two 8-GPU nodes: c0-0, c0-1, c1-0, c1-1."""
    return [mk_node(f"c{c}-{i}", labels={CLIQUE: f"c{c}"}) for c in range(2) for i in range(2)]


def pool(**reservations):
    return b.GPUPool("p").levels(("nvlink", CLIQUE)).spec(reservations=reservations).record()


def running(name: str, node: str, eta: float, *, since: float = OLD, ckpt: float | None = None, gpus: int = 8,
            priority: int = 0):
    """A one-rank job on ``node`` placed at ``since``, reporting ``eta`` and its last checkpoint at ``ckpt``."""
    st = {"phase": "Running", "attempt": 0, "placement": placed("p", [node], admitted_at=since),
          "progress": {"step": 10, "eta": iso(eta), "lastReportTime": iso(NOW - 30)}}
    if ckpt is not None:
        st["lastCheckpoint"] = {"step": 5, "path": "/c", "time": iso(ckpt)}
    return mk_job(name, gpus=gpus, status=st, created=since - 60, priority=priority)


def gang(replicas: int = 2, created: float = NOW - 3000, priority: int = 0, status: dict | None = None):
    """The waiting gang: ``replicas`` x 8 GPUs inside one NVLink domain, waiting since ``created``."""
    return mk_job("big", replicas=replicas, gpus=8, topology=REQUIRED, created=created, priority=priority,
                  **({"status": status} if status else {}))


def full(**c0):
    """Every node busy: c0 frees first (c0-0 at +900, c0-1 at +1200), c1 at +1800 and +2400; c1's
    checkpoints are the freshest of all (a domain-blind choice would take them)."""
    jobs = {"a": dict(node="c0-0", eta=NOW + 900, ckpt=NOW - 1200), "b": dict(node="c0-1", eta=NOW + 1200, ckpt=NOW - 900),
            "c": dict(node="c1-0", eta=NOW + 1800, ckpt=NOW - 10), "d": dict(node="c1-1", eta=NOW + 2400, ckpt=NOW - 10)}
    for name, extra in c0.items():
        jobs[name].update(extra)
    return [running(n, **kw) for n, kw in jobs.items()]


def decide(p, jobs):
    plan = plan_admission(snapshot([p], fleet(), jobs=jobs), NOW)
    return plan, {w.key[1]: w for w in plan.wait}


def test_off_by_default_the_reserved_gang_waits_however_long():
    assert PoolReservations().preempt_after_seconds is None
    plan, waits = decide(pool(), full() + [gang(created=NOW - 86400)])
    assert not plan.preempt and waits["big"].reason == CAPACITY_RESERVED


@pytest.mark.parametrize("after, preempts", [(3600, False), (3000, True), (0, True)])
def test_it_preempts_only_once_it_waited_preempt_after_seconds(after, preempts):
    plan, waits = decide(pool(preemptAfterSeconds=after), full() + [gang(created=NOW - 3000)])
    assert bool(plan.preempt) == preempts
    assert waits["big"].reason == (PREEMPTING if preempts else CAPACITY_RESERVED)
    if preempts:
        assert not plan.reservations  # given up: the nomination holds the GPUs instead


def test_the_wait_counts_from_when_it_last_became_not_admitted():
    since = {"conditions": [{"type": ADMITTED, "status": "False", "reason": "Preempted",
                             "lastTransitionTime": iso(NOW - 600)}]}
    plan, waits = decide(pool(preemptAfterSeconds=1800), full() + [gang(created=NOW - 86400, status=since)])
    assert not plan.preempt and waits["big"].reason == CAPACITY_RESERVED


def test_victims_only_in_the_reserved_domain_and_the_gpus_go_to_the_gang():
    plan, _ = decide(pool(preemptAfterSeconds=600), full() + [gang()])
    [p] = plan.preempt
    assert sorted(v.key[1] for v in p.victims) == ["a", "b"]  # c0, not c1's fresher checkpoints
    assert {v.reason for v in p.victims} == {FOR_RESERVATION} and FOR_RESERVATION in PREEMPTION_REASONS
    assert dict(p.gpus_by_node) == {"c0-0": 8, "c0-1": 8}  # every GPU freed is nominated to the gang
    assert "preemptAfterSeconds" in preemption_message(p.key, 0, p.victims[0])


def test_never_a_job_of_higher_priority():
    # b on c0 and c on c1 outrank the gang: neither domain can be freed by preemption
    plan, waits = decide(pool(preemptAfterSeconds=600), full(b={"priority": 1}, c={"priority": 1}) + [gang(priority=0)])
    assert not plan.preempt and waits["big"].reason == CAPACITY_RESERVED
    same = {n: {"priority": 1} for n in "abcd"}  # (a lower one would be plain priority preemption)
    plan, _ = decide(pool(preemptAfterSeconds=600), full(**same) + [gang(priority=1)])
    [p] = plan.preempt
    assert sorted(v.key[1] for v in p.victims) == ["a", "b"] and {v.reason for v in p.victims} == {FOR_RESERVATION}


def test_never_a_job_younger_than_min_runtime_seconds():
    young = {"since": NOW - 600, "ckpt": None}  # 10 min into its run; the pool's default protects 30
    plan, waits = decide(pool(preemptAfterSeconds=600), full(b=young, d=young) + [gang()])  # one in each domain
    assert not plan.preempt and waits["big"].reason == CAPACITY_RESERVED


def shared(**c0):
    """c0-0 runs two 4-GPU jobs (a1 checkpointed 50 min ago, a2 one minute ago), c0-1 one 8-GPU job
    (b, 30 min ago); c0 frees first (+900..+1200), c1 later. A gang of 3 x 4 GPUs needs 12 GPUs of c0."""
    jobs = {"a1": dict(node="c0-0", eta=NOW + 900, ckpt=NOW - 3000, gpus=4),
            "a2": dict(node="c0-0", eta=NOW + 1000, ckpt=NOW - 60, gpus=4),
            "b": dict(node="c0-1", eta=NOW + 1200, ckpt=NOW - 1800),
            "c": dict(node="c1-0", eta=NOW + 1800, ckpt=NOW - 10), "d": dict(node="c1-1", eta=NOW + 2400, ckpt=NOW - 10)}
    for name, extra in c0.items():
        jobs[name].update(extra)
    third = mk_job("big", replicas=3, gpus=4, topology=REQUIRED, created=NOW - 3000)
    return [running(n, **kw) for n, kw in jobs.items()] + [third]


def test_the_freshest_checkpoint_first_and_only_as_many_as_needed():
    plan, _ = decide(pool(preemptAfterSeconds=600), shared())
    [p] = plan.preempt
    # a2 (the freshest) first, then b; a1 (the oldest checkpoint) is not needed once b frees 8.
    assert [v.key[1] for v in p.victims] == ["a2", "b"] and sum(p.gpus_by_node.values()) == 12
    assert [v.lost_gpu_seconds for v in p.victims] == [pytest.approx(60 * 4), pytest.approx(1800 * 8)]


def test_a_job_that_never_reported_a_checkpoint_counts_from_its_placement():
    plan, _ = decide(pool(preemptAfterSeconds=600), shared(a1={"ckpt": None, "since": NOW - 2000},
                                                            a2={"ckpt": NOW - 2400}, b={"ckpt": NOW - 5000}))
    [p] = plan.preempt
    assert [v.key[1] for v in p.victims] == ["a1", "b"]  # a1: 2000 s since its placement, the cheapest per GPU
    v = p.victims[0]
    assert v.basis.value == "Placement" and v.lost_gpu_seconds == pytest.approx(2000 * 4)
    assert "reported no checkpoint" in preemption_message(p.key, 0, v)


def test_never_a_job_as_big_as_the_gang():
    # b holds 8 GPUs; a gang of 8 x 1 GPU needing one node of c0 may take only a1 and a2 (4 each).
    jobs = [j for j in shared() if j.name != "big"] + [
        mk_job("big", replicas=1, gpus=8, topology=REQUIRED, created=NOW - 3000)]
    plan, _ = decide(pool(preemptAfterSeconds=600), jobs)
    [p] = plan.preempt
    assert sorted(v.key[1] for v in p.victims) == ["a1", "a2"] and dict(p.gpus_by_node) == {"c0-0": 8}
    alone = [j for j in jobs if j.name not in ("a1", "a2")] + [running("a", "c0-0", NOW + 900, ckpt=NOW - 60)]
    plan, waits = decide(pool(preemptAfterSeconds=600), alone)
    assert not plan.preempt and waits["big"].reason == CAPACITY_RESERVED  # only 8-GPU jobs stand there


def test_a_gang_that_may_preempt_but_finds_its_domain_protected_holds_all_its_free_gpus():
    # c0-0: a1 (4 GPUs) and 4 free; c0-1: b, 10 min into its run (protected by minRuntimeSeconds):
    # the 3 x 4 gang cannot get 12 GPUs of c0 by preemption yet. A 4-GPU job that ends before the
    # reservation's start would backfill the free GPUs of c0-0, and be protected in turn.
    jobs = [running("a1", "c0-0", NOW + 900, ckpt=NOW - 3000, gpus=4),
            running("b", "c0-1", NOW + 1200, since=NOW - 600),
            running("c", "c1-0", NOW + 1800, since=NOW - 300), running("d", "c1-1", NOW + 2400, since=NOW - 300),
            mk_job("big", replicas=3, gpus=4, topology=REQUIRED, created=NOW - 3000),
            mk_job("fast", gpus=4, created=NOW - 100, maxRunSeconds=600)]
    # (c1's jobs are younger still: c0 is the domain it may free soonest, at +1200)
    before, _ = decide(pool(), jobs)
    assert [(a.key[1], a.placement.nodes) for a in before.admit] == [("fast", ("c0-0",))]  # backfill
    plan, waits = decide(pool(preemptAfterSeconds=600), jobs)
    assert not plan.preempt and not plan.admit and waits["big"].reason == CAPACITY_RESERVED
    [r] = plan.reservations
    assert r.held.get("c0-0") == 4


def test_a_domain_the_gang_may_never_preempt_keeps_the_plain_reservation_and_its_backfill():
    # As above, but b is old and of a higher priority than the gang: no wait makes it a victim,
    # so holding every free GPU of c0 would idle them for nothing. The plain reservation stays,
    # and the job that ends before its start backfills c0-0 as without preemptAfterSeconds.
    jobs = [running("a1", "c0-0", NOW + 900, ckpt=NOW - 3000, gpus=4),
            running("b", "c0-1", NOW + 1200, priority=5),
            running("c", "c1-0", NOW + 1800, priority=5), running("d", "c1-1", NOW + 2400, priority=5),
            mk_job("big", replicas=3, gpus=4, topology=REQUIRED, created=NOW - 3000),
            mk_job("fast", gpus=4, created=NOW - 100, maxRunSeconds=600)]
    plan, waits = decide(pool(preemptAfterSeconds=600), jobs)
    assert not plan.preempt and waits["big"].reason == CAPACITY_RESERVED
    assert [(a.key[1], a.placement.nodes) for a in plan.admit] == [("fast", ("c0-0",))]
    [r] = plan.reservations
    assert not r.draining


def unknown(name: str, node: str, since: float = OLD, gpus: int = 8):
    """A one-rank job on ``node`` placed at ``since`` that reports nothing and has no time limit."""
    st = {"phase": "Running", "attempt": 0, "placement": placed("p", [node], admitted_at=since)}
    return mk_job(name, gpus=gpus, status=st, created=since - 60)


def test_a_gang_that_may_preempt_reserves_where_no_end_is_known():
    # Every job has an unknown end: no reservation can be computed from ends, so before it may
    # preempt the gang just waits; once it may, the jobs it may stop count as ending now.
    jobs = [unknown(f"u{i}", n, gpus=4) for i, n in enumerate(["c0-0", "c0-1", "c1-0", "c1-1"])] + [gang()]
    plan, waits = decide(pool(preemptAfterSeconds=3600), jobs)
    assert not plan.preempt and not plan.reservations and waits["big"].reason != CAPACITY_RESERVED
    plan, waits = decide(pool(preemptAfterSeconds=600), jobs)
    [p] = plan.preempt
    assert len(p.victims) == 2 and len({n[:2] for n in p.gpus_by_node}) == 1  # two nodes of one domain
    assert waits["big"].reason == PREEMPTING


def test_its_reservation_picks_the_domain_it_can_free_soonest_counting_what_it_may_preempt():
    # c0 frees first by its ends (+900, +1200) but b there is 10 min into its run (protected until
    # +1200); c1's jobs are old, smaller than the gang, with unknown ends: it may stop them now.
    jobs = [running("a", "c0-0", NOW + 900, gpus=4), running("b", "c0-1", NOW + 1200, since=NOW - 600, gpus=4),
            unknown("c", "c1-0", gpus=4), unknown("d", "c1-1", gpus=4), gang()]
    plan, waits = decide(pool(preemptAfterSeconds=600), jobs)
    [p] = plan.preempt
    assert sorted(v.key[1] for v in p.victims) == ["c", "d"] and sorted(p.gpus_by_node) == ["c1-0", "c1-1"]
    before, _ = decide(pool(preemptAfterSeconds=3600), jobs)  # not yet: the plain reservation, on c0
    [r] = before.reservations
    assert sorted(r.placement.gpus_by_node) == ["c0-0", "c0-1"] and r.start == NOW + 1200


def test_stoppable_jobs_end_when_min_runtime_seconds_lets_them():
    from kubeforge.admission import ending_jobs
    from records import view
    jobs = [view(unknown("u", "c0-0", gpus=4)), view(running("y", "c0-1", NOW + 5000, since=NOW - 600, gpus=4)),
            view(running("k", "c1-0", NOW + 300, gpus=4))]
    got = ending_jobs(jobs, frozenset(), NOW, 300.0, {jobs[0].key: NOW, jobs[1].key: NOW + 1200})
    assert [(e - NOW, j.record.name) for e, j in got] == [(0, "u"), (300, "k"), (1200, "y")]
    assert [j.record.name for _, j in ending_jobs(jobs, frozenset(), NOW, 300.0)] == ["k", "y"]  # u: unknown
