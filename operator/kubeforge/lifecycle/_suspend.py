"""Suspend and resume (``spec.suspend``), as Job and JobSet do."""

from __future__ import annotations

from kubeforge.lifecycle._accounting import fold_running
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.objects import ADMITTED, JOB_RESUMED, JOB_SUSPENDED, NORMAL, PENDING, READY, RESUMED, RUNNING, SUSPENDED


def suspend_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> bool:
    """While ``spec.suspend`` is true: delete every pod, release the placement (the GPUs go
    back to the pool), keep the checkpoint volume and the status; the next attempt starts
    with admission again. Returns True when the job is (being) suspended.

    Setting it back to false moves the phase from Suspended to Pending (and returns False, so
    the job goes on to admission in the same decision).
    """
    if d.spec.suspend:
        if d.phase != SUSPENDED or d.placement is not None or ctx.assumed is not None:
            fold_running(d, ctx, end=True)
            d.set(phase=SUSPENDED, placement=None, attempt=d.attempt + 1, restartNotBefore=None)
            d.condition(SUSPENDED, True, JOB_SUSPENDED, "spec.suspend is true: pods deleted, checkpoint volume and status kept")
            d.condition(RUNNING, False, JOB_SUSPENDED, "suspended")
            d.condition(READY, False, JOB_SUSPENDED, "suspended")
            d.condition(ADMITTED, False, JOB_SUSPENDED, "a suspended job holds no GPUs")
            plan.events.append((NORMAL, SUSPENDED, "job suspended: pods deleted, GPUs released"))
            plan.release = True
            plan.forget_assumed = True
        plan.delete_pods = sorted(p.name for p in ctx.pods if not p.deleting)
        return True
    if d.phase == SUSPENDED:
        d.set(phase=PENDING)
        d.condition(SUSPENDED, False, JOB_RESUMED, "spec.suspend is false: waiting for admission")
        plan.events.append((NORMAL, RESUMED, "job resumed; waiting for admission"))
    return False
