"""An InferenceService's status patch and the Events that narrate it, pure: the groups' part and
the autoscaler's.

:func:`kubeforge.serving.plan_serving` composes them: :func:`groups_status` from the groups it
decided on, then, when its context carries a :class:`ScalingOutcome`, :func:`scaling_status`
and :func:`scaling_events` from the autoscaler's decision, so that the plan holds the whole
status patch and every Event of a reconcile and the runtime only reads, plans and applies (the
HPA writes its ``ScalingActive`` / ``ScalingLimited`` conditions, ``desiredReplicas`` and
``lastScaleTime`` from its own decision the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from kubeforge.admission import AssumedGroup
from kubeforge.api import GroupPhase
from kubeforge.autoscaling import Decision
from kubeforge.autoscaling import reasons as scaling
from kubeforge.autoscaling.prometheus import QueryResult
from kubeforge.modelcache import CacheState, group_weights
from kubeforge.objects import rfc3339, set_condition
from kubeforge.objects import group_pod_name
from kubeforge.objects import (
    INVALID_SPEC, NO_FAILED_GROUPS, NO_READY_REPLICAS, NORMAL, READY as READY_CONDITION, REPLICA_GROUP_FAILED,
    REPLICAS_READY, SCALED, SCALED_TO_ZERO, WARNING, GroupRecord, InferenceServiceRecord, condition,
)

__all__ = ["ScalingOutcome", "group_status", "groups_status", "scaling_events", "scaling_status"]

Event = tuple[str, str, str]


class _Context(Protocol):
    """What the groups' part reads of :class:`kubeforge.serving.ServingContext` (read-only)."""

    @property
    def now(self) -> float: ...
    @property
    def desired(self) -> int: ...
    @property
    def shape(self) -> Any: ...
    @property
    def shape_error(self) -> str | None: ...
    @property
    def waiting(self) -> tuple[str, str] | None: ...
    @property
    def model_key(self) -> str | None: ...
    @property
    def model_caches(self) -> CacheState: ...
    @property
    def assumed(self) -> Mapping[int, AssumedGroup]: ...

READY, FAILED, DRAINING_PHASE = GroupPhase.READY.value, GroupPhase.FAILED.value, GroupPhase.DRAINING.value
STANDBY_PHASE = GroupPhase.STANDBY.value


def group_status(g: GroupRecord, leader: str | None) -> dict[str, Any]:
    """``status.groups[]`` entry of a group. A group out of the Service shows phase ``Draining``
    (draining) or ``Standby`` (a Ready standby replica), so the phases agree with
    ``readyReplicas``, which leaves both out; its start phases and standby state are added."""
    phase = DRAINING_PHASE if g.draining_since is not None else \
        STANDBY_PHASE if g.standby is not None and g.phase == READY else g.phase
    out: dict[str, Any] = {"index": g.index, "attempt": g.attempt, "phase": phase, "nodes": list(g.nodes),
                           "gpusPerPod": g.gpus_per_pod, "restarts": g.restarts,
                           "startupFailures": g.startup_failures}
    for key, value in (("pool", g.pool or None), ("level", g.level), ("domain", g.domain),
                       ("templateHash", g.template_hash), ("drainFor", g.drain_for), ("message", g.message),
                       ("leader", leader if g.nodes else None)):
        if value:
            out[key] = value[:4096] if key == "message" else value
    for key, ts in (("admittedAt", g.admitted_at), ("readySince", g.ready_since), ("drainingSince", g.draining_since),
                    ("standbySince", g.standby_since)):
        if ts is not None:
            out[key] = rfc3339(ts)
    if g.start is not None:
        out["start"] = g.start.to_status()
    if g.standby is not None:
        out["standby"] = g.standby
    return out


def _add_weights(rows: list[dict[str, Any]], groups: list[GroupRecord], status: Mapping[str, Any], key: str,
                 caches: CacheState, assumed: Mapping[int, AssumedGroup]) -> None:
    """Each row's ``weights`` (:func:`kubeforge.modelcache.group_weights`): its source is what
    admission saw when it placed the group (:attr:`~kubeforge.admission.AssumedGroup.cached`), then
    kept from the group's last status at the same attempt (Cached or Cold is decided once; a copy
    fetched between the placement and the first status write does not make a cold start Cached)."""
    before = {(r.get("index"), r.get("attempt", 0)): r.get("weights")
              for r in status.get("groups") or [] if isinstance(r, Mapping)}
    for row, g in zip(rows, groups):
        prev = before.get((g.index, g.attempt))
        placed = assumed.get(g.index)
        if prev is None and placed is not None and placed.cached is not None:
            prev = {"source": "Cached" if placed.cached else "Cold"}
        weights = group_weights(prev, g.nodes, key, caches, g.phase == READY)
        if weights is not None:
            row["weights"] = weights


def _ready_condition(svc: InferenceServiceRecord, ctx: _Context, groups: Mapping[int, GroupRecord],
                     ready: int, conds: Any) -> tuple[Any, list[Event]]:
    """``Ready`` set on ``conds``, and the InvalidSpec Warning when the shape error is new."""
    gen, events = svc.generation, []
    if ctx.shape_error:
        before = condition(svc.status, READY_CONDITION) or {}
        if (before.get("reason"), before.get("message")) != (INVALID_SPEC, ctx.shape_error):
            events.append((WARNING, INVALID_SPEC, ctx.shape_error))  # once, as a TrainingJob's InvalidSpec
        return set_condition(conds, READY_CONDITION, False, INVALID_SPEC, ctx.shape_error, ctx.now, gen), events
    if ready:
        return set_condition(conds, READY_CONDITION, True, REPLICAS_READY, f"{ready} of {ctx.desired} replicas ready",
                             ctx.now, gen), events
    if ctx.desired == 0 and svc.spec.min_replicas == 0:  # type: ignore[union-attr]
        return set_condition(conds, READY_CONDITION, True, SCALED_TO_ZERO, "no replicas: scaled to zero while idle",
                             ctx.now, gen), events
    first = next((g.message for g in sorted(groups.values(), key=lambda g: g.index) if g.message), None)
    why = first or (f"waiting for GPUs: {ctx.waiting[1]}" if ctx.waiting else "waiting for a replica to start")
    return set_condition(conds, READY_CONDITION, False, NO_READY_REPLICAS, f"0 of {ctx.desired} replicas ready: {why}",
                         ctx.now, gen), events


def groups_status(svc: InferenceServiceRecord, ctx: _Context,
                  groups: Mapping[int, GroupRecord]) -> tuple[dict[str, Any], list[Event]]:
    """The groups' part of the status patch, and its Events.

    Args:
        svc: The service (spec parsed, not None), with the status the plan acts on.
        ctx: The plan's :class:`~kubeforge.serving.ServingContext` (clock, desired count,
            shape, admission's wait).
        groups: The groups after this decision, by index.

    Returns:
        ``({groups, replicas, readyReplicas, conditions, nodesPerReplica when the shape is
        known}, events)``: the ``Ready`` condition (``ReplicasReady``, ``ScaledToZero``,
        ``NoReadyReplicas`` with the first group's message or admission's wait, ``InvalidSpec``
        with its Warning once) and ``ReplicaGroupFailed``.
    """
    ordered = sorted(groups.values(), key=lambda g: g.index)
    rows = [group_status(g, group_pod_name(svc.name, g.index, 0, g.attempt)) for g in ordered]
    if ctx.model_key is not None:
        _add_weights(rows, ordered, svc.status, ctx.model_key, ctx.model_caches, ctx.assumed)
    ready = sum(1 for g in groups.values() if g.phase == READY and g.draining_since is None and g.standby is None)
    holding = sum(1 for g in groups.values() if g.holds)
    failed = [g for g in groups.values() if g.phase == FAILED]
    conds, events = _ready_condition(svc, ctx, groups, ready, svc.status.get("conditions"))
    gen = svc.generation
    if failed:
        conds = set_condition(conds, REPLICA_GROUP_FAILED, True, REPLICA_GROUP_FAILED,
                              "; ".join(g.message or f"group {g.index} failed" for g in failed), ctx.now, gen)
    else:
        conds = set_condition(conds, REPLICA_GROUP_FAILED, False, NO_FAILED_GROUPS,
                              "every group is within its restarts", ctx.now, gen)
    out: dict[str, Any] = {"groups": rows, "replicas": holding, "readyReplicas": ready, "conditions": conds}
    if ctx.shape is not None:
        out["nodesPerReplica"] = ctx.shape.pods
    return out, events



@dataclass(frozen=True)
class ScalingOutcome:
    """What the autoscaler decided in this reconcile (or its last decision, between polls).

    Attributes:
        decision: :func:`kubeforge.autoscaling.decide`'s outcome.
        metric: The queue as read (the runtime's ``read_queue``): its
            value and time become ``lastMetricValue`` / ``lastMetricTime``, its error text goes
            into the ``ScalingActive`` message.
        current: The replicas the decision started from (``status.desiredReplicas``, else the
            groups not leaving): a ``Scaled`` Event and ``lastScaleTime`` when
            ``decision.desired`` differs.
        capacity_note: Admission's reason the pool cannot place one more replica
            (:func:`kubeforge.admission.groups_that_fit`), added to an ``InsufficientCapacity``
            message; None when it can or is unknown.
    """

    decision: Decision
    metric: QueryResult
    current: int
    capacity_note: str | None = None


def _conditions(svc: InferenceServiceRecord, s: ScalingOutcome, conds: Any, now: float) -> Any:
    """``ScalingActive``, ``ScalingLimited`` and, in SLO mode, ``SLOMet`` set on ``conds``."""
    d, gen = s.decision, svc.generation
    active_msg = d.inactive_reason or d.reason
    if s.metric.error:
        active_msg = f"Prometheus query failed ({s.metric.error}); {active_msg}"
    if svc.spec.autoscaling.ignored_target:  # type: ignore[union-attr]
        active_msg = f"{active_msg}; targetPerReplica is ignored: slo sizes the service"
    limited = d.limited_reason or "desired replicas within bounds and capacity"
    if d.limited_condition_reason == scaling.INSUFFICIENT_CAPACITY and s.capacity_note:
        limited = f"{limited}; the next replica: {s.capacity_note}"
    conds = set_condition(conds, scaling.SCALING_ACTIVE, d.scaling_active, d.active_condition_reason, active_msg, now,
                          gen)
    conds = set_condition(conds, scaling.SCALING_LIMITED, d.limited, d.limited_condition_reason, limited, now, gen)
    if d.slo is not None:  # SLO mode: the measured percentiles against the targets
        met = "Unknown" if d.slo.met is None else d.slo.met
        conds = set_condition(conds, scaling.SLO_MET, met, d.slo.reason, d.slo.message, now, gen)
    return conds


def scaling_status(svc: InferenceServiceRecord, outcome: ScalingOutcome, status: dict[str, Any] | None,
                   now: float) -> dict[str, Any]:
    """The status patch with the autoscaler's fields added.

    Args:
        svc: The service (spec parsed, not None), with the status the plan acts on.
        outcome: The autoscaler's decision and what it read.
        status: The groups' part of the patch (:func:`kubeforge.serving.plan_serving`'s), or
            None; its conditions (else the service's) get the autoscaling ones.
        now: Unix seconds.

    Returns:
        A new patch: ``status`` plus ``conditions`` (``ScalingActive``, ``ScalingLimited``,
        ``SLOMet`` in SLO mode), ``desiredReplicas``, ``url``; ``lastScaleTime`` and
        ``lastScaleDirection`` when the count changes; ``lastMetricValue`` and
        ``lastMetricTime`` when the metric was read; ``forecast`` when predictive scale-up
        made one.
    """
    spec = svc.spec
    assert spec is not None
    d = outcome.decision
    patch: dict[str, Any] = dict(status or {})
    conds = _conditions(svc, outcome, patch.get("conditions", svc.status.get("conditions")), now)
    patch.update({"conditions": conds, "desiredReplicas": d.desired,
                  "url": f"http://{svc.name}.{svc.namespace}.svc:{spec.port}"})
    if d.desired != outcome.current:
        patch["lastScaleTime"] = rfc3339(now)
        patch["lastScaleDirection"] = "Up" if d.desired > outcome.current else "Down"
    q = outcome.metric
    if q.value is not None:
        patch["lastMetricValue"] = q.value
        patch["lastMetricTime"] = rfc3339(q.time or now)
    fc = d.forecast
    if fc is not None and d.predicted is not None:
        patch["forecast"] = {"method": fc.method, "leadSeconds": round(fc.lead_seconds, 1),
                             "currentRate": round(fc.current_rate, 4), "forecastRate": round(fc.rate, 4),
                             "replicas": d.predicted, "time": rfc3339(now), "message": fc.message[:1024]}
    return patch


def scaling_events(svc: InferenceServiceRecord, outcome: ScalingOutcome, patch: dict[str, Any]) -> list[Event]:
    """The Events ``(type, reason, message)`` of the autoscaler's part of ``patch``.

    A ``Scaled`` Normal Event when the count changes (with the numbers behind it), then a
    Warning when the metric cannot be read (``ScalingActive`` turns False) or the pool cannot
    place the replicas asked for (``ScalingLimited`` turns True, ``InsufficientCapacity``):
    once per transition against the service's status, not per poll.

    Args:
        svc: The service, with the status before this patch.
        outcome: The autoscaler's decision.
        patch: :func:`scaling_status`'s patch.
    """
    d = outcome.decision
    out: list[Event] = []
    if d.desired != outcome.current:
        out.append((NORMAL, SCALED, f"replicas {outcome.current} -> {d.desired}: {d.reason}"))
    new = {c["type"]: c for c in patch.get("conditions") or []}
    for type_, bad in ((scaling.SCALING_ACTIVE, "False"), (scaling.SCALING_LIMITED, "True")):
        c, old = new.get(type_), condition(svc.status, type_)
        if c is None or c["status"] != bad:
            continue
        if type_ == scaling.SCALING_LIMITED and c["reason"] != scaling.INSUFFICIENT_CAPACITY:
            continue
        if old is None or (old.get("status"), old.get("reason")) != (bad, c["reason"]):
            out.append((WARNING, c["reason"], c["message"]))
    return out
