"""How a gang ends: a worker's failure (restart with backoff, then Failed) or every worker's
success (JobSet's default success policy, "All")."""

from __future__ import annotations

from typing import Sequence

from kubeforge.lifecycle._accounting import backoff
from kubeforge.lifecycle._plan import RestartCause, StatusDraft, TrainingContext, TrainingPlan
from kubeforge.lifecycle._stop import fail_job, stop_gang
from kubeforge.objects import (
    ADMITTED, ALL_WORKERS_SUCCEEDED, BACKOFF, BACKOFF_LIMIT_EXCEEDED, NORMAL, READY, RESTARTING, RUNNING, SUCCEEDED,
    WARNING, WORKER_FAILED, Pod, rejected_by_kubelet,
)

def failure_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, current: Sequence[Pod]) -> bool:
    """A worker that ended ``Failed`` (not a disruption, not a kubelet rejection) restarts the
    whole gang after ``backoffSeconds * 2**(failures-1)`` (capped by ``maxBackoffSeconds``);
    with ``maxRestarts`` used up, the job is Failed (``BackoffLimitExceeded``) naming the pod."""
    failed = sorted((p for p in current if p.phase == "Failed" and not rejected_by_kubelet(p)), key=lambda p: p.rank)
    if not failed:
        return False
    first = failed[0]
    why = f"pod {first.name} (rank {first.rank}) failed with exit code {first.exit_code}"
    fp = d.spec.failure_policy
    used = d.restarts_of(RestartCause.FAILURE)
    if used >= fp.max_restarts:
        fail_job(d, ctx, plan, reason=BACKOFF_LIMIT_EXCEEDED,
                 message=f"{why}; {used} restarts used of maxRestarts {fp.max_restarts}",
                 summary=why, event=f"{why}; maxRestarts {fp.max_restarts} reached")
        return True
    count = d.count(RestartCause.FAILURE)
    plan.restart = RestartCause.FAILURE
    delay = backoff(fp.backoff_seconds, fp.max_backoff_seconds, count)
    d.condition(RUNNING, False, WORKER_FAILED, f"{why}; restart {count}/{fp.max_restarts} in {delay:.0f}s")
    d.condition(READY, False, WORKER_FAILED, why)
    d.condition(ADMITTED, False, BACKOFF, f"restarting after {delay:.0f}s backoff")
    stop_gang(d, ctx, plan, phase=RESTARTING, not_before=ctx.now + delay,
              event=(WARNING, WORKER_FAILED, f"{why}; restarting the gang in {delay:.0f}s ({count}/{fp.max_restarts})"))
    return True


def success_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, current: Sequence[Pod]) -> bool:
    """Every worker ``Succeeded``: the job is Succeeded and its GPUs go back. A rank that exits
    0 while others still run is waited for (torchrun ends all ranks together)."""
    replicas = d.spec.replicas
    if not (len(current) == replicas and all(p.phase == "Succeeded" for p in current)):
        return False
    msg = f"all {replicas} workers succeeded"
    d.condition(SUCCEEDED, True, ALL_WORKERS_SUCCEEDED, msg)
    d.condition(RUNNING, False, SUCCEEDED, "finished")
    d.condition(READY, False, SUCCEEDED, "finished")
    stop_gang(d, ctx, plan, phase=SUCCEEDED, final=True, event=(NORMAL, SUCCEEDED, msg))
    return True
