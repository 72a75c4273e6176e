"""The rules of a service's groups together in a serving decision: admission's new groups, warm
standby (promote, sleep and wake), scale-down, rollout, stale pods. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from kubeforge.admission import scale_down_order, standby_removal_order
from kubeforge.api import DrainReason, GroupPhase
from kubeforge.objects import (
    ADMITTED, DRAINING, NORMAL, ROLLING_OUT, STANDBY_ASLEEP, STANDBY_WOKEN, WAKING_STANDBY, GroupRecord,
)
from kubeforge.serving._context import DRAIN_POLL_SECONDS
from kubeforge.serving._group import GroupRules
from kubeforge.serving._standby import ASLEEP, PENDING, WAKING, is_serving, is_standby, promote, standby_step

__all__ = ["STANDBY_POLL_SECONDS", "ServiceRules"]

READY, STARTING, FAILED = GroupPhase.READY.value, GroupPhase.STARTING.value, GroupPhase.FAILED.value
SCALE_DOWN, ROLLOUT = DrainReason.SCALE_DOWN.value, DrainReason.ROLLOUT.value
STANDBY_POLL_SECONDS = 2.0
"""A group told to sleep or wake is looked at again at least this often (the call's end also
brings a look)."""


class ServiceRules(GroupRules):
    """The group rules plus those of the service's groups together (:mod:`kubeforge.serving._plan`)."""

    def admit(self, groups: dict[int, GroupRecord]) -> None:
        """Write the groups admission placed (as many as are still wanted: the desired count plus
        the standby replicas). A new group serves while fewer than the desired count do, else it
        is a standby replica (the refill after a wake); a group placed again keeps its role."""
        ctx = self.ctx
        count = sum(1 for g in groups.values() if not g.leaving and (g.holds or g.phase == FAILED))
        wanted = ctx.desired + self.spec.standby.replicas
        for index, a in sorted(ctx.assumed.items()):
            self.plan.written_assumed.append(index)
            old = groups.get(index)
            if (old is not None and (old.nodes or old.phase == FAILED)) or count >= wanted:
                self.plan.release = True  # stale, or no longer wanted: its GPUs go back
                continue
            pl = a.placement
            # A new attempt past any pod of this index still terminating (a group removed by a
            # scale-down and added back): pod names carry the attempt, and a name still in use
            # would be refused (409) and the group left without that pod.
            seen = max((p.attempt for p in self.by_group.get(index, [])), default=-1)
            attempt = max(old.attempt if old else 0, seen + 1)
            serving = sum(1 for x in groups.values() if is_serving(x))
            role = old.standby if old is not None else (None if serving < ctx.desired else PENDING)
            g = GroupRecord(index=index, attempt=attempt, phase=STARTING, pool=pl.pool,
                            nodes=pl.nodes, gpus_per_pod=a.gpus_per_pod, level=pl.level, domain=pl.domain,
                            template_hash=ctx.template_hash, admitted_at=ctx.now,
                            restarts=old.restarts if old else 0, startup_failures=old.startup_failures if old else 0,
                            standby=PENDING if role in (PENDING, ASLEEP) else None)
            where = f"{pl.level} {pl.domain}" if pl.level else f"pool {pl.pool}"
            self.event(NORMAL, ADMITTED, f"group {index} placed on {len(pl.nodes)} node(s) in {where}: {pl.reason}")
            groups[index] = self.progress(g, [])
            count += 1

    def scale(self, groups: dict[int, GroupRecord]) -> None:
        """Bring the serving count (failed groups and groups draining for a rollout included)
        down to the desired one, in :func:`~kubeforge.admission.scale_down_order`: a group
        draining for a rollout is turned into a scale-down drain (deleted once drained, not
        recreated), a Ready one starts draining, any other is deleted at once. Standby replicas
        beyond ``spec.standby.replicas`` are deleted at once (they serve nothing), in
        :func:`~kubeforge.admission.standby_removal_order`."""
        ctx = self.ctx
        extra = [g for g in groups.values() if is_standby(g)]
        for g in standby_removal_order(extra)[:max(0, len(extra) - self.spec.standby.replicas)]:
            self.delete_live(g)
            del groups[g.index]
        active = [g for g in groups.values() if is_serving(g)]
        excess = len(active) - ctx.desired
        if excess <= 0:
            return
        for g in scale_down_order(active, ctx.load)[:excess]:
            if g.draining_since is not None:
                self.event(NORMAL, DRAINING, f"group {g.index} was draining for the rollout: it is deleted once "
                           f"drained instead of recreated (scale-down to {ctx.desired})")
                groups[g.index] = replace(g, drain_for=SCALE_DOWN)
            elif g.phase == READY:
                self.event(NORMAL, DRAINING, f"group {g.index} leaves the Service and is deleted once its requests "
                           f"in flight are done (at most {self.spec.drain_seconds}s): scale-down to {ctx.desired}")
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
        busy = [g for g in groups.values() if g.standby is None and (
            g.draining_since is not None or (g.holds and g.phase != READY) or (not g.nodes and g.phase != FAILED))]
        g = next((x for x in stale if x.phase != READY or x.standby is not None), None)  # standby ones serve nothing
        if g is not None:
            self.delete_live(g)
            what = "was not Ready" if g.standby is None else "is a standby replica"
            self.event(NORMAL, ROLLING_OUT, f"group {g.index} {what}: recreating it from the new template")
            keep = self.same_shape(g)
            new = replace(g, attempt=g.attempt + 1, start=None, template_hash=ctx.template_hash,
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

    def promote(self, groups: dict[int, GroupRecord]) -> None:
        """Wake standby replicas first while fewer groups serve than desired
        (:func:`~kubeforge.serving._standby.promote`), each with a Normal Event."""
        for before, after in promote(groups, self.ctx.desired, self.ctx.now):
            how = ("its engine is told to wake up" if after.standby == WAKING else
                   "it serves once started")
            self.event(NORMAL, WAKING_STANDBY, f"group {before.index} was a standby replica ({before.standby}): "
                       f"{how} (scale-up to {self.ctx.desired})")

    def standby(self, groups: dict[int, GroupRecord]) -> list[float]:
        """Each standby group's next state from its engine's (:func:`~kubeforge.serving._standby.standby_step`):
        the sleeps and wakes to ask for, an Event when one falls asleep or wakes. Returns the
        wake times measured now."""
        ctx, woke = self.ctx, []
        leaders = {p.group: p for p in ctx.pods if p.worker == 0 and p.group is not None and not p.deleting}
        for index in sorted(groups):
            g = groups[index]
            if g.standby is None:
                continue
            st = standby_step(g, ctx.sleeping.get(index), ctx.now)
            groups[index] = st.group
            lead = leaders.get(index)
            lead = lead if lead is not None and lead.attempt == g.attempt else None
            if st.sleep and lead is not None:
                self.plan.sleep.append(lead)
            if st.wake and lead is not None:
                self.plan.wake.append(lead)
            if st.sleep or st.wake:
                self.plan.requeue(STANDBY_POLL_SECONDS)
            if st.group.standby == ASLEEP and g.standby != ASLEEP:
                self.event(NORMAL, STANDBY_ASLEEP, f"group {index} is asleep: a standby replica holding its GPUs, "
                           f"out of the Service")
            if st.woke_after is not None:
                woke.append(st.woke_after)
            if g.standby == WAKING and st.group.standby is None and g.phase == READY:
                took = f" after {st.woke_after:.1f}s" if st.woke_after is not None else ""
                self.event(NORMAL, STANDBY_WOKEN, f"group {index} is awake{took} and joins the Service")
        return woke
