"""A placed gang making progress: create what is missing, notice when every worker runs."""

from __future__ import annotations

from typing import Sequence

from kubeforge.lifecycle._accounting import maybe_fold
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.lifecycle._volume import gates_to_lift
from kubeforge.objects import (
    ALL_WORKERS_RUNNING, NORMAL, PREEMPTED, READY, RECOVERED, RUNNING, Pod, owns_checkpoint_claim,
)


def progress_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, current: Sequence[Pod]) -> None:
    """Create the ranks that have no pod, in the same step as the volume claim and the workers
    Service (behind the volume gate while the claim is not Bound and its StorageClass binds
    immediately: :mod:`kubeforge.lifecycle._volume`), lift the gates that may go, and once
    every worker runs set phase Running with the ``Running`` and ``Ready`` conditions
    (``kubectl wait --for=condition=Ready``). Worker counts are written along with any other
    change (not once per pod: a gang's start is one status write)."""
    pl = d.placement
    assert pl is not None
    replicas = d.spec.replicas
    present = {p.rank for p in current}
    missing = [r for r in range(min(replicas, len(pl.nodes))) if r not in present]
    if missing:
        plan.ensure_claim = owns_checkpoint_claim(d.spec.checkpoint)
        plan.ensure_service = True
        plan.create_ranks = missing
        plan.volume_gate = ctx.claim_wait is not None
    plan.ungate = gates_to_lift(current, ctx.claim_wait is not None, not missing)
    running = sum(1 for p in current if p.phase == "Running")
    if running == replicas and d.phase != RUNNING:
        where = f"{pl.level} {pl.domain}" if pl.level else f"pool {pl.pool}"
        d.set(phase=RUNNING, startTime=d.get("startTime") or d.stamp(ctx.now))
        if not d.get("runningSince"):
            d.set(runningSince=d.stamp(ctx.now))
        msg = f"{replicas} workers running on {len(set(pl.nodes))} nodes in {where}"
        d.condition(RUNNING, True, ALL_WORKERS_RUNNING, msg)
        d.condition(READY, True, ALL_WORKERS_RUNNING, msg)
        pre = d.current_condition(PREEMPTED)
        if pre and pre.get("status") == "True":
            d.condition(PREEMPTED, False, RECOVERED, f"gang running again after: {pre.get('message', '')}")
        plan.events.append((NORMAL, RUNNING, f"all {replicas} workers running in {where}"))
    maybe_fold(d, ctx, plan)
    if d.patch:
        counts = {
            "active": sum(1 for p in current if p.phase in ("Pending", "Running")),
            "ready": sum(1 for p in current if p.ready),
            "succeeded": sum(1 for p in current if p.phase == "Succeeded"),
            "failed": sum(1 for p in current if p.phase == "Failed"),
        }
        if counts != d.get("replicas"):
            d.set(replicas=counts)
