"""One admission round's queueing book: per pool, its strategy (:class:`QueueingStrategy`), the
gang that blocks it (``StrictFIFO``) and the reservations made so far (``Backfill``), and what
they hold back from the gangs tried after them. Pure; owned by the round
(:class:`~kubeforge.admission._round.Round`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from kubeforge.admission._pools import PoolView
from kubeforge.admission._reservation import (
    QueueingStrategy, Reservation, ending_jobs, own_end, pool_grace, pool_strategy, reservation_message, reserve,
)
from kubeforge.admission._snapshot import JobView, Snapshot
from kubeforge.objects import CAPACITY_RESERVED, WAITING_FOR_CAPACITY, Key
from kubeforge.placement import GangRequest


@dataclass
class QueueBook:
    """The queueing state of one round.

    Attributes:
        snapshot: The round's snapshot (pools, preempting gangs).
        views: The round's pool views.
        now: Unix seconds.
        override: One strategy for every pool (a bench's :class:`~kubeforge.admission.AdmissionRules`),
            or None: each pool's own (:func:`pool_strategy`).
        blockers: Per StrictFIFO pool, the first gang that waits for capacity there.
        reservations: Per pool, the reservations made so far, in queue order.
        tried: Per pool, how many waiting gangs asked for a reservation (at most its
            ``maxReservations``).
        previous: The nodes of each gang's reservation in the last round (kept while still good).
    """

    snapshot: Snapshot
    views: Mapping[str, PoolView]
    now: float
    override: QueueingStrategy | None = None
    blockers: dict[str, Key] = field(default_factory=dict)
    reservations: dict[str, list[Reservation]] = field(default_factory=dict)
    tried: dict[str, int] = field(default_factory=dict)
    previous: Mapping[Key, frozenset[str]] = field(default_factory=dict)
    _strategies: dict[str, QueueingStrategy] = field(default_factory=dict)

    def strategy(self, pool: str) -> QueueingStrategy:
        """The strategy of ``pool`` (BestEffortFIFO for a pool that does not exist)."""
        got = self._strategies.get(pool)
        if got is None:
            rec = self.snapshot.pools.get(pool)
            got = pool_strategy(rec, self.override) if rec is not None else QueueingStrategy.BEST_EFFORT_FIFO
            self._strategies[pool] = got
        return got

    def blocker(self, pool: str) -> Key | None:
        """The gang a StrictFIFO pool waits behind, or None."""
        return self.blockers.get(pool)

    def holding(self, view: PoolView, job: JobView) -> tuple[int, ...]:
        """Which of the pool's reservations so far hold against ``job`` (indices in its list, which
        only grows within a round): every one whose start comes before the job's own end
        (:func:`own_end`; no time limit: all of them), and every draining one
        (:attr:`Reservation.draining`). Two gangs with the same answer and the same ``taken`` see
        the same free GPUs (:meth:`usable`)."""
        mine = self.reservations.get(view.name)
        if not mine:
            return ()
        end = own_end(job, self.now)
        return tuple(i for i, r in enumerate(mine) if end is None or end > r.start or r.draining)

    def usable(self, view: PoolView, job: JobView, taken: Mapping[str, int]) -> Mapping[str, int]:
        """``taken`` plus what the pool's reservations hold against ``job`` (:meth:`holding`)."""
        holding = self.holding(view, job)
        if not holding:
            return taken
        mine = self.reservations[view.name]
        out = dict(taken)
        for r in (mine[i] for i in holding):
            for n, g in r.held.items():
                out[n] = out.get(n, 0) + g
        return out

    def signature(self, pools: Sequence[str]) -> tuple:
        """What a gang's "does not fit" answer depended on besides free GPUs: each of its pools'
        blocker and reservations so far (an :class:`~kubeforge.admission.AdmissionMemo` answer
        is stale when it moves)."""
        return tuple((self.blockers.get(p), tuple(r.signature for r in self.reservations.get(p, ())))
                     for p in pools)

    def holds(self) -> dict[str, dict[str, int]]:
        """Every reservation's held GPUs, by resource and node (serving replicas, whose end is
        never known, keep off them)."""
        out: dict[str, dict[str, int]] = {}
        for pool, rs in self.reservations.items():
            view = self.views.get(pool)
            if view is None:
                continue
            into = out.setdefault(view.resource, {})
            for r in rs:
                for n, g in r.held.items():
                    into[n] = into.get(n, 0) + g
        return out

    def after_wait(self, job: JobView, allowed: Sequence[str], request_in: Callable[[PoolView], GangRequest],
                   taken: Callable[[PoolView], Mapping[str, int]], running: Callable[[str], Sequence[JobView]],
                   wait, stoppable: Callable[[PoolView], Mapping[Key, float] | None] = lambda view: None):
        """What a gang that waits for capacity does to the queue: it blocks its StrictFIFO pools,
        and in its Backfill pools with reservations left it asks for one; the soonest wins and
        its wait says so (reason ``CapacityReserved``). Returns the wait to report (``wait`` or
        the reserved one). ``stoppable(view)``: the jobs the gang may preempt for a reservation in
        that pool and when (:func:`~kubeforge.admission.stoppable_jobs`), or None while it may not
        (``preemptAfterSeconds``): its reservation counts them as ending then, known end or not."""
        if wait.reason != WAITING_FOR_CAPACITY:
            return wait
        best: Reservation | None = None
        for pool in allowed:
            view = self.views.get(pool)
            if view is None or view.unavailable is not None:
                continue
            strategy = self.strategy(pool)
            if strategy == QueueingStrategy.STRICT_FIFO:
                self.blockers.setdefault(pool, job.key)
                continue
            if strategy != QueueingStrategy.BACKFILL or self.tried.get(pool, 0) >= _max_reservations(view):
                continue
            self.tried[pool] = self.tried.get(pool, 0) + 1
            got = self._reserve(job, request_in(view), view, self.usable(view, job, taken(view)),
                                self._ending(pool, running, stoppable(view)))
            if got is not None and (best is None or got.start < best.start):
                best = got
        if best is None:
            return wait
        self.reservations.setdefault(best.pool, []).append(best)
        return type(wait)(job.key, CAPACITY_RESERVED, reservation_message(best))

    def reservation_of(self, key: Key) -> Reservation | None:
        """The reservation ``key`` got so far this round, or None."""
        return next((r for rs in self.reservations.values() for r in rs if r.key == key), None)

    def release(self, r: Reservation) -> None:
        """Give up ``r`` (its gang preempts instead): it holds nothing for the gangs tried after it,
        and its slot of the pool's ``maxReservations`` goes back."""
        self.reservations[r.pool].remove(r)
        self.tried[r.pool] = max(0, self.tried.get(r.pool, 0) - 1)

    def restore(self, r: Reservation) -> None:
        """Undo :meth:`release` (the gang found no victims: it keeps its reservation)."""
        self.reservations.setdefault(r.pool, []).append(r)
        self.tried[r.pool] = self.tried.get(r.pool, 0) + 1

    def _reserve(self, job: JobView, request: GangRequest, view: PoolView, taken: Mapping[str, int],
                 ends: list) -> Reservation | None:
        """The gang's reservation in ``view``: on the nodes of its last one while they make room no
        more than the pool's ``graceSeconds`` after the best nodes now would (stability: a
        reservation that moves hands what it held to others), else on the best."""
        exclude = self._reserved_nodes(view.name)
        best = reserve(job.key, request, view, taken, ends, exclude)
        before = self.previous.get(job.key)
        if best is None or not before or before == frozenset(best.placement.gpus_by_node):
            return best
        kept = reserve(job.key, request, view, taken, ends, exclude, only=before)
        if kept is not None and kept.start <= best.start + pool_grace(self.snapshot.pools.get(view.name)):
            return kept
        return best

    def _ending(self, pool: str, running: Callable[[str], Sequence[JobView]],
                stoppable: Mapping[Key, float] | None = None) -> list:
        """The pool's running gangs with a known end, as the round leaves them so far (those it
        admitted included), soonest first; ``stoppable``: those the gang may preempt, ending when
        it may (:func:`~kubeforge.admission.ending_jobs`)."""
        return ending_jobs(running(pool), self.snapshot.preempting, self.now, pool_grace(self.snapshot.pools.get(pool)),
                           stoppable)

    def _reserved_nodes(self, pool: str) -> frozenset[str]:
        return frozenset(n for r in self.reservations.get(pool, ()) for n in r.placement.gpus_by_node)


def _max_reservations(view: PoolView) -> int:
    spec = view.record.spec
    return spec.reservations.max_reservations if spec is not None else 0
