"""A pool's reservations for big gangs that wait, and backfill around them (Slurm's words)."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from ._base import KubeModel


RESERVATIONS_DESCRIPTION = (
    "reservations keep big gangs from starving behind a stream of small jobs (Slurm's reservations with "
    "backfill). The first waiting gangs in queue order that do not fit (up to maxReservations) each get the "
    "GPUs of the domain, at the topology level they need, expected to free soonest: from the ETAs the jobs "
    "running there report (status.progress.eta), else from their spec.maxRunSeconds; a job with neither has "
    "an unknown end and is never counted on. Later jobs may use reserved GPUs only if they end before the "
    "reservation's expected start (their own spec.maxRunSeconds); otherwise they run elsewhere or wait. The "
    "gang shows Admitted=False, reason CapacityReserved, with an Event naming the reserved nodes and the "
    "expected start. With preemptAfterSeconds set, a reserved gang that has waited that long preempts the jobs "
    "standing on its reserved domain (off by default). Mode Disabled is Kueue's BestEffortFIFO."
)
"""The ``spec.reservations`` field's description (``kubectl explain gpupool.spec.reservations``)."""


class ReservationMode(str, Enum):
    """ReservationMode switches a pool's reservations on or off."""

    ENABLED = "Enabled"
    DISABLED = "Disabled"


class PoolReservations(KubeModel):
    """PoolReservations keeps big gangs from starving behind a stream of small jobs, the way
    Slurm's backfill scheduler does. Admission tries waiting jobs in queue order (priority, then
    age); when the first ones (up to maxReservations) cannot fit, each gets a reservation: the
    GPUs it would take in the domain of its topology level expected to free soonest, from the
    ETAs of the jobs running there (status.progress.eta, from their workers' reports), else
    from their spec.maxRunSeconds. A job with neither has an unknown end and is never counted
    on to free its GPUs; when no domain can be counted on, the gang gets no reservation and waits
    as before. Jobs behind a reserved gang may still use the reserved GPUs only if they end
    before its expected start (their own spec.maxRunSeconds); otherwise they run elsewhere or
    wait. The gang's Admitted condition (reason CapacityReserved) and an Event say what is
    reserved for it and when it expects to start. A job that outlives its ETA by more than
    graceSeconds no longer counts as ending, so the reservation is recomputed and free GPUs are
    never held idle longer than that.

    ``preemptAfterSeconds`` (opt-in, absent = off) lets a reserved gang that has waited that long
    stop the jobs on its reserved domain instead of waiting for them to end. The name follows the
    ``...Seconds`` durations of this API (``fallbackAfterSeconds``, ``preemption.minRuntimeSeconds``)
    and says the one thing it sets: Kueue's ClusterQueue ``preemption`` knobs
    (``withinClusterQueue: LowerPriority|LowerOrNewerEqualPriority``, ``borrowWithinCohort`` with
    its ``maxPriorityThreshold``, "priority less than or equal to") are policies that act at once,
    with no wait, and Slurm has no per-reservation knob either (a waiting job gains priority with
    ``PriorityWeightAge`` until a ``PriorityTier``/QOS lets it preempt; ``PreemptExemptTime`` is the
    victims' protection, kubeforge's ``minRuntimeSeconds``). Victims, as with Kueue's
    ``maxPriorityThreshold``, have a priority less than or equal to the gang's, and hold fewer GPUs
    than it (equal gangs would otherwise take turns preempting each other: the backfill bench,
    e2e/README-backfill-bench.md).
    """

    mode: ReservationMode = Field(
        default=ReservationMode.ENABLED,
        description="mode is Enabled (the first waiting gangs that do not fit get reservations; "
        "others backfill around them) or Disabled (every job that fits is admitted in queue "
        "order, Kueue's BestEffortFIFO: a big gang may wait while smaller ones keep taking the "
        "GPUs that free up).",
    )
    max_reservations: int = Field(
        default=1,
        ge=1,
        le=16,
        description="maxReservations is how many waiting gangs may hold a reservation in the pool "
        "at once: the first ones in queue order that do not fit.",
    )
    grace_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description="graceSeconds is how long a running job may outlive its expected end "
        "(status.progress.eta, or its maxRunSeconds) before it no longer counts as ending: the "
        "reservations that counted on it are then recomputed, so reserved GPUs are never held "
        "idle past a reservation's expected start plus this grace.",
    )
    preempt_after_seconds: int | None = Field(
        default=None,
        ge=0,
        le=604800,
        description="preemptAfterSeconds, when set, lets a gang that holds a reservation and has waited "
        "this long (since it last became not Admitted) preempt jobs on its reserved domain (the domain "
        "of the topology level it needs) instead of waiting for them to end: only jobs smaller than it (fewer "
        "GPUs) and of priority less than or equal to its own (of its team, or of a team that borrows), never one whose run is "
        "younger than preemption.minRuntimeSeconds, those that lose the least work first (the age of "
        "their last reported checkpoint, else of their placement), and only as many as it needs. They "
        "restart as for any preemption (Preempted=True, reason PreemptedForReservation); the GPUs they "
        "free are nominated to the gang, and any it does not need go back to the queue. Absent (the "
        "default): reservations never preempt; the gang waits for the jobs' ends.",
    )
