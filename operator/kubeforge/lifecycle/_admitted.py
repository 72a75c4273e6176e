"""The job's side of admission: write the placement admission decided, or why it waits."""

from __future__ import annotations

from kubeforge.lifecycle._plan import WAIT_MESSAGE_REFRESH_SECONDS, StatusDraft, TrainingContext, TrainingPlan
from kubeforge.objects import (
    ADMITTED, NORMAL, NORMAL_WAITS, NOT_ADMITTED, PENDING, PLACED, READY, RESTARTING, WARNING, condition,
)


def admission_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> bool:
    """For a job holding no placement.

    With an assumed placement (admission placed it; see :mod:`kubeforge.admission`), write it
    to ``status.placement`` with ``Admitted=True`` and go on (returns False): the same decision
    creates the pods. Otherwise the job waits (returns True): ``Admitted=False`` says why
    (rewritten when the reason changes, the message at most every
    WAIT_MESSAGE_REFRESH_SECONDS), with an Event when the reason changes (Normal for a job
    preempting others or holding a reservation, :data:`~kubeforge.objects.NORMAL_WAITS`; else a Warning).
    """
    if ctx.assumed is not None:
        pl = ctx.assumed
        d.set(placement=pl.to_status(d.stamp(ctx.now), ctx.spec_hash), restartNotBefore=None, attempt=d.attempt)
        if not d.get("restarts"):
            d.set(restarts=d.restarts)  # all three counters on record from the first admission
        if d.phase != RESTARTING:
            d.set(phase=PENDING)
        d.condition(ADMITTED, True, PLACED, pl.reason)
        where = f"{pl.level} {pl.domain}" if pl.level else f"pool {pl.pool}"
        plan.events.append((NORMAL, ADMITTED, f"gang of {len(pl.nodes)} placed in {where}: {pl.reason}"))
        plan.forget_assumed = True
        plan.admitted = True
        return False
    if not d.old and ctx.waiting is None:
        # A new job admission has not decided on yet: its decision (a placement, or why it
        # waits) queues this job again within a round and is written with phase Pending then.
        # Writing phase Pending alone now would cost every gang one more status write.
        return True
    if d.get("phase") not in (PENDING, RESTARTING):
        d.set(phase=PENDING)
    not_before = d.time("restartNotBefore")
    if not_before is not None and not_before > ctx.now:
        plan.requeue(not_before - ctx.now)
    if ctx.waiting is not None:
        reason, message = ctx.waiting
        old = condition(d.old, ADMITTED)
        same = bool(old and old.get("status") == "False" and old.get("reason") == reason)
        fresh = old is not None and old.get("message") == message
        if not same or (not fresh and ctx.now - ctx.last_wait_write >= WAIT_MESSAGE_REFRESH_SECONDS):
            d.condition(ADMITTED, False, reason, message)
            plan.wrote_wait = True
            if not same:
                d.condition(READY, False, NOT_ADMITTED, "waiting for admission")
                plan.events.append((NORMAL if reason in NORMAL_WAITS else WARNING, reason, message))
        elif not fresh:  # a newer message, held back by the refresh limit: written once it allows
            plan.requeue(ctx.last_wait_write + WAIT_MESSAGE_REFRESH_SECONDS - ctx.now)
    return True
