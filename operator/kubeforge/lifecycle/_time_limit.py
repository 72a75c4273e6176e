"""The time limit, ``spec.maxRunSeconds`` (Slurm's ``--time``, Kueue's
``maximumExecutionTimeSeconds``), enforced.

A job's run time is the time its attempts held a placement: ``status.runSeconds`` (the earlier
attempts, folded by :func:`account_run_time` when a placement ends) plus ``now -
status.placement.admittedAt`` for the attempt that holds one now. Time waiting for admission or
backing off does not count. It counts from the placement, not from the moment every worker runs,
because GPUs are held from the placement on: so ``admittedAt + maxRunSeconds - runSeconds`` is
the latest time the job gives its GPUs back, which admission may rely on when it lets a job run
before a reserved gang (backfill, :mod:`kubeforge.admission`). Kueue counts its admitted time the
same way, summed over evictions (``status.accumulatedPastExexcutionTimeSeconds``).

Reached, the job fails for good: ``Failed=True`` with reason ``MaxRunSecondsExceeded`` and a
Warning Event of that reason, its gang stopped through the one helper that fails a job
(:func:`~kubeforge.lifecycle.fail_job`: SIGTERM with the pods' own grace period, so the workers
can checkpoint) and its GPUs released. A placed job with time left is requeued for the moment
its limit is reached, so no resync is relied on.
"""

from __future__ import annotations

from typing import Any, Mapping

from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.lifecycle._stop import fail_job
from kubeforge.objects import MAX_RUN_SECONDS_EXCEEDED, WARNING, status_time


def run_seconds(status: Mapping[str, Any], now: float) -> float:
    """Seconds the job's attempts held placements up to ``now``: ``status.runSeconds`` plus, for a
    placement held now, ``now - placement.admittedAt`` (a placement without ``admittedAt``,
    written before it existed, adds nothing).

    Args:
        status: The job's status (any mapping with ``runSeconds`` and ``placement``).
        now: Unix seconds.
    """
    done = float(status.get("runSeconds") or 0.0)
    since = status_time(status.get("placement") or {}, "admittedAt")
    return done + (max(0.0, now - since) if since is not None else 0.0)


def account_run_time(d: StatusDraft) -> None:
    """Fold the current attempt's run into ``status.runSeconds`` when this decision ends (or
    replaces) the placement it held: called once per decision, after every policy, so every
    path that drops a placement (a stop, a suspend, a finished job, a namespace being deleted)
    is counted the same way."""
    if "placement" not in d.patch:
        return
    since = status_time(d.old.get("placement") or {}, "admittedAt")
    if since is None or since == status_time(d.patch.get("placement") or {}, "admittedAt"):
        return
    d.set(runSeconds=round(float(d.get("runSeconds") or 0.0) + max(0.0, d.now - since), 3))


def time_limit_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> bool:
    """Fail the job once its run time (:func:`run_seconds`) reaches ``spec.maxRunSeconds``;
    otherwise, while it holds a placement, ask for a reconcile at the moment it will. Returns
    True when the job fails here (the decision ends)."""
    limit = d.spec.max_run_seconds
    if limit is None:
        return False
    status = {"runSeconds": d.get("runSeconds"), "placement": d.get("placement")}
    used = run_seconds(status, ctx.now)
    if used < limit:
        if status_time(status["placement"] or {}, "admittedAt") is not None:
            plan.requeue(limit - used)
        return False
    message = (f"the job held its placements for {used:.0f}s in all (status.runSeconds and the attempt "
               f"placed now); spec.maxRunSeconds is {limit}")
    plan.events.append((WARNING, MAX_RUN_SECONDS_EXCEEDED, message))
    fail_job(d, ctx, plan, reason=MAX_RUN_SECONDS_EXCEEDED, message=message,
             summary=f"stopped at its time limit (spec.maxRunSeconds {limit})",
             event=f"spec.maxRunSeconds {limit} reached: the gang is stopped")
    return True
