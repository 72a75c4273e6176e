"""GPUPool: a cluster-scoped, named set of GPU nodes and what the operator knows about them."""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar, Literal, Optional

from pydantic import ConfigDict, Field, field_validator

from kubeforge.accelerators import nvidia

from .. import API_VERSION
from ._base import (
    DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, LABEL_KEY_PATTERN, MAX_LABEL_KEY_LENGTH, MAX_LABEL_LENGTH, MAX_NAME_LENGTH,
    KubeModel, name_rules, schema_default,
)
from ._core import Condition, LabelSelector, ObjectMeta, Toleration, conditions_field
from ._model_cache import ModelCachePolicy, PoolModel
from ._quota import GPUQuota, PoolPreemption, QuotaUsage
from ._reservations import RESERVATIONS_DESCRIPTION, PoolReservations

DEFAULT_GPU_RESOURCE_NAME = nvidia.GPU_RESOURCE_NAME
"""The API's default vendor is NVIDIA: its device plugin's resource."""
DEFAULT_DEVICE_CLASS_NAME = nvidia.DRA_DEVICE_CLASS
"""The DeviceClass NVIDIA's DRA driver (k8s-dra-driver-gpu) installs for whole GPUs."""
DEFAULT_DRA_DRIVER = nvidia.DRA_DRIVER
"""The driver name NVIDIA's DRA driver publishes its GPUs' ResourceSlices under."""
DNS_SUBDOMAIN_MAX = 253


class DeviceAllocation(str, Enum):
    """DeviceAllocation is how the pool's pods get their GPUs."""

    DEVICE_PLUGIN = "DevicePlugin"
    DRA = "DRA"


class DRAConfig(KubeModel):
    """DRAConfig says which Dynamic Resource Allocation devices are the pool's GPUs."""

    device_class_name: str = Field(
        default=DEFAULT_DEVICE_CLASS_NAME,
        min_length=1,
        max_length=DNS_SUBDOMAIN_MAX,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="deviceClassName is the DeviceClass (resource.k8s.io/v1) the operator's "
        "ResourceClaimTemplates request GPUs from, with an exact count per pod. gpu.nvidia.com "
        "with NVIDIA's DRA driver.",
    )
    driver: str = Field(
        default=DEFAULT_DRA_DRIVER,
        min_length=1,
        max_length=63,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="driver is the DRA driver whose ResourceSlices publish the GPUs: a node's "
        "GPUs are the devices of this driver in the slices of that node whose attribute type, "
        "when present, is gpu (NVIDIA's driver marks MIG devices type mig). Allocated devices "
        "are read from ResourceClaim status.allocation. gpu.nvidia.com with NVIDIA's driver.",
    )
    spare_nodes_per_clique: int = Field(
        default=2,
        ge=0,
        le=64,
        description="spareNodesPerClique is how many wholly free nodes a multi-node NVLink gang "
        "leaves in its nvidia.com/gpu.clique when some clique allows it (2 of an NVL72 rack's 18 "
        "trays: a failed tray is replaced inside the clique and the gang keeps its "
        "ComputeDomain); gangs too large for one clique are split evenly over the fewest cliques.",
    )


class CapacityType(str, Enum):
    """CapacityType is whether a pool's nodes are spot or on-demand."""

    AUTO = "Auto"
    SPOT = "Spot"
    ON_DEMAND = "OnDemand"


class LevelSource(str, Enum):
    """LevelSource says where an effective topology level came from."""

    SPEC = "Spec"
    DETECTED = "Detected"


class TopologyLevel(KubeModel):
    """TopologyLevel is one level of the interconnect hierarchy: a name and the node label
    whose value names a node's domain at that level."""

    name: str = Field(
        min_length=1,
        max_length=MAX_LABEL_LENGTH,
        pattern=DNS_LABEL_PATTERN,
        description="name of the level, a DNS label such as nvlink, block, rack or spine. "
        "Jobs name it in topology.level.",
    )
    node_label: str = Field(
        min_length=1,
        max_length=MAX_LABEL_KEY_LENGTH,
        pattern=LABEL_KEY_PATTERN,
        description="nodeLabel is the node label whose value names the domain at this level, "
        "for example nvidia.com/gpu.clique, cloud.google.com/gce-topology-block or "
        "topology.k8s.aws/network-node-layer-1.",
    )


class EffectiveTopologyLevel(TopologyLevel):
    """EffectiveTopologyLevel is a topology level the operator uses, and where it came from."""

    source: LevelSource = Field(
        default=LevelSource.SPEC,
        description="source says where the level came from: Spec (spec.topologyLevels) or "
        "Detected (well-known node labels).",
    )


class GPUPoolSpec(KubeModel):
    """GPUPoolSpec is the desired state of a GPUPool."""

    node_selector: LabelSelector = Field(
        default_factory=LabelSelector,
        description="nodeSelector selects the pool's nodes by label (a metav1.LabelSelector). "
        "Empty selects every node that has the GPU resource.",
        json_schema_extra=schema_default(LabelSelector),
    )
    gpu_resource_name: str = Field(
        default=DEFAULT_GPU_RESOURCE_NAME,
        min_length=1,
        max_length=MAX_LABEL_KEY_LENGTH,
        pattern=LABEL_KEY_PATTERN,
        description="gpuResourceName is the extended resource that counts GPUs on the pool's "
        "nodes and that pods request. With deviceAllocation DRA it is the device-plugin name the "
        "same GPUs may also be requested by: pods requesting it on the pool's nodes are counted "
        "as holding GPUs there too, so a node exposed both ways is never over-committed.",
    )
    device_allocation: DeviceAllocation = Field(
        default=DeviceAllocation.DEVICE_PLUGIN,
        description="deviceAllocation is DevicePlugin (pods request gpuResourceName in their "
        "limits; capacity from node allocatable) or DRA (Dynamic Resource Allocation, "
        "resource.k8s.io/v1: capacity from the ResourceSlices of the nodes, pods get "
        "spec.resourceClaims from a ResourceClaimTemplate the operator owns, and multi-node "
        "gangs inside one nvidia.com/gpu.clique get a ComputeDomain).",
    )
    dra: DRAConfig = Field(
        default_factory=DRAConfig,
        description="dra says which devices are the pool's GPUs when deviceAllocation is DRA; "
        "ignored otherwise.",
        json_schema_extra=schema_default(DRAConfig),
    )
    topology_levels: list[TopologyLevel] = Field(
        default_factory=list,
        max_length=8,
        description="topologyLevels are the interconnect levels of the pool, narrowest first "
        "(for example nvlink, then block, then spine). When empty, the operator detects them "
        "from well-known node labels (nvidia.com/gpu.clique, cloud.google.com/gce-topology-"
        "block, topology.k8s.aws/network-node-layer-N, ...). The node itself is always the "
        "narrowest level, named hostname.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(l, self.exists_one(m, m.name == l.name))",
                    "message": "topologyLevels names must be unique",
                }
            ]
        },
    )
    capacity_type: CapacityType = Field(
        default=CapacityType.AUTO,
        description="capacityType says whether the nodes are Spot, OnDemand, or Auto: detected "
        "per node from karpenter.sh/capacity-type, cloud.google.com/gke-spot, "
        "eks.amazonaws.com/capacityType or kubernetes.azure.com/scalesetpriority (a node "
        "without these labels counts as on-demand).",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=32,
        description="tolerations are added to every pod the operator places in the pool (for "
        "example to tolerate a nvidia.com/gpu or spot taint).",
    )
    price_per_gpu_hour: Optional[float] = Field(
        default=None,
        alias="pricePerGPUHour",
        ge=0,
        description="pricePerGPUHour is the price of one GPU-hour in the pool, in any currency "
        "unit, used to report job cost. Empty means no cost is reported.",
    )
    quotas: list[GPUQuota] = Field(
        default_factory=list,
        max_length=256,
        description="quotas split the pool's GPUs between teams (namespaces): each gets "
        "nominalGPUs guaranteed and may borrow idle ones. Empty: no quotas, every job may use "
        "the whole pool.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
    )
    preemption: PoolPreemption = Field(
        default_factory=PoolPreemption,
        description="preemption says when a waiting job may preempt running ones in this pool.",
        json_schema_extra=schema_default(PoolPreemption),
    )
    reservations: PoolReservations = Field(default_factory=PoolReservations, json_schema_extra=schema_default(
        PoolReservations), description=RESERVATIONS_DESCRIPTION)
    model_cache: ModelCachePolicy = Field(default_factory=ModelCachePolicy, json_schema_extra=schema_default(
        ModelCachePolicy), description="modelCache is how the nodes cache the weights of the services' spec.model.")

    @field_validator("quotas")
    @classmethod
    def _one_quota_per_namespace(cls, quotas: list[GPUQuota]) -> list[GPUQuota]:
        names = [q.name for q in quotas]
        if len(names) != len(set(names)):
            raise ValueError("quotas names must be unique")
        seen: dict[str, str] = {}
        for q in quotas:
            for ns in q.namespaces:
                if ns in seen:
                    raise ValueError(f"namespace {ns} is in quotas {seen[ns]} and {q.name}: a namespace "
                                     "belongs to at most one quota of a pool")
                seen[ns] = q.name
        return quotas

    @field_validator("topology_levels")
    @classmethod
    def _unique_level_names(cls, levels: list[TopologyLevel]) -> list[TopologyLevel]:
        names = [level.name for level in levels]
        if len(names) != len(set(names)):
            raise ValueError("topologyLevels names must be unique")
        return levels


class NodeCounts(KubeModel):
    """NodeCounts counts a pool's nodes."""

    total: int = Field(default=0, ge=0, description="total is the number of selected nodes.")
    ready: int = Field(default=0, ge=0, description="ready is the number of nodes that are Ready and schedulable.")
    spot: int = Field(default=0, ge=0, description="spot is the number of spot nodes.")
    on_demand: int = Field(default=0, ge=0, description="onDemand is the number of on-demand nodes.")


class GPUCounts(KubeModel):
    """GPUCounts counts GPUs; allocated + free = allocatable."""

    capacity: int = Field(default=0, ge=0, description="capacity is the GPUs the nodes have (node capacity), "
                          "usable or not.")
    allocatable: int = Field(
        default=0,
        ge=0,
        description="allocatable is the GPUs pods can be given: the allocatable GPUs of nodes "
        "that are Ready, schedulable (not cordoned, no taint the pool does not tolerate) and "
        "not about to be reclaimed.",
    )
    allocated: int = Field(default=0, ge=0, description="allocated is the GPUs held on those nodes: by admitted "
                           "jobs (from admission, before their pods exist) and by every other pod bound there.")
    free: int = Field(default=0, ge=0, description="free is allocatable minus allocated: GPUs new work can get now.")
    unavailable: int = Field(default=0, ge=0, description="unavailable is the allocatable GPUs of nodes that are "
                             "not usable (NotReady, cordoned, tainted, being reclaimed); not part of allocatable.")


class TopologyDomain(KubeModel):
    """TopologyDomain is one domain of one topology level: the nodes sharing a label value."""

    level: str = Field(
        max_length=MAX_LABEL_LENGTH,
        description="level is the name of the topology level.",
    )
    name: str = Field(
        max_length=MAX_LABEL_LENGTH,
        description="name is the domain's node label value at that level.",
    )
    nodes: int = Field(default=0, ge=0, description="nodes is the number of nodes in the domain.")
    gpus: GPUCounts = Field(
        default_factory=GPUCounts,
        description="gpus counts the domain's GPUs.",
    )


class PoolWorkload(KubeModel):
    """PoolWorkload is a workload holding GPUs in the pool."""

    kind: str = Field(
        max_length=MAX_LABEL_LENGTH,
        description="kind of the workload: TrainingJob, InferenceService, or Pod for a pod of "
        "neither that holds GPUs on the pool's nodes.",
    )
    namespace: str = Field(
        max_length=MAX_LABEL_LENGTH, description="namespace of the workload."
    )
    name: str = Field(max_length=MAX_NAME_LENGTH, description="name of the workload.")
    gpus: int = Field(default=0, ge=0, description="gpus is the number of GPUs it holds.")


class GPUPoolStatus(KubeModel):
    """GPUPoolStatus is the observed state of a GPUPool."""

    observed_generation: Optional[int] = Field(
        default=None,
        ge=0,
        description="observedGeneration is the .metadata.generation this status was computed "
        "from.",
    )
    conditions: list[Condition] = conditions_field(
        "Ready: False with NoNodes when the nodeSelector matches no node or no matched node has "
        "gpuResourceName, NoUsableNodes, InvalidSpec; TopologyReady: False with LevelLabelMissing "
        "when a level of spec.topologyLevels names a label no node of the pool carries")
    topology_levels: list[EffectiveTopologyLevel] = Field(
        default_factory=list,
        max_length=8,
        description="topologyLevels are the effective levels, narrowest first, from the spec or "
        "detected from node labels.",
    )
    nodes: NodeCounts = Field(
        default_factory=NodeCounts, description="nodes counts the pool's nodes."
    )
    gpus: GPUCounts = Field(default_factory=GPUCounts, description="gpus counts all the pool's "
                            "GPUs.")
    spot_gpus: GPUCounts = Field(
        default_factory=GPUCounts,
        alias="spotGPUs",
        description="spotGPUs counts the GPUs on spot nodes.",
    )
    on_demand_gpus: GPUCounts = Field(
        default_factory=GPUCounts,
        alias="onDemandGPUs",
        description="onDemandGPUs counts the GPUs on on-demand nodes.",
    )
    domains: list[TopologyDomain] = Field(
        default_factory=list,
        max_length=4096,
        description="domains are the pool's topology domains at every level, with their GPUs.",
    )
    workloads: list[PoolWorkload] = Field(
        default_factory=list,
        max_length=4096,
        description="workloads are the jobs and services that hold GPUs in the pool.",
    )
    standby_gpus: int = Field(
        default=0, ge=0, alias="standbyGPUs",
        description="standbyGPUs are the GPUs held by InferenceServices' standby replicas (started and "
        "asleep, out of their Service: spec.standby): counted in allocated, shown apart as what the "
        "insurance costs.",
    )
    quotas: list[QuotaUsage] = Field(
        default_factory=list,
        max_length=257,
        description="quotas is each team's use of its quota (and '*' for namespaces in none).",
    )
    models: list[PoolModel] = Field(default_factory=list, max_length=256, description="models counts the "
                                    "nodes holding each cached model (ModelCacheNode status).")
    models_summary: Optional[str] = Field(default=None, max_length=256, description="modelsSummary is "
                                          "'NAME READY/NODES, ...' for kubectl get (the first models).")


class GPUPool(KubeModel):
    """GPUPool is a named set of GPU nodes: how to select them, their interconnect topology,
    spot or on-demand capacity, and the GPUs free in each topology domain."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": name_rules(
        "GPUPool", MAX_LABEL_LENGTH, "it is the kubeforge.io/pool label value on the pods placed in it",
        form="DNS subdomain",
    )})

    KIND: ClassVar[str] = "GPUPool"
    PLURAL: ClassVar[str] = "gpupools"
    SINGULAR: ClassVar[str] = "gpupool"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("gpool",)
    CATEGORIES: ClassVar[tuple[str, ...]] = ("kubeforge",)
    NAMESPACED: ClassVar[bool] = False
    PRINTER_COLUMNS: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes.total"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus.allocatable"},
        {"name": "Free", "type": "integer", "jsonPath": ".status.gpus.free"},
        {"name": "Allocated", "type": "integer", "jsonPath": ".status.gpus.allocated"},
        {"name": "Spot GPUs", "type": "integer", "jsonPath": ".status.spotGPUs.allocatable"},
        {
            "name": "Ready",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
        },
        {"name": "Models", "type": "string", "jsonPath": ".status.modelsSummary"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    api_version: Literal["kubeforge.io/v1alpha1"] = Field(
        default=API_VERSION, description="apiVersion is kubeforge.io/v1alpha1."
    )
    kind: Literal["GPUPool"] = Field(default="GPUPool", description="kind is GPUPool.")
    metadata: ObjectMeta = Field(
        default_factory=ObjectMeta, description="metadata is the object's metadata."
    )
    spec: GPUPoolSpec = Field(
        default_factory=GPUPoolSpec,
        description="spec is the desired state of the pool.",
        json_schema_extra=schema_default(GPUPoolSpec),
    )
    status: Optional[GPUPoolStatus] = Field(
        default=None, description="status is the observed state of the pool."
    )
