"""Preemption for a reservation (opt-in, issue 27): a reserved gang that waited too long stops the
smaller jobs on its reserved domain instead of waiting for them to end. Pure.

Reservations with backfill alone (:mod:`kubeforge.admission._reservation`) only keep new jobs off
the GPUs a gang waits for; the jobs already running there still run to their end, and in the
backfill bench's mix (small jobs up to 4 h, 15 % with an unknown end) a block takes hours to
drain. With the pool's ``spec.reservations.preemptAfterSeconds`` set, a gang that holds a
reservation and has waited that long (since it last became not ``Admitted``) preempts, through
the plan's ordinary preemption path (:class:`~kubeforge.admission.Preempt`: its victims restart
with ``Preempted=True`` and the reason :data:`~kubeforge.objects.PREEMPTED_FOR_RESERVATION`, it
is nominated the GPUs of its placement):

- only jobs on the nodes of its reservation's domain (the domain of the topology level it needs;
  a gang with no level: the reserved nodes themselves), and it is placed inside that domain.
  Once the gang may preempt, its reservation counts the jobs it may stop as ending when it may
  (:func:`stoppable_jobs`: now, or when ``minRuntimeSeconds`` lets them), known end or not, so
  it lands on the domain it can free soonest. Before this, the reservation counted only the jobs'
  expected ends: in the backfill bench a gang got none while a block's jobs had unknown ends, and
  waited on a block it could not free sooner (large-gang wait p95 175 min at
  ``preemptAfterSeconds`` 3600; with it 88, e2e/README-backfill-bench.md, 2026-11-28);
- only jobs smaller than the gang (fewer GPUs in all): a reservation is for a gang that smaller
  jobs starve. Without this rule the backfill bench's equal-priority 64-GPU gangs took turns
  preempting each other every ``preemptAfterSeconds`` (a victim waits again, gets the reservation
  and preempts back: 4 gangs preempted 7 times, 30.9 GPU-hours lost each), and an 8-GPU job
  holding the pool's reservation preempted a 64-GPU gang;
- only jobs of a priority less than or equal to its own (Kueue's ``maxPriorityThreshold`` reads the
  same way), of its own team, or of a team that borrows beyond its nominal quota (a pool with
  quotas: a team within its quota keeps its guarantee against a reservation too);
- never a job whose run is younger than the pool's ``preemption.minRuntimeSeconds``, nor one
  already being preempted;
- those that lose the least work first (:func:`~kubeforge.admission.victim_order`: the age of
  their last reported checkpoint times their GPUs, the placement's age when they reported none,
  which :attr:`~kubeforge.admission.Victim.basis` and the victim's Event say), and only as many
  as its placement needs (the greedy pick is pruned as :func:`~kubeforge.admission.choose_victims`
  prunes).

A gang that may preempt but finds no such set yet only because some job there is younger than
``minRuntimeSeconds`` (:func:`only_protected`) keeps its reservation, which then holds every free
GPU of its nodes (:func:`hold_all`), not only those it would need at its expected start, against
every later job (even one that would end before that start): backfilled jobs would
otherwise keep landing there, each protected for ``minRuntimeSeconds`` in turn (the backfill
bench: a gang eligible at 399 min found no victims until 534). The hold lasts at most
``minRuntimeSeconds`` (by then everything on those nodes may be preempted) and the reservation's
message says it. A gang that could not make room even then (the jobs there are larger, of a higher
priority, or of a team within its quota) keeps the plain reservation.

Every GPU a victim frees is either in the gang's nominated placement or, when a victim also held
GPUs the placement does not need, back in the pool for the next round's queue: nothing is held
without a reason.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from kubeforge.admission._ordering import WorkLost, victim_order
from kubeforge.admission._pools import PoolView
from kubeforge.admission._quota import QuotaBook
from kubeforge.admission._reservation import Reservation
from kubeforge.admission._snapshot import JobView
from kubeforge.admission._victims import Victim, _select, checkpoint_age, protected, run_time
from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME
from kubeforge.objects import PREEMPTED_FOR_RESERVATION, Key, PoolRecord, rank_gpus
from kubeforge.placement import GangRequest, Placement

FOR_RESERVATION = PREEMPTED_FOR_RESERVATION
"""A victim on the reserved domain of a gang that waited past ``preemptAfterSeconds``."""


def preempt_after(pool: PoolRecord | None) -> float | None:
    """The pool's ``spec.reservations.preemptAfterSeconds`` (seconds), or None: off (the default,
    and a pool without a valid spec)."""
    spec = pool.spec if pool is not None else None
    after = spec.reservations.preempt_after_seconds if spec is not None else None
    return float(after) if after is not None else None


def may_preempt(pool: PoolRecord | None, waited: float) -> bool:
    """Whether a reserved gang that has waited ``waited`` seconds may preempt for its reservation in
    ``pool``: the pool's ``preemptAfterSeconds`` is set and ``waited`` reached it."""
    after = preempt_after(pool)
    return after is not None and waited >= after


def domain_nodes(reservation: Reservation, view: PoolView) -> frozenset[str]:
    """The nodes of the reservation's domain: those of ``view`` whose label of the placement's level
    is its domain; with no level (or a level the pool does not have), the reserved nodes."""
    pl = reservation.placement
    level = next((lv for lv in view.levels if lv.name == pl.level), None) if pl.level else None
    if level is None or pl.domain is None:
        return frozenset(pl.gpus_by_node)
    return frozenset(n.name for n in view.nodes if n.labels.get(level.node_label) == pl.domain)


def reservation_candidates(preemptor: JobView, gpus: int, nodes: frozenset[str], book: QuotaBook,
                           running: Sequence[JobView], in_flight: frozenset[Key], now: float,
                           resource: str = DEFAULT_GPU_RESOURCE_NAME,
                           protect: bool = True) -> list[tuple[JobView, str]]:
    """The running gangs ``preemptor`` (a gang of ``gpus`` GPUs of ``resource``) may stop for its
    reservation (module docstring), unordered, each with the reason :data:`FOR_RESERVATION`: on
    ``nodes``, holding fewer than ``gpus`` GPUs, of a priority <= its own, of its team or a
    borrowing team, not in ``in_flight``, and at least the pool's ``minRuntimeSeconds`` into their
    run (``protect`` False: whatever their run, for :func:`only_protected`)."""
    spec = preemptor.record.spec
    assert spec is not None
    team = book.team(preemptor.record.namespace)
    out = []
    for v in running:
        vs, pl = v.record.spec, v.placement
        if vs is None or pl is None or vs.priority > spec.priority or v.key == preemptor.key or v.key in in_flight:
            continue
        if not nodes.intersection(pl.nodes) or len(pl.nodes) * rank_gpus(v.record, resource) >= gpus:
            continue
        if book.team(v.record.namespace) != team and book.borrowed(book.team(v.record.namespace)) <= 0:
            continue  # a team within its nominal quota keeps its guarantee
        if protect and protected(v, book, now):
            continue
        out.append((v, FOR_RESERVATION))
    return out


def reservation_victims(preemptor: JobView, request: GangRequest, reservation: Reservation, view: PoolView,
                        book: QuotaBook, running: Sequence[JobView], taken: Mapping[str, int],
                        in_flight: frozenset[Key], now: float,
                        cost: WorkLost = checkpoint_age, protect: bool = True) -> tuple[list[Victim], Placement] | None:
    """The fewest jobs on ``reservation``'s domain whose GPUs, once freed, let ``preemptor`` be placed
    inside that domain, those that lose the least work first; None when the rules allow no such set.

    Args:
        preemptor: The reserved gang (the caller checked it waited long enough: :func:`may_preempt`).
        request: Its gang request in the pool.
        reservation: The reservation it got this round.
        view: The pool, with the ledger's allocations.
        book: The pool's quotas and usage.
        running: Gangs holding a placement in this pool.
        taken: GPUs per node promised so far this round (its own reservation's held GPUs not counted).
        in_flight: Jobs already being preempted (never chosen twice).
        now: Unix seconds.
        cost: The work a victim loses, seconds (:func:`~kubeforge.admission.checkpoint_age`).
        protect: False: count jobs younger than ``minRuntimeSeconds`` as victims too.

    Returns:
        (victims in the order chosen, the placement the preemptor would get), or None.
    """
    nodes = domain_nodes(reservation, view)
    candidates = reservation_candidates(preemptor, request.gpus, nodes, book, running, in_flight, now, view.resource,
                                        protect)
    if not candidates:
        return None
    return _select(victim_order(candidates, now, cost), request, view, book, taken, now, nodes, cost)


def only_protected(preemptor: JobView, request: GangRequest, reservation: Reservation, view: PoolView,
                   book: QuotaBook, running: Sequence[JobView], taken: Mapping[str, int],
                   in_flight: frozenset[Key], now: float) -> bool:
    """Whether the only thing between ``preemptor`` and its victims is ``minRuntimeSeconds``: with
    that protection lifted, :func:`reservation_victims` (same arguments) would make room. Only then
    does its reservation hold every free GPU of its nodes (:func:`hold_all`), and only until those
    jobs are that old; a domain whose jobs it may never stop (larger, of a higher priority, of a
    team within its quota) keeps the plain reservation, whose later jobs that end in time backfill."""
    return reservation_victims(preemptor, request, reservation, view, book, running, taken, in_flight, now,
                               protect=False) is not None


def hold_all(reservation: Reservation, view: PoolView, taken: Mapping[str, int]) -> Reservation:
    """``reservation`` holding every GPU free now on its nodes, up to what the gang takes there
    (``taken``: GPUs promised so far this round), against every later job
    (:attr:`~kubeforge.admission.Reservation.draining`), for a gang that may preempt but found no
    victims yet."""
    held = dict(reservation.held)
    for n in view.nodes:
        want = reservation.placement.gpus_by_node.get(n.name, 0)
        free = max(0, n.gpus_free - taken.get(n.name, 0))
        if min(want, free) > held.get(n.name, 0):
            held[n.name] = min(want, free)
    return replace(reservation, held=held, draining=True)


def stoppable_jobs(preemptor: JobView, gpus: int, view: PoolView, book: QuotaBook, running: Sequence[JobView],
                   in_flight: frozenset[Key], now: float) -> dict[Key, float]:
    """For a gang of ``gpus`` GPUs that may preempt for a reservation in ``view`` (:func:`may_preempt`):
    every running job of the pool it may stop (:func:`reservation_candidates` on all the pool's
    nodes, ``minRuntimeSeconds`` aside), with when it may (unix seconds): ``now``, or when the
    job's run reaches ``minRuntimeSeconds``. Its reservation then counts them as ending by then
    (:func:`~kubeforge.admission.ending_jobs`), so it lands on the domain that it can free soonest,
    whether the jobs there have a known end or not."""
    nodes = frozenset(n.name for n in view.nodes)
    cands = reservation_candidates(preemptor, gpus, nodes, book, running, in_flight, now, view.resource, protect=False)
    return {v.key: now + max(0.0, book.min_runtime - run_time(v, now)) for v, _ in cands}
