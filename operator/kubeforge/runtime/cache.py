"""The operator's memory: one object, one ``forget(key)``.

- kopf indexes (see :mod:`kubeforge.runtime.indexes`) mirror nodes, pods, our objects, claims
  and storage classes from watches; nothing here lists the cluster per reconcile.
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
from dataclasses import dataclass, field, replace
from typing import Any, Hashable, Iterator, Mapping

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


@dataclass
class _Overlay:
    written_at: float
    rv: str | None
    status: dict[str, Any]


@dataclass
class Cache:
    """Everything the loops share; one instance per operator process."""

    indexes: Any = None
    overlay: dict[Hashable, _Overlay] = field(default_factory=dict)
    assumed: dict[Key, tuple[PlacementRecord, float]] = field(default_factory=dict)
    writing: set[Key] = field(default_factory=set)
    created: dict[Key, dict[str, float]] = field(default_factory=dict)
    deleted: dict[Key, dict[str, float]] = field(default_factory=dict)
    create_errors: dict[Key, CreateError] = field(default_factory=dict)
    waiting: dict[Key, tuple[str, str]] = field(default_factory=dict)
    last_wait_write: dict[Key, float] = field(default_factory=dict)
    services_made: dict[str, float] = field(default_factory=dict)
    views: dict[str, PoolView] = field(default_factory=dict)
    ledgers: dict[str, Ledger] = field(default_factory=dict)
    assumed_groups: dict[tuple[Key, int], tuple[AssumedGroup, float]] = field(default_factory=dict)
    serving_waits: dict[Key, tuple[str, str]] = field(default_factory=dict)
    activator: tuple[tuple[str, ...], int | None] = ((), None)
    serving: dict[Key, Any] = field(default_factory=dict)
    nominations: dict[Key, tuple[str, dict[str, int], float]] = field(default_factory=dict)
    preempt_requests: dict[Key, tuple[str, str, float]] = field(default_factory=dict)
    admission_memo: AdmissionMemo = field(default_factory=AdmissionMemo)
    _views: dict[Key, JobView] = field(default_factory=dict)

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
        t = self.services_made.get(namespace)
        return t is not None and time.monotonic() - t < SERVICE_RECHECK

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
        if pool in self.views:
            return self.views[pool]
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
            self.overlay.pop(key, None)
            return
        rv = (written.get("metadata") or {}).get("resourceVersion")
        old = self.overlay.get(key)
        if old is not None and _rv(old.rv) is not None and _rv(rv) is not None and _rv(rv) < _rv(old.rv):  # type: ignore[operator]
            return  # two writes answered out of order: keep the newer one
        self.overlay[key] = _Overlay(time.monotonic(), rv, dict(written.get("status") or {}))

    def effective(self, key: Hashable, rec: Record) -> Record:
        """``rec`` with the status to act on: our own last write until the index has caught up
        with it (resourceVersions compared as integers, as the API server's watch cache does)."""
        entry = self.overlay.get(key)
        if entry is None:
            return rec
        seen, mine = _rv(rec.resource_version), _rv(entry.rv)
        if seen is not None and mine is not None and seen >= mine:
            self.overlay.pop(key, None)
            return rec
        if seen is None or mine is None:  # not comparable: trust our write for a while
            if time.monotonic() - entry.written_at > EXPECTATION_TTL:
                self.overlay.pop(key, None)
                return rec
        return replace(rec, status=entry.status, resource_version=entry.rv or rec.resource_version)

    # --- assumed placements, expectations -----------------------------------------------------------

    def assume(self, key: Key, placement: PlacementRecord) -> None:
        self.assumed[key] = (placement, time.monotonic())
        self.waiting.pop(key, None)

    def assumed_for(self, key: Key) -> PlacementRecord | None:
        entry = self.assumed.get(key)
        if entry is None:
            return None
        if key not in self.writing and time.monotonic() - entry[1] > ASSUME_TTL:
            self.assumed.pop(key, None)
            return None
        return entry[0]

    def expect(self, book: dict[Key, dict[str, float]], key: Key, names: list[str]) -> None:
        now = time.monotonic()
        book.setdefault(key, {}).update({n: now for n in names})

    def expected(self, book: dict[Key, dict[str, float]], key: Key) -> set[str]:
        """Names still expected (younger than EXPECTATION_TTL)."""
        entries = book.get(key)
        if not entries:
            return set()
        now = time.monotonic()
        for n in [n for n, t in entries.items() if now - t > EXPECTATION_TTL]:
            del entries[n]
        return set(entries)

    def observed(self, book: dict[Key, dict[str, float]], key: Key, name: str) -> None:
        """The index showed ``name``: the expectation is met and goes (controller-runtime's
        ``CreationObserved``). Left to its TTL, a name reused later (a group index added back
        after a scale-down) would be taken as created for a minute and never made."""
        entries = book.get(key)
        if entries is not None:
            entries.pop(name, None)

    def forget(self, key: Key) -> None:
        """Drop everything held about one object (it was deleted)."""
        for book in (self.overlay, self.assumed, self.created, self.deleted, self.create_errors,
                     self.waiting, self.last_wait_write, self.serving, self.nominations, self.preempt_requests,
                     self._views, self.serving_waits):
            book.pop(key, None)  # type: ignore[attr-defined]
        for gk in [k for k in self.assumed_groups if k[0] == key]:
            del self.assumed_groups[gk]

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
        self.assumed_groups[(key, group.index)] = (group, time.monotonic())

    def assumed_groups_of(self, key: Key) -> dict[int, AssumedGroup]:
        """The groups of ``key`` admission placed that its status does not show yet."""
        now = time.monotonic()
        out = {}
        for (k, index), (g, at) in list(self.assumed_groups.items()):
            if k != key:
                continue
            if key not in self.writing and now - at > ASSUME_TTL:
                del self.assumed_groups[(k, index)]
                continue
            out[index] = g
        return out

    def forget_groups(self, key: Key, indices: list[int]) -> None:
        """The service's status now carries (or dropped) these admitted groups."""
        for i in indices:
            self.assumed_groups.pop((key, i), None)

    def snapshot(self) -> Snapshot:
        """Everything an admission round reads, from the indexes and this process's memory."""
        pods: list[Pod] = list(self._pods_of("node"))
        now = time.monotonic()
        for gk in [k for k, (_, at) in self.assumed_groups.items() if k[0] not in self.writing and now - at > ASSUME_TTL]:
            del self.assumed_groups[gk]
        jobs = {rec.key: self.job_view(rec) for rec in self.jobs()}
        self._views = dict(jobs)  # drop the views of jobs that are gone
        return Snapshot(
            pools=self.pools(),
            nodes={k: v for k, v in self._all("kf_nodes")},  # type: ignore[misc]
            pods=pods,
            jobs=jobs,
            services={k: self.effective(k, v) for k, v in self._all("kf_services")},  # type: ignore[misc]
            storage_classes=frozenset(k for k, _ in self._all("kf_storage_classes")),  # type: ignore[misc]
            nominations={k: (pool, by_node) for k, (pool, by_node, at) in self.nominations.items()
                         if time.monotonic() - at < NOMINATION_TTL},
            preempting=frozenset(self.preempt_requests),
            claims={k: v[0] for k, v in self._all("kf_claims")},  # type: ignore[misc]
            terminating=self.terminating_namespaces(),
            assumed_groups={k: g for k, (g, _) in self.assumed_groups.items()},
            devices=inventory(v for _, v in self._all("kf_slices")),
            resource_claims=[v for _, v in self._all("kf_resource_claims")],
        )
