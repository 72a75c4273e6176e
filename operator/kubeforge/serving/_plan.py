"""The InferenceService decision: ``plan_serving(svc, ctx) -> ServingPlan``, pure.

One decision home for a replica group's life, as :func:`kubeforge.lifecycle.plan_training` is
for a gang. It reads the service (spec, ``status.groups``), its pods, their nodes, the
autoscaler's desired count and what admission placed (assumed groups), and returns the groups to
write, the pods to create and delete, the Service's endpoints and the Events. Level-based: the
same inputs give the same plan, so a reconcile cut short is simply redone.

Per group, in order (the first rule that acts decides):

1. **Failed** groups hold nothing and stay failed until the spec changes (LeaderWorkerSet's
   bounded recovery keeps a failed group for debugging; here its GPUs are released).
2. **Draining**: out of the Service; deleted once its requests in flight (running and queued in its engine) reach 0 or after
   ``drainSeconds`` (then removed on a scale-down, recreated from the new template on a
   rollout).
3. **Lost** (``RecreateGroupOnPodRestart``): a pod failed, exited, was evicted, deleted or
   preempted (``DisruptionTarget``), a container of a multi-pod group restarted, a pod of a Ready
   group vanished, or a node is lost (:func:`kubeforge.objects.interruption_reason`): the whole
   group is recreated (``restarts`` + 1), on the same nodes unless a node is lost (then placed
   again); past ``multiNode.maxGroupRestarts`` it is Failed.
4. **Startup**: a pod kube-scheduler refuses because of the template's own hard inter-pod
   constraints fails the group at once (``UnschedulableTemplate``: no retry burnt, GPUs released
   until the spec changes); a pod the kubelet refused, one kube-scheduler cannot bind on its node for
   :data:`SCHEDULE_TIMEOUT` s, or, ``startupTimeoutSeconds`` after admission, a worker with no
   pod, an unbound pod or one stuck (``ErrImagePull``...): the group is placed again
   (``startupFailures`` + 1, the scheduler's reason in its message and a Warning Event). A bound
   pod that is still pulling or loading is never cut short.
5. Otherwise its missing pods are created (``LeaderReady``: the workers once the leader is
   Ready) and it is ``Ready`` once every pod runs and the leader is Ready. Its start phases
   (``status.groups[].start``) are read from its pods until then
   (:mod:`kubeforge.serving._starts`); each group that becomes Ready adds a sample to
   ``status.startTime.cold``.

Then, for the service: standby replicas (``spec.standby``, :mod:`kubeforge.serving._standby`)
are taken into service first while fewer groups serve than desired (asleep ones are told to
wake); admission's new groups are written (serving ones up to the desired count, then standby
ones: the refill); the count goes to the desired one
(failed groups keep their index, as LeaderWorkerSet's, and a group draining for a rollout counts,
since it comes back; a scale-down removes failed groups, then groups not yet placed, then turns
rollout drains into scale-down drains, then removes starting groups, then drains the
least-loaded Ready ones: :func:`kubeforge.admission.scale_down_order`); a stale
template rolls out one group at a time with no surge (recreated in place when its shape is the
same, so its GPUs stay reserved; standby ones at once); standby groups are told to sleep once
Ready and their wakes timed (``status.startTime.wake``); the endpoints are the Ready leaders
not draining and not standby.

The module layout: :mod:`~kubeforge.serving._context` (the context and the plan),
:mod:`~kubeforge.serving._group` (rules 1 to 5), :mod:`~kubeforge.serving._service` (the
service's groups together), :mod:`~kubeforge.serving._standby` and
:mod:`~kubeforge.serving._starts` (issue 28), :mod:`~kubeforge.serving._status` (the status
patch and Events).
"""

from __future__ import annotations

from kubeforge.objects import (
    DRAINING, REPLICA_GROUP_FAILED, REPLICA_GROUP_NOT_STARTED, REPLICA_GROUP_RESTARTED, ROLLING_OUT, GroupRecord,
    InferenceServiceRecord, groups_of,
)
from kubeforge.admission import AssumedGroup
from kubeforge.serving._context import DRAIN_POLL_SECONDS, ServingContext, ServingPlan
from kubeforge.serving._group import FAILED, READY
from kubeforge.serving._service import ServiceRules
from kubeforge.serving._standby import standby_held
from kubeforge.serving._starts import new_cold_samples, start_times
from kubeforge.serving._status import groups_status, scaling_events, scaling_status

__all__ = ["DRAINING", "DRAIN_POLL_SECONDS", "GROUP_FAILED", "GROUP_NOT_STARTED", "GROUP_RESTARTED", "ROLLING_OUT",
           "AssumedGroup", "ServingContext", "ServingPlan", "plan_serving"]

# The names this module first exported the group reasons under (kubeforge.serving's API).
GROUP_RESTARTED = REPLICA_GROUP_RESTARTED
GROUP_FAILED = REPLICA_GROUP_FAILED
GROUP_NOT_STARTED = REPLICA_GROUP_NOT_STARTED


def _groups(st: ServiceRules, old: dict[int, GroupRecord]) -> tuple[dict[int, GroupRecord], list[float]]:
    """Every group after this decision, and the standby wakes timed now: each group's own rules,
    then the service's (promote standby replicas, admission's new groups, scale, roll out, sleep
    and wake)."""
    plan, ctx = st.plan, st.ctx
    groups: dict[int, GroupRecord] = {}
    for index, g in old.items():
        new = st.step(g)
        if new is None:
            plan.release = True
            continue
        if new.attempt != g.attempt and new.nodes and new.phase != FAILED:
            new = st.progress(new, [])  # recreated in place: its new pods
        groups[index] = new
    st.promote(groups)
    if ctx.shape is not None:
        st.admit(groups)
    st.scale(groups)
    st.roll_out(groups)
    woke = st.standby(groups)
    st.stale_pods(groups)
    return groups, woke


def plan_serving(svc: InferenceServiceRecord, ctx: ServingContext) -> ServingPlan:
    """Decide the next actions for one InferenceService (see the module docstring).

    Args:
        svc: The service (spec parsed with API defaults, not None), with the status to act on
            (this process's last write when the index has not caught up).
        ctx: Its pods, their nodes, the desired count, admission's groups, the standby
            engines' sleep, the clock.

    Returns:
        A :class:`ServingPlan`. Its ``status`` carries ``desiredReplicas``, the autoscaling
        conditions and the other fields of the autoscaler, and its Events the autoscaler's, when
        ``ctx.scaling`` is given (:func:`~kubeforge.serving.scaling_status`,
        :func:`~kubeforge.serving.scaling_events`); ``standbyReplicas``, ``standbyGPUs`` and
        ``startTime`` (the measured starts and wakes) always; never ``observedGeneration``.
    """
    st = ServiceRules(svc, ctx)
    plan = st.plan
    if ctx.namespace_terminating:
        return plan
    old = {g.index: g for g in groups_of(svc.status)}
    groups, woke = _groups(st, old)
    plan.delete = sorted(set(plan.delete))
    created = {(g.index, w) for g, w in plan.create}
    plan.create = [(groups[i], w) for i, w in sorted(created) if i in groups and groups[i].nodes
                   and groups[i].draining_since is None]
    leaders = {p.group: p for p in ctx.pods if p.worker == 0 and p.group is not None}
    for g in groups.values():
        lead = leaders.get(g.index)
        if (g.phase == READY and g.draining_since is None and g.standby is None and lead is not None
                and lead.attempt == g.attempt and lead.ready and lead.ip and not lead.deleting):
            plan.endpoints.append((lead.name, lead.ip, lead.node))
    plan.status, events = groups_status(svc, ctx, groups)
    plan.events += events
    asleep, held = standby_held(groups)
    plan.status.update({"standbyReplicas": asleep, "standbyGPUs": held})
    times = start_times(svc.status, new_cold_samples(old, groups), woke)
    if times is not None:
        plan.status["startTime"] = times
    if ctx.scaling is not None:
        plan.status = scaling_status(svc, ctx.scaling, plan.status, ctx.now)
        plan.events = scaling_events(svc, ctx.scaling, plan.status) + plan.events
    return plan
