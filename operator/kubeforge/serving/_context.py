"""The serving plan's input and output: :class:`ServingContext` (what a decision reads besides the
service) and :class:`ServingPlan` (what a reconcile applies). Pure data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kubeforge.admission import AssumedGroup, GroupShape
from kubeforge.modelcache import CacheState
from kubeforge.objects import DEFAULT_NOT_READY_GRACE, SCHEDULE_TIMEOUT, GroupRecord, Node, Pod
from kubeforge.serving._status import ScalingOutcome

__all__ = ["DRAIN_POLL_SECONDS", "ServingContext", "ServingPlan"]

DRAIN_POLL_SECONDS = 5.0
"""A draining group is looked at again at least this often (its requests in flight may be 0)."""


@dataclass(frozen=True)
class ServingContext:
    """What the decision reads besides the service.

    Attributes:
        now: Unix seconds.
        desired: Replicas the autoscaler wants now (already capped by what can be placed).
        pods: Every pod of the service (any group, any attempt).
        nodes: Nodes by name (those of the groups at least); a node missing here is gone.
        shape: The replica's shape in the service's pool, or None (no pool, or ``shape_error``).
        shape_error: Why the spec gives no shape in that pool (reported as InvalidSpec).
        template_hash: :func:`kubeforge.builders.serving.serving_hash` of the spec.
        assumed: Groups admission placed, by index.
        load: Running requests per group (its leader's ``vllm:num_requests_running``), where
            known; a group missing here is assumed busy while it drains.
        waiting: Admission's ``(reason, message)`` for groups that found no room, or None.
        not_ready_grace: Seconds a node may be NotReady before its pods count as lost.
        schedule_timeout: See :data:`kubeforge.objects.SCHEDULE_TIMEOUT`.
        namespace_terminating: The namespace is being deleted: nothing is decided.
        scaling: The autoscaler's outcome (its decision, the metric read, the count it started
            from), or None: with it, the plan's status and Events carry the autoscaler's part too
            (:func:`~kubeforge.serving.scaling_status`, :func:`~kubeforge.serving.scaling_events`);
            ``desired`` is then its ``decision.desired``.
        sleeping: Whether the engine of each Ready group with a standby state sleeps (its
            leader's ``/is_sleeping``, :func:`~kubeforge.serving.engines_to_ask`); a group
            missing here is unknown.
        model_key: The cache key of the service's ``spec.model`` when its pods get it from the
            node caches (:func:`kubeforge.modelcache.cache_key`), else None: each group's
            ``weights`` is then left out.
        model_caches: The copies on the groups' nodes (ModelCacheNode statuses).
    """

    now: float
    desired: int
    pods: Sequence[Pod] = ()
    nodes: Mapping[str, Node] = field(default_factory=dict)
    shape: GroupShape | None = None
    shape_error: str | None = None
    template_hash: str = ""
    assumed: Mapping[int, AssumedGroup] = field(default_factory=dict)
    load: Mapping[int, float] = field(default_factory=dict)
    waiting: tuple[str, str] | None = None
    not_ready_grace: float = DEFAULT_NOT_READY_GRACE
    schedule_timeout: float = SCHEDULE_TIMEOUT
    namespace_terminating: bool = False
    scaling: ScalingOutcome | None = None
    sleeping: Mapping[int, bool] = field(default_factory=dict)
    model_key: str | None = None
    model_caches: CacheState = field(default_factory=dict)


@dataclass
class ServingPlan:
    """What a reconcile applies, in this order: the status (groups first: a group's nodes are on
    record before its pods exist, so a restart finds them), deletes, creates, the endpoints,
    then Events.

    Attributes:
        status: Merge patch for ``.status`` (groups, counts, Ready and ReplicaGroupFailed; with
            ``ServingContext.scaling``, the autoscaling conditions, ``desiredReplicas``,
            ``lastScaleTime``, ``lastMetricValue`` and ``url`` as well), or None when nothing
            is decided. ``observedGeneration`` is the writer's.
        create: ``(group, worker)`` pods to create.
        delete: Pod names to delete.
        endpoints: ``(leader pod, IP, node)`` the Service routes to.
        events: ``(type, reason, message)``, the autoscaler's first (``Scaled``, and the
            Warnings of ScalingActive / ScalingLimited transitions) when ``ctx.scaling`` is given.
        written_assumed: Indices of admitted groups this plan writes (or drops): forget them.
        release: GPUs go back to the pool (admission should run).
        requeue_after: Seconds until the next look is needed, or None.
        sleep: Leader pods to tell to sleep (``POST /sleep?level=1``): standby replicas.
        wake: Leader pods to tell to wake up (``POST /wake_up``): standby replicas taken into service.
    """

    status: dict[str, Any] | None = None
    create: list[tuple[GroupRecord, int]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    endpoints: list[tuple[str, str, str | None]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    written_assumed: list[int] = field(default_factory=list)
    release: bool = False
    requeue_after: float | None = None
    sleep: list[Pod] = field(default_factory=list)
    wake: list[Pod] = field(default_factory=list)

    def requeue(self, seconds: float) -> None:
        """Ask to be looked at again within ``seconds`` (at least 0.5 s; the sooner of two asks)."""
        seconds = max(0.5, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)
