"""TrainingJob status: phase, placement, restart counters, checkpoints, accounting."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Optional

from pydantic import Field

from ._base import MAX_LABEL_LENGTH, MAX_NAME_LENGTH, KubeModel
from ._core import Condition, conditions_field

NodeName = Annotated[str, Field(max_length=MAX_NAME_LENGTH)]


class TrainingJobPhase(str, Enum):
    """TrainingJobPhase is a one-word summary of a TrainingJob's state."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class Placement(KubeModel):
    """Placement is where the job's replicas were placed, and why."""

    pool: Optional[str] = Field(
        default=None, max_length=MAX_NAME_LENGTH, description="pool is the chosen GPUPool."
    )
    level: Optional[str] = Field(
        default=None,
        max_length=MAX_LABEL_LENGTH,
        description="level is the topology level of the chosen domain.",
    )
    domain: Optional[str] = Field(
        default=None,
        max_length=MAX_LABEL_LENGTH,
        description="domain is the chosen domain (its node label value at that level).",
    )
    nodes: list[NodeName] = Field(
        default_factory=list,
        max_length=1024,
        description="nodes are the node names, in rank order (replica i runs on nodes[i]).",
    )
    reason: Optional[str] = Field(
        default=None,
        max_length=4096,
        description="reason explains the choice, or why the job cannot be placed yet.",
    )
    admitted_at: Optional[datetime] = Field(
        default=None,
        description="admittedAt is when this placement was made; startupTimeoutSeconds counts "
        "from it.",
    )
    spec_hash: Optional[str] = Field(
        default=None,
        max_length=64,
        description="specHash identifies the replicas, gpusPerReplica, topology, pools and "
        "template this placement was made for; when the spec no longer matches it, the gang "
        "is restarted as a new attempt with the new spec (reason SpecChanged).",
    )


class RestartCounts(KubeModel):
    """RestartCounts counts the job's restarts, by cause."""

    failures: int = Field(
        default=0, ge=0, description="failures is the number of restarts after real failures."
    )
    preemptions: int = Field(
        default=0,
        ge=0,
        description="preemptions is the number of restarts after preemption (spot reclaim, "
        "drain, eviction, a higher-priority job); they do not count against maxRestarts.",
    )
    startup_failures: int = Field(
        default=0,
        ge=0,
        description="startupFailures is the number of times the gang failed to start: startup "
        "timeouts, placements lost to other pods, creates the API server refused. Counted "
        "against failurePolicy.maxStartupRetries.",
    )


class LastCheckpoint(KubeModel):
    """LastCheckpoint is the latest checkpoint the workload reported."""

    step: Optional[int] = Field(
        default=None, ge=0, description="step is the training step of the checkpoint."
    )
    path: Optional[str] = Field(
        default=None, max_length=4096, description="path of the checkpoint in the volume."
    )
    time: Optional[datetime] = Field(
        default=None, description="time the checkpoint was written."
    )


MAX_REPORTED_METRICS = 16
"""The most metrics one progress report carries (Kubeflow Trainer's trainerStatus.metrics is a
short list of the latest values, not a history)."""

STATUS_TOKEN_AUDIENCE = "kubeforge.io"
"""The audience of the projected ServiceAccount token every worker pod gets to report its
progress (docs/workload-reporting.md): the status endpoint accepts only tokens issued for it
(TokenReview with this audience), and the API server accepts none of them (its own audience
differs), so the token can do nothing else. Kubeflow Trainer uses ``trainer.kubeflow.org``."""


class ReportedMetric(KubeModel):
    """ReportedMetric is one training metric's latest value, as a worker reported it
    (Kubeflow Trainer's trainerStatus.metrics[] entry)."""

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z_][A-Za-z0-9_./-]*$",
                      description="name of the metric, e.g. loss, eval_loss, tokens_per_second.")
    value: str = Field(min_length=1, max_length=64, description="value of the metric, as the worker sent "
                       "it (a number written as a string, as Kubeflow Trainer keeps it).")


class Progress(KubeModel):
    """Progress is what the job's workers last reported about their training (see
    docs/workload-reporting.md): where they are, how far is left, and when they expect to end.
    It is written only from reports of a live pod of the current attempt; a job that never
    reports has none, and then admission falls back on the time since placement."""

    step: Optional[int] = Field(default=None, ge=0, description="step is the training step the workers "
                                "reached (optimizer steps, as the training loop counts them).")
    total_steps: Optional[int] = Field(default=None, ge=1, description="totalSteps is the step the "
                                       "training ends at, when known.")
    percent: Optional[float] = Field(default=None, ge=0, le=100, description="percent is how much of the "
                                     "training is done, 0-100: reported, else step / totalSteps.")
    eta: Optional[datetime] = Field(default=None, description="eta is when the training is expected to "
                                    "end: the report's time plus its estimated remaining seconds, else "
                                    "extrapolated from the rate of steps between reports. Admission reads "
                                    "it to decide what may run before a reserved gang (backfill).")
    last_report_time: Optional[datetime] = Field(default=None, description="lastReportTime is when the "
                                                 "operator accepted the last report.")
    reporter: Optional[str] = Field(default=None, max_length=MAX_NAME_LENGTH, description="reporter is "
                                    "the pod whose report this is.")
    metrics: list[ReportedMetric] = Field(default_factory=list, max_length=MAX_REPORTED_METRICS,
                                          description="metrics are the latest values reported (loss, "
                                          "tokens per second...), at most 16.")


class ReplicaCounts(KubeModel):
    """ReplicaCounts counts the job's worker pods."""

    active: int = Field(default=0, ge=0, description="active is the number of pods running or "
                        "pending.")
    ready: int = Field(default=0, ge=0, description="ready is the number of Ready pods.")
    succeeded: int = Field(
        default=0, ge=0, description="succeeded is the number of pods that exited 0."
    )
    failed: int = Field(default=0, ge=0, description="failed is the number of failed pods.")


class TrainingJobStatus(KubeModel):
    """TrainingJobStatus is the observed state of a TrainingJob."""

    observed_generation: Optional[int] = Field(
        default=None,
        ge=0,
        description="observedGeneration is the .metadata.generation this status was computed "
        "from.",
    )
    phase: Optional[TrainingJobPhase] = Field(
        default=None,
        description="phase summarizes the job: Pending, Running, Restarting, Succeeded, Failed "
        "or Suspended.",
    )
    conditions: list[Condition] = conditions_field(
        "Admitted, Ready, Running, Preempted, Succeeded, Failed, Suspended, ComputeDomainReady (a gang "
        "over several nodes of one NVLink clique in a DRA pool: its ComputeDomain's IMEX daemons are up on "
        "every node of the placement; until then the workers wait in ContainerCreating)"
    )
    placement: Optional[Placement] = Field(
        default=None, description="placement is where the replicas run."
    )
    restarts: RestartCounts = Field(
        default_factory=RestartCounts, description="restarts counts restarts by cause."
    )
    last_checkpoint: Optional[LastCheckpoint] = Field(
        default=None, description="lastCheckpoint is the latest checkpoint reported: live, by a "
        "worker's progress report, or after a run in a worker's termination message."
    )
    progress: Optional[Progress] = Field(
        default=None, description="progress is what the workers last reported about their training "
        "(step, ETA, metrics); empty until a worker reports."
    )
    start_time: Optional[datetime] = Field(
        default=None, description="startTime is when all replicas first ran."
    )
    completion_time: Optional[datetime] = Field(
        default=None, description="completionTime is when the job succeeded or failed."
    )
    gpu_hours: float = Field(
        default=0.0, ge=0, description="gpuHours is the GPU time the job has used, in hours, "
        "brought up to date every 10 minutes while it runs and when a run ends (add "
        "(now - runningSince) x GPUs for the figure of this moment)."
    )
    run_seconds: float = Field(
        default=0.0,
        ge=0,
        description="runSeconds is how long the job's earlier attempts held their placements, in "
        "seconds, each from status.placement.admittedAt until its gang was stopped (time waiting "
        "for admission does not count); the attempt holding a placement now adds now - "
        "placement.admittedAt. spec.maxRunSeconds limits the sum.",
    )
    cost: Optional[float] = Field(
        default=None,
        ge=0,
        description="cost is gpuHours priced at each pool's pricePerGPUHour (empty when no "
        "pool has a price).",
    )
    replicas: ReplicaCounts = Field(
        default_factory=ReplicaCounts, description="replicas counts the worker pods."
    )
    attempt: int = Field(
        default=0,
        ge=0,
        description="attempt is the gang's current run: 0 first, +1 every time the whole gang is "
        "stopped (failure, preemption, suspend, startup failure, spec change). Pods carry it in "
        "the kubeforge.io/restart-attempt label; pods of an older attempt never count.",
    )
    running_since: Optional[datetime] = Field(
        default=None,
        description="runningSince is when the current running segment started (or was last "
        "folded into gpuHours); empty while the gang is not running.",
    )
    restart_not_before: Optional[datetime] = Field(
        default=None,
        description="restartNotBefore is the end of the backoff after a worker failure: the "
        "gang is not placed again before this time.",
    )
