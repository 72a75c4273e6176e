"""kubeforge's status vocabulary, one constant each (JobSet's ``pkg/constants/constants.go``):
the phases of a TrainingJob, the condition types of TrainingJobs, InferenceServices and
GPUPools, and every condition and Event reason the training, admission and serving sides
write. (The autoscaler's and the activator's are in :mod:`kubeforge.autoscaling` and
:mod:`kubeforge.activator`.)

One word, one constant: where kubeforge uses the same word in several roles (``Failed`` is a
phase, a condition type, the reason of ``Running=False`` and a Warning Event), one constant
serves them all and its docstring lists the roles. The phases' words come from the CRD's own
enum (:class:`kubeforge.api.TrainingJobPhase`). Decisions compare these constants (or a plan's
typed fields), never message text. Strings that are Kubernetes' own (pod phases, a container's
``waiting`` reason such as ``ErrImagePull``, kube-scheduler's ``Unschedulable`` as it reads it
from a pod) are passed through as they come.
"""

from __future__ import annotations

from typing import Final

from kubeforge.api import TrainingJobPhase

# --- Event types (core/v1 Event.type) ---------------------------------------------------------

NORMAL: Final = "Normal"
"""Event type of an expected step (placed, running, suspended, succeeded...)."""
WARNING: Final = "Warning"
"""Event type of something a user may have to act on (a failure, a wait, a refused spec)."""

# --- TrainingJob phases (status.phase; the CRD's enum) ----------------------------------------

PENDING: Final = TrainingJobPhase.PENDING.value
"""Phase: waiting for admission, or placed and starting."""
RUNNING: Final = TrainingJobPhase.RUNNING.value
"""Phase: every worker runs. Also the condition type ``Running`` (True once every worker runs;
False with the reason that stopped it) and a Normal Event when the gang starts running."""
RESTARTING: Final = TrainingJobPhase.RESTARTING.value
"""Phase: the gang was stopped by a preemption or a worker failure and waits to run again."""
SUCCEEDED: Final = TrainingJobPhase.SUCCEEDED.value
"""Phase: every worker exited 0. Also the condition type ``Succeeded`` (True:
:data:`ALL_WORKERS_SUCCEEDED`), the reason of ``Running=False`` / ``Ready=False`` once it
finished, and the Normal Event then."""
FAILED: Final = TrainingJobPhase.FAILED.value
"""Phase: the job failed for good. Also the condition type ``Failed`` (True; its reason says
which limit: :data:`BACKOFF_LIMIT_EXCEEDED`, :data:`PREEMPTION_LIMIT_EXCEEDED`,
:data:`STARTUP_RETRY_LIMIT_EXCEEDED`, :data:`MAX_RUN_SECONDS_EXCEEDED`), the reason of ``Running=False`` / ``Ready=False`` then,
and the Warning Event then."""
SUSPENDED: Final = TrainingJobPhase.SUSPENDED.value
"""Phase: ``spec.suspend`` is true; no pods, no GPUs. Also the condition type ``Suspended``
(:data:`JOB_SUSPENDED` / :data:`JOB_RESUMED`) and the Normal Event when the job is suspended."""

JOB_PHASES: Final = tuple(p.value for p in TrainingJobPhase)
"""Every TrainingJob phase, in the CRD's order (the labels of ``kubeforge_trainingjobs``)."""
TERMINAL_JOB_PHASES: Final = (SUCCEEDED, FAILED)
"""Phases a TrainingJob never leaves: it holds nothing any more."""

# --- condition types (the phase words above are condition types too) -------------------------

ADMITTED: Final = "Admitted"
"""Condition type of a TrainingJob: True once admission placed the gang (:data:`PLACED`), False
with the reason it waits or was stopped. Also the Normal Event when a gang or a serving replica
group is placed."""
READY: Final = "Ready"
"""Condition type of a TrainingJob (every worker runs: ``kubectl wait --for=condition=Ready``),
an InferenceService (some replica serves) and a GPUPool (some node is usable)."""
PREEMPTED: Final = "Preempted"
"""Condition type of a TrainingJob: True when its gang was stopped by a disruption (reason
:data:`PREEMPTED`, :data:`PREEMPTED_BY_HIGHER_PRIORITY`, :data:`QUOTA_RECLAIMED` or
:data:`PREEMPTED_FOR_RESERVATION`), False
(:data:`RECOVERED`) once it runs again. Also the reason of ``Admitted``/``Running``/``Ready=False``
after a disruption and of the Warning Event then."""
COMPUTE_DOMAIN_READY: Final = "ComputeDomainReady"
"""Condition type of a multi-node NVLink gang: its ComputeDomain's IMEX daemons are up on every
node of the placement."""
TOPOLOGY_READY: Final = "TopologyReady"
"""Condition type of a GPUPool: every topology level it uses is on its nodes."""
REPLICA_GROUP_FAILED: Final = "ReplicaGroupFailed"
"""Condition type of an InferenceService (True: a replica group used up its restarts; False:
:data:`NO_FAILED_GROUPS`), its True reason, and the Warning Event when a group fails (its GPUs
are released until the spec changes)."""

# --- TrainingJob: Admitted --------------------------------------------------------------------

PLACED: Final = "Placed"
"""``Admitted=True``: admission placed the gang; the message says where and why there."""
PREEMPTING: Final = "Preempting"
"""``Admitted=False`` (a Normal Event): the job preempts others and is admitted once their GPUs
are free."""
CAPACITY_RESERVED: Final = "CapacityReserved"
"""``Admitted=False`` (a Normal Event): the gang does not fit now and GPUs are reserved for it from
its expected start (the pool's ``spec.reservations``); the message says which and when. Only jobs
that end before that start may use them meanwhile (backfill)."""
CLAIM_NOT_FOUND: Final = "ClaimNotFound"
"""``Admitted=False`` (Warning Event): ``checkpoint.existingClaimName`` names a claim that does
not exist."""
STORAGE_CLASS_NOT_FOUND: Final = "StorageClassNotFound"
"""``Admitted=False`` (Warning Event): ``checkpoint.storageClassName`` names no StorageClass."""
POOL_NOT_FOUND: Final = "PoolNotFound"
"""``Admitted=False`` of a TrainingJob, ``Ready=False`` of an InferenceService (Warning Event):
none of the GPUPools its spec names exists."""
MODEL_NOT_MOUNTED: Final = "ModelNotMounted"
"""InferenceService (a Warning Event, once a generation): its ``spec.model`` comes from the node
caches, but the operator runs without ``--model-cache`` (the chart's ``cacheAgent.enabled``): no
agent fetches it, so nothing is mounted and the template loads its own weights."""
QUOTA_EXCEEDED: Final = "QuotaExceeded"
"""``Admitted=False`` (Warning Event): admitting the gang would break its team's borrowing limit."""
UNSCHEDULABLE: Final = "Unschedulable"
"""``Admitted=False`` (Warning Event): the gang can never fit any of its pools as they are
(also the wait of a serving replica group). As a startup failure: a worker kube-scheduler never
bound (the scheduler's own reason, kept)."""
WAITING_FOR_CAPACITY: Final = "WaitingForCapacity"
"""``Admitted=False`` (Warning Event): the gang fits its pools but not their free GPUs now (also
the wait of a serving replica group)."""
INVALID_SPEC: Final = "InvalidSpec"
"""``Admitted=False`` (and Ready=False; a Warning Event): the models or the API server refused
something only an edit of the spec can fix. Admission waits for the spec to change. Also
``Ready=False`` of an InferenceService and a GPUPool whose spec is refused."""
UNSCHEDULABLE_TEMPLATE: Final = "UnschedulableTemplate"
"""``Admitted=False`` (Running, Ready; a Warning Event): kube-scheduler will not bind a worker
on the node it was given and the job's own template explains why (its requests, node
constraints, tolerations, or its required inter-pod affinity / spread constraints). The GPUs are
released at once, no startup retry is counted, and admission waits for the spec to change:
placing it again would fail the same way. Also the Warning Event of a serving replica group
that fails for the same cause."""
PLACEMENT_LOST: Final = "PlacementLost"
"""``Admitted=False`` (Running, Ready; a Warning Event): a worker could not start on its node for
a reason outside the job's own spec (something else took the GPUs, the kubelet refused it): a
startup failure, retried with backoff. Also a serving group's failed start."""
NAMESPACE_TERMINATING: Final = "NamespaceTerminating"
"""``Admitted=False``: the namespace is being deleted; nothing more is created or restarted and
no preemption is counted."""
SPEC_CHANGED: Final = "SpecChanged"
"""``Admitted``/``Running``/``Ready=False`` (a Normal Event): the spec changed under a placed gang;
it restarts with the new spec as a new attempt, counted neither as a failure nor a preemption."""
CREATE_FAILED: Final = "CreateFailed"
"""``Admitted=False`` (Running, Ready; a Warning Event): the API server refused one of the gang's
objects for a reason an edit of the spec does not fix (quota, PodSecurity, a webhook): a startup
failure, retried with backoff. Also ``Ready=False`` of an InferenceService whose Service or pod
was refused so."""
SECRET_NOT_FOUND: Final = "SecretNotFound"
"""``Admitted=False`` (Running, Ready; a Warning Event): ``checkpoint.objectStore.secretName`` names
no Secret in the job's namespace (asked right before the gang's pods are made: kubeforge keeps no
index of Secrets): a startup failure, retried with backoff, so creating the Secret lets the next
try start."""
STARTUP_TIMEOUT: Final = "StartupTimeout"
"""``Admitted=False`` (Running, Ready; a Warning Event): not every worker ran
``startupTimeoutSeconds`` after admission (and no pod says why): a startup failure. Also a
serving group's failed start."""
MODEL_COPY_FAILED: Final = "ModelCopyFailed"
"""A serving group's failed start (a Warning Event): ``startupTimeoutSeconds`` after admission a
node of the group still has no verified copy of the service's ``spec.model`` and its agent's last
fetch failed (its reason in the message): the group is placed again, its GPUs not held waiting."""
VOLUME_NOT_BOUND: Final = "VolumeNotBound"
"""``Admitted=False`` (Running, Ready; a Warning Event): the gang did not start within
``startupTimeoutSeconds`` because its own checkpoint claim never became Bound (its workers
waited behind the volume gate): a startup failure."""
BACKOFF: Final = "Backoff"
"""``Admitted=False``: a worker failed; the gang is placed again after its backoff."""
JOB_SUSPENDED: Final = "JobSuspended"
"""``Suspended=True`` and ``Admitted``/``Running``/``Ready=False``: ``spec.suspend`` is true."""
JOB_RESUMED: Final = "JobResumed"
"""``Suspended=False``: ``spec.suspend`` turned false; the job waits for admission again."""

NORMAL_WAITS: Final = (PREEMPTING, CAPACITY_RESERVED)
"""``Admitted=False`` reasons whose Event is Normal: the job's way to its GPUs is under way; every
other wait is a Warning."""
BLOCKED_UNTIL_SPEC_CHANGES: Final = (INVALID_SPEC, UNSCHEDULABLE_TEMPLATE)
"""``Admitted=False`` reasons, at the job's current generation, that stop admission until the
spec changes."""

STARTUP_FAILURE_REASONS: Final = (STARTUP_TIMEOUT, PLACEMENT_LOST, CREATE_FAILED, UNSCHEDULABLE, VOLUME_NOT_BOUND,
                                  SECRET_NOT_FOUND, MODEL_COPY_FAILED)
"""kubeforge's own reasons of a failed start (``restarts.startupFailures``); a stuck container's
own reason (``ErrImagePull``...) is the other kind. The labels of ``kubeforge_startup_failures_total``
known in advance."""

# --- TrainingJob: Ready, Running ----------------------------------------------------------------

NOT_ADMITTED: Final = "NotAdmitted"
"""``Ready=False``: the job waits for admission (``Admitted=False`` says why)."""
ALL_WORKERS_RUNNING: Final = "AllWorkersRunning"
"""``Running=True`` and ``Ready=True``: every worker of the gang runs."""
WORKER_FAILED: Final = "WorkerFailed"
"""``Running``/``Ready=False`` (a Warning Event): a worker failed; the gang restarts after backoff
(``restarts.failures``)."""

# --- TrainingJob: Preempted ---------------------------------------------------------------------

PREEMPTED_BY_HIGHER_PRIORITY: Final = "PreemptedByHigherPriority"
"""``Preempted=True``: admission stopped the gang for a higher-priority job of its team (a label
of ``kubeforge_preemptions_total``)."""
QUOTA_RECLAIMED: Final = "QuotaReclaimed"
"""``Preempted=True``: admission stopped the gang, whose team borrowed, for a team within its
nominal quota (a label of ``kubeforge_preemptions_total``)."""
PREEMPTED_FOR_RESERVATION: Final = "PreemptedForReservation"
"""``Preempted=True``: admission stopped the gang, on the reserved domain of a gang of the same or
a higher priority that waited longer than its pool's ``spec.reservations.preemptAfterSeconds``
(opt-in; a label of ``kubeforge_preemptions_total``)."""
PREEMPTION_REASONS: Final = (PREEMPTED_BY_HIGHER_PRIORITY, QUOTA_RECLAIMED, PREEMPTED_FOR_RESERVATION)
"""Why admission chooses a running gang as a victim."""
RECOVERED: Final = "Recovered"
"""``Preempted=False``: the gang runs again after a preemption."""

# --- TrainingJob: Failed, Succeeded -------------------------------------------------------------

BACKOFF_LIMIT_EXCEEDED: Final = "BackoffLimitExceeded"
"""``Failed=True``: a worker failed with ``failurePolicy.maxRestarts`` used up."""
PREEMPTION_LIMIT_EXCEEDED: Final = "PreemptionLimitExceeded"
"""``Failed=True``: preempted more than ``failurePolicy.maxPreemptions`` times."""
STARTUP_RETRY_LIMIT_EXCEEDED: Final = "StartupRetryLimitExceeded"
"""``Failed=True``: failed to start with ``failurePolicy.maxStartupRetries`` used up."""
MAX_RUN_SECONDS_EXCEEDED: Final = "MaxRunSecondsExceeded"
"""``Failed=True`` and a Warning Event: the job's attempts held their placements for
``spec.maxRunSeconds`` in all (``status.runSeconds`` plus the current attempt; Slurm's time limit,
Kueue's ``maximumExecutionTimeSeconds``); its gang is stopped and its GPUs released."""
ALL_WORKERS_SUCCEEDED: Final = "AllWorkersSucceeded"
"""``Succeeded=True``: every worker exited 0."""

# --- TrainingJob: ComputeDomainReady ------------------------------------------------------------

IMEX_DAEMONS_READY: Final = "IMEXDaemonsReady"
"""``ComputeDomainReady=True``: every node of the placement runs a Ready IMEX daemon of the domain."""
IMEX_DAEMONS_NOT_READY: Final = "IMEXDaemonsNotReady"
"""``ComputeDomainReady=False``: the domain exists, some node's IMEX daemon is not Ready yet."""
COMPUTE_DOMAIN_PENDING: Final = "ComputeDomainPending"
"""``ComputeDomainReady=False``: the domain is being created."""
GANG_NOT_PLACED: Final = "GangNotPlaced"
"""``ComputeDomainReady=False``: the gang holds no placement (restarting, suspended, finished)."""

# --- TrainingJob: Events only -------------------------------------------------------------------

RESUMED: Final = "Resumed"
"""Normal Event: ``spec.suspend`` turned false."""
CHECKPOINT_REPORTED: Final = "CheckpointReported"
"""Normal Event: a worker reported a newer checkpoint (``status.lastCheckpoint``)."""

# --- InferenceService ---------------------------------------------------------------------------

REPLICAS_READY: Final = "ReplicasReady"
"""``Ready=True``: at least one replica group serves."""
NO_READY_REPLICAS: Final = "NoReadyReplicas"
"""``Ready=False``: no replica group serves; the message says what the first one waits for."""
SCALED_TO_ZERO: Final = "ScaledToZero"
"""``Ready=True``: no replicas, scaled to zero while idle (``minReplicas: 0``)."""
NO_FAILED_GROUPS: Final = "NoFailedGroups"
"""``ReplicaGroupFailed=False``: every group is within its restarts."""
REPLICA_GROUP_RESTARTED: Final = "ReplicaGroupRestarted"
"""Warning Event: a group lost a pod or a node and is recreated whole."""
REPLICA_GROUP_NOT_STARTED: Final = "ReplicaGroupNotStarted"
"""Warning Event: a group did not start on the nodes it was given and is placed again."""
DRAINING: Final = "Draining"
"""Normal Event: a group left the Service and is deleted once its requests in flight (running
and waiting) are done."""
ROLLING_OUT: Final = "RollingOut"
"""Normal Event: a group is recreated from a changed template (one group at a time)."""
SCALED: Final = "Scaled"
"""Normal Event: the autoscaler changed the desired replica count."""
WAKING_STANDBY: Final = "WakingStandby"
"""Normal Event: a scale-up takes a standby replica into service: its engine is told to wake up."""
STANDBY_WOKEN: Final = "StandbyWoken"
"""Normal Event: a standby replica's engine is awake and it joins the Service (with its wake time)."""
STANDBY_ASLEEP: Final = "StandbyAsleep"
"""Normal Event: a standby replica's engine is asleep (its GPUs held, out of the Service)."""

# --- GPUPool ------------------------------------------------------------------------------------

NODES_READY: Final = "NodesReady"
"""``Ready=True``: at least one node of the pool is usable."""
NO_USABLE_NODES: Final = "NoUsableNodes"
"""``Ready=False`` (Warning Event): the pool has nodes with its GPUs, none usable now."""
NO_NODES: Final = "NoNodes"
"""``Ready=False`` (Warning Event): the selector matches no node, or none of the matched nodes
has the pool's GPU resource (a typo in ``gpuResourceName``, or the device plugin is not running)."""
DEVICE_CLASS_NOT_FOUND: Final = "DeviceClassNotFound"
"""``Ready=False`` (Warning Event) of a DRA pool whose ``spec.dra.deviceClassName`` names no
DeviceClass (the DRA driver that installs it is missing, or a typo): nothing is admitted into it.
Also the reason a TrainingJob's ``Admitted=False`` and an InferenceService's ``Ready=False`` give
while every pool they list is such a pool."""
LEVELS_DETECTED: Final = "LevelsDetected"
"""``TopologyReady=True``: the levels were detected from the nodes' labels."""
LEVELS_FOUND: Final = "LevelsFound"
"""``TopologyReady=True``: every level of ``spec.topologyLevels`` is on the pool's nodes."""
LEVEL_LABEL_MISSING: Final = "LevelLabelMissing"
"""``TopologyReady=False`` (Warning Event): a level of ``spec.topologyLevels`` names a label no
node of the pool carries; gangs that ask for that level cannot be placed."""

# --- helpers ------------------------------------------------------------------------------------

NEEDS_SPEC_CHANGE_CODES: Final = (400, 422)
"""HTTP codes of a create the API server refused that only an edit of the spec can fix
(BadRequest, Invalid)."""


def refusal_reason(code: int) -> str:
    """The reason for a create the API server refused permanently with ``code``:
    :data:`INVALID_SPEC` when only an edit of the spec can fix it, else :data:`CREATE_FAILED`."""
    return INVALID_SPEC if code in NEEDS_SPEC_CHANGE_CODES else CREATE_FAILED


__all__ = [name for name in list(globals()) if name.isupper() and not name.startswith("_")] + ["refusal_reason"]
