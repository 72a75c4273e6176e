"""InferenceService status: the replica groups, their phases and drains, the scaling record, the
start times and the forecast."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Optional

from pydantic import Field

from ._base import MAX_LABEL_LENGTH, MAX_NAME_LENGTH, KubeModel
from ._core import Condition, conditions_field
from ._serving_start import ForecastStatus, GroupStart, StandbyState, StartTimes

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


class WeightsSource(str, Enum):
    """WeightsSource says whether a group's weights were on its nodes when it got them."""

    CACHED = "Cached"
    COLD = "Cold"


class WeightsPhase(str, Enum):
    """WeightsPhase is where a group's weights are: Downloading (a node's copy is being fetched),
    LoadingWeights (every node holds it; the engine loads it and is not Ready yet), Loaded."""

    DOWNLOADING = "Downloading"
    LOADING_WEIGHTS = "LoadingWeights"
    LOADED = "Loaded"


class GroupWeights(KubeModel):
    """GroupWeights is how a group with spec.model gets its weights."""

    source: WeightsSource = Field(description="source is Cached (every node held a verified copy when the group "
                                  "got its nodes) or Cold (a node had to fetch it first).")
    phase: WeightsPhase = Field(description="phase is Downloading, LoadingWeights or Loaded.")
    progress_percent: Optional[int] = Field(default=None, ge=0, le=100, description="progressPercent of the "
                                            "slowest node's download while Downloading.")
    message: Optional[str] = Field(default=None, max_length=1024, description="message names the nodes whose "
                                   "copy failed and the node agent's reason (it retries after a back-off).")


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
    weights: Optional[GroupWeights] = Field(default=None, description="weights says whether its model was cached "
                                            "on its nodes and where its load is (spec.model).")
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
