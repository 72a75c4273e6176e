"""Checkpoint-aware preemption, pure: which running gangs a waiting gang may stop, and which it
does stop.

The rules (Kueue's ``withinClusterQueue`` / ``reclaimWithinCohort`` preemption, over the quotas
of :mod:`kubeforge.admission._quota`):

- A waiting job that does not fit may preempt running TrainingJobs:
  * of its own team with a lower priority (``withinQuota: LowerPriority``; a pool without
    quotas is one team, so this is plain priority preemption), but not while its team borrows
    beyond its nominal quota (``withinQuotaWhileBorrowing: Never``, the default): the GPUs it
    would take from a teammate are borrowed, and a victim of a reclaim would otherwise come back
    by preempting a lower-priority teammate, two preemptions for one reclaim (a *cascade*; the
    replay of ``e2e/bench/preemption.py`` with live reports lost 3x the GPU-hours with it);
  * of other teams that borrow, whatever their priority (``reclaimQuota: Any``) or only lower
    (``LowerPriority``), but only while the preemptor stays within its own nominal quota, and
    only as long as the victim's team still borrows.
- Victims are chosen to lose the least work, counted as the age of their last checkpoint
  times their GPUs (GPU-seconds since the last checkpoint, or since the gang started when it
  never reported one). Candidates are taken cheapest GPUs first (the least work lost per GPU
  freed, i.e. the freshest checkpoint), then the lowest priority, then the newest; then the
  fewest needed are kept (Kueue prunes its candidate list the same way).
- A ``Required`` gang (and a multi-node NVLink gang, which needs whole free nodes of one clique)
  needs room inside ONE domain of its level: victims are chosen domain by domain, only among the
  gangs that hold GPUs there, and the domain whose victims lose the least work in all wins.
  Victims scattered over domains that still leave the gang unplaceable are never chosen (what a
  topology-blind choice does: kueue#10815).
- No gang is preempted before its current run is the pool's ``preemption.minRuntimeSeconds`` old
  (KEP-9876 asks Kueue for the same).

No cycle: a within-team victim has a lower priority than its preemptor, so it can never
preempt it back within the team; a reclaimed victim's team was borrowing and still uses at
least its nominal quota once the victim restarts, so it cannot reclaim from the preemptor,
whose team stays within its nominal quota.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping, Sequence

from kubeforge.admission._ordering import WorkLost, victim_order
from kubeforge.admission._pools import PoolView
from kubeforge.admission._quota import UNLISTED, QuotaBook
from kubeforge.admission._running import Rule, RunningGangs, reachable
from kubeforge.admission._snapshot import JobView
from kubeforge.admission._victim_fit import Placing, search_for
from kubeforge.admission._victim_index import VictimIndex
from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME, PreemptionPolicy
from kubeforge.objects import (
    ADMITTED, PREEMPTED_BY_HIGHER_PRIORITY, QUOTA_RECLAIMED, Key, condition_time, rank_gpus, status_time,
)
from kubeforge.placement import GangRequest, NodeInfo, Placement

HIGHER_PRIORITY = PREEMPTED_BY_HIGHER_PRIORITY
"""A victim of a higher-priority job of its own team (the ``Preempted`` reason)."""
QUOTA_RECLAIM = QUOTA_RECLAIMED
"""A victim whose borrowing team gives GPUs back to a team within its nominal quota."""


class LostWorkBasis(str, Enum):
    """What a running gang's work at risk is counted from (:func:`checkpoint_basis`)."""

    CHECKPOINT = "Checkpoint"
    """The last checkpoint its workers reported in this run (``status.lastCheckpoint``, written
    live from their progress reports)."""
    PLACEMENT = "Placement"
    """No checkpoint reported since this placement was made (a job that does not report, or not
    yet): everything since the placement, the fallback."""


@dataclass(frozen=True)
class Victim:
    """A running gang chosen for preemption.

    Attributes:
        key: The job.
        reason: ``PreemptedByHigherPriority`` or ``QuotaReclaimed``.
        lost_gpu_seconds: GPU-seconds of work since its last checkpoint (what it loses at
            worst, if it cannot checkpoint in its grace period).
        gpus_by_node: The GPUs it frees, per node.
        basis: What ``lost_gpu_seconds`` counts from: a checkpoint the job reported, or (it
            reported none in this run) its placement (:class:`LostWorkBasis`).
    """

    key: Key
    reason: str
    lost_gpu_seconds: float
    gpus_by_node: Mapping[str, int]
    basis: LostWorkBasis = LostWorkBasis.CHECKPOINT


def preemption_message(preemptor: Key, priority: int, victim: Victim) -> str:
    """The Preempted condition's (and Event's) message: who preempted the victim, why, and the work
    at risk, saying what it was counted from (a reported checkpoint, or the placement when the job
    reported none in this run: :attr:`Victim.basis`)."""
    why = {HIGHER_PRIORITY: "a higher-priority job", QUOTA_RECLAIM: "its team's nominal quota"}.get(
        victim.reason, "a gang whose reservation on these nodes waited past the pool's preemptAfterSeconds")
    gpus = sum(victim.gpus_by_node.values()) or 1
    age = victim.lost_gpu_seconds / gpus / 60
    since = (f"since its last reported checkpoint, {age:.0f} min ago" if victim.basis == LostWorkBasis.CHECKPOINT
             else f"since its placement {age:.0f} min ago: it reported no checkpoint in this run")
    return (f"preempted by {preemptor[0]}/{preemptor[1]} (priority {priority}) to make room for {why}; it loses "
            f"at most {victim.lost_gpu_seconds / 3600:.2f} GPU-hours, the work {since}")


def checkpoint_basis(job: JobView, now: float) -> tuple[float, LostWorkBasis]:
    """When a running gang's work at risk starts, and from what: its last checkpoint
    (``status.lastCheckpoint.time``) when the job reported one since this placement was made,
    else the placement itself (``status.placement.admittedAt``, else the ``Admitted``
    condition, else ``now``): ``(unix seconds, basis)``."""
    ck = status_time(job.status.get("lastCheckpoint") or {}, "time")
    start = status_time(job.status.get("placement") or {}, "admittedAt") or condition_time(job.status, ADMITTED) or now
    if ck is not None and ck >= start:
        return ck, LostWorkBasis.CHECKPOINT
    return start, LostWorkBasis.PLACEMENT


def checkpoint_age(job: JobView, now: float) -> float:
    """Seconds of work a running gang would lose if stopped now: the age of its last checkpoint
    (``status.lastCheckpoint.time``; without one since this placement, the time since the
    placement was made: :func:`checkpoint_basis`); 0 when it holds no placement."""
    if job.record.spec is None or job.placement is None:
        return 0.0
    return max(0.0, now - checkpoint_basis(job, now)[0])


def run_time(job: JobView, now: float) -> float:
    """Seconds the gang's current run has lasted: since its placement was made
    (``status.placement.admittedAt``, else the ``Admitted`` condition); 0 when unknown."""
    start = status_time(job.status.get("placement") or {}, "admittedAt") or condition_time(job.status, ADMITTED)
    return max(0.0, now - start) if start is not None else 0.0


def protected(job: JobView, book: QuotaBook, now: float) -> bool:
    """Whether the pool's ``preemption.minRuntimeSeconds`` still protects the running gang: its run
    (:func:`run_time`) is younger than that. Every kind of preemption reads it here."""
    return bool(book.min_runtime) and run_time(job, now) < book.min_runtime


def lost_work(job: JobView, now: float, resource: str = DEFAULT_GPU_RESOURCE_NAME,
              cost: WorkLost = checkpoint_age) -> float:
    """GPU-seconds a running gang would lose if stopped now: ``cost`` (by default
    :func:`checkpoint_age`) times the GPUs of ``resource`` it holds
    (:func:`kubeforge.objects.rank_gpus` per node)."""
    spec, pl = job.record.spec, job.placement
    if spec is None or pl is None:
        return 0.0
    return cost(job, now) * len(pl.nodes) * rank_gpus(job.record, resource)


def _rule(preemptor: JobView, gpus: int, book: QuotaBook) -> Rule:
    """The rules (module docstring) as ``preemptor`` meets them in this state of ``book``, per
    namespace of the running gangs (:data:`~kubeforge.admission._running.Rule`)."""
    spec = preemptor.record.spec
    assert spec is not None
    team = book.team(preemptor.record.namespace)
    within_nominal = not book.enabled or team != UNLISTED and book.used.get(team, 0) + gpus <= book.nominal.get(team, 0)
    within = book.within_quota
    if book.borrowed(team) > 0 and book.within_while_borrowing == PreemptionPolicy.NEVER:
        within = PreemptionPolicy.NEVER  # no cascade: a borrowing team does not reshuffle borrowed GPUs

    def rule(namespace: str) -> tuple[str, int | None] | None:
        vteam = book.team(namespace)
        if vteam == team:
            return (HIGHER_PRIORITY, spec.priority) if within == PreemptionPolicy.LOWER_PRIORITY else None
        if within_nominal and book.reclaim != PreemptionPolicy.NEVER and book.borrowed(vteam) > 0:
            return QUOTA_RECLAIM, None if book.reclaim == PreemptionPolicy.ANY else spec.priority
        return None
    return rule


def eligible_victims(preemptor: JobView, gpus: int, book: QuotaBook, running: Sequence[JobView],
                     in_flight: frozenset[Key], now: float) -> list[tuple[JobView, str]]:
    """The running gangs the rules (module docstring) let ``preemptor`` stop to get ``gpus``
    GPUs, each with its reason (:data:`HIGHER_PRIORITY` or :data:`QUOTA_RECLAIM`), unordered;
    ``in_flight`` gangs (already being preempted) and gangs younger than the pool's
    ``minRuntimeSeconds`` are left out. :func:`choose_victims` chooses among them; a bench
    modelling another victim choice starts from them too.

    They come in ``running``'s order whatever ``running`` is; a
    :class:`~kubeforge.admission.RunningGangs` (what a round passes) is looked up through its
    groups, so the try costs O(namespaces + the gangs the rules reach) instead of O(running)."""
    rule = _rule(preemptor, gpus, book)
    out = []
    # The rules above first (by namespace, through the groups of a RunningGangs): they are cheap,
    # and a waiting gang meets the running ones each round it is placed (e2e/bench/scale: parsing
    # run times here, then walking every running gang, was most of such a round).
    for v, reason in reachable(running, rule):
        key = v.key
        if key == preemptor.key or key in in_flight:
            continue
        if protected(v, book, now):
            continue
        out.append((v, reason))
    return out


def _domain_level(request: GangRequest, view: PoolView):
    """The level whose ONE domain must hold the gang (``Required``, or a whole-node NVLink gang at
    its level), or None."""
    if request.mode != "Required" and not request.whole_nodes:
        return None
    name = request.level or (view.levels[0].name if view.levels else None)
    return next((lv for lv in view.levels if lv.name == name), None)


def choose_victims(preemptor: JobView, request: GangRequest, view: PoolView, book: QuotaBook,
                   running: Sequence[JobView], taken: Mapping[str, int], in_flight: frozenset[Key],
                   now: float, cost: WorkLost = checkpoint_age) -> tuple[list[Victim], Placement] | None:
    """The fewest running gangs whose GPUs, once freed, let ``preemptor`` be placed, chosen to
    lose the least work; None when the rules allow no such set. A gang that must stay inside one
    domain gets victims of one domain only: the domain whose victims lose the least work in all
    (then the fewest victims, then the domain's name).

    Args:
        preemptor: The waiting job.
        request: Its gang request.
        view: The pool, with the ledger's allocations.
        book: The pool's quotas and usage.
        running: Gangs holding a placement in this pool.
        taken: GPUs per node already promised in this round (and nominated to others).
        in_flight: Jobs already being preempted (never chosen twice).
        now: Unix seconds.
        cost: The work a victim loses, seconds (:data:`WorkLost`; :func:`checkpoint_age`).

    Returns:
        (victims in the order they were chosen, the placement the preemptor would get), or None.
    """
    candidates = _candidates(preemptor, request.gpus, view, book, running, taken, in_flight, now, cost)
    if candidates is None:
        return None
    level = _domain_level(request, view)
    if level is None:
        return _select(candidates, request, view, book, taken, now, None, cost)
    best = None
    for domain, members in sorted(_by_domain(view, level.node_label).items()):
        names = frozenset(n.name for n in members)
        mine = [c for c in candidates if names.intersection(c[0].placement.nodes)]  # type: ignore[union-attr]
        if not mine:
            continue
        got = _select(mine, request, view, book, taken, now, names, cost, nodes=members)
        if got is None:
            continue
        key = (sum(v.lost_gpu_seconds for v in got[0]), len(got[0]), domain)
        if best is None or key < best[0]:
            best = (key, got)
    return None if best is None else best[1]


def _candidates(preemptor: JobView, gpus: int, view: PoolView, book: QuotaBook, running: Sequence[JobView],
                taken: Mapping[str, int], in_flight: frozenset[Key], now: float,
                cost: WorkLost) -> Iterable[tuple[JobView, str]] | None:
    """:func:`choose_victims`' candidates in the victim order (:func:`victim_order`), or None when
    there are none or even all of them would not make room for ``gpus`` GPUs. For a
    :class:`~kubeforge.admission.RunningGangs` they come from the round's
    :class:`~kubeforge.admission._victim_index.VictimIndex` (O(namespaces) to refuse, the order
    kept across tries); any other sequence is listed and sorted here, the same candidates."""
    if isinstance(running, RunningGangs):
        index = running.kept(("victims", now, cost, view.resource, book.min_runtime),
                             lambda: _index(running, book, now, cost, view.resource))
        index.sync(in_flight if isinstance(in_flight, frozenset) else frozenset(in_flight))
        rule = _rule(preemptor, gpus, book)
        rules = {ns: rule(ns) for ns in index.namespaces()}
        count, reach = index.reach(rules, preemptor.key)
        if not count:
            return None
        if index.per_view(view, _pool_free) - sum(taken.values()) + reach < gpus:
            return None  # even every candidate would not make room
        return index.candidates(rules, preemptor.key, count)
    listed = eligible_victims(preemptor, gpus, book, running, in_flight, now)
    if not listed:
        return None
    reach = sum(len(v.placement.nodes) * rank_gpus(v.record, view.resource) for v, _ in listed)  # type: ignore[union-attr]
    if _pool_free(view) - sum(taken.values()) + reach < gpus:
        return None
    return victim_order(listed, now, cost)


def _pool_free(view: PoolView) -> int:
    """The GPUs the pool's usable nodes have free, before the round's promises."""
    return sum(n.gpus_free for n in view.nodes if n.usable)


def _index(running: Sequence[JobView], book: QuotaBook, now: float, cost: WorkLost, resource: str) -> VictimIndex:
    """The round's :class:`VictimIndex` of ``running``: the keys, GPUs and protection the
    try before it computed per candidate (:func:`victim_order`, :func:`lost_work`, :func:`protected`)."""
    return VictimIndex(
        running,
        lambda v: (cost(v, now), v.record.spec.priority, -v.record.created),  # type: ignore[union-attr]
        lambda v: len(v.placement.nodes) * rank_gpus(v.record, resource),  # type: ignore[union-attr]
        lambda v: v.record.spec is not None and not protected(v, book, now))


def _by_domain(view: PoolView, label: str) -> dict[str, list[NodeInfo]]:
    """The pool's nodes per value of ``label``, each list in the pool's order."""
    out: dict[str, list[NodeInfo]] = {}
    for n in view.nodes:
        value = n.labels.get(label)
        if value is not None:
            out.setdefault(value, []).append(n)
    return out


def _select(candidates: Iterable[tuple[JobView, str]], request: GangRequest, view: PoolView, book: QuotaBook,
            taken: Mapping[str, int], now: float, only: frozenset[str] | None,
            cost: WorkLost = checkpoint_age, how=None,
            nodes: Sequence[NodeInfo] | None = None) -> tuple[list[Victim], Placement] | None:
    """Greedy in ``candidates``' order until the gang fits (on the nodes of ``only`` when given;
    ``nodes``: those nodes of the pool, in its order, when the caller has them), then drop every
    victim the placement does not need, latest first.

    Whether it fits is asked once per victim taken and once per victim tried for dropping; the
    search's :func:`~kubeforge.admission._victim_fit.search_for` answers it from replica slots
    where they decide it (one placement in all, for the final victims) and by placing the gang
    otherwise: the same victims and placement either way (issue 31). ``how``: the search's
    maker (:class:`~kubeforge.admission._victim_fit.Placing` to place every time)."""
    if nodes is None:
        nodes = view.nodes if only is None else [n for n in view.nodes if n.name in only]
    used = dict(book.used)
    chosen: list[Victim] = []
    freed: dict[str, int] = {}
    search = (how or search_for)(request, nodes, view.levels, taken, {})
    for v, reason in candidates:
        vteam = book.team(v.record.namespace)
        if reason == QUOTA_RECLAIM and used.get(vteam, 0) <= book.nominal.get(vteam, 0):
            continue  # that team no longer borrows: reclaim stops there
        per = rank_gpus(v.record, view.resource)
        by_node: dict[str, int] = {}
        for n in v.placement.nodes:  # type: ignore[union-attr]
            by_node[n] = by_node.get(n, 0) + per
        chosen.append(Victim(v.key, reason, lost_work(v, now, view.resource, cost), by_node,
                             checkpoint_basis(v, now)[1]))
        search.give(freed, by_node)
        for n, g in by_node.items():
            freed[n] = freed.get(n, 0) + g
        used[vteam] = used.get(vteam, 0) - sum(by_node.values())
        if search.fits(freed):
            break
    else:
        return None
    chosen = _prune(chosen, search, freed)
    placement = search.placement(freed)
    if placement is None:  # the count said it fits, the placer did not (never seen): decide by placing
        return None if how is Placing else _select(candidates, request, view, book, taken, now, only, cost, Placing, nodes)
    return chosen, placement


def _prune(chosen: list[Victim], search, freed: dict[str, int]) -> list[Victim]:
    """Keep the fewest: every victim but the last, latest first, is dropped when the gang fits
    without it (``search``: the search's :class:`~kubeforge.admission._victim_fit.Counting` or
    :class:`~kubeforge.admission._victim_fit.Placing`; ``freed``, GPUs by node, updated in place).
    The victims the loop with ``chosen.remove`` kept (the first equal victim goes), without its
    O(victims) scan and a new ``freed`` per drop: O(victims x their nodes) in all (issue 31)."""
    alive = [True] * len(chosen)
    same: dict[Key, list[int]] = {}
    for i, v in enumerate(chosen):
        same.setdefault(v.key, []).append(i)
    for i in range(len(chosen) - 2, -1, -1):
        victim = chosen[i]
        back = {n: -g for n, g in victim.gpus_by_node.items()}
        if search.fits_without(freed, back):
            alive[next(j for j in same[victim.key] if alive[j] and chosen[j] == victim)] = False
            search.give(freed, back)
            for n, g in victim.gpus_by_node.items():
                freed[n] -= g
    return [v for v, keep in zip(chosen, alive) if keep]
