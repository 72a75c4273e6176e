"""Reservations and backfill: big gangs land under contention (issue 27, Slurm's words).

With Kueue's ``BestEffortFIFO`` (kubeforge's order without reservations) a gang that does not fit
waits and the smaller jobs behind it take every GPU that frees up, so under a steady stream of
small jobs a gang that needs a whole domain may wait forever (kueue#8309, KAI-Scheduler#1969).
Slurm's backfill scheduler (``sched/backfill``: each cycle it plans the pending jobs in priority
order on a timeline of the running jobs' end times) gives the first pending job a *reservation*
at its expected start, and lets a later job run on reserved resources only if it ends before
that start (*backfill*). Here, in one admission round, pure:

- The first waiting gangs in queue order that cannot fit a pool (up to the pool's
  ``spec.reservations.maxReservations``) each get a :class:`Reservation`: the running jobs of the
  pool are freed in the order they are expected to end (:func:`expected_end`: their
  ``status.progress.eta`` from their workers' reports, else the end their ``spec.maxRunSeconds``
  sets, ``admittedAt + maxRunSeconds - runSeconds``), until the gang fits; the gang's placement
  then (the domain of the level it needs, expected to free soonest) is what is reserved, from the
  end of the last job it waits for (its expected start). A job with neither an ETA nor a time limit
  has an unknown end and is treated as never freeing; a gang that only such jobs could make room
  for gets no reservation and waits as before (unless it may preempt them for a reservation:
  :func:`ending_jobs` then counts them as ending when it may,
  :mod:`kubeforge.admission._reservation_preemption`). A second reservation of a pool never shares a node
  with the first.
- What a reservation holds now is only what must stay free for it: on each of its nodes, the GPUs
  free now that the jobs ending before its start will not free in time
  (``min(free now, wanted - freed by then)``). A later job may use held GPUs only if it ends
  before the reservation's start (its own ``maxRunSeconds``: :func:`own_end`); otherwise it is
  placed elsewhere or waits. Jobs ahead of the gang in the queue were placed before it and are
  never held back.
- A job that outlives its expected end by more than the pool's ``graceSeconds`` no longer counts
  as ending, so a reservation that counted on it is recomputed the next round (later, elsewhere,
  or none): held GPUs never stay idle past a reservation's start plus the grace.
- Reservations are recomputed every round, but a gang keeps the nodes of its last one while they
  still make room no more than ``graceSeconds`` after the best nodes now would: ends become known
  (and sooner) as reports arrive, and a reservation that hopped to other nodes at each small gain
  would hand the GPUs it held to the small jobs every time.

``StrictFIFO`` (Kueue's other queueing strategy) is here too, for comparison (the backfill
bench): the first gang that waits for capacity in a pool blocks every later one there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Mapping, Sequence

from kubeforge.admission._pools import PoolView
from kubeforge.admission._snapshot import JobView
from kubeforge.api import PoolReservations, ReservationMode
from kubeforge.objects import rfc3339
from kubeforge.lifecycle import run_seconds
from kubeforge.objects import Key, PoolRecord, rank_gpus, status_time
from kubeforge.placement import GangRequest, Placement, place_gang


class QueueingStrategy(str, Enum):
    """How a pool's queue treats a gang that does not fit (Kueue's ClusterQueue
    ``queueingStrategy`` words, plus Slurm's backfill)."""

    BEST_EFFORT_FIFO = "BestEffortFIFO"
    """The gangs behind it are still tried (``spec.reservations.mode: Disabled``)."""
    STRICT_FIFO = "StrictFIFO"
    """Nothing behind it is admitted in that pool until it is (bench comparisons only)."""
    BACKFILL = "Backfill"
    """It gets a reservation; later jobs use reserved GPUs only if they end before its start
    (``spec.reservations.mode: Enabled``, the default)."""


def pool_strategy(pool: PoolRecord, override: QueueingStrategy | None = None) -> QueueingStrategy:
    """A pool's queueing strategy: ``override`` when given (a bench's rules), else Backfill when
    its ``spec.reservations.mode`` is Enabled, else BestEffortFIFO."""
    if override is not None:
        return override
    if pool.spec is None or pool.spec.reservations.mode == ReservationMode.DISABLED:
        return QueueingStrategy.BEST_EFFORT_FIFO
    return QueueingStrategy.BACKFILL


def pool_grace(pool: PoolRecord | None) -> float:
    """The pool's ``spec.reservations.graceSeconds`` (the API default when it has no valid spec)."""
    spec = pool.spec if pool is not None else None
    return float(spec.reservations.grace_seconds if spec is not None else PoolReservations().grace_seconds)


def expected_end(job: JobView, now: float, grace: float) -> float | None:
    """When a running gang is expected to give its GPUs back (unix seconds, never before
    ``now``), or None when unknown: the earlier of its workers' ETA (``status.progress.eta``, from
    a report of this run: ``lastReportTime`` not before the placement) and the end its time limit
    sets (``admittedAt + spec.maxRunSeconds - status.runSeconds``; a placement this process has
    not written yet starts ``now``). An end more than ``grace`` seconds past is no longer believed
    (None): the job outlived it."""
    spec, pl = job.record.spec, job.placement
    progress = job.status.get("progress") or {}
    if spec is None or pl is None or (spec.max_run_seconds is None and not progress.get("eta")):
        return None  # nothing known (checked first: a round asks this of every running job)
    written = job.status.get("placement") or {}
    start = status_time(written, "admittedAt") if written else now
    start = now if start is None else start
    ends = []
    eta, reported = status_time(progress, "eta"), status_time(progress, "lastReportTime")
    if eta is not None and (reported is None or reported >= start):
        ends.append(eta)
    if spec.max_run_seconds is not None:
        ends.append(start + spec.max_run_seconds - float(job.status.get("runSeconds") or 0.0))
    if not ends or min(ends) + grace < now:
        return None
    return max(min(ends), now)


def own_end(job: JobView, now: float) -> float | None:
    """When a waiting job would end at the latest if it started ``now``: ``now`` plus what its
    time limit leaves (``spec.maxRunSeconds`` minus the run time it used), or None (no limit)."""
    spec = job.record.spec
    if spec is None or spec.max_run_seconds is None:
        return None
    return now + max(0.0, spec.max_run_seconds - run_seconds(job.status, now))


@dataclass(frozen=True)
class Reservation:
    """GPUs held for a waiting gang from its expected start (Slurm's reservation).

    Attributes:
        key: The gang it is for.
        pool: The pool.
        start: When it expects to start (unix seconds): the expected end of the last running
            job it waits for.
        placement: Where it expects to run then (level, domain, nodes, GPUs per node).
        held: GPUs per node that are free now and must stay free for it: only jobs that end
            before ``start`` may use them.
        waits_for: The running jobs it waits for, those expected to end by ``start``.
        draining: Its gang may preempt for it but the jobs on its domain are still protected
            (:func:`~kubeforge.admission.hold_all`): ``held`` then keeps every later job off, even
            one that ends before ``start``.
    """

    key: Key
    pool: str
    start: float
    placement: Placement
    held: Mapping[str, int]
    waits_for: tuple[Key, ...]
    draining: bool = False

    @property
    def signature(self) -> tuple:
        """What a later gang's "does not fit" answer depended on (for the admission memo)."""
        return self.key, self.start, tuple(sorted(self.held.items())), self.draining


def reservation_message(r: Reservation) -> str:
    """The reserved gang's ``Admitted=False`` message (reason ``CapacityReserved``) and Event:
    what is reserved and when it expects to start. Stable while the reservation is (no relative
    times), so it is not rewritten every round."""
    pl = r.placement
    where = f"{pl.level} {pl.domain}" if pl.level else f"pool {r.pool}"
    nodes = ", ".join(sorted(pl.gpus_by_node)[:4]) + (" ..." if len(pl.gpus_by_node) > 4 else "")
    jobs = ", ".join(f"{k[0]}/{k[1]}" for k in r.waits_for[:3]) + (
        f" and {len(r.waits_for) - 3} more" if len(r.waits_for) > 3 else "")
    return (f"does not fit now; {sum(pl.gpus_by_node.values())} GPUs on {len(pl.gpus_by_node)} nodes of {where} "
            f"({nodes}) are reserved for it in pool {r.pool}, expected to start at {rfc3339(r.start)} once {jobs} "
            f"end (their ETA or maxRunSeconds); until then only jobs that end before it may use them")


def ending_jobs(running: Sequence[JobView], preempting: frozenset[Key], now: float,
                grace: float, stoppable: Mapping[Key, float] | None = None) -> list[tuple[float, JobView]]:
    """The running gangs of a pool whose end is known, ``(end, job)`` soonest first (a gang being
    preempted ends ``now``); those with an unknown end are left out. ``stoppable``: for a gang that
    may preempt for its reservation, the jobs it may stop and when (unix seconds,
    :func:`~kubeforge.admission.stoppable_jobs`): each ends then at the latest, known or not."""
    out = []
    for job in running:
        end = now if job.key in preempting else expected_end(job, now, grace)
        if stoppable and job.key in stoppable:
            end = stoppable[job.key] if end is None else min(end, stoppable[job.key])
        if end is not None:
            out.append((end, job))
    out.sort(key=lambda e: (e[0], e[1].key))
    return out


def reserve(key: Key, request: GangRequest, view: PoolView, taken: Mapping[str, int],
            ends: Sequence[tuple[float, JobView]], exclude: frozenset[str] = frozenset(),
            only: frozenset[str] | None = None) -> Reservation | None:
    """The reservation of a gang that does not fit ``view`` now, or None when no set of jobs with
    a known end makes room for it.

    The fewest jobs of ``ends`` (soonest first) whose GPUs, once freed, let the gang be placed are
    found by bisection (placement is monotone in free GPUs), so a reservation costs about
    ``log2(len(ends)) + 1`` placements.

    Args:
        key: The gang.
        request: Its request in this pool.
        view: The pool, with the ledger's allocations.
        taken: GPUs per node promised so far this round (and held by earlier reservations).
        ends: :func:`ending_jobs` of the pool.
        exclude: Nodes of earlier reservations of the pool (a reservation never shares one).
        only: When given, the gang's nodes are chosen among these only (its last reservation's).
    """
    if not ends:
        return None
    nodes = [n for n in view.nodes if n.name not in exclude and (only is None or n.name in only)]
    fit = _fit_after(request, view, nodes, taken, ends)
    if fit(len(ends)) is None:
        return None
    lo, hi = 1, len(ends)
    while lo < hi:
        mid = (lo + hi) // 2
        if fit(mid) is not None:
            hi = mid
        else:
            lo = mid + 1
    start = ends[lo - 1][0]
    while lo < len(ends) and ends[lo][0] == start:  # jobs that end together free together
        lo += 1
    got = fit(lo)
    assert got is not None
    placement, freed = got
    held = {}
    for node in view.nodes:
        want = placement.gpus_by_node.get(node.name, 0)
        free_now = max(0, node.gpus_free - taken.get(node.name, 0))
        hold = min(free_now, max(0, want - freed.get(node.name, 0)))
        if hold:
            held[node.name] = hold
    return Reservation(key, view.name, start, placement, held, tuple(j.key for _, j in ends[:lo]))


def _fit_after(request: GangRequest, view: PoolView, nodes, taken: Mapping[str, int],
               ends: Sequence[tuple[float, JobView]]):
    """``fit(k)``: the gang's placement once the first ``k`` jobs of ``ends`` freed their GPUs
    (with the GPUs freed per node), or None."""
    def fit(k: int) -> tuple[Placement, dict[str, int]] | None:
        freed: dict[str, int] = {}
        for _, job in ends[:k]:
            per = rank_gpus(job.record, view.resource)
            for n in job.placement.nodes:  # type: ignore[union-attr]
                freed[n] = freed.get(n, 0) + per
        trial = [replace(n, gpus_allocated=max(0, n.gpus_allocated - freed[n.name])) if freed.get(n.name) else n
                 for n in nodes]
        result = place_gang(request, trial, view.levels, taken)
        return (result, freed) if isinstance(result, Placement) else None
    return fit
