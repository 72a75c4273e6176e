"""The cluster snapshot the admission core plans over: plain data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME, CapacityType, DeviceAllocation
from kubeforge.modelcache import CacheState
from kubeforge.objects import (
    EMPTY_INVENTORY, ClaimView, ComputeDomainView, DeviceInventory, InferenceServiceRecord, Key, Node,
    PENDING, PlacementRecord, Pod, PoolRecord, TrainingJobRecord, current_attempt, dra_key,
    placement_of, with_devices,
)


@dataclass(frozen=True, slots=True)
class JobView:
    """A TrainingJob as admission sees it.

    Attributes:
        record: The job as the index holds it.
        status: Its effective status: the index's, or this process's last write when the
            index has not caught up with it yet.
        assumed: A placement this process decided and has not yet seen in ``status`` (Kueue's
            "assumed" workload): it holds GPUs in the ledger from the moment it is decided.
    """

    record: TrainingJobRecord
    status: Mapping[str, Any]
    assumed: PlacementRecord | None = None
    held: PlacementRecord | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "held", placement_of(self.status) or self.assumed)

    @property
    def key(self) -> Key:
        return self.record.key

    @property
    def placement(self) -> PlacementRecord | None:
        """The placement that holds GPUs: the one in status, else the assumed one (worked out
        once: every round reads it for every job)."""
        return self.held

    @property
    def attempt(self) -> int:
        return current_attempt(self.status)

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or PENDING)


@dataclass(frozen=True)
class AssumedGroup:
    """A replica group admission placed that the service's ``status.groups`` does not show yet
    (Kueue's assumed workload, for serving): it holds its GPUs in the ledger from the moment it
    is decided.

    Attributes:
        index: The group's index.
        placement: Its pool, nodes (leader first), level and domain.
        gpus_per_pod: What each pod holds (the scheduler's count, sidecars included).
        cached: Its nodes all held the service's model when it was placed (the ``Cached`` /
            ``Cold`` source of its ``weights``), None without a cached model.
    """

    index: int
    placement: PlacementRecord
    gpus_per_pod: int
    cached: bool | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything one admission round reads, as plain data.

    Attributes:
        pools: GPUPools by name.
        nodes: Nodes by name (every node; pools select theirs).
        pods: Pods that request an extended resource and are not terminal, any namespace,
            kubeforge's and everyone else's.
        jobs: TrainingJobs by key.
        services: InferenceServices by key.
        storage_classes: StorageClass names that exist.
        claims: PersistentVolumeClaims that exist, by key, with their phase.
        nominations: Gangs that preempted others: key -> (pool, GPUs per node promised to
            them until their victims' GPUs are free).
        preempting: Gangs being preempted now (never chosen again until they stop).
        terminating: Namespaces being deleted: nothing there is admitted or given a node.
        assumed_groups: Replica groups admission placed that their service's status does not
            show yet, by (service key, index).
        devices: The GPUs DRA drivers publish (ResourceSlices). Their count per node is added
            to ``nodes`` (allocatable and capacity under ``dra:<driver>``) when the snapshot is
            made, so every pool view reads DRA and device-plugin GPUs the same way.
        resource_claims: ResourceClaims with an allocation (their devices are held).
        compute_domains: ComputeDomains kubeforge made, by (namespace, name).
        device_classes: The DeviceClasses that exist (``resource.k8s.io/v1``), by name; None
            when not known (then no DRA pool is refused for its class).
        model_caches: The nodes' model copies (ModelCacheNode status: node -> key -> state);
            placement prefers nodes that hold a service's model.
    """

    pools: Mapping[str, PoolRecord] = field(default_factory=dict)
    nodes: Mapping[str, Node] = field(default_factory=dict)
    pods: Sequence[Pod] = ()
    jobs: Mapping[Key, JobView] = field(default_factory=dict)
    services: Mapping[Key, InferenceServiceRecord] = field(default_factory=dict)
    storage_classes: frozenset[str] = frozenset()
    claims: Mapping[Key, str] = field(default_factory=dict)
    nominations: Mapping[Key, tuple[str, Mapping[str, int]]] = field(default_factory=dict)
    preempting: frozenset[Key] = frozenset()
    terminating: frozenset[str] = frozenset()
    assumed_groups: Mapping[tuple[Key, int], AssumedGroup] = field(default_factory=dict)
    devices: DeviceInventory = EMPTY_INVENTORY
    resource_claims: Sequence[ClaimView] = ()
    compute_domains: Mapping[Key, ComputeDomainView] = field(default_factory=dict)
    device_classes: frozenset[str] | None = None
    model_caches: CacheState = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.devices.gpus:
            object.__setattr__(self, "nodes", with_devices(self.nodes, self.devices))


def pool_resource(pool: PoolRecord | None) -> str:
    """The GPU resource a pool counts (``spec.gpuResourceName``; the API default when the
    pool is missing or its spec does not parse)."""
    if pool is None or pool.spec is None:
        return DEFAULT_GPU_RESOURCE_NAME
    if pool.spec.device_allocation == DeviceAllocation.DRA:
        return dra_key(pool.spec.dra.driver)
    return pool.spec.gpu_resource_name


def is_dra_pool(pool: PoolRecord | None) -> bool:
    """Whether the pool's pods get their GPUs through Dynamic Resource Allocation."""
    return pool is not None and pool.spec is not None and pool.spec.device_allocation == DeviceAllocation.DRA


def same_gpus(pools: Mapping[str, PoolRecord], resource: str) -> frozenset[str]:
    """The ledger keys that count the same physical GPUs as ``resource``: a DRA pool's driver key
    and its ``gpuResourceName`` (the device-plugin name those GPUs may also be requested by).
    Each ledger counts what is held under all of them, so a node whose GPUs are requested both
    ways is never promised twice."""
    keys = {resource}
    for p in pools.values():
        if is_dra_pool(p):
            pair = {pool_resource(p), p.spec.gpu_resource_name}  # type: ignore[union-attr]
            if keys & pair:
                keys |= pair
    return frozenset(keys)


def pool_capacity_type(pool: PoolRecord) -> str | None:
    """``"spot"`` / ``"on-demand"`` when the pool's ``spec.capacityType`` fixes it, None for
    Auto (detected per node)."""
    if pool.spec is None or pool.spec.capacity_type == CapacityType.AUTO:
        return None
    return "spot" if pool.spec.capacity_type == CapacityType.SPOT else "on-demand"
