"""The inputs and the output of one TrainingJob decision, and the status being built."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

from kubeforge.api import TrainingJobSpec
from kubeforge.objects import (
    DEFAULT_NOT_READY_GRACE, NEEDS_SPEC_CHANGE_CODES, PENDING, SCHEDULE_TIMEOUT, ComputeDomainView, Node,
    PlacementRecord, Pod, TrainingJobRecord, condition, current_attempt, placement_of, rfc3339, set_condition,
    status_time,
)
from kubeforge.placement import GangRequest, NodeInfo
from kubeforge.progress import Report

GPU_HOURS_FOLD_SECONDS = 600.0
"""``status.gpuHours`` of a running job is brought up to date at most this often (the live
figure is ``gpuHours + (now - runningSince) x GPUs``). Every write counts at scale: once a
minute, 5,000 running jobs cost the API server ~80 status writes a second for nothing else."""

PROGRESS_WRITE_SECONDS = 30.0
"""``status.progress`` is rewritten from the workers' reports at most this often per job
(:mod:`kubeforge.lifecycle._reports`; ``kubeforge run --progress-write-seconds``): 1,000 jobs
reporting every 10 s cost the API server ~33 status writes a second, not 100."""

WAIT_MESSAGE_REFRESH_SECONDS = 60.0
"""A waiting job's message (how many GPUs short) is rewritten at most this often while its
reason stays the same (a new reason is written at once)."""


@dataclass(frozen=True)
class CreateError:
    """The API server refused to create one of the gang's objects.

    Attributes:
        attempt: The attempt whose object it was.
        kind: ``Pod``, ``PersistentVolumeClaim`` or ``Service``; or ``Secret``: a Secret the
            pods need was not found (404 on reading its metadata), nothing was created.
        name: The object's name.
        code: The HTTP status (422, 403, 400, ...).
        message: The server's message (Kubernetes' own status message, not a response body
            from elsewhere).
    """

    attempt: int
    kind: str
    name: str
    code: int
    message: str

    @property
    def needs_spec_change(self) -> bool:
        """422 Invalid and 400 BadRequest: only an edit of the spec can fix the object."""
        return self.code in NEEDS_SPEC_CHANGE_CODES


class RestartCause(Enum):
    """Why a plan stops the gang to run it again, as counted: each value is the counter of
    ``status.restarts`` the restart moves (and the metric the runtime counts it in)."""

    FAILURE = "failures"
    """A worker failed: ``kubeforge_failure_restarts_total``."""
    PREEMPTION = "preemptions"
    """A disruption (a preemption, an eviction, a lost node): ``kubeforge_preemption_restarts_total``."""
    STARTUP = "startupFailures"
    """The gang failed to start: ``kubeforge_startup_failures_total``, by
    :attr:`TrainingPlan.startup_failure`."""


@dataclass(frozen=True)
class TrainingContext:
    """What the decision reads besides the job: its pods, their nodes, and what this process
    knows that the API server does not show yet.

    Attributes:
        now: Unix seconds.
        pods: Every pod of the job, any attempt.
        nodes: Nodes by name (those of the placement and the pods at least); a node missing
            here is treated as deleted.
        assumed: A placement admission decided and that is not in ``status`` yet.
        waiting: Admission's ``(reason, message)`` for a job that waits, or None.
        last_wait_write: When the waiting message was last written (unix seconds).
        pool_prices: ``pricePerGPUHour`` by pool name (None: no price).
        create_error: A create the API server refused for the current attempt, or None.
        spec_hash: :func:`kubeforge.builders.training.spec_hash` of the current spec.
        not_ready_grace: Seconds a node may be NotReady before its pods count as lost.
        schedule_timeout: See :data:`kubeforge.objects.SCHEDULE_TIMEOUT`.
        preempted_by: ``(reason, message)`` when admission chose this running gang as a victim
            (``PreemptedByHigherPriority`` or ``QuotaReclaimed``), else None.
        claim_wait: Why the gang's pods wait behind the volume gate (its checkpoint claim is
            not Bound and its StorageClass binds immediately: ungated they would only sit in
            kube-scheduler's backoff; :func:`kubeforge.lifecycle.claim_wait`), or None.
        request: The gang's placement request in the pool of its placement
            (:func:`kubeforge.admission.gang_request`), to tell a worker its own template keeps
            off its node from one something else took the GPUs of; None when unknown.
        pool_nodes: The placement's pool's nodes as placement sees them, by name.
        rank_gpus: GPUs one rank holds in its pool (:func:`kubeforge.objects.rank_gpus`:
            gpusPerReplica plus sidecars and init containers), for GPU-hours; None: gpusPerReplica.
        namespace_terminating: The job's namespace is being deleted: nothing is created,
            restarted or counted any more (the namespace controller deletes everything).
        domain_cliques: The NVLink cliques of the placement when the gang needs a ComputeDomain
            (several nodes of cliques in a DRA pool), else None.
        compute_domains: The ComputeDomains kubeforge made for this job.
        report: What the workers reported since (and maybe before) the progress written, merged
            (:func:`kubeforge.progress.merge_reports`), or None.
        report_write_seconds: The least seconds between two writes of ``status.progress``
            (:data:`PROGRESS_WRITE_SECONDS`).
    """

    now: float
    pods: Sequence[Pod] = ()
    nodes: Mapping[str, Node] = field(default_factory=dict)
    assumed: PlacementRecord | None = None
    waiting: tuple[str, str] | None = None
    last_wait_write: float = 0.0
    pool_prices: Mapping[str, float | None] = field(default_factory=dict)
    create_error: CreateError | None = None
    spec_hash: str = ""
    not_ready_grace: float = DEFAULT_NOT_READY_GRACE
    schedule_timeout: float = SCHEDULE_TIMEOUT
    claim_wait: str | None = None
    preempted_by: tuple[str, str] | None = None
    request: GangRequest | None = None
    pool_nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    rank_gpus: int | None = None
    namespace_terminating: bool = False
    domain_cliques: tuple[str, ...] | None = None
    compute_domains: Sequence[ComputeDomainView] = ()
    report: Report | None = None
    report_write_seconds: float = PROGRESS_WRITE_SECONDS


@dataclass
class TrainingPlan:
    """What a reconcile applies, in this order: the status write (which carries a new attempt
    before any pod of the old one is deleted, so no deletion of ours ever looks like someone
    else's), deletes, then creates (volume claim and Service first), then Events.

    Attributes:
        status: Merge patch for ``.status``, or None when nothing changes.
        delete_pods: Pod names to delete.
        delete_grace_seconds: Grace period for those deletes (None: the pods' own, so the
            workload gets SIGTERM and can checkpoint).
        create_ranks: Ranks whose pods to create (for the placement in the written status).
        volume_gate: Create them behind the volume gate (``kubeforge.io/checkpoint-claim``):
            the claim is not Bound yet.
        ensure_claim: Create the checkpoint PVC if absent.
        ensure_service: Create the namespace's workers Service if absent.
        ungate: Pod names whose kubeforge gates (volume, legacy gang) to lift.
        events: ``(type, reason, message)`` to post.
        release: The job's GPUs go back to the pool (admission should run).
        requeue_after: Seconds until the next reconcile is needed, or None.
        forget_assumed: The assumed placement is written (or abandoned): drop it.
        admitted: The status writes admission's placement (``Admitted=True``, reason Placed):
            the gang's first write of a new placement, before any of its pods exist.
        wrote_wait: The waiting message is part of ``status``.
        compute_domain: ``(name, cliques)`` of the ComputeDomain to create (before the pods) if
            absent, or None.
        release_compute_domains: ComputeDomains to release: kubeforge's finalizer removed, then
            deleted.
        restart: Why the gang is stopped to run again, when the plan counts a restart (a
            stop that ends the job, or that counts nothing such as a spec change, leaves it None).
        startup_failure: The reason of a failed start (with ``restart`` STARTUP): one of
            :data:`kubeforge.objects.STARTUP_FAILURE_REASONS`, or a stuck container's own reason.
    """

    status: dict[str, Any] | None = None
    delete_pods: list[str] = field(default_factory=list)
    delete_grace_seconds: int | None = None
    create_ranks: list[int] = field(default_factory=list)
    volume_gate: bool = False
    ensure_claim: bool = False
    ensure_service: bool = False
    ungate: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    release: bool = False
    requeue_after: float | None = None
    forget_assumed: bool = False
    admitted: bool = False
    wrote_wait: bool = False
    compute_domain: tuple[str, tuple[str, ...]] | None = None
    release_compute_domains: list[str] = field(default_factory=list)
    restart: RestartCause | None = None
    startup_failure: str | None = None

    def requeue(self, seconds: float) -> None:
        """Ask for a reconcile in ``seconds`` at the latest."""
        seconds = max(0.0, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


class StatusDraft:
    """The status being decided: reads see the changes made so far; :attr:`patch` holds them.

    Conditions follow metav1.Condition semantics through
    :func:`kubeforge.objects.set_condition` (the transition time moves only when the
    status does) and carry the job's generation.
    """

    def __init__(self, job: TrainingJobRecord, now: float):
        self.job = job
        self.now = now
        self.old: Mapping[str, Any] = job.status
        self.patch: dict[str, Any] = {}
        self._attempt = current_attempt(job.status)  # before any counter of this decision moves

    @property
    def spec(self) -> TrainingJobSpec:
        """The job's parsed spec (a draft is only made for a valid one)."""
        assert self.job.spec is not None
        return self.job.spec

    def get(self, name: str, default: Any = None) -> Any:
        """The status field ``name`` as this decision leaves it so far."""
        return self.patch[name] if name in self.patch else self.old.get(name, default)

    def set(self, **fields: Any) -> None:
        """Write status fields (None clears one in the merge patch)."""
        self.patch.update(fields)

    def current_condition(self, type_: str) -> Mapping[str, Any] | None:
        """The condition of ``type_`` as this decision leaves it so far, or None."""
        return condition({"conditions": self.get("conditions")}, type_)

    def condition(self, type_: str, status: bool, reason: str, message: str) -> None:
        """Set the condition ``type_`` (``status`` True/False) with ``reason`` and ``message``."""
        self.patch["conditions"] = set_condition(self.get("conditions"), type_, status, reason, message,
                                                 self.now, self.job.generation)

    @property
    def phase(self) -> str:
        """``status.phase`` so far (Pending when unset)."""
        return str(self.get("phase") or PENDING)

    @property
    def attempt(self) -> int:
        """The attempt being decided on: ``status.attempt`` as written by this decision, else as
        it was when the decision started (not re-derived from counters this decision moved)."""
        return int(self.patch["attempt"]) if self.patch.get("attempt") is not None else self._attempt

    @property
    def placement(self) -> PlacementRecord | None:
        """``status.placement`` so far, or None."""
        return placement_of({"placement": self.get("placement")})

    @property
    def restarts(self) -> dict[str, int]:
        """``status.restarts`` with every counter present (a copy: :meth:`count` moves one)."""
        r = dict(self.get("restarts") or {})
        for cause in RestartCause:
            r.setdefault(cause.value, 0)
        return r

    def restarts_of(self, cause: RestartCause) -> int:
        """The restarts counted so far for ``cause``."""
        return self.restarts[cause.value]

    def count(self, cause: RestartCause) -> int:
        """Count one more restart for ``cause`` in ``status.restarts``; returns the new count."""
        r = self.restarts
        r[cause.value] += 1
        self.set(restarts=r)
        return r[cause.value]

    def time(self, name: str) -> float | None:
        """The timestamp field ``name`` so far, in unix seconds, or None."""
        return status_time({name: self.get(name)}, name)

    def result(self) -> dict[str, Any] | None:
        """The patch, or None when it changes nothing."""
        return {k: v for k, v in self.patch.items()} or None

    def stamp(self, ts: float) -> str:
        """``ts`` (unix seconds) as the status writes times (RFC 3339)."""
        return rfc3339(ts)
