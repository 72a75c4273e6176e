"""The InferenceService decision: ``plan_serving(svc, ctx) -> ServingPlan``, pure.

One decision home for a replica group's life, as :func:`kubeforge.lifecycle.plan_training` is
for a gang. It reads the service (spec, ``status.groups``), its pods, their nodes, the
autoscaler's desired count and what admission placed (assumed groups), and returns the groups to
write, the pods to create and delete, the Service's endpoints and the Events. Level-based: the
same inputs give the same plan, so a reconcile cut short is simply redone.

Per group, in order (the first rule that acts decides):

1. **Failed** groups hold nothing and stay failed until the spec changes (LeaderWorkerSet's
   bounded recovery keeps a failed group for debugging; here its GPUs are released).
2. **Draining**: out of the Service; deleted once its running requests reach 0 or after
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
   Ready) and it is ``Ready`` once every pod runs and the leader is Ready.

Then, for the service: admission's new groups are written; the count goes to the desired one
(failed groups keep their index, as LeaderWorkerSet's, and a group draining for a rollout counts,
since it comes back; a scale-down removes failed groups, then groups not yet placed, then turns
rollout drains into scale-down drains, then removes starting groups, then drains the
least-loaded Ready ones: :func:`kubeforge.admission.scale_down_order`); a stale
template rolls out one group at a time with no surge (recreated in place when its shape is the
same, so its GPUs stay reserved); the endpoints are the Ready leaders not draining.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from kubeforge.api import DrainReason, GroupPhase, InferenceServiceSpec, StartupPolicy
from kubeforge.objects import (
    ADMITTED, DEFAULT_NOT_READY_GRACE, DRAINING, NORMAL, PLACEMENT_LOST, REPLICA_GROUP_FAILED, REPLICA_GROUP_NOT_STARTED,
    REPLICA_GROUP_RESTARTED, ROLLING_OUT, SCHEDULE_TIMEOUT, STARTUP_TIMEOUT, UNSCHEDULABLE, UNSCHEDULABLE_TEMPLATE,
    WARNING, GroupRecord, InferenceServiceRecord, Node, Pod, groups_of, interruption_reason, own_constraint_cause,
    rejected_by_kubelet, waits_for_volume,
)
from kubeforge.admission import AssumedGroup, GroupShape, scale_down_order
from kubeforge.serving._status import ScalingOutcome, groups_status, scaling_events, scaling_status

READY, STARTING, FAILED = GroupPhase.READY.value, GroupPhase.STARTING.value, GroupPhase.FAILED.value
SCALE_DOWN, ROLLOUT = DrainReason.SCALE_DOWN.value, DrainReason.ROLLOUT.value

# The names this module first exported the group reasons under (kubeforge.serving's API).
GROUP_RESTARTED = REPLICA_GROUP_RESTARTED
GROUP_FAILED = REPLICA_GROUP_FAILED
GROUP_NOT_STARTED = REPLICA_GROUP_NOT_STARTED
DRAIN_POLL_SECONDS = 5.0
"""A draining group is looked at again at least this often (its running requests may be 0)."""


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
    """

    status: dict[str, Any] | None = None
    create: list[tuple[GroupRecord, int]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    endpoints: list[tuple[str, str, str | None]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    written_assumed: list[int] = field(default_factory=list)
    release: bool = False
    requeue_after: float | None = None

    def requeue(self, seconds: float) -> None:
        seconds = max(0.5, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


class _Step:
    """One decision's working state: the plan being built and the service's constants."""

    def __init__(self, svc: InferenceServiceRecord, ctx: ServingContext):
        self.svc, self.ctx = svc, ctx
        self.spec: InferenceServiceSpec = svc.spec  # type: ignore[assignment]
        self.plan = ServingPlan()
        self.by_group: dict[int, list[Pod]] = {}
        for p in ctx.pods:
            if p.group is not None:
                self.by_group.setdefault(p.group, []).append(p)

    def current(self, g: GroupRecord) -> list[Pod]:
        return [p for p in self.by_group.get(g.index, []) if p.attempt == g.attempt]

    def event(self, type_: str, reason: str, message: str) -> None:
        self.plan.events.append((type_, reason, message))

    def delete_live(self, g: GroupRecord) -> None:
        self.plan.delete += [p.name for p in self.current(g) if not p.deleting and not p.terminal]
        self.plan.release = True

    def same_shape(self, g: GroupRecord) -> bool:
        s = self.ctx.shape
        return s is not None and g.pool == s.pool and len(g.nodes) == s.pods and g.gpus_per_pod == s.held

    # --- the rules of one group -------------------------------------------------------------

    def lost(self, g: GroupRecord, cur: Sequence[Pod]) -> tuple[str, bool] | None:
        """(why the group is lost, whether a node is), or None."""
        for node in g.nodes:
            why = interruption_reason(self.ctx.nodes.get(node), node, self.ctx.now, self.ctx.not_ready_grace)
            if why:
                return why, True
        multi = len(g.nodes) > 1
        for p in sorted(cur, key=lambda p: p.worker):
            if p.disruption:
                return f"pod {p.name}: DisruptionTarget ({p.disruption})", False
            if p.phase == "Failed" and not (g.phase != READY and rejected_by_kubelet(p)):
                return f"pod {p.name} failed" + (f" ({p.reason})" if p.reason else "") + \
                    (f", exit code {p.exit_code}" if p.exit_code is not None else ""), False
            if p.phase == "Succeeded":
                return f"pod {p.name} exited", False
            if p.deleting and not p.terminal:
                return f"pod {p.name} was deleted", False
            if multi and p.container_restarts > 0:
                return f"a container of pod {p.name} restarted (the group's collective is broken)", False
        if g.phase == READY:
            have = {p.worker for p in cur}
            gone = [w for w in range(len(g.nodes)) if w not in have]
            if gone:
                return f"the pod of worker {gone[0]} disappeared", False
        return None

    def not_started(self, g: GroupRecord, cur: Sequence[Pod]) -> tuple[str, str] | None:
        """(reason, message) when a starting group failed to start on its nodes, else None
        (asks to be looked at again at its next deadline)."""
        ctx = self.ctx
        for p in cur:
            if rejected_by_kubelet(p):
                return PLACEMENT_LOST, f"the kubelet refused pod {p.name} on node {p.node} ({p.reason})"
        stuck = sorted((p for p in cur if p.phase == "Pending" and not p.deleting and p.node is None
                        and p.unschedulable_since is not None and not waits_for_volume(p.unschedulable_message)),
                       key=lambda p: p.unschedulable_since or 0.0)
        if stuck:
            waited = ctx.now - (stuck[0].unschedulable_since or ctx.now)
            if waited >= ctx.schedule_timeout:
                return UNSCHEDULABLE, (f"pod {stuck[0].name} could not be scheduled on node {stuck[0].assigned} "
                                         f"for {waited:.0f}s ({stuck[0].unschedulable_message or UNSCHEDULABLE})")
            self.plan.requeue(ctx.schedule_timeout - waited)
        if g.admitted_at is None:
            return None
        left = g.admitted_at + self.spec.startup_timeout_seconds - ctx.now
        if left > 0:
            self.plan.requeue(left)
            return None
        have = {p.worker: p for p in cur}
        for w in range(len(g.nodes)):
            p = have.get(w)
            if p is None and (w == 0 or self.spec.multi_node.startup_policy == StartupPolicy.LEADER_CREATED):
                return STARTUP_TIMEOUT, f"worker {w} has no pod {self.spec.startup_timeout_seconds}s after admission"
            if p is not None and p.node is None:
                return STARTUP_TIMEOUT, (f"pod {p.name} is not bound {self.spec.startup_timeout_seconds}s after "
                                          f"admission" + (f" ({p.unschedulable_message})" if p.unschedulable_message else ""))
            if p is not None and p.waiting:
                return p.waiting_reason or STARTUP_TIMEOUT, f"pod {p.name}: {p.waiting}"
        return None  # every pod bound and not stuck: pulling or loading, never cut short

    def fail_or_replace(self, g: GroupRecord, *, restarts: int, startup_failures: int, why: str,
                        reason: str, keep_nodes: bool) -> GroupRecord:
        """End the group's attempt: Failed past maxGroupRestarts, else recreated (in place when
        ``keep_nodes``, else placed again by admission)."""
        self.delete_live(g)
        limit = self.spec.multi_node.max_group_restarts
        if max(restarts, startup_failures) > limit:
            msg = (f"group {g.index} failed: {why}; {restarts} restarts and {startup_failures} failed starts, more "
                   f"than multiNode.maxGroupRestarts {limit}; its GPUs are released until the spec changes")
            self.event(WARNING, GROUP_FAILED, msg)
            return replace(g, phase=FAILED, nodes=(), attempt=g.attempt + 1, restarts=restarts,
                           startup_failures=startup_failures, admitted_at=None, ready_since=None, message=msg)
        self.event(WARNING, reason, f"group {g.index}: {why}; recreating the whole group"
                   + (" on the same nodes" if keep_nodes else ", placed again")
                   + f" (restarts {restarts}, failed starts {startup_failures} of {limit})")
        return replace(g, phase=STARTING, attempt=g.attempt + 1, restarts=restarts, startup_failures=startup_failures,
                       nodes=g.nodes if keep_nodes else (), admitted_at=self.ctx.now if keep_nodes else None,
                       ready_since=None, message=why)

    def step(self, g: GroupRecord) -> GroupRecord | None:
        """The group after this decision, or None when it is removed."""
        ctx = self.ctx
        if g.phase == FAILED:
            if g.template_hash != ctx.template_hash:  # the spec changed: try again
                return replace(g, phase=STARTING, nodes=(), restarts=0, startup_failures=0, message=None)
            return g
        if not g.nodes:
            return g  # waits for admission to place it again
        cur = self.current(g)
        if g.draining_since is not None:
            return self.drain(g, cur)
        lost = self.lost(g, cur)
        if lost:
            why, node_lost = lost
            return self.fail_or_replace(g, restarts=g.restarts + 1, startup_failures=g.startup_failures, why=why,
                                        reason=GROUP_RESTARTED, keep_nodes=not node_lost)
        if g.phase != READY:
            tmpl = self.spec.template.spec
            blamed = next((why for p in cur if p.unschedulable_since is not None
                           and (why := own_constraint_cause(tmpl, p))), None)
            if blamed:
                self.delete_live(g)
                msg = f"group {g.index}: {blamed}; its GPUs are released until the spec changes"
                self.event(WARNING, UNSCHEDULABLE_TEMPLATE, msg)
                return replace(g, phase=FAILED, nodes=(), attempt=g.attempt + 1, admitted_at=None, message=msg)
            failed = self.not_started(g, cur)
            if failed:
                reason, why = failed
                return self.fail_or_replace(g, restarts=g.restarts, startup_failures=g.startup_failures + 1,
                                            why=f"{reason}: {why}", reason=GROUP_NOT_STARTED, keep_nodes=False)
        return self.progress(g, cur)

    def progress(self, g: GroupRecord, cur: Sequence[Pod]) -> GroupRecord:
        have = {p.worker: p for p in cur if not p.terminal}
        leader = have.get(0)
        leader_ready = leader is not None and leader.phase == "Running" and leader.ready
        ready = leader_ready and len(have) == len(g.nodes) and all(p.phase == "Running" for p in have.values())
        for w in range(len(g.nodes)):
            if w in have:
                continue
            if w > 0 and self.spec.multi_node.startup_policy == StartupPolicy.LEADER_READY and not leader_ready:
                continue
            self.plan.create.append((g, w))
        if ready:
            return replace(g, phase=READY, ready_since=g.ready_since or self.ctx.now, message=None)
        waiting = next((f"pod {p.name}: Pending, not bound yet" if p.node is None else
                        f"pod {p.name}: {p.waiting}" if p.waiting else
                        f"pod {p.name}: {p.phase}, not Ready yet (pulling the image or loading the model)"
                        for p in sorted(have.values(), key=lambda p: p.worker)
                        if not (p.phase == "Running" and (p.ready or p.worker > 0))), None)
        return replace(g, phase=STARTING, ready_since=None, message=waiting or "creating its pods")

    def drain(self, g: GroupRecord, cur: Sequence[Pod]) -> GroupRecord | None:
        ctx = self.ctx
        assert g.draining_since is not None
        left = g.draining_since + self.spec.drain_seconds - ctx.now
        serving = any(p.worker == 0 and p.phase == "Running" and not p.deleting for p in cur)
        if ctx.load.get(g.index) != 0 and left > 0 and serving:
            self.plan.requeue(min(left, DRAIN_POLL_SECONDS))
            return g
        self.delete_live(g)
        if g.drain_for != ROLLOUT:
            return None
        self.event(NORMAL, ROLLING_OUT, f"group {g.index} drained: recreating it from the new template")
        if self.same_shape(g):
            return replace(g, phase=STARTING, attempt=g.attempt + 1, template_hash=ctx.template_hash,
                           draining_since=None, drain_for=None, admitted_at=ctx.now, ready_since=None, message=None)
        return replace(g, phase=STARTING, attempt=g.attempt + 1, nodes=(), template_hash=ctx.template_hash,
                       draining_since=None, drain_for=None, admitted_at=None, ready_since=None,
                       message="placed again: its shape or pool changed")

    # --- the service ------------------------------------------------------------------------

    def admit(self, groups: dict[int, GroupRecord]) -> None:
        """Write the groups admission placed (as many as are still wanted)."""
        ctx = self.ctx
        count = sum(1 for g in groups.values() if not g.leaving and (g.holds or g.phase == FAILED))
        for index, a in sorted(ctx.assumed.items()):
            self.plan.written_assumed.append(index)
            old = groups.get(index)
            if (old is not None and (old.nodes or old.phase == FAILED)) or count >= ctx.desired:
                self.plan.release = True  # stale, or no longer wanted: its GPUs go back
                continue
            pl = a.placement
            # A new attempt past any pod of this index still terminating (a group removed by a
            # scale-down and added back): pod names carry the attempt, and a name still in use
            # would be refused (409) and the group left without that pod.
            seen = max((p.attempt for p in self.by_group.get(index, [])), default=-1)
            attempt = max(old.attempt if old else 0, seen + 1)
            g = GroupRecord(index=index, attempt=attempt, phase=STARTING, pool=pl.pool,
                            nodes=pl.nodes, gpus_per_pod=a.gpus_per_pod, level=pl.level, domain=pl.domain,
                            template_hash=ctx.template_hash, admitted_at=ctx.now,
                            restarts=old.restarts if old else 0, startup_failures=old.startup_failures if old else 0)
            where = f"{pl.level} {pl.domain}" if pl.level else f"pool {pl.pool}"
            self.event(NORMAL, ADMITTED, f"group {index} placed on {len(pl.nodes)} node(s) in {where}: {pl.reason}")
            groups[index] = self.progress(g, [])
            count += 1

    def scale(self, groups: dict[int, GroupRecord]) -> None:
        """Bring the count (failed groups and groups draining for a rollout included) down to the
        desired one, in :func:`~kubeforge.admission.scale_down_order`: a group draining for a
        rollout is turned into a scale-down drain (deleted once drained, not recreated), a Ready
        one starts draining, any other is deleted at once."""
        ctx = self.ctx
        active = [g for g in groups.values() if not g.leaving]
        excess = len(active) - ctx.desired
        if excess <= 0:
            return
        for g in scale_down_order(active, ctx.load)[:excess]:
            if g.draining_since is not None:
                self.event(NORMAL, DRAINING, f"group {g.index} was draining for the rollout: it is deleted once "
                           f"drained instead of recreated (scale-down to {ctx.desired})")
                groups[g.index] = replace(g, drain_for=SCALE_DOWN)
            elif g.phase == READY:
                self.event(NORMAL, DRAINING, f"group {g.index} leaves the Service and is deleted once its running "
                           f"requests are done (at most {self.spec.drain_seconds}s): scale-down to {ctx.desired}")
                groups[g.index] = replace(g, draining_since=ctx.now, drain_for=SCALE_DOWN)
                self.plan.requeue(DRAIN_POLL_SECONDS)
            else:
                self.delete_live(g)
                del groups[g.index]

    def roll_out(self, groups: dict[int, GroupRecord]) -> None:
        """One group at a time, no surge: a stale group that is not Ready is recreated at once; a
        Ready one is drained first, and only while every other group is Ready."""
        ctx = self.ctx
        stale = sorted((g for g in groups.values() if g.nodes and g.phase != FAILED and g.draining_since is None
                        and g.template_hash != ctx.template_hash), key=lambda g: g.index)
        if not stale:
            return
        busy = [g for g in groups.values() if g.draining_since is not None or (g.holds and g.phase != READY)
                or (not g.nodes and g.phase != FAILED)]
        g = next((x for x in stale if x.phase != READY), None)
        if g is not None:
            self.delete_live(g)
            self.event(NORMAL, ROLLING_OUT, f"group {g.index} was not Ready: recreating it from the new template")
            keep = self.same_shape(g)
            new = replace(g, attempt=g.attempt + 1, template_hash=ctx.template_hash,
                          nodes=g.nodes if keep else (), admitted_at=ctx.now if keep else None,
                          phase=STARTING, ready_since=None, message=None)
            groups[g.index] = self.progress(new, []) if keep else new
            return
        if busy:
            return  # one replica unavailable at a time
        g = stale[0]
        self.event(NORMAL, ROLLING_OUT, f"group {g.index} leaves the Service to be recreated from the new template "
                   f"(one group at a time, at most {self.spec.drain_seconds}s of draining)")
        groups[g.index] = replace(g, draining_since=ctx.now, drain_for=ROLLOUT)
        self.plan.requeue(DRAIN_POLL_SECONDS)

    def stale_pods(self, groups: Mapping[int, GroupRecord]) -> None:
        """Pods of no current group attempt go (a group removed, recreated, or released)."""
        for index, pods in self.by_group.items():
            g = groups.get(index)
            for p in pods:
                if p.deleting or p.terminal:
                    continue
                if g is None or not g.nodes or p.attempt != g.attempt:
                    self.plan.delete.append(p.name)


def plan_serving(svc: InferenceServiceRecord, ctx: ServingContext) -> ServingPlan:
    """Decide the next actions for one InferenceService (see the module docstring).

    Args:
        svc: The service (spec parsed with API defaults, not None), with the status to act on
            (this process's last write when the index has not caught up).
        ctx: Its pods, their nodes, the desired count, admission's groups, the clock.

    Returns:
        A :class:`ServingPlan`. Its ``status`` carries ``desiredReplicas``, the autoscaling
        conditions and the other fields of the autoscaler, and its Events the autoscaler's, when
        ``ctx.scaling`` is given (:func:`~kubeforge.serving.scaling_status`,
        :func:`~kubeforge.serving.scaling_events`); never ``observedGeneration``.
    """
    st = _Step(svc, ctx)
    plan = st.plan
    if ctx.namespace_terminating:
        return plan
    old = {g.index: g for g in groups_of(svc.status)}
    groups: dict[int, GroupRecord] = {}
    for index, g in old.items():
        new = st.step(g)
        if new is None:
            plan.release = True
            continue
        if new.attempt != g.attempt and new.nodes and new.phase != FAILED:
            new = st.progress(new, [])  # recreated in place: its new pods
        groups[index] = new
    if ctx.shape is not None:
        st.admit(groups)
    st.scale(groups)
    st.roll_out(groups)
    st.stale_pods(groups)
    plan.delete = sorted(set(plan.delete))
    created = {(g.index, w) for g, w in plan.create}
    plan.create = [(groups[i], w) for i, w in sorted(created) if i in groups and groups[i].nodes
                   and groups[i].draining_since is None]
    leaders = {p.group: p for p in ctx.pods if p.worker == 0 and p.group is not None}
    for g in groups.values():
        lead = leaders.get(g.index)
        if (g.phase == READY and g.draining_since is None and lead is not None and lead.attempt == g.attempt
                and lead.ready and lead.ip and not lead.deleting):
            plan.endpoints.append((lead.name, lead.ip, lead.node))
    plan.status, events = groups_status(svc, ctx, groups)
    plan.events += events
    if ctx.scaling is not None:
        plan.status = scaling_status(svc, ctx.scaling, plan.status, ctx.now)
        plan.events = scaling_events(svc, ctx.scaling, plan.status) + plan.events
    return plan
