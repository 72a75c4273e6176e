"""The preemption try through :class:`kubeforge.admission.RunningGangs` (running gangs grouped by
namespace, sorted by priority: issue 31, e2e/README-scale-bench.md) finds exactly the victims the
walk over every running gang found, with the same reasons, in the same order.

The reference is the walk as it was before the grouping (``walk_all`` below, copied from
``eligible_victims`` at d55403c), on random pools (quotas on and off, teams of several
namespaces, the unlisted team, borrowing, every ``withinQuota`` / ``reclaimQuota`` /
``withinQuotaWhileBorrowing``, ``minRuntimeSeconds``), running gangs (priorities, ages, an
unparsed spec, the preemptor itself) and gangs in flight; then whole rounds with and without the
grouping decide the same plans.
"""

from __future__ import annotations

import copy
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

import builders as b
import kubeforge.admission._round as round_module
import kubeforge.admission._victim_fit as victim_fit
import kubeforge.admission._victims as victims_module
from kubeforge.admission import (
    HIGHER_PRIORITY, QUOTA_RECLAIM, UNLISTED, QuotaBook, RunningGangs, eligible_victims, plan_admission, run_time,
)
from kubeforge.admission._victim_index import VictimIndex
from kubeforge.api import PreemptionPolicy
from kubeforge.placement import NodeInfo
from records import CLIQUE, NOW, mk_job, mk_node, placed, snapshot, view
from test_fit_memo import digest

P = PreemptionPolicy
NAMESPACES = ["a", "b", "c", "d", "e"]


def walk_all(preemptor, gpus, book, running, in_flight, now):
    """``eligible_victims`` before the grouping (d55403c): every running gang, one by one."""
    spec = preemptor.record.spec
    team = book.team(preemptor.record.namespace)
    within_nominal = not book.enabled or team != UNLISTED and book.used.get(team, 0) + gpus <= book.nominal.get(team, 0)
    within = book.within_quota
    if book.borrowed(team) > 0 and book.within_while_borrowing == P.NEVER:
        within = P.NEVER
    out = []
    for v in running:
        vs = v.record.spec
        if vs is None:
            continue
        vteam = book.team(v.record.namespace)
        if vteam == team:
            if within != P.LOWER_PRIORITY or vs.priority >= spec.priority:
                continue
            reason = HIGHER_PRIORITY
        elif within_nominal and book.reclaim != P.NEVER and book.borrowed(vteam) > 0:
            if book.reclaim != P.ANY and vs.priority >= spec.priority:
                continue
            reason = QUOTA_RECLAIM
        else:
            continue
        if v.key == preemptor.key or v.key in in_flight:
            continue
        if book.min_runtime and run_time(v, now) < book.min_runtime:
            continue
        out.append((v, reason))
    return out


def random_book(rng: random.Random) -> QuotaBook:
    """Quotas on or off; teams of one or two namespaces, some namespaces in none (``*``)."""
    book = QuotaBook("p", enabled=rng.random() < 0.75,
                     within_quota=rng.choice([P.LOWER_PRIORITY, P.NEVER]),
                     reclaim=rng.choice([P.ANY, P.LOWER_PRIORITY, P.NEVER]),
                     min_runtime=rng.choice([0.0, 0.0, 600.0, 3600.0]),
                     within_while_borrowing=rng.choice([P.NEVER, P.LOWER_PRIORITY]))
    for ns in NAMESPACES:
        if rng.random() < 0.8:
            book.team_of[ns] = rng.choice(["t1", "t2", "t3"])
    for team in ("t1", "t2", "t3", UNLISTED):
        if team != UNLISTED:
            book.nominal[team] = rng.choice([0, 8, 16, 32])
        book.used[team] = rng.choice([0, 4, 8, 16, 24, 40])
    return book


def random_gang(rng: random.Random, name: str, ns: str | None = None):
    """A running gang: random namespace, priority and age; one in 15 has no parsed spec."""
    admitted = NOW - rng.choice([30, 300, 900, 3000, 7200])
    st = {"phase": "Running", "attempt": 0, "placement": placed("p", [f"n{rng.randrange(8)}"], admitted_at=admitted)}
    rec = mk_job(name, ns=ns or rng.choice(NAMESPACES), priority=rng.randint(-2, 3), gpus=rng.choice([2, 4, 8]),
                 status=st, created=admitted - 60)
    if rng.random() < 1 / 15:
        rec = replace(rec, spec=None)
    return view(rec)


def keyed(victims):
    return [(v.key, id(v), reason) for v, reason in victims]


def test_the_grouped_try_finds_what_the_walk_found():
    rng = random.Random(31)
    reasons = {HIGHER_PRIORITY: 0, QUOTA_RECLAIM: 0}
    empty = 0
    for case in range(400):
        book = random_book(rng)
        running = [random_gang(rng, f"r{i}") for i in range(rng.randint(0, 30))]
        pre = view(mk_job("w", ns=rng.choice(NAMESPACES), priority=rng.randint(-2, 3)))
        if running and rng.random() < 0.2:  # the preemptor runs already (a restart): never its own victim
            running.insert(rng.randrange(len(running)), view(mk_job("w", ns=pre.record.namespace, priority=-3)))
        in_flight = frozenset(v.key for v in running if rng.random() < 0.15)
        gpus = rng.choice([1, 4, 8, 16])
        want = walk_all(pre, gpus, book, running, in_flight, NOW)
        grouped = RunningGangs(running)
        assert keyed(eligible_victims(pre, gpus, book, grouped, in_flight, NOW)) == keyed(want), case
        assert keyed(eligible_victims(pre, gpus, book, running, in_flight, NOW)) == keyed(want), case  # a plain list
        # Indexed, then grown as a round grows it (an admitted gang appended), then changed otherwise.
        half = RunningGangs(running[:len(running) // 2])
        half.groups()
        for v in running[len(running) // 2:]:
            half.append(v)
        assert keyed(eligible_victims(pre, gpus, book, half, in_flight, NOW)) == keyed(want), case
        if running:  # every change but an append drops the index (a kept one would point at other gangs)
            half.pop(0)
            assert keyed(eligible_victims(pre, gpus, book, half, in_flight, NOW)) == \
                keyed(walk_all(pre, gpus, book, running[1:], in_flight, NOW)), case
            half.reverse()
            assert keyed(eligible_victims(pre, gpus, book, half, in_flight, NOW)) == \
                keyed(walk_all(pre, gpus, book, running[:0:-1], in_flight, NOW)), case
        if len(running) > 1:
            half[0] = running[0]
            assert keyed(eligible_victims(pre, gpus, book, half, in_flight, NOW)) == \
                keyed(walk_all(pre, gpus, book, running[:1] + running[-2:0:-1], in_flight, NOW)), case
        for v, reason in want:
            reasons[reason] += 1
        empty += not want
    # The cases reach every rule: both reasons, and tries with nobody to stop.
    assert min(reasons.values()) > 50 and 50 < empty < 350, (reasons, empty)


def test_a_copy_of_running_gangs_has_its_own_index():
    rng = random.Random(5)
    gangs = RunningGangs(random_gang(rng, f"r{i}", ns="a") for i in range(6))
    gangs.groups()
    twin = copy.copy(gangs)
    twin.append(random_gang(rng, "extra", ns="b"))
    assert "b" in twin.groups() and "b" not in gangs.groups()
    assert isinstance(copy.deepcopy(gangs), RunningGangs) and len(copy.deepcopy(gangs)) == 6


def quota_pool(rng: random.Random):
    quotas = [{"name": "t1", "namespaces": ["a", "b"], "nominalGPUs": rng.choice([16, 32, 48])},
              {"name": "t2", "namespaces": ["c"], "nominalGPUs": rng.choice([0, 8])}]
    preemption = {"withinQuota": rng.choice(["LowerPriority", "Never"]),
                  "reclaimQuota": rng.choice(["Any", "LowerPriority", "Never"]),
                  "withinQuotaWhileBorrowing": rng.choice(["Never", "LowerPriority"]),
                  "minRuntimeSeconds": rng.choice([0, 600, 3600])}
    pool = b.GPUPool("p").levels(("nvlink", CLIQUE)).preemption(preemption)
    return (pool.quotas(quotas) if rng.random() < 0.7 else pool).record()


def crowded(rng: random.Random, topologies=None):
    """Eight 8-GPU nodes in two cliques, most of them held by running gangs of namespaces a-d (d
    is in no quota) at random priorities and ages, and 30 waiting gangs that mostly do not fit
    (each with one of ``topologies`` when given, else the default)."""
    nodes = [mk_node(f"n{i}", labels={CLIQUE: f"c{i // 4}"}) for i in range(8)]
    jobs = []
    for i, node in enumerate(nodes):
        for j, gpus in enumerate(rng.choice([[8], [4, 4], [4], []])):
            admitted = NOW - rng.choice([300, 1800, 7200])
            st = {"phase": "Running", "attempt": 0, "placement": placed("p", [node.name], admitted_at=admitted)}
            jobs.append(mk_job(f"r{i}-{j}", ns=rng.choice("abccdd"), gpus=gpus, priority=rng.randint(-3, 2),
                               status=st, created=admitted - 60))
    for i in range(30):
        topology = {"topology": rng.choice(topologies)} if topologies else {}
        jobs.append(mk_job(f"w{i:02d}", ns=rng.choice("aabbcd"), priority=rng.randint(-3, 5), created=NOW - rng.randint(10, 900),
                           **rng.choice([dict(replicas=1, gpus=8), dict(replicas=1, gpus=4), dict(replicas=2, gpus=8)]),
                           **topology))
    return nodes, jobs


def rounds_with_and_without(monkeypatch, seed: int, module, name: str, other, *more, topologies=None):
    """48 random :func:`crowded` rounds (quota pools of :func:`quota_pool`, seeded ``seed``;
    waiting gangs of ``topologies``), each planned as the code is and with ``module.name``
    replaced by ``other`` (and each ``(module, name, other)`` of ``more``): the two digests."""
    rng = random.Random(seed)
    for _ in range(48):
        nodes, jobs = crowded(rng, topologies)
        snap = snapshot([quota_pool(rng)], nodes, jobs=jobs)
        plain = digest(plan_admission(snap, NOW))
        with monkeypatch.context() as m:
            for mod, attr, value in ((module, name, other), *more):
                m.setattr(mod, attr, value)
            yield plain, digest(plan_admission(snap, NOW))


def test_rounds_decide_the_same_with_and_without_the_groups(monkeypatch):
    """Whole rounds (quotas, borrowing, reclaim, minRuntimeSeconds): the plan with the round's
    :class:`RunningGangs` and with plain lists walked whole are equal, preemptions included."""
    reasons: dict[str, int] = {}
    for grouped, walked in rounds_with_and_without(monkeypatch, 31, round_module, "RunningGangs", list):
        assert grouped == walked
        for p in grouped["preempt"]:
            for v in p.victims:
                reasons[v.reason] = reasons.get(v.reason, 0) + 1
    # The rounds did preempt, for both reasons: the try was exercised, not only refused.
    assert reasons.get(HIGHER_PRIORITY, 0) > 5 and reasons.get(QUOTA_RECLAIM, 0) > 5, reasons


class NoBound(victim_fit.SlotBound):
    """:class:`SlotBound` that lets every placement be tried (the choice before it)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.slots = 10**9

    def change(self, freed, change):
        pass

    def delta(self, freed, change):
        return 0


def test_rounds_decide_the_same_with_and_without_the_slot_bound(monkeypatch):
    """The victim choice skips the placements the :class:`SlotBound` rules out (too few slots
    even with every freed GPU): whole rounds with and without it decide the same plans, and they
    did preempt. Gangs of 8 GPUs a replica need whole nodes, so many tries are ruled out."""
    preempted = 0
    for bounded, tried in rounds_with_and_without(monkeypatch, 32, victims_module, "search_for", victim_fit.Placing,
                                                  (victim_fit, "SlotBound", NoBound)):
        assert bounded == tried
        preempted += sum(len(p.victims) for p in bounded["preempt"])
    assert preempted > 10


def test_the_slot_bound_counts_what_freed_gpus_make_room_for():
    """Three 8-GPU nodes, 6, 8 and 12 GPUs held (the over-allocated one counts 0, not less): room for
    one 2-GPU replica; freeing 4 GPUs on the first adds two; taking them back removes them."""
    pool = SimpleNamespace(nodes=[NodeInfo(name=n, labels={}, gpus_allocatable=8, gpus_allocated=held)
                                  for n, held in (("n0", 6), ("n1", 8), ("n2", 12))])
    bound = victim_fit.SlotBound(pool.nodes, 2, {})
    assert bound.slots == 1
    freed: dict[str, int] = {}
    assert bound.delta(freed, {"n0": 4}) == 2
    bound.change(freed, {"n0": 4})
    freed["n0"] = 4
    assert bound.slots == 3
    assert bound.delta(freed, {"n0": -4}) == -2
    assert victim_fit.SlotBound(pool.nodes[1:2], 2, {}).slots == 0
    assert victim_fit.SlotBound(pool.nodes, 2, {"n0": 1}).slots == 0  # taken this round



TOPOLOGIES = [{"mode": "Required", "level": "nvlink"}, {"mode": "Preferred", "level": "nvlink"}, {"mode": "None"},
              {"mode": "Preferred"}]


class NoFallback(victim_fit.Placing):
    """In place of the search's fallback (a placement refused where the count said the gang fits):
    fails the test, so a count that says yes too often cannot hide behind it."""

    def __init__(self, *a):
        raise AssertionError("the count said the gang fits and the placer did not")


def mismatches(monkeypatch, topologies, *patches) -> tuple[int, int]:
    """(rounds of :func:`rounds_with_and_without`, seed 33, whose plans differ between the code as
    it is, with ``patches``, and placing at every question; victims chosen)."""
    differ = preempted = 0
    for counted, placed_ in rounds_with_and_without(monkeypatch, 33, victims_module, "search_for",
                                                   victim_fit.Placing, topologies=topologies):
        differ += counted != placed_
        preempted += sum(len(p.victims) for p in placed_["preempt"])
    return differ, preempted


@pytest.mark.parametrize("topologies", [None, TOPOLOGIES], ids=["default", "modes"])
def test_rounds_decide_the_same_counting_and_placing(monkeypatch, topologies):
    """The victim search asks whether the gang fits once per victim taken or dropped; counting the
    gang's replica slots (:class:`~kubeforge.admission._victim_fit.Counting`, one placement a
    search) and placing it each time (:class:`~kubeforge.admission._victim_fit.Placing`, the
    search before issue 31's change) decide the same plans in whole rounds, preemptions included
    (victims, their order and reasons, the preemptors' placements), for every topology mode, and
    the count never needed the fallback."""
    monkeypatch.setattr(victims_module, "Placing", NoFallback)
    differ, preempted = mismatches(monkeypatch, topologies)
    assert differ == 0 and preempted > 10, (differ, preempted)


class Forgetful(victim_fit.GangRoom):
    """Broken: ignores what a victim's drop takes back, so it drops every victim it is asked about."""

    def fits_with(self, nodes):
        return self.fits


class Greedy(victim_fit.GangRoom):
    """Broken: counts one replica fewer than the gang has (says yes too early)."""

    def __init__(self, request, *a):
        super().__init__(replace(request, replicas=max(1, request.replicas - 1)) if request.replicas > 1 else request, *a)


class Strict(victim_fit.GangRoom):
    """Broken: asks for one replica more than the gang has (says no too long)."""

    def __init__(self, request, *a):
        super().__init__(replace(request, replicas=request.replicas + 1), *a)


@pytest.mark.parametrize("broken", [Forgetful, Greedy, Strict])
def test_a_broken_room_is_caught(monkeypatch, broken):
    """The equality above can fail: each broken room either decides other plans in some round, or
    says the gang fits where the placer refuses it (the fallback the test forbids)."""
    monkeypatch.setattr(victims_module, "Placing", NoFallback)
    monkeypatch.setattr(victim_fit, "GangRoom", broken)
    with pytest.raises(AssertionError):
        differ, _ = mismatches(monkeypatch, TOPOLOGIES)
        assert differ == 0



class Unlike:
    """Nothing is an instance: ``choose_victims`` lists and sorts each try's candidates as it did
    before the round's :class:`~kubeforge.admission._victim_index.VictimIndex` (issue 31)."""


def removed(chosen, search, freed):
    """The drop pass before ``_prune`` (``list.remove`` on the list, a new ``freed`` per drop):
    ``(chosen, the last freed)``."""
    for victim in list(reversed(chosen[:-1])):
        back = {n: -g for n, g in victim.gpus_by_node.items()}
        if search.fits_without(freed, back):
            chosen.remove(victim)
            search.give(freed, back)
            freed = {n: g - victim.gpus_by_node.get(n, 0) for n, g in freed.items()}
    return chosen, freed


def removing(chosen, search, freed):
    """:func:`removed` as ``_prune``'s stand-in: the search's dict given the last ``freed``'s
    values at the end."""
    chosen, out = removed(chosen, search, freed)
    freed.clear()
    freed.update(out)
    return chosen


def index_mismatches(monkeypatch, topologies=None) -> tuple[int, int]:
    """(rounds of :func:`rounds_with_and_without`, seed 34, whose plans differ between the code
    as it is and the tries as they were: candidates listed, summed and sorted each try, the drop
    pass by ``list.remove``; victims chosen)."""
    differ = preempted = 0
    for kept, listed in rounds_with_and_without(monkeypatch, 34, victims_module, "RunningGangs", Unlike,
                                                (victims_module, "_prune", removing), topologies=topologies):
        differ += kept != listed
        preempted += sum(len(p.victims) for p in listed["preempt"])
    return differ, preempted


@pytest.mark.parametrize("topologies", [None, TOPOLOGIES], ids=["default", "modes"])
def test_rounds_decide_the_same_with_and_without_the_kept_order(monkeypatch, topologies):
    """Whole rounds (quotas, reclaim, minRuntimeSeconds, admissions between tries, victims going
    in flight, every topology mode, ``Required`` ones walking the candidates per domain): the
    round's kept victim order and the tries as they were decide the same plans, and they did
    preempt."""
    differ, preempted = index_mismatches(monkeypatch, topologies)
    assert differ == 0 and preempted > 10, (differ, preempted)


class ForgetsFlight(VictimIndex):
    """Broken: a gang that goes in flight stays a candidate of the round's later tries."""

    def _leave(self, p):
        pass


class RefusesEarly(VictimIndex):
    """Broken: the refusal's sums leave out the gangs one priority below the rules' bound."""

    def below(self, ns, bound):
        return super().below(ns, None if bound is None else bound - 1)


class OutOfOrder(VictimIndex):
    """Broken: the candidates by name, not in the victim order."""

    def candidates(self, rules, preemptor, count):
        return sorted(super().candidates(rules, preemptor, count), key=lambda c: c[0].key)


@pytest.mark.parametrize("broken", [ForgetsFlight, RefusesEarly, OutOfOrder])
def test_a_broken_kept_order_is_caught(monkeypatch, broken):
    """The equality above can fail: each broken index decides other plans in some round."""
    monkeypatch.setattr(victims_module, "VictimIndex", broken)
    differ, _ = index_mismatches(monkeypatch, TOPOLOGIES)
    assert differ > 0
