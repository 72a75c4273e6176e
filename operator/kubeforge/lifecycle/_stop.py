"""Stopping a gang: the one place that ends an attempt, whatever the cause."""

from __future__ import annotations

from kubeforge.lifecycle._accounting import fold_running
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan


def stop_gang(
    d: StatusDraft,
    ctx: TrainingContext,
    plan: TrainingPlan,
    *,
    phase: str,
    event: tuple[str, str, str],
    not_before: float | None = None,
    final: bool = False,
) -> None:
    """End the current attempt: close the running segment, release the placement, move to
    the next attempt and delete the gang's live pods (with their own grace period, so each
    worker gets SIGTERM and can checkpoint).

    The new ``attempt`` is written before the pods are deleted (see
    :class:`~kubeforge.lifecycle.TrainingPlan`), so the deletions never look like a
    preemption. A ``final`` stop (Failed, Succeeded) keeps the attempt number.

    Args:
        d: The status being built; the caller sets the conditions and counters.
        ctx: The decision's inputs.
        plan: Receives the deletes, the Event and ``release``.
        phase: The phase after the stop.
        event: ``(type, reason, message)``.
        not_before: ``restartNotBefore`` (backoff), or None to requeue at once.
        final: The job is finished.
    """
    fold_running(d, ctx, end=True)
    d.set(phase=phase, placement=None)
    if not final:
        d.set(attempt=d.attempt + 1)
        d.set(restartNotBefore=d.stamp(not_before) if not_before is not None else None)
        if not_before is not None:
            plan.requeue(not_before - ctx.now)
    else:
        d.set(completionTime=d.stamp(ctx.now))
    plan.delete_pods = sorted(p.name for p in ctx.pods if not p.deleting and not p.terminal)
    plan.delete_grace_seconds = None
    plan.release = True
    plan.forget_assumed = True
    plan.events.append(event)
