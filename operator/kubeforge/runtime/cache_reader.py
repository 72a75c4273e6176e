"""The index reader of :class:`kubeforge.runtime.cache.Cache`: typed reads of the in-memory
mirrors the watches keep (:mod:`kubeforge.runtime.indexes`, :mod:`kubeforge.runtime.informer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Iterator, Mapping

from kubeforge.modelcache import CopyState, NodeCache
from kubeforge.objects import (
    ClaimView, ComputeDomainView, DeploymentState, InferenceServiceRecord, Key, Node, Pod, PoolRecord,
    SliceView, TrainingJobRecord,
)


@dataclass
class IndexReader:
    """Reads of the cluster as the watches mirror it; nothing here lists the cluster.

    Invariants:

    - Read only: no method changes an index (the watches' handlers alone do).
    - Before :meth:`attach` (``indexes`` None) every read finds nothing: None, an empty list,
      an empty mapping.
    - An index missing from those attached reads as empty (but :meth:`node_pods` needs
      ``kf_pods``, which every operator attaches).
    - Every read copies what it hands out (lists, dicts, iterators over a copy of the keys),
      so a watch event that lands meanwhile does not change it under the reader.

    Attributes:
        indexes: Index name -> kopf index (key -> store of values), None before :meth:`attach`.
    """

    indexes: Any = None

    def attach(self, indexes: Mapping[str, Any]) -> None:
        """Read the cluster from these kopf indexes (name -> index) from now on."""
        self.indexes = dict(indexes)

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

    def _pods_of(self, kind: str) -> Iterator[Pod]:
        if self.indexes is None:
            return
        idx = self.indexes["kf_pods"]
        for key in list(idx.keys()):
            if key[0] == kind:
                yield from list(idx.get(key) or ())

    # --- one object ---------------------------------------------------------------------------

    def job(self, key: Key) -> TrainingJobRecord | None:
        """A TrainingJob as the index holds it."""
        return self._one("kf_jobs", key)

    def service(self, key: Key) -> InferenceServiceRecord | None:
        """An InferenceService as the index holds it."""
        return self._one("kf_services", key)

    def pool(self, name: str) -> PoolRecord | None:
        """A GPUPool as the index holds it."""
        return self._one("kf_pools", name)

    def node(self, name: str) -> Node | None:
        """A Node as the index holds it."""
        return self._one("kf_nodes", name)

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

    def resource_claim(self, key: Key) -> ClaimView | None:
        """An allocated ResourceClaim."""
        return self._one("kf_resource_claims", key)

    def compute_domain(self, key: Key) -> ComputeDomainView | None:
        """A ComputeDomain kubeforge made."""
        return self._one("kf_compute_domains", key)

    # --- collections --------------------------------------------------------------------------

    def job_pods(self, key: Key) -> list[Pod]:
        """A TrainingJob's pods, every attempt."""
        return self._many("kf_pods", ("job",) + key)

    def service_pods(self, key: Key) -> list[Pod]:
        """An InferenceService's replica pods."""
        return self._many("kf_pods", ("svc",) + key)

    def node_pods(self) -> list[Pod]:
        """Every pod that holds extended resources on a node (bound, or assigned)."""
        return list(self._pods_of("node"))

    def jobs(self) -> Iterator[TrainingJobRecord]:
        """Every TrainingJob."""
        return (v for _, v in self._all("kf_jobs"))

    def services(self) -> dict[Key, InferenceServiceRecord]:
        """Every InferenceService, by key."""
        return {k: v for k, v in self._all("kf_services")}  # type: ignore[misc]

    def pools(self) -> dict[str, PoolRecord]:
        """Every GPUPool, by name."""
        return {k: v for k, v in self._all("kf_pools")}  # type: ignore[misc]

    def nodes(self) -> dict[str, Node]:
        """Every Node, by name."""
        return {k: v for k, v in self._all("kf_nodes")}  # type: ignore[misc]

    def storage_classes(self) -> frozenset[str]:
        """The names of every StorageClass."""
        return frozenset(k for k, _ in self._all("kf_storage_classes"))  # type: ignore[misc]

    def claim_phases(self) -> dict[Key, str]:
        """Every PersistentVolumeClaim's phase, by key."""
        return {k: v[0] for k, v in self._all("kf_claims")}  # type: ignore[misc]

    def terminating_namespaces(self) -> frozenset[str]:
        """Every namespace being deleted."""
        return frozenset(k for k, _ in self._all("kf_namespaces"))  # type: ignore[misc]

    def slices(self) -> Iterator[SliceView]:
        """Every ResourceSlice's record (the DRA drivers' devices)."""
        return (v for _, v in self._all("kf_slices"))

    def device_classes(self) -> frozenset[str] | None:
        """The DeviceClasses that exist, by name; None while no index of them is attached (a
        fake cache in tests: then no DRA pool is refused for its class)."""
        if self.indexes is None or "kf_device_classes" not in self.indexes:
            return None
        return frozenset(k for k, _ in self._all("kf_device_classes"))  # type: ignore[misc]

    def resource_claims(self) -> list[ClaimView]:
        """Every allocated ResourceClaim."""
        return [v for _, v in self._all("kf_resource_claims")]

    def model_caches(self) -> dict[str, Mapping[str, CopyState]]:
        """Every node's model copies (node -> key -> state), from the ModelCacheNode statuses."""
        return {k: v.copies for k, v in self._all("kf_model_caches")}  # type: ignore[misc]

    def model_cache_specs(self) -> dict[str, Mapping[str, Any]]:
        """Every ModelCacheNode's ``spec``, by node."""
        return {k: v.spec for k, v in self._all("kf_model_caches")}  # type: ignore[misc]

    def model_cache(self, node: str) -> NodeCache | None:
        """The ModelCacheNode of ``node``, or None."""
        return self._one("kf_model_caches", node)

    def job_compute_domains(self, key: Key) -> list[ComputeDomainView]:
        """The ComputeDomains kubeforge made for the job ``key`` (a scan of that index only: it
        holds one or two domains per multi-node NVLink gang)."""
        return [cd for (ns, _), cd in self._all("kf_compute_domains") if ns == key[0] and cd.job == key[1]]  # type: ignore[misc]
