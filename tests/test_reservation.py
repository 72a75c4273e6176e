"""Reservations and backfill in the admission round (issue 27, item 3; Slurm's backfill): the first
waiting gang that does not fit gets the GPUs of the domain expected to free soonest (from the
ETAs and time limits of the jobs running there), later jobs use them only if they end before its
expected start, and the admission memo stays right when a reservation moves or goes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubeforge.admission import (
    AdmissionMemo, AdmissionRules, QueueingStrategy, expected_end, own_end, plan_admission,
)
from kubeforge.objects import CAPACITY_RESERVED, WAITING_FOR_CAPACITY
import builders as b
from records import CLIQUE, NOW, iso, mk_job, mk_node, mk_service, placed, snapshot, view

REQUIRED = {"mode": "Required", "level": "nvlink"}


def fleet(cliques: int = 2, per: int = 2) -> list:
    """``cliques`` NVLink domains of ``per`` 8-GPU nodes: c0-0, c0-1, c1-0..."""
    return [mk_node(f"c{c}-{i}", labels={CLIQUE: f"c{c}"}) for c in range(cliques) for i in range(per)]


def pool(reservations: dict | None = None):
    """The pool ``p`` over :func:`fleet`'s NVLink domains, with ``spec.reservations`` when given."""
    pool = b.GPUPool("p").levels(("nvlink", CLIQUE))
    return (pool.spec(reservations=reservations) if reservations is not None else pool).record()


def running(name: str, node: str, *, eta: float | None = None, limit: int | None = None, since: float = NOW - 600,
            gpus: int = 8, **kw):
    """A one-rank job on ``node`` placed at ``since``, reporting ``eta`` (this run) and/or limited to ``limit`` s."""
    st = {"phase": "Running", "attempt": 0, "placement": placed("p", [node], admitted_at=since)}
    if eta is not None:
        st["progress"] = {"step": 10, "eta": iso(eta), "lastReportTime": iso(NOW - 30)}
    extra = {"maxRunSeconds": limit} if limit is not None else {}
    return mk_job(name, gpus=gpus, status=st, created=since - 60, **extra, **kw)


def big(name: str = "big", created: float = NOW - 3000, **kw):
    return mk_job(name, replicas=2, gpus=8, topology=REQUIRED, created=created, **kw)


def small(name: str, created: float = NOW - 100, limit: int | None = None, gpus: int = 8):
    return mk_job(name, gpus=gpus, created=created, **({"maxRunSeconds": limit} if limit else {}))


# --------------------------------------------------------------------------- expected ends


@pytest.mark.parametrize("status_extra, limit, want", [
    ({"progress": {"eta": iso(NOW + 600), "lastReportTime": iso(NOW - 10)}}, None, NOW + 600),
    ({"progress": {"eta": iso(NOW + 600), "lastReportTime": iso(NOW - 7200)}}, None, None),  # a report of an earlier run
    ({}, 3600, NOW - 600 + 3600),                                   # admittedAt + maxRunSeconds
    ({"runSeconds": 1000}, 3600, NOW - 600 + 2600),                 # minus the earlier attempts' run
    ({"progress": {"eta": iso(NOW + 9000), "lastReportTime": iso(NOW - 10)}}, 3600, NOW + 3000),  # the earlier
    ({"progress": {"eta": iso(NOW - 100), "lastReportTime": iso(NOW - 10)}}, None, NOW),   # late, within grace
    ({"progress": {"eta": iso(NOW - 400), "lastReportTime": iso(NOW - 10)}}, None, None),  # late past grace
    ({}, None, None),                                               # neither: unknown
])
def test_expected_end(status_extra, limit, want):
    st = {"phase": "Running", "placement": placed("p", ["n"], admitted_at=NOW - 600), **status_extra}
    j = view(mk_job("j", status=st, **({"maxRunSeconds": limit} if limit else {})))
    got = expected_end(j, NOW, grace=300)
    assert got == (pytest.approx(want) if want is not None else None)


def test_own_end_is_what_the_time_limit_leaves():
    assert own_end(view(small("s", limit=1200)), NOW) == pytest.approx(NOW + 1200)
    assert own_end(view(mk_job("s", maxRunSeconds=1200, status={"runSeconds": 900})), NOW) == pytest.approx(NOW + 300)
    assert own_end(view(small("s")), NOW) is None


# --------------------------------------------------------------------------- reservations


def busy(eta0: float = NOW + 900, eta1: float = NOW + 1800):
    """Both domains half busy: c0 frees at ``eta0``, c1 at ``eta1``; one node free in each."""
    return [running("r0", "c0-0", eta=eta0), running("r1", "c1-0", eta=eta1)]


def test_the_first_gang_that_does_not_fit_reserves_the_domain_that_frees_soonest():
    plan = plan_admission(snapshot([pool()], fleet(), jobs=busy() + [big()]), NOW)
    [w] = plan.wait
    assert w.reason == CAPACITY_RESERVED
    [r] = plan.reservations
    assert r.key == w.key and r.start == pytest.approx(NOW + 900)
    assert r.placement.domain == "c0" and dict(r.held) == {"c0-1": 8}  # c0-0 frees by then
    assert r.waits_for == (("team-a", "r0"),)
    assert "c0" in w.message and iso(NOW + 900) in w.message


def test_a_later_job_without_a_time_limit_stays_off_the_reserved_gpus():
    plan = plan_admission(snapshot([pool()], fleet(), jobs=busy() + [big(), small("s")]), NOW)
    [a] = plan.admit
    assert a.key[1] == "s" and a.placement.nodes == ("c1-1",)  # the free node outside the reservation


def test_a_later_job_that_ends_before_the_start_backfills_the_reserved_gpus():
    jobs = busy() + [running("x", "c1-1", eta=NOW + 5000), big(), small("fast", limit=600), small("slow", limit=3600)]
    plan = plan_admission(snapshot([pool()], fleet(), jobs=jobs), NOW)
    assert [(a.key[1], a.placement.nodes) for a in plan.admit] == [("fast", ("c0-1",))]
    assert {w.key[1]: w.reason for w in plan.wait} == {"big": CAPACITY_RESERVED, "slow": WAITING_FOR_CAPACITY}


def test_without_a_known_end_nothing_is_reserved_and_small_jobs_go_ahead():
    jobs = [running("r0", "c0-0"), running("r1", "c1-0"), big(), small("s")]
    plan = plan_admission(snapshot([pool()], fleet(), jobs=jobs), NOW)
    assert not plan.reservations and [a.key[1] for a in plan.admit] == ["s"]
    assert {w.key[1]: w.reason for w in plan.wait} == {"big": WAITING_FOR_CAPACITY}


def test_disabled_is_best_effort_fifo():
    p = pool({"mode": "Disabled"})
    plan = plan_admission(snapshot([p], fleet(), jobs=busy() + [big(), small("a"), small("b")]), NOW)
    assert not plan.reservations and sorted(a.key[1] for a in plan.admit) == ["a", "b"]


def test_strict_fifo_blocks_everything_behind_the_first_gang_that_waits():
    rules = AdmissionRules(queueing=QueueingStrategy.STRICT_FIFO)
    plan = plan_admission(snapshot([pool()], fleet(), jobs=busy() + [big(), small("s", limit=60)]), NOW, rules=rules)
    assert not plan.admit and not plan.reservations
    assert "StrictFIFO" in next(w.message for w in plan.wait if w.key[1] == "s")


def test_an_end_past_its_grace_is_not_counted_on():
    # c0's job should have ended 10 min ago: it no longer counts, so the gang waits for c1.
    plan = plan_admission(snapshot([pool()], fleet(), jobs=busy(eta0=NOW - 600) + [big()]), NOW)
    [r] = plan.reservations
    assert r.placement.domain == "c1" and r.start == pytest.approx(NOW + 1800)


def test_max_reservations_bounds_them_and_they_never_share_a_node():
    jobs = busy() + [big("b1", created=NOW - 3000), big("b2", created=NOW - 2000)]
    one = plan_admission(snapshot([pool()], fleet(), jobs=jobs), NOW)
    assert [r.key[1] for r in one.reservations] == ["b1"]
    p2 = pool({"maxReservations": 2})
    two = plan_admission(snapshot([p2], fleet(), jobs=jobs), NOW)
    assert [(r.key[1], r.placement.domain) for r in two.reservations] == [("b1", "c0"), ("b2", "c1")]


def test_serving_replicas_keep_off_reserved_gpus():
    svc = mk_service("s", gpus=8, status={"desiredReplicas": 2})
    plan = plan_admission(snapshot([pool()], fleet(), jobs=busy() + [big()], services=[svc]), NOW)
    assert [g.placement.nodes for g in plan.groups] == [("c1-1",)]


def test_the_memo_notices_a_reservation_that_is_gone():
    """A job held back by a reservation did not fit although the pool had room: once the reserved
    gang is gone, no node got freer, yet the job must be placed (the memo compares the queue's
    signature, not only free GPUs)."""
    memo = AdmissionMemo()
    jobs = busy() + [running("x", "c1-1", eta=NOW + 5000), big(), small("s")]
    first = plan_admission(snapshot([pool()], fleet(), jobs=jobs), NOW, memo)
    assert not first.admit and first.reservations
    without = [j for j in jobs if j.name != "big"]
    again = plan_admission(snapshot([pool()], fleet(), jobs=without), NOW + 1, memo)
    fresh = plan_admission(snapshot([pool()], fleet(), jobs=without), NOW + 1)
    assert [a.key[1] for a in again.admit] == [a.key[1] for a in fresh.admit] == ["s"]


def test_a_reserved_gang_is_placed_once_its_domain_frees():
    memo = AdmissionMemo()
    jobs = busy() + [big()]
    plan_admission(snapshot([pool()], fleet(), jobs=jobs), NOW, memo)
    done = [j for j in jobs if j.name != "r0"]
    plan = plan_admission(snapshot([pool()], fleet(), jobs=done), NOW + 900, memo)
    assert [(a.key[1], a.placement.domain) for a in plan.admit] == [("big", "c0")] and not plan.reservations


def test_a_job_admitted_earlier_in_the_queue_is_never_held_back():
    # "first" is ahead of the big gang in the queue (older): it takes c0-1 before any reservation.
    jobs = busy() + [small("first", created=NOW - 9000), big()]
    plan = plan_admission(snapshot([pool()], fleet(), jobs=jobs), NOW)
    assert [a.key[1] for a in plan.admit] == ["first"]
    assert replace(plan.reservations[0]).placement.domain in ("c0", "c1")


@pytest.mark.parametrize("eta1, domain", [(NOW + 700, "c0"), (NOW + 300, "c1")])
def test_a_reservation_keeps_its_nodes_unless_others_free_a_grace_sooner(eta1, domain):
    """Round 1 reserves c0 (frees at +900; c1 at +1800). Round 2, c1's job reports a sooner ETA:
    200 s sooner than c0 (within the 300 s grace) keeps c0 and what it holds; 600 s sooner moves."""
    memo = AdmissionMemo()
    first = plan_admission(snapshot([pool()], fleet(), jobs=busy() + [big()]), NOW, memo)
    assert first.reservations[0].placement.domain == "c0"
    again = plan_admission(snapshot([pool()], fleet(), jobs=busy(eta1=eta1) + [big()]), NOW + 1, memo)
    assert again.reservations[0].placement.domain == domain
