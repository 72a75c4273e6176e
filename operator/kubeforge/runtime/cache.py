"""The operator's memory: one object, one ``forget(key)``.

- Indexes mirror the cluster from watches: pods, claims and nodes through the informer
  (:mod:`kubeforge.runtime.informer`), our objects, storage classes and the rest through
  kopf (:mod:`kubeforge.runtime.indexes`); nothing here lists the cluster per reconcile.
- The status overlay holds the status this process last wrote for an object until the index
  has caught up with that write (by resourceVersion), so no decision acts on a lagging copy
  (that is how two jobs could otherwise get the same GPUs).
- Assumed placements: admission decided them, the job's status (a service's ``status.groups``)
  does not show them yet; they hold GPUs in the ledger meanwhile (Kueue's assume).
- Expectations: pods this process created or deleted that the index does not show yet, so
  a reconcile that runs before the watch catches up does not create or delete them again
  (the Job controller's expectations).
- Create errors and waiting reasons, handed from where they are seen to the job's reconcile.
- Each InferenceService's autoscaler memory (``serving``).
- Preemptions in flight: GPUs nominated to a preemptor until its victims are gone, and each
  victim's pending stop (its reconcile writes it).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping

from kubeforge.admission import (
    AdmissionMemo, AssumedGroup, JobView, Ledger, PoolView, Snapshot, build_ledger, pool_resource, pool_view,
)
from kubeforge.lifecycle import CreateError
from kubeforge.objects import (
    ClaimView, ComputeDomainView, inventory, DeploymentState, InferenceServiceRecord, Key, Node, PlacementRecord, Pod, PoolRecord, Record, TrainingJobRecord,
    placement_of,
)

EXPECTATION_TTL = 60.0
"""Seconds an expectation (a create or delete not yet seen in the index) is trusted."""
ASSUME_TTL = 120.0
"""Seconds an assumed placement may wait for its status write before it is dropped. Never
while that write is in flight (:attr:`Cache.writing`): dropped then, its GPUs would look free
to the next admission round while the write puts the placement on record anyway."""
SERVICE_RECHECK = 600.0
"""Seconds the namespace's shared workers Service is taken as present once created (there is
no watch of Services): after that the next gang creates it again, so one deleted by hand
comes back (a 409 when it is still there)."""
NOMINATION_TTL = 600.0
"""Seconds GPUs stay promised to a preemptor while its victims checkpoint and stop; then it
may preempt again (a victim whose pods never go away must not hold it forever)."""


def _rv(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _changed(old: Mapping[Key, Any], new: Mapping[Key, Any]) -> list[Key]:
    """The keys of ``new`` whose value is not the one in ``old``."""
    return [k for k, v in new.items() if old.get(k) != v]


@dataclass
class _Overlay:
    written_at: float
    rv: str | None
    status: dict[str, Any]


def service_key(key: Key) -> tuple[str, str, str]:
    """The key of an InferenceService in the books that TrainingJobs use too (our own last
    status write, a status write in flight, expected creates and deletes, held Events):
    ``("InferenceService", namespace, name)``. A job's entries there are keyed by
    ``(namespace, name)``, so a TrainingJob and an InferenceService of the same name in one
    namespace never read each other's: once they did, and the service's status write made the
    job look unplaced to the next admission round, which placed it a second time."""
    return ("InferenceService", key[0], key[1])


@dataclass
class Cache:
    """Everything the loops share; one instance per operator process.

    Its state is private: the loops read and change it only through the methods below, which
    keep its invariants in one place (Kueue's scheduler cache, ``pkg/cache/scheduler/cache.go``,
    and controller-runtime's ``ControllerExpectations`` are the models):

    - **assume → write → confirm or forget.** :meth:`assume` books an admitted gang's GPUs at
      once; :meth:`status_write` brackets the write that puts it on record (an assumption never
      expires while that write is in flight); :meth:`confirm` drops the assumption once the
      written status holds it (the overlay then carries it until the index does);
      :meth:`forget_assumed` drops it when the write was refused or the job went away;
      :meth:`renew_assumed` keeps it another :data:`ASSUME_TTL` when the write's answer was lost.
      Otherwise an assumption expires after :data:`ASSUME_TTL`.
    - **expectations.** :meth:`expect_created` / :meth:`expect_deleted` record writes sent;
      :meth:`pending_creates` / :meth:`pending_deletes` are those the index does not show yet
      (younger than :data:`EXPECTATION_TTL`); :meth:`created_observed` / :meth:`deleted_observed`
      lower one when the index shows it or the write failed.
    - **hand-offs** from where something is seen to the reconcile that acts on it: waiting
      reasons (:meth:`hand_waits`), create refusals (:meth:`create_refused`), preemption
      requests (:meth:`request_stop`), nominations (:meth:`nominate`).
    - **Events held for their write.** :meth:`hold_events` keeps the Events that narrate a status
      write until its answer: :meth:`take_events` after it (or when nothing needed writing),
      :meth:`drop_events` when it was refused or superseded (409). A write whose answer was lost
      may be on record: its Events wait for the next reconcile, which no longer sees the
      transition they narrate.
    - :meth:`forget` drops everything held about one object.
    """

    indexes: Any = None
    _overlay: dict[Hashable, _Overlay] = field(default_factory=dict)
    _assumed: dict[Key, tuple[PlacementRecord, float]] = field(default_factory=dict)
    _writing: set[Key] = field(default_factory=set)
    _created: dict[Key, dict[str, float]] = field(default_factory=dict)
    _deleted: dict[Key, dict[str, float]] = field(default_factory=dict)
    _create_errors: dict[Key, CreateError] = field(default_factory=dict)
    _waiting: dict[Key, tuple[str, str]] = field(default_factory=dict)
    _last_wait_write: dict[Key, float] = field(default_factory=dict)
    _services_made: dict[str, float] = field(default_factory=dict)
    _round_views: dict[str, PoolView] = field(default_factory=dict)
    _ledgers: dict[str, Ledger] = field(default_factory=dict)
    _assumed_groups: dict[tuple[Key, int], tuple[AssumedGroup, float]] = field(default_factory=dict)
    _serving_waits: dict[Key, tuple[str, str]] = field(default_factory=dict)
    _activator: tuple[tuple[str, ...], int | None] = ((), None)
    _serving: dict[Key, Any] = field(default_factory=dict)
    _nominations: dict[Key, tuple[str, dict[str, int], float]] = field(default_factory=dict)
    _stop_requests: dict[Key, tuple[str, str, float]] = field(default_factory=dict)
    _held_events: dict[Key, dict[tuple[str, str], tuple[str, float]]] = field(default_factory=dict)
    admission_memo: AdmissionMemo = field(default_factory=AdmissionMemo)
    _views: dict[Key, JobView] = field(default_factory=dict)

    def attach(self, indexes: Mapping[str, Any]) -> None:
        """Read the cluster from these kopf indexes (name -> index) from now on."""
        self.indexes = dict(indexes)

    # --- indexes ---------------------------------------------------------------------------------

    def _one(self, index: str, key: Hashable) -> Any | None:
        if self.indexes is None:
            return None
        idx = self.indexes.get(index)
        store = idx.get(key) if idx is not None else None
        return next(iter(store), None) if store else None

    def _many(self, index: str, key: Hashable) -> list[Any]:
        if self.indexes is None:
            return []
        idx = self.indexes.get(index)
        store = idx.get(key) if idx is not None else None
        return list(store) if store else []

    def _all(self, index: str) -> Iterator[tuple[Hashable, Any]]:
        if self.indexes is None:
            return
        idx = self.indexes.get(index)
        if idx is None:
            return
        for key in list(idx.keys()):
            for value in list(idx.get(key) or ()):
                yield key, value

    def job(self, key: Key) -> TrainingJobRecord | None:
        return self._one("kf_jobs", key)

    def service(self, key: Key) -> InferenceServiceRecord | None:
        return self._one("kf_services", key)

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

    def pool(self, name: str) -> PoolRecord | None:
        return self._one("kf_pools", name)

    def node(self, name: str) -> Node | None:
        return self._one("kf_nodes", name)

    def job_pods(self, key: Key) -> list[Pod]:
        return self._many("kf_pods", ("job",) + key)

    def service_pods(self, key: Key) -> list[Pod]:
        return self._many("kf_pods", ("svc",) + key)

    def _pods_of(self, kind: str) -> Iterator[Pod]:
        if self.indexes is None:
            return
        idx = self.indexes["kf_pods"]
        for key in list(idx.keys()):
            if key[0] == kind:
                yield from list(idx.get(key) or ())

    def jobs(self) -> Iterator[TrainingJobRecord]:
        return (v for _, v in self._all("kf_jobs"))

    def deployment(self, key: Key) -> DeploymentState | None:
        """The Deployment of an InferenceService."""
        return self._one("kf_deployments", key)

    def claim(self, key: Key) -> tuple[str, str] | None:
        """(phase, storageClassName) of a PersistentVolumeClaim, None when it does not exist."""
        return self._one("kf_claims", key)

    def binding_mode(self, storage_class: str) -> str | None:
        """``volumeBindingMode`` of a StorageClass, None when it does not exist."""
        return self._one("kf_storage_classes", storage_class)

    def namespace_terminating(self, namespace: str) -> bool:
        """Whether the namespace is being deleted (as the namespaces watch last showed it)."""
        return bool(self._one("kf_namespaces", namespace))

    def terminating_namespaces(self) -> frozenset[str]:
        """Every namespace being deleted."""
        return frozenset(k for k, _ in self._all("kf_namespaces"))  # type: ignore[misc]

    def view(self, pool: str) -> PoolView | None:
        """The pool as the last admission round saw it (its levels, tolerations, resource);
        built now when no round has run yet."""
        if pool in self._round_views:
            return self._round_views[pool]
        rec = self.pool(pool)
        if rec is None:
            return None
        snap = self.snapshot()
        return pool_view(rec, snap.nodes, build_ledger(snap, pool_resource(rec)).per_node)

    def resource_claim(self, key: Key) -> ClaimView | None:
        """An allocated ResourceClaim."""
        return self._one("kf_resource_claims", key)

    def compute_domain(self, key: Key) -> ComputeDomainView | None:
        """A ComputeDomain kubeforge made."""
        return self._one("kf_compute_domains", key)

    def job_compute_domains(self, key: Key) -> list[ComputeDomainView]:
        """The ComputeDomains kubeforge made for the job ``key`` (a scan of that index only: it
        holds one or two domains per multi-node NVLink gang)."""
        return [cd for (ns, _), cd in self._all("kf_compute_domains") if ns == key[0] and cd.job == key[1]]  # type: ignore[misc]

    def pools(self) -> dict[str, PoolRecord]:
        return {k: v for k, v in self._all("kf_pools")}  # type: ignore[misc]

    # --- the status overlay -------------------------------------------------------------------

    def remember(self, key: Hashable, written: Mapping[str, Any] | None) -> None:
        """Record an object as the API server returned it after our status write (``None``:
        it is gone)."""
        if written is None:
            self._overlay.pop(key, None)
            return
        rv = (written.get("metadata") or {}).get("resourceVersion")
        old = self._overlay.get(key)
        if old is not None and _rv(old.rv) is not None and _rv(rv) is not None and _rv(rv) < _rv(old.rv):  # type: ignore[operator]
            return  # two writes answered out of order: keep the newer one
        self._overlay[key] = _Overlay(time.monotonic(), rv, dict(written.get("status") or {}))

    def own_write(self, key: Hashable, resource_version: str) -> bool:
        """Whether ``resource_version`` is the version our last status write of ``key`` made
        (the watch event that echoes it): the reconcile that wrote it decided on everything
        that version holds, so the echo needs no reconcile of its own."""
        entry = self._overlay.get(key)
        return entry is not None and bool(resource_version) and entry.rv == resource_version

    def effective(self, key: Hashable, rec: Record) -> Record:
        """``rec`` with the status to act on: our own last write until the index has caught up
        with it (resourceVersions compared as integers, as the API server's watch cache does)."""
        entry = self._overlay.get(key)
        if entry is None:
            return rec
        seen, mine = _rv(rec.resource_version), _rv(entry.rv)
        if seen is not None and mine is not None and seen >= mine:
            self._overlay.pop(key, None)
            return rec
        if seen is None or mine is None:  # not comparable: trust our write for a while
            if time.monotonic() - entry.written_at > EXPECTATION_TTL:
                self._overlay.pop(key, None)
                return rec
        return replace(rec, status=entry.status, resource_version=entry.rv or rec.resource_version)

    # --- assumed placements: assume -> write -> confirm / forget ----------------------------------

    def assume(self, key: Key, placement: PlacementRecord) -> None:
        """Admission gave ``key`` this placement: its GPUs are booked in every ledger from now
        on, until :meth:`confirm`, :meth:`forget_assumed` or :data:`ASSUME_TTL` with no write in
        flight. The job no longer waits."""
        self._assumed[key] = (placement, time.monotonic())
        self._waiting.pop(key, None)

    def assumed_for(self, key: Key) -> PlacementRecord | None:
        """The placement assumed for ``key``, None when there is none or it expired (an
        assumption whose status write is in flight never expires: dropped then, its GPUs would
        look free to the next round while the write puts the placement on record anyway)."""
        entry = self._assumed.get(key)
        if entry is None:
            return None
        if key not in self._writing and time.monotonic() - entry[1] > ASSUME_TTL:
            self._assumed.pop(key, None)
            return None
        return entry[0]

    @contextmanager
    def status_write(self, key: Key) -> Iterator[None]:
        """Bracket a status write of ``key``: its assumed placement and groups do not expire
        while the write is in flight."""
        self._writing.add(key)
        try:
            yield
        finally:
            self._writing.discard(key)

    def renew_assumed(self, key: Key) -> None:
        """A write that carried the assumed placement got no answer: the placement may be on
        record already; hold its GPUs another :data:`ASSUME_TTL`, until the retry or the index
        says."""
        entry = self._assumed.get(key)
        if entry is not None:
            self._assumed[key] = (entry[0], time.monotonic())

    def confirm(self, key: Key) -> None:
        """The status just written holds the assumed placement (the overlay carries it until the
        index does): the assumption has done its work."""
        self._assumed.pop(key, None)

    def forget_assumed(self, key: Key) -> None:
        """Drop ``key``'s assumed placement: its write was refused, the job is gone, or the
        decision was taken back. Its GPUs are free to the next round."""
        self._assumed.pop(key, None)

    # --- expectations (controller-runtime's ControllerExpectations) -----------------------------

    @staticmethod
    def _expect(book: dict[Key, dict[str, float]], key: Key, names: Iterable[str]) -> None:
        now = time.monotonic()
        book.setdefault(key, {}).update({n: now for n in names})

    @staticmethod
    def _pending(book: dict[Key, dict[str, float]], key: Key) -> set[str]:
        entries = book.get(key)
        if not entries:
            return set()
        now = time.monotonic()
        for n in [n for n, t in entries.items() if now - t > EXPECTATION_TTL]:
            del entries[n]
        return set(entries)

    def expect_created(self, key: Key, names: Iterable[str]) -> None:
        """Objects ``key``'s reconcile is creating now (pods, claims, domains; a gate lift as
        ``ungate:<pod>``): not made again while the index does not show them."""
        self._expect(self._created, key, names)

    def expect_deleted(self, key: Key, names: Iterable[str]) -> None:
        """Objects ``key``'s reconcile is deleting now (pods; a domain as
        ``computedomain:<name>``): never taken for someone else's deletion, never deleted twice."""
        self._expect(self._deleted, key, names)

    def pending_creates(self, key: Key) -> set[str]:
        """Creates of ``key`` sent and not seen yet (younger than :data:`EXPECTATION_TTL`)."""
        return self._pending(self._created, key)

    def pending_deletes(self, key: Key) -> set[str]:
        """Deletes of ``key`` sent and not seen yet (younger than :data:`EXPECTATION_TTL`)."""
        return self._pending(self._deleted, key)

    def created_observed(self, key: Key, name: str) -> None:
        """The index showed ``name``, or its create failed: the expectation goes
        (controller-runtime's ``CreationObserved``). Left to its TTL, a name reused later (a
        group index added back after a scale-down) would be taken as created for a minute and
        never made."""
        entries = self._created.get(key)
        if entries is not None:
            entries.pop(name, None)

    def deleted_observed(self, key: Key, name: str) -> None:
        """The delete of ``name`` failed (or was seen): decided again on the next look."""
        entries = self._deleted.get(key)
        if entries is not None:
            entries.pop(name, None)

    # --- hand-offs to the reconciles ----------------------------------------------------------

    def hand_waits(self, waiting: Mapping[Key, tuple[str, str]]) -> list[Key]:
        """The round's waiting gangs, ``key -> (reason, message)``, replacing the last round's;
        returns the keys whose reason or message changed (their reconcile writes it)."""
        changed = _changed(self._waiting, waiting)
        self._waiting = dict(waiting)
        return changed

    def wait_of(self, key: Key) -> tuple[str, str] | None:
        """Why admission left ``key`` waiting in the last round, ``(reason, message)``."""
        return self._waiting.get(key)

    def wait_written(self, key: Key, now: float) -> None:
        """``key``'s waiting reason was written to its status at ``now`` (epoch seconds)."""
        self._last_wait_write[key] = now

    def last_wait_write(self, key: Key) -> float:
        """When ``key``'s waiting reason was last written (epoch seconds; 0 never)."""
        return self._last_wait_write.get(key, 0.0)

    def hand_serving_waits(self, waits: Mapping[Key, tuple[str, str]]) -> list[Key]:
        """As :meth:`hand_waits`, for InferenceServices whose replica groups wait."""
        changed = _changed(self._serving_waits, waits)
        self._serving_waits = dict(waits)
        return changed

    def serving_wait_of(self, key: Key) -> tuple[str, str] | None:
        """Why ``key``'s replica groups wait, ``(reason, message)``, from the last round."""
        return self._serving_waits.get(key)

    def create_refused(self, key: Key, error: CreateError) -> None:
        """A create for ``key`` was refused for good (422, 403...): its next decision releases
        the GPUs and says why (:class:`~kubeforge.lifecycle.CreateError`)."""
        self._create_errors[key] = error

    def create_error(self, key: Key) -> CreateError | None:
        """The refusal :meth:`create_refused` handed to ``key``'s next decision."""
        return self._create_errors.get(key)

    def clear_create_error(self, key: Key) -> None:
        """A new attempt or placement is on record: the old refusal no longer applies."""
        self._create_errors.pop(key, None)

    # --- preemption: nominations and stop requests ----------------------------------------------

    def nominate(self, key: Key, pool: str, gpus_by_node: Mapping[str, int]) -> None:
        """GPUs promised to the preemptor ``key`` while its victims stop (for at most
        :data:`NOMINATION_TTL` seconds): no other gang takes them meanwhile."""
        self._nominations[key] = (pool, dict(gpus_by_node), time.monotonic())

    def keep_nominations(self, live: Iterable[Key]) -> None:
        """Drop every nomination but those of ``live`` (preemptors still waiting for victims)."""
        keep = set(live)
        for key in [k for k in self._nominations if k not in keep]:
            del self._nominations[key]

    def request_stop(self, victim: Key, reason: str, message: str, lost_gpu_seconds: float) -> None:
        """Ask ``victim``'s reconcile to stop it (preempted: ``reason`` and ``message`` go to its
        status and Event)."""
        self._stop_requests[victim] = (reason, message, lost_gpu_seconds)

    def stop_request(self, key: Key) -> tuple[str, str] | None:
        """``(reason, message)`` of the stop asked of ``key``, None when none is."""
        entry = self._stop_requests.get(key)
        return entry[:2] if entry is not None else None

    def stop_done(self, key: Key) -> None:
        """The stop is on record (a new attempt), or ``key`` holds nothing left to stop."""
        self._stop_requests.pop(key, None)

    # --- Events held for the status write they narrate -------------------------------------------

    def hold_events(self, key: Key, events: Iterable[tuple[str, str, str]], now: float) -> None:
        """Keep ``events`` (``(type, reason, message)``, decided at ``now``, epoch seconds) until
        the status write that puts their decision on record answers. Events still held from a
        write whose answer was lost stay, but one with the same type and reason is replaced by
        the newer decision's."""
        held = self._held_events.setdefault(key, {})
        for type_, reason, message in events:
            held.pop((type_, reason), None)
            held[(type_, reason)] = (message, now)
        if not held:
            del self._held_events[key]

    def take_events(self, key: Key) -> list[tuple[str, str, str, float]]:
        """The Events held for ``key`` (``(type, reason, message, decided_at)``, oldest first),
        now that their status is on record; they are no longer held."""
        held = self._held_events.pop(key, {})
        return [(type_, reason, message, at) for (type_, reason), (message, at) in held.items()]

    def drop_events(self, key: Key) -> None:
        """The write was refused or superseded: what the held Events narrate is not on record."""
        self._held_events.pop(key, None)

    # --- the admission round, serving memory, the activator --------------------------------------

    def round_done(self, views: Mapping[str, PoolView], ledgers: Mapping[str, Ledger]) -> None:
        """Keep what the last admission round saw: each pool's view, each resource's ledger."""
        self._round_views = dict(views)
        self._ledgers = dict(ledgers)

    def ledger(self, resource: str) -> Ledger | None:
        """The last round's ledger of ``resource`` (e.g. ``nvidia.com/gpu``)."""
        return self._ledgers.get(resource)

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

    def forget(self, key: Key) -> None:
        """Drop everything held about one TrainingJob (it was deleted)."""
        for book in (self._overlay, self._assumed, self._created, self._deleted, self._create_errors,
                     self._waiting, self._last_wait_write, self._nominations, self._stop_requests,
                     self._views, self._held_events):
            book.pop(key, None)  # type: ignore[attr-defined]

    def forget_service(self, key: Key) -> None:
        """Drop everything held about one InferenceService (it was deleted): its own books under
        ``key``, the shared ones under :func:`service_key`."""
        for book in (self._serving, self._serving_waits):
            book.pop(key, None)  # type: ignore[attr-defined]
        sk = service_key(key)
        for book in (self._overlay, self._created, self._deleted, self._held_events):
            book.pop(sk, None)  # type: ignore[attr-defined]
        for gk in [k for k in self._assumed_groups if k[0] == key]:
            del self._assumed_groups[gk]

    # --- the admission snapshot ---------------------------------------------------------------------

    def job_view(self, rec: TrainingJobRecord) -> JobView:
        """The job as admission sees it; reused while neither the index's record, our own last
        write nor the assumed placement changed (every round asks for every job)."""
        eff = self.effective(rec.key, rec)
        assumed = None if placement_of(eff.status) else self.assumed_for(rec.key)
        hit = self._views.get(rec.key)
        if hit is not None and hit.record is eff and hit.assumed is assumed:
            return hit
        view = JobView(eff, eff.status, assumed)
        self._views[rec.key] = view
        return view

    def assume_group(self, key: Key, group: AssumedGroup) -> None:
        """Admission gave one of ``key``'s replica groups nodes: they hold its GPUs until the
        service's status shows the group (or :data:`ASSUME_TTL` passes with no write)."""
        self._assumed_groups[(key, group.index)] = (group, time.monotonic())

    def assumed_groups_of(self, key: Key) -> dict[int, AssumedGroup]:
        """The groups of ``key`` admission placed that its status does not show yet."""
        now = time.monotonic()
        out = {}
        for (k, index), (g, at) in list(self._assumed_groups.items()):
            if k != key:
                continue
            if service_key(key) not in self._writing and now - at > ASSUME_TTL:
                del self._assumed_groups[(k, index)]
                continue
            out[index] = g
        return out

    def forget_groups(self, key: Key, indices: list[int]) -> None:
        """The service's status now carries (or dropped) these admitted groups."""
        for i in indices:
            self._assumed_groups.pop((key, i), None)

    def snapshot(self) -> Snapshot:
        """Everything an admission round reads, from the indexes and this process's memory."""
        pods: list[Pod] = list(self._pods_of("node"))
        now = time.monotonic()
        for gk in [k for k, (_, at) in self._assumed_groups.items()
                   if service_key(k[0]) not in self._writing and now - at > ASSUME_TTL]:
            del self._assumed_groups[gk]
        jobs = {rec.key: self.job_view(rec) for rec in self.jobs()}
        self._views = dict(jobs)  # drop the views of jobs that are gone
        return Snapshot(
            pools=self.pools(),
            nodes={k: v for k, v in self._all("kf_nodes")},  # type: ignore[misc]
            pods=pods,
            jobs=jobs,
            services={k: self.effective(service_key(k), v) for k, v in self._all("kf_services")},  # type: ignore[misc,arg-type]
            storage_classes=frozenset(k for k, _ in self._all("kf_storage_classes")),  # type: ignore[misc]
            nominations={k: (pool, by_node) for k, (pool, by_node, at) in self._nominations.items()
                         if time.monotonic() - at < NOMINATION_TTL},
            preempting=frozenset(self._stop_requests),
            claims={k: v[0] for k, v in self._all("kf_claims")},  # type: ignore[misc]
            terminating=self.terminating_namespaces(),
            assumed_groups={k: g for k, (g, _) in self._assumed_groups.items()},
            devices=inventory(v for _, v in self._all("kf_slices")),
            resource_claims=[v for _, v in self._all("kf_resource_claims")],
        )
