"""TrainingJob: a gang of worker pods that run one distributed training program."""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from .. import API_VERSION
from ._base import (
    DNS_LABEL_PATTERN,
    MAX_LABEL_LENGTH,
    KubeModel,
    name_rules,
    schema_default,
)
from ._checkpoint import Checkpoint
from ._core import ObjectMeta
from ._pod_template import PodTemplate
from ._trainingjob_status import TrainingJobStatus
from ._workload import PoolName, TopologyMode, check_unique_pools, pools_field

MAX_JOB_NAME_LENGTH = 51
"""A worker's hostname is ``<job>-worker-<rank>`` with rank < 1024: 51 + 12 = 63, the DNS
label limit."""


class TrainingTopology(KubeModel):
    """TrainingTopology says which topology domain the job's replicas must share."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.mode != 'Required' || has(self.level)",
                    "message": "topology.level is required when topology.mode is Required",
                }
            ]
        }
    )

    mode: TopologyMode = Field(
        default=TopologyMode.PREFERRED,
        description="mode is Required (all replicas in one domain of the level, or the job "
        "waits), Preferred (the narrowest domain that fits, else spread over the pool) or "
        "None (anywhere in the pool).",
    )
    level: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=MAX_LABEL_LENGTH,
        pattern=DNS_LABEL_PATTERN,
        description="level is the name of the pool's topology level (see GPUPool "
        "status.topologyLevels) whose domain the replicas stay inside. Required when mode is "
        "Required; with Preferred it is the widest level tried before spreading.",
    )

    @model_validator(mode="after")
    def _required_needs_level(self) -> "TrainingTopology":
        if self.mode == TopologyMode.REQUIRED and not self.level:
            raise ValueError("topology.level is required when topology.mode is Required")
        return self


class FailurePolicy(KubeModel):
    """FailurePolicy says how the job reacts to failed and preempted workers. A failure or a
    preemption restarts the whole gang from the last checkpoint."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.backoffSeconds <= self.maxBackoffSeconds",
                    "message": "failurePolicy.backoffSeconds must not exceed "
                    "failurePolicy.maxBackoffSeconds",
                }
            ]
        }
    )

    max_restarts: int = Field(
        default=3,
        ge=0,
        le=100,
        description="maxRestarts is how many times the job is restarted after real failures "
        "(a worker exits non-zero) before it is marked Failed. Preemptions (spot reclaim, "
        "node drain, eviction) never count.",
    )
    backoff_seconds: int = Field(
        default=10,
        ge=0,
        le=3600,
        description="backoffSeconds is the wait before the first restart after a failure; it "
        "doubles with each further failure.",
    )
    max_backoff_seconds: int = Field(
        default=600,
        ge=0,
        le=86400,
        description="maxBackoffSeconds caps the exponential backoff.",
    )
    preemptions_before_fallback: int = Field(
        default=2,
        ge=0,
        le=100,
        description="preemptionsBeforeFallback is how many preemptions in a pool move the job "
        "to the next pool in pools (0 and 1 both move it at the first preemption).",
    )
    max_preemptions: int = Field(
        default=100,
        ge=0,
        le=100000,
        description="maxPreemptions is how many preemptions the job survives, restarting from "
        "its last checkpoint each time; at the next one it is Failed with reason "
        "PreemptionLimitExceeded. Counted apart from maxRestarts.",
    )
    max_startup_retries: int = Field(
        default=5,
        ge=0,
        le=100,
        description="maxStartupRetries is how many times a gang that failed to start (not every "
        "worker Running within startupTimeoutSeconds, a placement lost to another pod, a worker "
        "Pod or volume claim the API server refused) is requeued, after backoffSeconds doubling "
        "each time, before the job is Failed with reason StartupRetryLimitExceeded.",
    )

    @model_validator(mode="after")
    def _backoff_within_cap(self) -> "FailurePolicy":
        if self.backoff_seconds > self.max_backoff_seconds:
            raise ValueError(
                "failurePolicy.backoffSeconds must not exceed failurePolicy.maxBackoffSeconds"
            )
        return self


class TrainingJobSpec(KubeModel):
    """TrainingJobSpec is the desired state of a TrainingJob."""

    pools: list[PoolName] = pools_field("job")
    replicas: int = Field(
        ge=1,
        le=1024,
        description="replicas is the number of worker pods, started and restarted together "
        "as a gang (typically one per node).",
    )
    gpus_per_replica: int = Field(
        ge=1,
        le=64,
        description="gpusPerReplica is the number of GPUs each worker pod requests (and the "
        "torchrun nproc-per-node).",
    )
    priority: int = Field(
        default=0,
        ge=-1000000,
        le=1000000,
        description="priority orders jobs waiting for GPUs: higher is admitted first.",
    )
    template: PodTemplate = Field(
        description="template is the pod template of every worker (a core/v1 PodTemplateSpec). "
        "The operator adds GPU resources, node affinity, tolerations, the checkpoint volume "
        "and the torchrun environment (PET_*, WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT).",
    )
    topology: TrainingTopology = Field(
        default_factory=TrainingTopology,
        description="topology says how tightly the replicas are packed in the pool's "
        "interconnect hierarchy.",
        json_schema_extra=schema_default(TrainingTopology),
    )
    checkpoint: Checkpoint = Field(
        default_factory=Checkpoint,
        description="checkpoint says where checkpoints are kept across restarts: a claim per "
        "job (the default), a directory per job in a shared claim, or an object store, with an "
        "optional node-local fast tier.",
        json_schema_extra=schema_default(Checkpoint),
    )
    failure_policy: FailurePolicy = Field(
        default_factory=FailurePolicy,
        description="failurePolicy says how failures and preemptions are retried.",
        json_schema_extra=schema_default(FailurePolicy),
    )
    suspend: bool = Field(
        default=False,
        description="suspend stops the job's pods (keeping its checkpoints) while true; "
        "setting it back to false resumes the job.",
    )
    startup_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=86400,
        description="startupTimeoutSeconds is how long, from admission, every worker has to be "
        "Running (Kueue's waitForPodsReady). A gang that does not start in time (an image that "
        "cannot be pulled, a volume that never binds, a constraint no node meets) is stopped, its "
        "GPUs are released, the reason taken from the pods is reported in the Admitted condition, "
        "and it is requeued (see failurePolicy.maxStartupRetries).",
    )
    fallback_after_seconds: int = Field(
        default=300,
        ge=0,
        le=604800,
        description="fallbackAfterSeconds is how long a job waits for room in its pool before "
        "the next pool of pools is tried as well, and so on down the list (0 tries every pool "
        "at once, as Kueue tries its flavors). Preemptions move a job down the list too, see "
        "failurePolicy.preemptionsBeforeFallback.",
    )

    max_run_seconds: Optional[int] = Field(
        default=None,
        ge=60,
        le=31_536_000,
        description="maxRunSeconds is the job's time limit (Slurm's --time, Kueue's "
        "maximumExecutionTimeSeconds): the most seconds its gang may run, summed over its "
        "attempts (time waiting for admission does not count). Reached, the gang is stopped and "
        "the job Failed with reason MaxRunSecondsExceeded. Admission also reads it as the "
        "latest end of a running job that reports no ETA, to decide what may start before a "
        "reserved gang (backfill). Empty: no limit.",
    )

    _check_pools = field_validator("pools")(check_unique_pools)


class TrainingJob(KubeModel):
    """TrainingJob runs a gang of worker pods for one distributed training program, placed
    inside the fastest interconnect domain that fits, restarted from its last checkpoint after
    failures and preemptions."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": name_rules(
        "TrainingJob", MAX_JOB_NAME_LENGTH,
        "it names the workers' hostnames <name>-worker-<rank>, at most 63 characters"
    )})

    KIND: ClassVar[str] = "TrainingJob"
    PLURAL: ClassVar[str] = "trainingjobs"
    SINGULAR: ClassVar[str] = "trainingjob"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tj", "tjob")
    CATEGORIES: ClassVar[tuple[str, ...]] = ("kubeforge",)
    NAMESPACED: ClassVar[bool] = True
    PRINTER_COLUMNS: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Pool", "type": "string", "jsonPath": ".status.placement.pool"},
        {"name": "Domain", "type": "string", "jsonPath": ".status.placement.domain"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "GPUs/Replica", "type": "integer", "jsonPath": ".spec.gpusPerReplica"},
        {"name": "Progress", "type": "number", "jsonPath": ".status.progress.percent"},
        {"name": "ETA", "type": "string", "jsonPath": ".status.progress.eta"},
        {"name": "Preemptions", "type": "integer", "jsonPath": ".status.restarts.preemptions"},
        {"name": "Failures", "type": "integer", "jsonPath": ".status.restarts.failures"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    api_version: Literal["kubeforge.io/v1alpha1"] = Field(
        default=API_VERSION, description="apiVersion is kubeforge.io/v1alpha1."
    )
    kind: Literal["TrainingJob"] = Field(default="TrainingJob", description="kind is TrainingJob.")
    metadata: ObjectMeta = Field(
        default_factory=ObjectMeta, description="metadata is the object's metadata."
    )
    spec: TrainingJobSpec = Field(description="spec is the desired state of the job.")
    status: Optional[TrainingJobStatus] = Field(
        default=None, description="status is the observed state of the job."
    )
