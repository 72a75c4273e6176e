"""InferenceService: model-server replicas on GPUs behind one Service, scaled on queue depth.

The spec and the resource; the autoscaling models live in :mod:`._autoscaling` and the status in
:mod:`._inferenceservice_status` (as the TrainingJob's status lives in :mod:`._trainingjob_status`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar, Literal, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from .. import API_VERSION
from ._activation import Activation
from ._autoscaling import Autoscaling
from ._base import DNS_LABEL_PATTERN, MAX_LABEL_LENGTH, KubeModel, name_rules, schema_default
from ._core import ObjectMeta
from ._inferenceservice_status import InferenceServiceStatus
from ._model_cache import ModelSource
from ._pod_template import PodTemplate
from ._serving_start import Standby
from ._workload import PoolName, TopologyMode, check_unique_pools, pools_field

class ServingTopology(KubeModel):
    """ServingTopology says which topology domain each replica's GPUs must share."""

    mode: TopologyMode = Field(
        default=TopologyMode.REQUIRED,
        description="mode is Required (each replica's GPUs inside one domain of the level, or "
        "the replica waits), Preferred (inside one domain when possible) or None.",
    )
    level: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=MAX_LABEL_LENGTH,
        pattern=DNS_LABEL_PATTERN,
        description="level is the name of the pool's topology level (for example nvlink) that "
        "each replica stays inside; empty means one node.",
    )


class Parallelism(KubeModel):
    """Parallelism is how one replica's model is split over GPUs (data parallelism is the number
    of replicas). vLLM's and SGLang's names: tensor parallel inside a node's NVLink, pipeline
    parallel across nodes."""

    tensor: int = Field(
        default=1,
        ge=1,
        le=64,
        description="tensor is the tensor-parallel size (vLLM --tensor-parallel-size, SGLang --tp-size).",
    )
    pipeline: int = Field(
        default=1,
        ge=1,
        le=32,
        description="pipeline is the pipeline-parallel size (vLLM --pipeline-parallel-size, SGLang --pp-size).",
    )

    @property
    def gpus(self) -> int:
        """GPUs of one replica: tensor x pipeline."""
        return self.tensor * self.pipeline


class Engine(str, Enum):
    """Engine is the model server that runs a multi-node replica; the operator writes its
    distributed start commands and flags."""

    VLLM = "vllm"
    SGLANG = "sglang"
    NONE = "none"


class StartupPolicy(str, Enum):
    """StartupPolicy says when a multi-node replica's workers are created (LeaderWorkerSet's
    names)."""

    LEADER_CREATED = "LeaderCreated"
    LEADER_READY = "LeaderReady"


DEFAULT_MAX_GROUP_RESTARTS = 5
"""Group recreations allowed before a replica group is marked failed (LeaderWorkerSet KEP-820's
proposed default)."""


class MultiNode(KubeModel):
    """MultiNode configures replicas whose model spans several nodes: each replica is a group of
    pods (a leader that serves and is the Service's endpoint, and workers), placed, restarted and
    scaled as one gang, the LeaderWorkerSet way."""

    startup_policy: StartupPolicy = Field(
        default=StartupPolicy.LEADER_CREATED,
        description="startupPolicy is LeaderCreated (all pods of a group are created together, "
        "LeaderWorkerSet's default) or LeaderReady (workers are created once the leader is Ready).",
    )
    max_group_restarts: int = Field(
        default=DEFAULT_MAX_GROUP_RESTARTS,
        ge=0,
        le=1000,
        description="maxGroupRestarts is how many times a group is recreated after one of its pods "
        "failed, was evicted, deleted or preempted, or its node was lost, before the group is "
        "marked failed (its GPUs released, a ReplicaGroupFailed condition and Event) until the "
        "spec changes. Default 5 (LeaderWorkerSet KEP-820).",
    )


class InferenceServiceSpec(KubeModel):
    """InferenceServiceSpec is the desired state of an InferenceService."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.minReplicas <= self.maxReplicas",
                    "message": "minReplicas must be less than or equal to maxReplicas",
                },
                {
                    "rule": "!has(self.parallelism) || !has(self.gpusPerReplica) || "
                    "self.gpusPerReplica == self.parallelism.tensor * self.parallelism.pipeline",
                    "message": "gpusPerReplica must equal parallelism.tensor x parallelism.pipeline (or be left out)",
                },
                {
                    "rule": "!has(self.standby) || self.standby.replicas == 0 || !has(self.engine) || self.engine == 'vllm'",
                    "message": "standby replicas sleep through vLLM's sleep mode: standby.replicas needs engine vllm",
                },
            ]
        }
    )

    pools: list[PoolName] = pools_field("service's replicas")
    gpus_per_replica: Optional[int] = Field(
        default=None,
        ge=1,
        le=64,
        description="gpusPerReplica is the number of GPUs of one replica. Default: "
        "parallelism.tensor x parallelism.pipeline when parallelism is set, else 1. Without "
        "parallelism a replica is one pod, which must fit one node (a larger one waits, "
        "Unschedulable); with parallelism a replica needing more GPUs than one node has becomes a "
        "group of pods, one per node, each taking a whole node's GPUs.",
    )
    parallelism: Optional[Parallelism] = Field(
        default=None,
        description="parallelism is the tensor x pipeline split of one replica's model. A replica "
        "larger than a node of the pool runs as a group of nodesPerReplica = tensor x pipeline / "
        "GPUs per node pods (which must divide evenly), inside one domain of topology.level.",
    )
    engine: Engine = Field(
        default=Engine.VLLM,
        description="engine is vllm (default), sglang or none. For a replica of several pods the "
        "operator writes the engine's distributed start into the leader and workers (vllm: ray "
        "head on the leader, then the template's command with --tensor-parallel-size and "
        "--pipeline-parallel-size; workers join the leader's ray cluster; sglang: --tp-size, "
        "--pp-size, --nnodes, --node-rank and --dist-init-addr on every pod); none leaves the "
        "template's command alone. Every pod gets LeaderWorkerSet's LWS_LEADER_ADDRESS, "
        "LWS_GROUP_SIZE and LWS_WORKER_INDEX either way.",
    )
    multi_node: MultiNode = Field(
        default_factory=MultiNode,
        description="multiNode configures replicas of several pods.",
        json_schema_extra=schema_default(MultiNode),
    )
    startup_timeout_seconds: int = Field(
        default=600,
        ge=30,
        le=86400,
        description="startupTimeoutSeconds: a replica whose pods are not all bound and started "
        "this long after they were given their nodes is placed again elsewhere (counted in "
        "status, reason in its condition and one Warning Event). A pod that is bound and pulling "
        "its image or loading its model is not cut short for being slow; only one that cannot be "
        "scheduled or is stuck (ErrImagePull, CrashLoopBackOff, ...) is.",
    )
    drain_seconds: int = Field(
        default=120,
        ge=0,
        le=3600,
        description="drainSeconds: a replica removed by a scale-down or a rollout first leaves the "
        "Service (no new requests) and is deleted once its requests in flight reach 0 "
        "(vllm:num_requests_running + vllm:num_requests_waiting of its leader pod: deleting the "
        "pod aborts both) or after this many seconds.",
    )
    drain_min_seconds: int = Field(
        default=2,
        ge=0,
        le=600,
        description="drainMinSeconds: the least time a draining replica stays out of the Service "
        "before it is deleted, even with nothing in flight (at most drainSeconds): whatever routes "
        "requests (kube-proxy, a gateway, the activator) sees it leave the EndpointSlice a moment "
        "later and may still send it requests meanwhile, which deleting the pod would abort. The "
        "same wait as a preStop sleep or Knative queue-proxy's drain; 2 s covers an EndpointSlice "
        "update reaching kube-proxy (its iptables minSyncPeriod is 1 s) plus a metrics scrape.",
    )
    activation: Activation = Field(
        default_factory=Activation,
        description="activation says how requests that arrive while no replica is ready are held "
        "by the kubeforge activator.",
        json_schema_extra=schema_default(Activation),
    )
    template: PodTemplate = Field(
        description="template is the pod template of every replica (a core/v1 "
        "PodTemplateSpec), for example a vLLM, SGLang or Triton container. The operator adds "
        "GPU resources, node affinity and the pool's tolerations.",
    )
    port: int = Field(
        default=8000,
        ge=1,
        le=65535,
        description="port is the container port the model server listens on; the Service "
        "exposes it under the same number.",
    )
    min_replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="minReplicas is the fewest replicas; 0 allows scale to zero when the "
        "queue stays empty.",
    )
    max_replicas: int = Field(
        default=4,
        ge=1,
        le=1000,
        description="maxReplicas is the most replicas.",
    )
    topology: ServingTopology = Field(
        default_factory=ServingTopology,
        description="topology keeps each multi-GPU replica inside one node or NVLink domain.",
        json_schema_extra=schema_default(ServingTopology),
    )
    autoscaling: Autoscaling = Field(
        default_factory=Autoscaling,
        description="autoscaling sizes the service from its request queue.",
        json_schema_extra=schema_default(Autoscaling),
    )
    standby: Standby = Field(
        default_factory=Standby,
        description="standby keeps replicas started but asleep, out of the Service, for fast scale-up.",
        json_schema_extra=schema_default(Standby),
    )
    model: Optional[ModelSource] = Field(
        default=None,
        description="model is the weights the replicas serve, pinned: the pool's nodes cache it (one "
        "download a node, shared by every replica there), placement prefers nodes that hold it (never "
        "requires them: a replica starts cold on free capacity rather than wait), and the serving "
        "containers get it read-only at model.mountPath (vLLM: --model). Empty: the template loads its "
        "own weights.",
    )

    _check_pools = field_validator("pools")(check_unique_pools)

    @model_validator(mode="after")
    def _min_below_max(self) -> "InferenceServiceSpec":
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must be less than or equal to maxReplicas")
        if self.parallelism is not None and self.gpus_per_replica is not None and \
                self.gpus_per_replica != self.parallelism.gpus:
            raise ValueError("gpusPerReplica must equal parallelism.tensor x parallelism.pipeline (or be left out)")
        if self.standby.replicas and self.engine != Engine.VLLM:
            raise ValueError("standby replicas sleep through vLLM's sleep mode: standby.replicas needs engine vllm")
        return self

    @property
    def replica_gpus(self) -> int:
        """GPUs of one replica: gpusPerReplica, else tensor x pipeline, else 1 (the defaults)."""
        if self.gpus_per_replica is not None:
            return self.gpus_per_replica
        return self.parallelism.gpus if self.parallelism is not None else 1


class InferenceService(KubeModel):
    """InferenceService runs model-server replicas on GPUs behind one Service, scaled between
    minReplicas and maxReplicas (down to zero if allowed) on the depth of the request queue."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": name_rules(
        "InferenceService", MAX_LABEL_LENGTH,
        "it names the Service and Deployment and is a label value on every replica"
    )})

    KIND: ClassVar[str] = "InferenceService"
    PLURAL: ClassVar[str] = "inferenceservices"
    SINGULAR: ClassVar[str] = "inferenceservice"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("infsvc", "kfis")
    CATEGORIES: ClassVar[tuple[str, ...]] = ("kubeforge",)
    NAMESPACED: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
        {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas"},
        {"name": "Nodes/Replica", "type": "integer", "jsonPath": ".status.nodesPerReplica"},
        {"name": "Min", "type": "integer", "jsonPath": ".spec.minReplicas"},
        {"name": "Max", "type": "integer", "jsonPath": ".spec.maxReplicas"},
        {"name": "Queue", "type": "number", "jsonPath": ".status.lastMetricValue"},
        {"name": "URL", "type": "string", "jsonPath": ".status.url"},
        # kubectl get -o wide: the replicas kept asleep (spec.standby) and the measured start (issue 28)
        {"name": "Standby", "type": "integer", "jsonPath": ".status.standbyReplicas", "priority": 1},
        {"name": "Start-P90", "type": "number", "jsonPath": ".status.startTime.cold.p90Seconds", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    api_version: Literal["kubeforge.io/v1alpha1"] = Field(
        default=API_VERSION, description="apiVersion is kubeforge.io/v1alpha1."
    )
    kind: Literal["InferenceService"] = Field(
        default="InferenceService", description="kind is InferenceService."
    )
    metadata: ObjectMeta = Field(
        default_factory=ObjectMeta, description="metadata is the object's metadata."
    )
    spec: InferenceServiceSpec = Field(description="spec is the desired state of the service.")
    status: Optional[InferenceServiceStatus] = Field(
        default=None, description="status is the observed state of the service."
    )

    def service_url(self) -> str:
        """Returns the in-cluster URL, http://NAME.NAMESPACE.svc:PORT."""
        return f"http://{self.metadata.name}.{self.metadata.namespace}.svc:{self.spec.port}"
