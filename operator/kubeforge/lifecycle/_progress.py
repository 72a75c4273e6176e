"""A placed gang making progress: create what is missing, notice when every worker runs."""

from __future__ import annotations

from typing import Sequence

from kubeforge.lifecycle._accounting import maybe_fold
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.objects import GANG_GATE, Pod, TrainingJobRecord, condition


def claim_wait(job: TrainingJobRecord, claim: tuple[str, str] | None, binding_mode: str | None) -> str | None:
    """Why a placed gang's pods wait for its checkpoint claim, or None to create them.

    Only the job's own claim is waited for, only while it is not Bound and its StorageClass
    binds immediately: with WaitForFirstConsumer the claim binds *because* a pod exists, and a
    user's ``existingClaimName`` is left to kube-scheduler.

    Args:
        job: The job.
        claim: ``(phase, storageClassName)`` of its claim ``<job>-checkpoint``, None if absent.
        binding_mode: ``volumeBindingMode`` of that StorageClass, None if unknown.
    """
    if job.spec is None or job.spec.checkpoint.existing_claim_name:
        return None
    name = f"{job.name}-checkpoint"
    if claim is None:
        return f"checkpoint claim {name} not created yet"
    phase, _ = claim
    if phase == "Bound" or binding_mode == "WaitForFirstConsumer":
        return None
    return f"checkpoint claim {name} is {phase}, waiting for it to bind"


def progress_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, current: Sequence[Pod]) -> None:
    """Create the ranks that have no pod (with the volume claim and the workers Service first,
    once the claim is bound when its StorageClass binds immediately),
    lift a legacy gang gate, and once every worker runs set phase Running with the ``Running``
    and ``Ready`` conditions (``kubectl wait --for=condition=Ready``). Worker counts are
    written along with any other change (not once per pod: a gang's start is one status write)."""
    pl = d.placement
    assert pl is not None
    replicas = d.spec.replicas
    present = {p.rank for p in current}
    missing = [r for r in range(min(replicas, len(pl.nodes))) if r not in present]
    if missing:
        plan.ensure_claim = not d.spec.checkpoint.existing_claim_name
        plan.ensure_service = True
        # Pods wait for an immediately-binding claim to be bound (the claim's watch event
        # brings the job back): created earlier they would sit in kube-scheduler's backoff.
        plan.create_ranks = [] if ctx.claim_wait else missing
    else:
        plan.ungate = sorted(p.name for p in current if GANG_GATE in p.gates)
    running = sum(1 for p in current if p.phase == "Running")
    if running == replicas and d.phase != "Running":
        where = f"{pl.level} {pl.domain}" if pl.level else f"pool {pl.pool}"
        d.set(phase="Running", startTime=d.get("startTime") or d.stamp(ctx.now))
        if not d.get("runningSince"):
            d.set(runningSince=d.stamp(ctx.now))
        msg = f"{replicas} workers running on {len(set(pl.nodes))} nodes in {where}"
        d.condition("Running", True, "AllWorkersRunning", msg)
        d.condition("Ready", True, "AllWorkersRunning", msg)
        pre = condition({"conditions": d.get("conditions")}, "Preempted")
        if pre and pre.get("status") == "True":
            d.condition("Preempted", False, "Recovered", f"gang running again after: {pre.get('message', '')}")
        plan.events.append(("Normal", "Running", f"all {replicas} workers running in {where}"))
    maybe_fold(d, ctx)
    if d.patch:
        counts = {
            "active": sum(1 for p in current if p.phase in ("Pending", "Running")),
            "ready": sum(1 for p in current if p.ready),
            "succeeded": sum(1 for p in current if p.phase == "Succeeded"),
            "failed": sum(1 for p in current if p.phase == "Failed"),
        }
        if counts != d.get("replicas"):
            d.set(replicas=counts)
