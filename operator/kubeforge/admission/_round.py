"""One admission round's working state: what is taken so far, each pool's quotas, the
running gangs that could be preempted, and the decision for one gang."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from kubeforge.admission._ledger import Ledger
from kubeforge.admission._ordering import entry_order
from kubeforge.admission._pools import PoolView, missing_gpus
from kubeforge.admission._request import gang_request, nvlink_request
from kubeforge.admission._quota import QuotaBook, quota_book
from kubeforge.admission._queueing import QueueBook
from kubeforge.admission._reservation import QueueingStrategy
from kubeforge.admission._running import RunningGangs
from kubeforge.admission._reservation_preemption import (
    hold_all, may_preempt, only_protected, reservation_victims, stoppable_jobs,
)
from kubeforge.admission._victims import Victim, choose_victims
from kubeforge.admission._snapshot import JobView, Snapshot, pool_resource
from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME
from kubeforge.objects import (
    CAPACITY_RESERVED, DEVICE_CLASS_NOT_FOUND, INVALID_SPEC, POOL_NOT_FOUND, PREEMPTING, QUOTA_EXCEEDED, TERMINAL_JOB_PHASES, UNSCHEDULABLE, WAITING_FOR_CAPACITY,
    Key, PlacementRecord, gpu_request_conflict,
)
from kubeforge.placement import GangRequest, NoFit, PendingGang, Placement, PoolIndex, Result, place_gang


@dataclass(frozen=True)
class Admit:
    """A gang admitted: ``placement`` in ``pool`` (rank i on ``placement.nodes[i]``)."""

    key: Key
    pool: str
    placement: Placement


@dataclass(frozen=True)
class Wait:
    """A gang that waits, and why: ``reason`` is the ``Admitted=False`` reason (a constant of
    :mod:`kubeforge.objects`: :data:`~kubeforge.objects.PREEMPTING`,
    :data:`~kubeforge.objects.WAITING_FOR_CAPACITY`...), ``message`` the text for people."""

    key: Key
    reason: str
    message: str


@dataclass(frozen=True)
class Preempt:
    """A gang that preempts ``victims`` in ``pool`` and is nominated ``gpus_by_node`` there: it
    waits (``Preempting``) until their GPUs are free, and nobody else gets them meanwhile."""

    key: Key
    pool: str
    victims: tuple[Victim, ...]
    gpus_by_node: Mapping[str, int]


@dataclass(frozen=True)
class AdmissionRules:
    """The order a round tries waiting gangs in and how it chooses victims: kubeforge's own by
    default, which is all the runtime ever uses. A documented seam for benches and tests that
    replay the same arrivals under other rules (``e2e/bench/preemption.py``: kubeforge's old
    priority-only queue, Kueue's victim order; ``e2e/bench/nvl72.py``: a topology-blind victim
    choice), passed to :func:`~kubeforge.admission.plan_admission`.

    Attributes:
        entry_order: ``(queue, borrows) -> queue``, as :func:`~kubeforge.admission.entry_order`.
        choose_victims: Called as :func:`~kubeforge.admission.choose_victims` is, with the same
            arguments and the same answer: ``(victims, placement)`` or None.
        queueing: One queueing strategy for every pool (``e2e/bench/backfill.py`` compares
            BestEffortFIFO, StrictFIFO and Backfill on the same arrivals), or None: each pool's
            own, from its ``spec.reservations`` (:func:`~kubeforge.admission.pool_strategy`).
        memo_fits: Whether a round remembers each "no room" answer of the plain fit and gives
            it again, without placing, to a later gang of the same request in the same pool while
            nothing in the pool's GPU resource was promised or released since and the same
            reservations hold against it (:meth:`Round.fit`): the same inputs, so the same answer.
            False: every gang is placed (the same plan, more CPU; tests compare the two).
        index_fits: Whether the plain fit of a gang against what the round promised so far goes
            through the pool's :class:`~kubeforge.placement.PoolIndex` (candidates and domain
            totals kept from gang to gang, the nodes that changed refreshed) instead of
            :func:`~kubeforge.placement.place_gang` over every node: the same answer without the
            O(nodes) work per gang. False: ``place_gang`` (tests compare the two).
    """

    entry_order: Callable[[Sequence[PendingGang], Callable[[PendingGang], bool]], list[PendingGang]] = entry_order
    choose_victims: Callable[..., tuple[list[Victim], Placement] | None] = choose_victims
    queueing: QueueingStrategy | None = None
    memo_fits: bool = True
    index_fits: bool = True


@dataclass
class Round:
    """The state one :func:`~kubeforge.admission.plan_admission` call threads through its
    decisions, so that nothing is promised twice within the round."""

    snapshot: Snapshot
    now: float
    ledgers: Mapping[str, Ledger]
    views: Mapping[str, PoolView]
    taken: dict[str, dict[str, int]] = field(default_factory=dict)
    books: dict[str, QuotaBook] = field(default_factory=dict)
    running: dict[str, RunningGangs] = field(default_factory=dict)  # per pool, grouped for the preemption try
    in_flight: set[Key] = field(default_factory=set)
    rules: AdmissionRules = field(default_factory=AdmissionRules)
    reserved_before: Mapping[Key, frozenset[str]] = field(default_factory=dict)
    queue: QueueBook = field(init=False)
    versions: dict[str, int] = field(default_factory=dict)  # per resource: moves with every change of taken
    nofits: dict[tuple, NoFit] = field(default_factory=dict)  # the round's "no room" answers (see fit)
    indexes: dict[str, tuple[str, PoolIndex]] = field(default_factory=dict)  # per pool: (resource, index)
    indexes_before: Mapping[str, tuple[str, PoolIndex]] = field(default_factory=dict)  # an earlier round's

    def __post_init__(self) -> None:
        self.queue = QueueBook(self.snapshot, self.views, self.now, self.rules.queueing, previous=self.reserved_before)
        self.taken = {r: {} for r in self.ledgers}
        for name, pool in self.snapshot.pools.items():
            self.books[name] = quota_book(pool, self.views[name], self.ledgers[pool_resource(pool)])
            self.running[name] = RunningGangs()
        for job in self.snapshot.jobs.values():
            pl = job.placement
            if pl is not None and pl.pool in self.running and job.phase not in TERMINAL_JOB_PHASES:
                self.running[pl.pool].append(job)
        self.in_flight = set(self.snapshot.preempting)
        for key, (pool, by_node) in self.snapshot.nominations.items():  # promised to preemptors
            view = self.views.get(pool)
            if view is not None:
                self._add(view.resource, by_node)

    def _add(self, resource: str, by_node: Mapping[str, int], sign: int = 1) -> None:
        self.versions[resource] = self.versions.get(resource, 0) + 1  # every "no room" answer of it is stale
        into = self.taken.setdefault(resource, {})
        for n, g in by_node.items():
            into[n] = into.get(n, 0) + sign * g
        for of, index in self.indexes.values():
            if of == resource:
                index.changed(by_node)

    def preemption_signature(self, pool: str) -> tuple:
        """What decides whether a gang could preempt in ``pool``: the lowest priority running
        there and the teams that borrow (an :class:`AdmissionMemo` answer is stale when it moves)."""
        prios = [j.record.spec.priority for j in self.running.get(pool, []) if j.record.spec is not None]
        book = self.books.get(pool)
        borrowing = frozenset(t for t in (book.used if book else {}) if book.borrowed(t) > 0) if book else frozenset()
        return (min(prios, default=None), borrowing)

    def borrows(self, job: JobView, gpus: int) -> bool:
        """Whether admitting ``gpus`` for ``job`` in its first pool would make its team borrow
        (as the round starts). Kueue's scheduler orders entries that fit within nominal quota
        first (``entryOrdering`` in kueue/pkg/scheduler/scheduler.go)."""
        spec = job.record.spec
        book = self.books.get(spec.pools[0]) if spec is not None and spec.pools else None
        return book is not None and book.borrowed(book.team(job.record.namespace), gpus) > 0

    def place(self, job: JobView, request: GangRequest, pools: list[str], allowed: list[str]) -> Admit | Wait | Preempt:
        """Place a gang in the first of its pools with room; else preempt in the first allowed
        pool where the rules permit it (Kueue's TryNextFlavor: other pools are tried without
        preempting first); else say why it waits."""
        own = self.snapshot.nominations.get(job.key)
        if own is None or own[0] not in self.views:
            return self._place(job, request, pools, allowed)
        pool, by_node = own
        view = self.views[pool]
        request = self._request(job, request, view)
        self._add(view.resource, by_node, -1)  # its own nomination is its to use
        result = self._place_on(view, request, self.taken[view.resource])
        if isinstance(result, Placement):
            self._admit(job, pool, result)
            return Admit(job.key, pool, result)
        self._add(view.resource, by_node)
        # Its victims still hold their GPUs (checkpointing in their grace period): wait for
        # them, never pick more.
        return Wait(job.key, PREEMPTING, f"waiting for the GPUs of the jobs it preempted in pool {pool} to be freed")

    def _place(self, job: JobView, request: GangRequest, pools: list[str], allowed: list[str]) -> Admit | Wait | Preempt:
        ns = job.record.namespace
        notes: list[str] = []
        missing = 0  # notes that say a pool does not exist
        unavailable = 0  # notes that say a pool can place nothing (its DeviceClass is missing)
        over_quota = False  # a pool's quota refused the gang
        permanent_everywhere = True
        tried: list[str] = []
        start = pools.index(allowed[0])
        for i in range(start, len(pools)):
            name = pools[i]
            if name not in allowed and not permanent_everywhere:
                break  # waits for fallbackAfterSeconds before trying the next pool
            tried.append(name)
            view = self.views.get(name)
            if view is None:
                missing += 1
                notes.append(f"GPUPool {name!r} does not exist")
                continue
            blocker = self.queue.blocker(name)
            if blocker is not None:  # StrictFIFO: nothing goes ahead of the gang that waits there
                permanent_everywhere = False
                why = f"StrictFIFO: behind {blocker[0]}/{blocker[1]}, which waits for capacity"
                notes.append(f"pool {name}: {why}" if len(pools) > 1 else why)
                continue
            if view.unavailable is not None:
                unavailable += 1
                permanent_everywhere = False  # installing the driver (or the class) lets it in
                notes.append(f"pool {name}: {view.unavailable[1]}" if len(pools) > 1 else view.unavailable[1])
                continue
            spec = job.record.spec
            conflict = gpu_request_conflict(spec.template.spec, spec.gpus_per_replica, view.resource)  # type: ignore[union-attr]
            if conflict:
                return Wait(job.key, INVALID_SPEC, conflict)
            req = self._request(job, request, view)
            refusal = self.books[name].refusal(ns, req.gpus)
            if refusal:
                permanent_everywhere = False
                over_quota = True
                notes.append(f"pool {name}: {refusal}" if len(pools) > 1 else refusal)
                continue
            result = self.fit(job, req, view)
            if isinstance(result, Placement):
                self._admit(job, name, result)
                return Admit(job.key, name, result)
            nofit: NoFit = result
            permanent_everywhere = permanent_everywhere and nofit.permanent
            why = missing_gpus(view) or nofit.reason
            notes.append(f"pool {name}: {why}" if len(pools) > 1 else why)
        for name in tried:
            view = self.views.get(name)
            pre = self._preempt(job, self._request(job, request, view), name) \
                if view is not None and view.unavailable is None and self.queue.blocker(name) is None else None
            if pre is not None:
                return pre
        if missing == len(notes):
            return Wait(job.key, POOL_NOT_FOUND, "; ".join(notes))
        if unavailable and missing + unavailable == len(notes):
            return Wait(job.key, DEVICE_CLASS_NOT_FOUND, "; ".join(notes))
        if over_quota:
            return Wait(job.key, QUOTA_EXCEEDED, "; ".join(notes))
        reason = UNSCHEDULABLE if permanent_everywhere and tried and tried[-1] == pools[-1] else WAITING_FOR_CAPACITY
        return Wait(job.key, reason, "; ".join(notes))

    def fit(self, job: JobView, request: GangRequest, view: PoolView) -> Placement | NoFit:
        """:func:`~kubeforge.placement.place_gang` of ``request`` for ``job`` in ``view`` against
        what the round has taken so far and the reservations that hold against the job.

        Within a round a :class:`~kubeforge.placement.NoFit` is remembered under the pool, the
        request (replicas, GPUs, topology, tolerations, node filter, needs: the whole
        :class:`~kubeforge.placement.GangRequest`), the version of the resource's ``taken``
        (:meth:`_add` moves it on every promise, nomination or release) and which reservations
        hold against the job (:meth:`QueueBook.holding`): a later gang with the same key has
        exactly the same inputs, so it gets the same answer (its reason and message included)
        without the O(nodes) search. Only the plain fit is skipped: the caller still tries
        preemption and reservations for it. Off with ``rules.memo_fits=False``.
        """
        taken = self.taken[view.resource]
        if not self.rules.memo_fits:
            return self._place_on(view, request, self.queue.usable(view, job, taken))
        key = (view.name, request, self.versions.get(view.resource, 0), self.queue.holding(view, job))
        hit = self.nofits.get(key)
        if hit is not None:
            return hit
        result = self._place_on(view, request, self.queue.usable(view, job, taken))
        if isinstance(result, NoFit):
            self.nofits[key] = result
        return result

    def _place_on(self, view: PoolView, request: GangRequest, reserved: Mapping[str, int]) -> Result:
        """``place_gang(request, view.nodes, view.levels, reserved)``: through the pool's
        :class:`~kubeforge.placement.PoolIndex` when ``reserved`` is the round's own ``taken``
        of the resource (no reservation holds against the gang: the index follows ``taken``
        through :meth:`_add`, the only writer of it while gangs are decided), else directly."""
        taken = self.taken[view.resource]
        if not self.rules.index_fits or reserved is not taken:
            return place_gang(request, view.nodes, view.levels, reserved)
        got = self.indexes.get(view.name)
        if got is None:
            got = self.indexes_before.get(view.name)
            if got is None or got[0] != view.resource or not got[1].rebase(view.nodes, view.levels, taken):
                got = (view.resource, PoolIndex(view.nodes, view.levels, taken))
            self.indexes[view.name] = got
        return got[1].place(request)

    @staticmethod
    def _request(job: JobView, request: GangRequest, view: PoolView) -> GangRequest:
        """``request`` (made for the default GPU resource) for the pool of ``view``: what one rank
        holds depends on which resource the pool counts, and a multi-node NVLink gang of a DRA
        pool takes whole free nodes of a clique (:func:`~kubeforge.admission.nvlink_request`)."""
        if view.resource != DEFAULT_GPU_RESOURCE_NAME:
            request = gang_request(job.record, view.resource)
        return nvlink_request(request, view)

    def after_wait(self, job: JobView, request: GangRequest, allowed: list[str], wait: Wait,
                   waited: float = 0.0) -> Wait | Preempt:
        """A gang that waits for capacity in ``allowed``: it blocks its StrictFIFO pools and may get
        a reservation in its Backfill ones (:meth:`QueueBook.after_wait`); returns the wait to
        report (reason ``CapacityReserved`` when it got one), or, when the reservation's pool lets
        a gang that ``waited`` that many seconds preempt for it, the preemption
        (:meth:`_preempt_for_reservation`)."""
        got = self.queue.after_wait(job, allowed, lambda view: self._request(job, request, view),
                                    lambda view: self.taken[view.resource], lambda pool: self.running.get(pool, ()),
                                    wait, lambda view: self._stoppable(job, request, view, waited))
        if got.reason != CAPACITY_RESERVED:
            return got
        return self._preempt_for_reservation(job, request, waited) or got

    def _stoppable(self, job: JobView, request: GangRequest, view: PoolView, waited: float) -> dict[Key, float] | None:
        """The jobs ``job`` may stop for a reservation in ``view`` and when
        (:func:`stoppable_jobs`), or None when it may not preempt there yet (:func:`may_preempt`)."""
        if not may_preempt(self.snapshot.pools.get(view.name), waited):
            return None
        req = self._request(job, request, view)
        return stoppable_jobs(job, req.gpus, view, self.books[view.name], self.running.get(view.name, ()),
                              frozenset(self.in_flight), self.now)

    def _preempt_for_reservation(self, job: JobView, request: GangRequest, waited: float) -> Preempt | None:
        """The reserved gang preempts the jobs on its reserved domain when its pool's
        ``preemptAfterSeconds`` is set and it waited that long
        (:mod:`kubeforge.admission._reservation_preemption`); its reservation is then given up (its
        nomination holds the GPUs instead, and the slot goes to the next gang). When no victims
        make room yet (jobs there younger than ``minRuntimeSeconds``), its reservation holds every
        free GPU of its nodes (:func:`hold_all`): nothing new lands there to be protected in turn."""
        r = self.queue.reservation_of(job.key)
        if r is None or not may_preempt(self.snapshot.pools.get(r.pool), waited):
            return None
        view, book = self.views[r.pool], self.books[r.pool]
        req = self._request(job, request, view)
        self.queue.release(r)
        args = (job, req, r, view, book, self.running[r.pool], self.queue.usable(view, job, self.taken[view.resource]),
                frozenset(self.in_flight), self.now)
        chosen = reservation_victims(*args)
        if chosen is None:  # while only minRuntimeSeconds protects the domain, nothing more lands on its free GPUs
            self.queue.restore(hold_all(r, view, self.taken[view.resource]) if only_protected(*args) else r)
            return None
        victims, placement = chosen
        self.in_flight.update(v.key for v in victims)
        self._add(view.resource, placement.gpus_by_node)  # nominated: nobody else takes them this round
        return Preempt(job.key, r.pool, tuple(victims), dict(placement.gpus_by_node))

    def _admit(self, job: JobView, pool: str, placement: Placement) -> None:
        view = self.views[pool]
        self._add(view.resource, placement.gpus_by_node)
        book = self.books[pool]
        team = book.team(job.record.namespace)
        book.used[team] = book.used.get(team, 0) + placement.gpus
        held = PlacementRecord(pool, placement.nodes, placement.level, placement.domain, placement.reason)
        self.running[pool].append(JobView(job.record, job.status, held))
        self.in_flight.add(job.key)  # never a victim in the round that admitted it

    def _preempt(self, job: JobView, request: GangRequest, pool: str) -> Preempt | None:
        view, book = self.views.get(pool), self.books.get(pool)
        if view is None or book is None or book.refusal(job.record.namespace, request.gpus):
            return None
        chosen = self.rules.choose_victims(job, request, view, book, self.running[pool],
                                           self.queue.usable(view, job, self.taken[view.resource]),
                                           frozenset(self.in_flight), self.now)
        if chosen is None:
            return None
        victims, placement = chosen
        self.in_flight.update(v.key for v in victims)
        self._add(view.resource, placement.gpus_by_node)  # nominated: nobody else takes them this round
        return Preempt(job.key, pool, tuple(victims), dict(placement.gpus_by_node))
