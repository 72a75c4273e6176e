"""Stopping a gang: the one place that ends an attempt, whatever the cause, and the two ways a
stop is told: the job fails for good (:func:`fail_job`), or it goes back to admission
(:func:`back_to_admission`)."""

from __future__ import annotations

from kubeforge.lifecycle._accounting import fold_running
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.objects import ADMITTED, FAILED, PENDING, READY, RUNNING, WARNING


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


def fail_job(
    d: StatusDraft,
    ctx: TrainingContext,
    plan: TrainingPlan,
    *,
    reason: str,
    message: str,
    summary: str | None = None,
    event: str | None = None,
) -> None:
    """The job fails for good: ``Failed=True`` with ``reason`` (which limit it passed) and
    ``message``; ``Running=False`` and ``Ready=False`` with reason ``Failed``; phase Failed; the
    gang stopped and its GPUs released (:func:`stop_gang`, final); a Warning Event ``Failed``.

    Args:
        d: The status being built.
        ctx: The decision's inputs.
        plan: Receives the stop and the Event.
        reason: The ``Failed`` condition's reason (``BackoffLimitExceeded``...).
        message: Its message.
        summary: The message of ``Running`` and ``Ready`` (default ``message``).
        event: The Event's message (default ``message``).
    """
    summary = message if summary is None else summary
    d.condition(FAILED, True, reason, message)
    d.condition(RUNNING, False, FAILED, summary)
    d.condition(READY, False, FAILED, summary)
    stop_gang(d, ctx, plan, phase=FAILED, final=True, event=(WARNING, FAILED, message if event is None else event))


def back_to_admission(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, type_: str, reason: str,
                      message: str) -> None:
    """Stop the gang and send it back to admission at once, counting no restart: ``Admitted``,
    ``Running`` and ``Ready`` False with ``reason`` and ``message``, phase Pending, an Event
    ``(type_, reason, message)``. (Whether admission places it again or waits for the spec to
    change is the reason's business: :data:`kubeforge.objects.BLOCKED_UNTIL_SPEC_CHANGES`.)"""
    d.condition(ADMITTED, False, reason, message)
    d.condition(RUNNING, False, reason, message)
    d.condition(READY, False, reason, message)
    stop_gang(d, ctx, plan, phase=PENDING, event=(type_, reason, message))
