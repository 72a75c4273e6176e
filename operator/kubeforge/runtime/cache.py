"""The operator's memory: one object, one ``forget(key)``, composed of small parts.

- :class:`~kubeforge.runtime.cache_reader.IndexReader`: the indexes mirror the cluster from
  watches: pods, claims and nodes through the informer (:mod:`kubeforge.runtime.informer`),
  our objects, storage classes and the rest through kopf (:mod:`kubeforge.runtime.indexes`);
  nothing here lists the cluster per reconcile.
- :class:`~kubeforge.runtime.cache_overlay.StatusOverlay`: the status this process last wrote
  for an object, until the index has caught up with that write (by resourceVersion), so no
  decision acts on a lagging copy (that is how two jobs could otherwise get the same GPUs).
- :class:`~kubeforge.runtime.cache_assumptions.Assumptions` (``cache.assumptions``): placements
  admission decided that the job's status (a service's ``status.groups``) does not show yet;
  they hold GPUs in the ledger meanwhile (Kueue's assume).
- :class:`~kubeforge.runtime.cache_expectations.Expectations` (``cache.expectations``): pods
  this process created or deleted that the index does not show yet, so a reconcile that runs
  before the watch catches up does not create or delete them again (the Job controller's).
- :class:`~kubeforge.runtime.cache_handoffs.HandOffs` (``cache.handoffs``): waiting reasons,
  create errors, nominations and stop requests, handed from where they are seen to the
  object's reconcile.
- :class:`~kubeforge.runtime.cache_events.HeldEvents` (``cache.held_events``): the Events
  that narrate a status write, until its answer.
- :class:`~kubeforge.runtime.cache_snapshot.Snapshotter`: the admission round's snapshot.
- Here: each InferenceService's autoscaler memory, the last round's views and ledgers, the
  activator's addresses, the namespaces' workers Services.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, NamedTuple

from kubeforge.admission import AdmissionMemo, JobView, Ledger, PoolView, Snapshot, build_ledger, pool_resource, pool_view
from kubeforge.objects import Key, PlacementRecord, Record, TrainingJobRecord
from kubeforge.runtime.admission_latency import AdmissionClock
from kubeforge.runtime.cache_assumptions import ASSUME_TTL, Assumptions
from kubeforge.runtime.cache_events import HeldEvents
from kubeforge.runtime.cache_expectations import EXPECTATION_TTL, Expectations
from kubeforge.runtime.cache_handoffs import NOMINATION_TTL, HandOffs
from kubeforge.runtime.cache_keys import service_key
from kubeforge.runtime.cache_overlay import StatusOverlay
from kubeforge.runtime.cache_reader import IndexReader
from kubeforge.runtime.cache_snapshot import Snapshotter
from kubeforge.runtime.watch_echo import WatchEcho

__all__ = ["ASSUME_TTL", "EARLY_VIEW_SECONDS", "EXPECTATION_TTL", "NOMINATION_TTL", "SERVICE_RECHECK", "Cache",
           "RoundSeen", "service_key"]

SERVICE_RECHECK = 600.0
"""Seconds the namespace's shared workers Service is taken as present once created (there is
no watch of Services): after that the next gang creates it again, so one deleted by hand
comes back (a 409 when it is still there)."""

EARLY_VIEW_SECONDS = 1.0
"""Seconds a pool's view built before the first admission round is reused (:meth:`Cache.view`),
as long as a round normally goes between two (``runtime/admission.py: ROUND_INTERVAL``). Each
build reads the whole cluster (snapshot, ledger, view): at 5,000 nodes about a quarter of a
second, and a restart's first reconciles of 2,000 running jobs asked for two each
(2026-12-07, e2e/README-scale-bench.md)."""


class RoundSeen(NamedTuple):
    """What the last admission round started from (:meth:`Cache.last_round`).

    Attributes:
        count: Rounds done by this process so far.
        snapshot: The snapshot it decided on (None: not kept).
        views: Each pool's view before the round's admissions.
        ledgers: Each GPU resource's ledger before them (``plan.ledgers_before``).
    """

    count: int
    snapshot: Snapshot | None
    views: Mapping[str, PoolView]
    ledgers: Mapping[str, Ledger]


def _monotonic() -> float:
    """Every part's clock: ``time.monotonic`` as this module sees it (a test that sets this
    module's ``time`` moves the clock of every part at once)."""
    return time.monotonic()


@dataclass
class Cache(IndexReader):
    """Everything the loops share; one instance per operator process.

    It reads the indexes (its :class:`~kubeforge.runtime.cache_reader.IndexReader` methods:
    ``job``, ``job_pods``, ``node``, ``claim``...) and composes the books; each part keeps its
    own invariants in its docstring (Kueue's scheduler cache, ``pkg/cache``, and
    controller-runtime's ``ControllerExpectations`` are the models). What spans parts is here:

    - :meth:`assume` books a placement and ends the job's wait in one step.
    - :meth:`forget` / :meth:`forget_service` drop everything held about one object, in every
      part (a service's shared books under :func:`service_key`).
    - :meth:`snapshot` reads the indexes through our own writes and assumptions;
      :meth:`view` is the last round's view of a pool (or a fresh one before any round).

    Attributes:
        assumptions: Assumed placements and groups (assume → write → confirm or forget).
        expectations: Creates and deletes sent and not seen yet.
        handoffs: Waits, create refusals, nominations and stop requests.
        held_events: The Events each status write narrates, until its answer.
        admission_memo: What admission reuses from round to round.
        admission_clock: Each admission's stage times, for the operator's histograms.
        echo: The TrainingJob status writes the watch has not echoed yet (a stalled watch stops
            the operator: :mod:`~kubeforge.runtime.watch_echo`).
    """

    assumptions: Assumptions = field(default_factory=lambda: Assumptions(_monotonic))
    expectations: Expectations = field(default_factory=lambda: Expectations(_monotonic))
    handoffs: HandOffs = field(default_factory=lambda: HandOffs(_monotonic))
    held_events: HeldEvents = field(default_factory=HeldEvents)
    admission_memo: AdmissionMemo = field(default_factory=AdmissionMemo)
    admission_clock: AdmissionClock = field(default_factory=lambda: AdmissionClock(_monotonic))
    echo: WatchEcho = field(default_factory=lambda: WatchEcho(_monotonic))
    _overlay: StatusOverlay = field(default_factory=lambda: StatusOverlay(_monotonic))
    _snapshots: Snapshotter = field(init=False, repr=False, compare=False)
    _services_made: dict[str, float] = field(default_factory=dict)
    _round_views: dict[str, PoolView] = field(default_factory=dict)
    _early_views: dict[str, tuple[float, PoolView | None]] = field(default_factory=dict)
    _ledgers: dict[str, Ledger] = field(default_factory=dict)
    _round: RoundSeen = RoundSeen(0, None, {}, {})
    _activator: tuple[tuple[str, ...], int | None] = ((), None)
    _serving: dict[Key, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._snapshots = Snapshotter(self, self._overlay, self.assumptions, self.handoffs)

    # --- the status overlay -------------------------------------------------------------------

    def remember(self, key: Hashable, written: Mapping[str, Any] | None) -> None:
        """Record an object as the API server returned it after our status write (``None``:
        it is gone)."""
        self._overlay.remember(key, written)

    def own_write(self, key: Hashable, resource_version: str) -> bool:
        """Whether ``resource_version`` is the version our last status write of ``key`` made
        (the watch event that echoes it): the reconcile that wrote it decided on everything
        that version holds, so the echo needs no reconcile of its own."""
        return self._overlay.own_write(key, resource_version)

    def effective(self, key: Hashable, rec: Record) -> Record:
        """``rec`` with the status to act on: our own last write until the index has caught up
        with it (resourceVersions compared as integers, as the API server's watch cache does)."""
        return self._overlay.effective(key, rec)

    # --- across parts -------------------------------------------------------------------------

    def assume(self, key: Key, placement: PlacementRecord) -> None:
        """Admission gave ``key`` this placement: its GPUs are booked in every ledger from now
        on (:meth:`Assumptions.assume <kubeforge.runtime.cache_assumptions.Assumptions.assume>`),
        and the job no longer waits."""
        self.assumptions.assume(key, placement)
        self.handoffs.stop_waiting(key)
        self.admission_clock.decided(key)

    def forget(self, key: Key) -> None:
        """Drop everything held about one TrainingJob (it was deleted)."""
        self._overlay.forget(key)
        self.assumptions.forget(key)
        self.expectations.forget(key)
        self.handoffs.forget(key)
        self._snapshots.forget(key)
        self.held_events.drop(key)
        self.admission_clock.forget(key)
        self.echo.forget(key)

    def forget_service(self, key: Key) -> None:
        """Drop everything held about one InferenceService (it was deleted): its own books under
        ``key``, the shared ones under :func:`service_key`."""
        self._serving.pop(key, None)
        self.handoffs.forget_service(key)
        sk = service_key(key)
        self._overlay.forget(sk)
        self.expectations.forget(sk)
        self.held_events.drop(sk)
        self.assumptions.forget_service(key)

    def job_view(self, rec: TrainingJobRecord) -> JobView:
        """The job as admission sees it; reused while neither the index's record, our own last
        write nor the assumed placement changed (every round asks for every job)."""
        return self._snapshots.job_view(rec)

    def snapshot(self) -> Snapshot:
        """Everything an admission round reads, from the indexes and this process's memory."""
        return self._snapshots.snapshot()

    # --- the admission round ------------------------------------------------------------------

    def round_done(self, views: Mapping[str, PoolView], ledgers: Mapping[str, Ledger],
                   snapshot: Snapshot | None = None, before: Mapping[str, Ledger] | None = None) -> None:
        """Keep what the last admission round saw: each pool's view, each resource's ledger
        after the round's admissions and, when given, the snapshot it decided on and the
        ledgers it started from (:meth:`last_round`); every call counts one round."""
        self._round_views = dict(views)
        self._early_views.clear()
        self._ledgers = dict(ledgers)
        self._round = RoundSeen(self._round.count + 1, snapshot, dict(views), dict(before or {}))

    def last_round(self) -> RoundSeen:
        """The rounds done so far and what the last one started from: the GPUPool status loop
        makes the pools' status of it when a round ran since its last pass
        (:mod:`kubeforge.runtime.pools`), instead of a second snapshot and ledger."""
        return self._round

    def ledger(self, resource: str) -> Ledger | None:
        """The last round's ledger of ``resource`` (e.g. ``nvidia.com/gpu``)."""
        return self._ledgers.get(resource)

    def view(self, pool: str) -> PoolView | None:
        """The pool as the last admission round saw it (its levels, tolerations, resource);
        None for a pool that does not exist. Before the first round (or for a pool it did
        not see), one built from the cluster now, reused for :data:`EARLY_VIEW_SECONDS`."""
        if pool in self._round_views:
            return self._round_views[pool]
        now = _monotonic()
        early = self._early_views.get(pool)
        if early is not None and now - early[0] < EARLY_VIEW_SECONDS:
            return early[1]
        rec = self.pool(pool)
        view = None
        if rec is not None:
            snap = self.snapshot()
            view = pool_view(rec, snap.nodes, build_ledger(snap, pool_resource(rec)).per_node,
                             device_classes=snap.device_classes)
        self._early_views[pool] = (now, view)
        return view

    # --- the namespaces' workers Services -----------------------------------------------------

    def workers_service_made(self, namespace: str) -> bool:
        """Whether the namespace's workers Service was created (or found) in the last
        :data:`SERVICE_RECHECK` seconds."""
        t = self._services_made.get(namespace)
        return t is not None and time.monotonic() - t < SERVICE_RECHECK

    def workers_service_sent(self, namespace: str) -> None:
        """The namespace's workers Service is being created now: concurrent reconciles in the
        namespace do not try too (each would get a 409)."""
        self._services_made[namespace] = time.monotonic()

    def workers_service_failed(self, namespace: str) -> None:
        """Its create failed: the next gang tries again."""
        self._services_made.pop(namespace, None)

    # --- serving memory, the activator --------------------------------------------------------

    def service_memory(self, key: Key, make: Callable[[], Any]) -> Any:
        """The autoscaler's memory of InferenceService ``key`` (made by ``make`` the first
        time)."""
        mem = self._serving.get(key)
        if mem is None:
            mem = self._serving[key] = make()
        return mem

    def known_service_memory(self, key: Key) -> Any | None:
        """The memory of ``key`` if it has one."""
        return self._serving.get(key)

    def services_remembered(self) -> list[Key]:
        """Every InferenceService with autoscaler memory."""
        return list(self._serving)

    @property
    def activator(self) -> tuple[tuple[str, ...], int | None]:
        """The activator's ready addresses and port, as last read."""
        return self._activator

    def set_activator(self, found: tuple[tuple[str, ...], int | None]) -> bool:
        """Record the activator's addresses; True when they changed."""
        if found == self._activator:
            return False
        self._activator = found
        return True
