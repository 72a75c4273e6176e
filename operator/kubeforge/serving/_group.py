"""The rules of one replica group in a serving decision: lost, not started, failed or replaced,
starting, Ready, draining (rules 1 to 5 of :mod:`kubeforge.serving._plan`). Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from kubeforge.api import DrainReason, GroupPhase, InferenceServiceSpec, StartupPolicy
from kubeforge.modelcache import FAILED as COPY_FAILED
from kubeforge.objects import (
    MODEL_COPY_FAILED, NORMAL, PLACEMENT_LOST, REPLICA_GROUP_FAILED, REPLICA_GROUP_NOT_STARTED, REPLICA_GROUP_RESTARTED,
    ROLLING_OUT, STARTUP_TIMEOUT, UNSCHEDULABLE, UNSCHEDULABLE_TEMPLATE, WARNING, GroupRecord, InferenceServiceRecord, Pod,
    interruption_reason, own_constraint_cause, rejected_by_kubelet, waits_for_volume,
)
from kubeforge.serving._context import DRAIN_POLL_SECONDS, ServingContext, ServingPlan
from kubeforge.serving._starts import with_start

__all__ = ["GroupRules"]

READY, STARTING, FAILED = GroupPhase.READY.value, GroupPhase.STARTING.value, GroupPhase.FAILED.value
SCALE_DOWN, ROLLOUT = DrainReason.SCALE_DOWN.value, DrainReason.ROLLOUT.value
GROUP_RESTARTED, GROUP_FAILED, GROUP_NOT_STARTED = REPLICA_GROUP_RESTARTED, REPLICA_GROUP_FAILED, REPLICA_GROUP_NOT_STARTED


class GroupRules:
    """One decision's working state (the plan being built and the service's constants) and the
    rules of one group (see :mod:`kubeforge.serving._plan`'s docstring, rules 1 to 5)."""

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
        return self.copy_failed(g)  # else every pod bound and not stuck: pulling or loading, never cut short

    def copy_failed(self, g: GroupRecord) -> tuple[str, str] | None:
        """(ModelCopyFailed, message) when a node of the group has no verified copy of the model
        and its agent's last fetch failed, or no agent reported the copy at all (asked once the
        start timed out): its pods' init container would wait for a copy that may never come,
        holding the GPUs. A copy still downloading is never cut short (a 405B model takes half
        an hour)."""
        key = self.ctx.model_key
        if key is None:
            return None
        after = f"{self.spec.startup_timeout_seconds}s after admission"
        for node in g.nodes:
            copy = (self.ctx.model_caches.get(node) or {}).get(key)
            if copy is None:
                return MODEL_COPY_FAILED, f"no node agent reported a copy of the model on node {node} {after}"
            if copy.phase == COPY_FAILED:
                return MODEL_COPY_FAILED, (f"node {node} has no copy of the model {after}: its fetch failed "
                                           f"({copy.reason or 'Failed'})")
        return None

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
            return replace(g, phase=FAILED, nodes=(), attempt=g.attempt + 1, start=None, restarts=restarts,
                           startup_failures=startup_failures, admitted_at=None, ready_since=None, message=msg)
        self.event(WARNING, reason, f"group {g.index}: {why}; recreating the whole group"
                   + (" on the same nodes" if keep_nodes else ", placed again")
                   + f" (restarts {restarts}, failed starts {startup_failures} of {limit})")
        return replace(g, phase=STARTING, attempt=g.attempt + 1, start=None, restarts=restarts, startup_failures=startup_failures,
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
                return replace(g, phase=FAILED, nodes=(), attempt=g.attempt + 1, start=None, admitted_at=None, message=msg)
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
            return with_start(replace(g, phase=READY, ready_since=g.ready_since or self.ctx.now, message=None), cur)
        waiting = next((f"pod {p.name}: Pending, not bound yet" if p.node is None else
                        f"pod {p.name}: {p.waiting}" if p.waiting else
                        f"pod {p.name}: {p.phase}, not Ready yet (pulling the image or loading the model)"
                        for p in sorted(have.values(), key=lambda p: p.worker)
                        if not (p.phase == "Running" and (p.ready or p.worker > 0))), None)
        return with_start(replace(g, phase=STARTING, ready_since=None, message=waiting or "creating its pods"), cur)

    def drain(self, g: GroupRecord, cur: Sequence[Pod]) -> GroupRecord | None:
        ctx = self.ctx
        assert g.draining_since is not None
        left = g.draining_since + self.spec.drain_seconds - ctx.now
        early = g.draining_since + self.spec.drain_min_seconds - ctx.now  # > 0: routing may not know yet
        serving = any(p.worker == 0 and p.phase == "Running" and not p.deleting for p in cur)
        if (early > 0 or ctx.load.get(g.index) != 0) and left > 0 and serving:
            self.plan.requeue(min(left, early if early > 0 else DRAIN_POLL_SECONDS, DRAIN_POLL_SECONDS))
            return g
        self.delete_live(g)
        if g.drain_for != ROLLOUT:
            return None
        self.event(NORMAL, ROLLING_OUT, f"group {g.index} drained: recreating it from the new template")
        if self.same_shape(g):
            return replace(g, phase=STARTING, attempt=g.attempt + 1, start=None, template_hash=ctx.template_hash,
                           draining_since=None, drain_for=None, admitted_at=ctx.now, ready_since=None, message=None)
        return replace(g, phase=STARTING, attempt=g.attempt + 1, start=None, nodes=(), template_hash=ctx.template_hash,
                       draining_since=None, drain_for=None, admitted_at=None, ready_since=None,
                       message="placed again: its shape or pool changed")
