"""How a gang ends: a worker's failure (restart with backoff, then Failed) or every worker's
success (JobSet's default success policy, "All")."""

from __future__ import annotations

from typing import Sequence

from kubeforge.lifecycle._accounting import backoff
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.lifecycle._stop import stop_gang
from kubeforge.objects import Pod

KUBELET_REJECTIONS = ("NodeAffinity", "NodeSelectorMismatching", "UnexpectedAdmissionError", "Taint")
"""``status.reason`` of a pod the kubelet refused at admission (with ``OutOf<resource>``): the
pod never ran, so it is a lost placement, not a failure of the workload."""


def rejected_by_kubelet(p: Pod) -> bool:
    """The kubelet refused the pod at admission (see :data:`KUBELET_REJECTIONS`)."""
    return p.phase == "Failed" and bool(p.reason) and (
        p.reason in KUBELET_REJECTIONS or str(p.reason).startswith("OutOf"))


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
    restarts = d.restarts
    if restarts["failures"] >= fp.max_restarts:
        msg = f"{why}; {restarts['failures']} restarts used of maxRestarts {fp.max_restarts}"
        d.condition("Failed", True, "BackoffLimitExceeded", msg)
        d.condition("Running", False, "Failed", why)
        d.condition("Ready", False, "Failed", why)
        stop_gang(d, ctx, plan, phase="Failed", final=True, event=("Warning", "Failed", f"{why}; maxRestarts {fp.max_restarts} reached"))
        return True
    restarts["failures"] += 1
    d.set(restarts=restarts)
    delay = backoff(fp.backoff_seconds, fp.max_backoff_seconds, restarts["failures"])
    d.condition("Running", False, "WorkerFailed", f"{why}; restart {restarts['failures']}/{fp.max_restarts} in {delay:.0f}s")
    d.condition("Ready", False, "WorkerFailed", why)
    d.condition("Admitted", False, "Backoff", f"restarting after {delay:.0f}s backoff")
    stop_gang(d, ctx, plan, phase="Restarting", not_before=ctx.now + delay,
              event=("Warning", "WorkerFailed", f"{why}; restarting the gang in {delay:.0f}s ({restarts['failures']}/{fp.max_restarts})"))
    return True


def success_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, current: Sequence[Pod]) -> bool:
    """Every worker ``Succeeded``: the job is Succeeded and its GPUs go back. A rank that exits
    0 while others still run is waited for (torchrun ends all ranks together)."""
    replicas = d.spec.replicas
    if not (len(current) == replicas and all(p.phase == "Succeeded" for p in current)):
        return False
    msg = f"all {replicas} workers succeeded"
    d.condition("Succeeded", True, "AllWorkersSucceeded", msg)
    d.condition("Running", False, "Succeeded", "finished")
    d.condition("Ready", False, "Succeeded", "finished")
    stop_gang(d, ctx, plan, phase="Succeeded", final=True, event=("Normal", "Succeeded", msg))
    return True
