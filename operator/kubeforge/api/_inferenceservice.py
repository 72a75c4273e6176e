"""InferenceService: model-server replicas on GPUs behind one Service, scaled on queue depth."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from .. import API_VERSION
from ._activation import Activation
from ._base import DNS_LABEL_PATTERN, MAX_LABEL_LENGTH, MAX_NAME_LENGTH, KubeModel, name_rules, schema_default
from ._core import Condition, ObjectMeta, PodTemplate, conditions_field
from ._serving_start import ForecastStatus, GroupStart, Predictive, Standby, StandbyState, StartTimes
from ._workload import PoolName, TopologyMode, check_unique_pools, pools_field

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"


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


class Metric(str, Enum):
    """Metric is the queue metric that drives autoscaling in queue-depth mode (no slo)."""

    VLLM_WAITING = "VLLMWaiting"
    SGLANG_QUEUE = "SGLangQueue"
    CUSTOM = "Custom"


class ScaleUpRules(KubeModel):
    """ScaleUpRules limit how fast replicas are added."""

    stabilization_window_seconds: int = Field(
        default=0,
        ge=0,
        le=3600,
        description="stabilizationWindowSeconds: the service scales up to the lowest "
        "recommendation of this window, so short spikes do not add replicas (0 reacts at once).",
    )
    max_step: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="maxStep is the most replicas added in one periodSeconds (the Kubernetes "
        "HPA's Pods scale-up policy), in queue-depth mode. The default, 1 per 10 s, paces the "
        "ramp to how long a GPU replica takes to start: replicas asked for a burst that drains "
        "before they are Ready only cost money. A queue above 8 times what the current "
        "replicas carry at targetPerReplica lifts the limit (panic mode, after Knative's). "
        "With slo set it does not apply: the queue model computes the replicas needed and "
        "scale-up goes there in one step (bounded by maxReplicas and the pool).",
    )
    period_seconds: int = Field(
        default=10,
        ge=1,
        le=1800,
        description="periodSeconds is the period that maxStep applies to (queue-depth mode).",
    )


class ScaleDownRules(KubeModel):
    """ScaleDownRules limit how fast replicas are removed."""

    stabilization_window_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="stabilizationWindowSeconds: the service scales down to the highest "
        "recommendation of this window, so a short lull does not remove replicas. The "
        "default, 300, is the Kubernetes HPA's: bursts that recur within 5 minutes find the "
        "replicas still there instead of scaling down and back up. It applies in both modes; "
        "with slo it is what holds the replicas through a day's noise.",
    )
    max_step: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="maxStep is the most replicas removed in one periodSeconds (both modes; "
        "each removed replica is drained first).",
    )
    period_seconds: int = Field(
        default=30,
        ge=1,
        le=1800,
        description="periodSeconds is the period that maxStep applies to.",
    )


class LatencySLO(KubeModel):
    """LatencySLO is the latency the service is sized for, measured from vLLM's histograms.

    The names are vLLM's metric names (vllm:time_to_first_token_seconds,
    vllm:inter_token_latency_seconds) in the unit they are exported in, so a target reads
    directly against histogram_quantile over them; llm-d and NVIDIA Dynamo call the same
    quantities TTFT and ITL."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.timeToFirstTokenSeconds) || has(self.interTokenLatencySeconds)",
                    "message": "slo needs timeToFirstTokenSeconds, interTokenLatencySeconds or both",
                }
            ]
        }
    )

    time_to_first_token_seconds: Optional[float] = Field(
        default=None,
        gt=0,
        le=600,
        description="timeToFirstTokenSeconds is the time-to-first-token target at percentile, "
        "in seconds: queue wait plus prefill, as vllm:time_to_first_token_seconds measures it "
        "(an interactive chat often takes 0.5 to 2). It cannot be below the prefill time of "
        "the prompts: SLOMet then says PrefillAboveTarget.",
    )
    inter_token_latency_seconds: Optional[float] = Field(
        default=None,
        gt=0,
        le=60,
        description="interTokenLatencySeconds is the inter-token-latency target at percentile, "
        "in seconds between two output tokens (vllm:inter_token_latency_seconds; reading "
        "speed is about 0.1 to 0.2). More requests per replica raise it, so it bounds how "
        "many requests each replica may run.",
    )
    percentile: int = Field(
        default=90,
        ge=50,
        le=99,
        description="percentile is the percentile both targets are for: 90 means 90 in 100 "
        "requests (tokens, for ITL) within the target. 90, the default, leaves the slowest "
        "tenth (the longest prompts, the first seconds of a burst) out; 99 keeps headroom "
        "against bursts, at the cost of more replicas.",
    )
    window_seconds: int = Field(
        default=60,
        ge=10,
        le=900,
        description="windowSeconds is the window of the measured rates and percentiles "
        "(Prometheus rate and histogram_quantile range); at least 4 scrape intervals. "
        "Shorter reacts sooner and measures noisier.",
    )


DEFAULT_TARGET_PER_REPLICA = 4.0
"""Queue length per replica of queue-depth mode when targetPerReplica is left out (vLLM's
waiting requests; KServe's KEDA examples target a few waiting requests per replica)."""


class Autoscaling(KubeModel):
    """Autoscaling sizes the service from metrics read from Prometheus. Without slo
    (queue-depth mode, the default): desired = ceil(metric / targetPerReplica). With slo:
    the replicas a queue model needs to meet the latency targets. Always within minReplicas
    and maxReplicas."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.metric != 'Custom' || (has(self.query) && self.query != '')",
                    "message": "autoscaling.query is required when autoscaling.metric is Custom",
                },
                {
                    # Refused when created or changed; an object stored before this rule (whose
                    # targetPerReplica the schema defaulted) is ratcheted, and ScalingActive says
                    # the field is ignored.
                    "rule": "!has(self.slo) || !has(self.targetPerReplica) || (oldSelf.hasValue() && "
                    "has(oldSelf.value().targetPerReplica) && oldSelf.value().targetPerReplica == self.targetPerReplica)",
                    "optionalOldSelf": True,
                    "message": "autoscaling.targetPerReplica is queue-depth mode's target; with autoscaling.slo the "
                    "latency targets size the service: set one of them",
                },
                {
                    "rule": "!has(self.slo) || self.metric == 'VLLMWaiting'",
                    "message": "autoscaling.slo reads vLLM's metrics: leave autoscaling.metric at "
                    "VLLMWaiting (the default) when slo is set",
                },
                {
                    "rule": "!has(self.predictive) || self.predictive.mode == 'Off' || self.metric == 'VLLMWaiting'",
                    "message": "autoscaling.predictive forecasts vLLM's admission rate: leave autoscaling.metric at "
                    "VLLMWaiting (the default) when predictive.mode is not Off",
                },
            ]
        }
    )

    prometheus_url: str = Field(
        default=DEFAULT_PROMETHEUS_URL,
        alias="prometheusURL",
        min_length=1,
        max_length=2048,
        pattern=r"^https?://",
        description="prometheusURL is the base URL of the Prometheus HTTP API to query. The "
        "operator may restrict it to a list of allowed prefixes (chart value "
        "prometheus.allowedURLs); a failed query is reported by status code and a fixed "
        "message, never with the response's content.",
    )
    metric: Metric = Field(
        default=Metric.VLLM_WAITING,
        description="metric is the queue of queue-depth mode: VLLMWaiting (sum of "
        "vllm:num_requests_waiting over the service's pods), SGLangQueue (sum of "
        "sglang:num_queue_reqs) or Custom (query). Whatever the metric, the requests the "
        "activator holds while the service has no ready replica "
        "(kubeforge_activator_queue_length) are added to it, so a service at zero replicas "
        "comes back when requests arrive. With slo set it must stay VLLMWaiting.",
    )
    query: Optional[str] = Field(
        default=None,
        max_length=4096,
        description="query is a PromQL expression returning one number: the queue length of "
        "the whole service. Required when metric is Custom, ignored otherwise. The "
        "placeholders {namespace} and {name} are replaced by the service's namespace and name. "
        "While no replica is ready the activator's held requests are added to it, unless the "
        "query reads kubeforge_activator_queue_length itself.",
    )
    target_per_replica: Optional[float] = Field(
        default=None,
        gt=0,
        description="targetPerReplica is the queue length that one replica should carry "
        "(queue-depth mode). Default 4. Not allowed with slo, which sizes the service from "
        "latency targets instead; an object stored with both before that rule keeps working, "
        "slo wins, and the ScalingActive condition says targetPerReplica is ignored.",
    )
    tolerance: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="tolerance is the relative change (metric per replica against target) "
        "below which the replica count is left alone (queue-depth mode).",
    )
    activation_threshold: float = Field(
        default=0.0,
        ge=0,
        description="activationThreshold: a service at zero replicas is scaled up only when "
        "the metric is above this value (as KEDA's activation threshold). With slo, the metric "
        "is the requests in the service: waiting, held by the activator and running.",
    )
    scale_to_zero_after_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description="scaleToZeroAfterSeconds is how long the metric must stay at or below "
        "activationThreshold before a service with minReplicas 0 is scaled to zero.",
    )
    polling_interval_seconds: int = Field(
        default=5,
        ge=1,
        le=300,
        description="pollingIntervalSeconds is how often the metric is read.",
    )
    scale_up: ScaleUpRules = Field(
        default_factory=ScaleUpRules,
        description="scaleUp limits how fast replicas are added.",
        json_schema_extra=schema_default(ScaleUpRules),
    )
    scale_down: ScaleDownRules = Field(
        default_factory=ScaleDownRules,
        description="scaleDown limits how fast replicas are removed.",
        json_schema_extra=schema_default(ScaleDownRules),
    )
    slo: Optional[LatencySLO] = Field(
        default=None,
        description="slo switches the service to SLO mode: from the measured arrival rate, "
        "time a request runs and what one replica holds, an M/M/c queue model computes the "
        "replicas that keep the time-to-first-token percentile at its target (and a linear "
        "model of ITL against running requests, the inter-token latency), and scale-up goes "
        "there at once. Left out, the service scales on queue depth (metric).",
    )
    predictive: Predictive = Field(
        default_factory=Predictive,
        description="predictive asks for replicas one start ahead of the forecast demand (never fewer).",
        json_schema_extra=schema_default(Predictive),
    )

    @property
    def queue_target(self) -> float:
        """The queue length per replica of queue-depth mode: targetPerReplica, else
        :data:`DEFAULT_TARGET_PER_REPLICA`."""
        return DEFAULT_TARGET_PER_REPLICA if self.target_per_replica is None else self.target_per_replica

    @property
    def ignored_target(self) -> bool:
        """Whether targetPerReplica is set beside slo (only on an object stored before the rule
        that refuses it): slo wins and the field is ignored."""
        return self.slo is not None and self.target_per_replica is not None

    @model_validator(mode="after")
    def _custom_needs_query(self) -> "Autoscaling":
        if self.metric == Metric.CUSTOM and not self.query:
            raise ValueError("autoscaling.query is required when autoscaling.metric is Custom")
        if self.slo is not None and self.metric != Metric.VLLM_WAITING:
            raise ValueError("autoscaling.slo reads vLLM's metrics: leave autoscaling.metric at "
                             "VLLMWaiting (the default) when slo is set")
        if self.predictive.mode.value != "Off" and self.metric != Metric.VLLM_WAITING:
            raise ValueError("autoscaling.predictive forecasts vLLM's admission rate: leave autoscaling.metric at "
                             "VLLMWaiting (the default) when predictive.mode is not Off")
        return self


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
        "Service (no new requests) and is deleted once its running requests reach 0 "
        "(vllm:num_requests_running) or after this many seconds.",
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


class ScaleDirection(str, Enum):
    """ScaleDirection is the direction of a scale change."""

    UP = "Up"
    DOWN = "Down"


class GroupPhase(str, Enum):
    """GroupPhase is where one replica group is in its life."""

    STARTING = "Starting"
    READY = "Ready"
    DRAINING = "Draining"
    STANDBY = "Standby"
    FAILED = "Failed"


class DrainReason(str, Enum):
    """DrainReason says why a group is draining."""

    SCALE_DOWN = "ScaleDown"
    ROLLOUT = "Rollout"


class ReplicaGroup(KubeModel):
    """ReplicaGroup is one replica: its pods' nodes (leader first), where they are and how it is."""

    index: int = Field(ge=0, le=10000, description="index of the group (pods carry it as kubeforge.io/group-index).")
    attempt: int = Field(default=0, ge=0, description="attempt moves by one each time the group is recreated; "
                         "pods carry it as kubeforge.io/restart-attempt.")
    phase: GroupPhase = Field(default=GroupPhase.STARTING, description="phase is Starting, Ready, Draining, Standby "
                              "(started and kept asleep, out of the Service) or Failed.")
    pool: Optional[str] = Field(default=None, max_length=MAX_NAME_LENGTH, description="pool is the GPUPool the group is in.")
    level: Optional[str] = Field(default=None, max_length=MAX_LABEL_LENGTH, description="level is the topology level "
                                 "whose one domain holds the group.")
    domain: Optional[str] = Field(default=None, max_length=MAX_LABEL_LENGTH, description="domain is that domain.")
    nodes: list[Annotated[str, Field(max_length=MAX_NAME_LENGTH)]] = Field(
        default_factory=list, max_length=64,
        description="nodes of the group's pods in worker order (the leader's first); empty once released.")
    gpus_per_pod: int = Field(default=0, ge=0, le=1024, description="gpusPerPod is what each pod holds (the "
                              "scheduler's count, sidecars included): what the pool books on each node.")
    leader: Optional[str] = Field(default=None, max_length=MAX_NAME_LENGTH, description="leader is the leader pod's name.")
    template_hash: Optional[str] = Field(default=None, max_length=64, description="templateHash of the pods; a "
                                         "different one rolls the group out.")
    admitted_at: Optional[datetime] = Field(default=None, description="admittedAt is when the group got its nodes.")
    ready_since: Optional[datetime] = Field(default=None, description="readySince is when every pod of the group "
                                            "became Running and the leader Ready.")
    draining_since: Optional[datetime] = Field(default=None, description="drainingSince is when the group left "
                                               "the Service before being deleted.")
    drain_for: Optional[DrainReason] = Field(default=None, description="drainFor is ScaleDown (deleted once "
                                             "drained) or Rollout (recreated from the new template once drained).")
    restarts: int = Field(default=0, ge=0, description="restarts counts recreations after a pod or node was lost "
                          "(bounded by multiNode.maxGroupRestarts).")
    startup_failures: int = Field(default=0, ge=0, description="startupFailures counts placements that did not "
                                  "start (startupTimeoutSeconds, a node it could not be scheduled on).")
    message: Optional[str] = Field(default=None, max_length=4096, description="message says what the group "
                                   "waits for or why it failed.")
    start: Optional[GroupStart] = Field(default=None, description="start is how long its start took, phase by phase.")
    standby: Optional[StandbyState] = Field(default=None, description="standby is Pending, Asleep or Waking for a "
                                            "standby replica (spec.standby), absent for a serving one.")
    standby_since: Optional[datetime] = Field(default=None, description="standbySince is when it fell asleep or "
                                              "was asked to wake.")


class InferenceServiceStatus(KubeModel):
    """InferenceServiceStatus is the observed state of an InferenceService."""

    observed_generation: Optional[int] = Field(
        default=None,
        ge=0,
        description="observedGeneration is the .metadata.generation this status was computed "
        "from.",
    )
    replicas: int = Field(default=0, ge=0, description="replicas is the number of replica pods.")
    ready_replicas: int = Field(
        default=0, ge=0, description="readyReplicas is the number of Ready replica pods."
    )
    desired_replicas: Optional[int] = Field(
        default=None,
        ge=0,
        description="desiredReplicas is the replica count the autoscaler last chose.",
    )
    last_metric_value: Optional[float] = Field(
        default=None, description="lastMetricValue is the last queue metric read."
    )
    last_metric_time: Optional[datetime] = Field(
        default=None, description="lastMetricTime is when lastMetricValue was read."
    )
    last_scale_time: Optional[datetime] = Field(
        default=None, description="lastScaleTime is when the replica count last changed."
    )
    last_scale_direction: Optional[ScaleDirection] = Field(
        default=None, description="lastScaleDirection is Up or Down."
    )
    groups: list[ReplicaGroup] = Field(
        default_factory=list,
        max_length=1000,
        description="groups are the replicas that hold GPUs (one group of one or more pods each), by index.",
    )
    nodes_per_replica: Optional[int] = Field(
        default=None, ge=1, le=64,
        description="nodesPerReplica is the pods (one per node) of one replica, from parallelism and the "
        "pool's GPUs per node.",
    )
    standby_replicas: int = Field(default=0, ge=0, description="standbyReplicas is the replicas asleep (spec.standby).")
    standby_gpus: int = Field(default=0, ge=0, alias="standbyGPUs", description="standbyGPUs is the GPUs the standby "
                              "replicas hold: what the insurance costs.")
    start_time: Optional[StartTimes] = Field(default=None, description="startTime is the service's measured starts "
                                             "and wakes (predictive scale-up's lead time).")
    forecast: Optional[ForecastStatus] = Field(default=None, description="forecast is predictive scale-up's last "
                                               "forecast.")
    conditions: list[Condition] = conditions_field(
        "Ready, ScalingActive, ScalingLimited, ReplicaGroupFailed, SLOMet")
    url: Optional[str] = Field(
        default=None,
        max_length=2048,
        description="url is the in-cluster address of the service: "
        "http://NAME.NAMESPACE.svc:PORT.",
    )


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
