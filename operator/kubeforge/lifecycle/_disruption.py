"""Disruption: the gang lost a worker to something other than its own failure.

A disruption restarts the whole gang from its last checkpoint, counted in
``restarts.preemptions`` (never against ``maxRestarts``), up to ``maxPreemptions``. Signals:

- a pod with condition ``DisruptionTarget=True``, any reason (``PreemptionByScheduler``,
  ``DeletionByTaintManager``, ``EvictionByEvictionAPI``, ``DeletionByPodGC``,
  ``TerminationByKubelet``);
- a worker ``Failed`` with ``status.reason`` ``Evicted`` (kubelet node-pressure eviction), or,
  once the gang ran, refused by its kubelet on re-admission (``UnexpectedAdmissionError``...);
- a worker of the current attempt being deleted by someone else (kubeforge writes a new
  attempt before it deletes pods, so its own deletions never count);
- once the gang ran, a rank whose pod is gone;
- a node of the placement that :func:`kubeforge.objects.interruption_reason` says is lost:
  an interruption taint, gone, NotReady past the grace period;
- admission chose the gang as a victim for a higher-priority job or to reclaim quota
  (:mod:`kubeforge.admission`): the condition's reason says which.
"""

from __future__ import annotations

from typing import Sequence

from kubeforge.lifecycle._plan import RestartCause, StatusDraft, TrainingContext, TrainingPlan
from kubeforge.lifecycle._stop import fail_job, stop_gang
from kubeforge.objects import (
    ADMITTED, PREEMPTED, PREEMPTION_LIMIT_EXCEEDED, READY, RESTARTING, RUNNING, WARNING, Pod, interruption_reason,
    not_ready_wait, rejected_by_kubelet,
)

EVICTION_REASONS = ("Evicted", "Preempting")
"""A failed pod's ``status.reason`` when the kubelet evicted it (node pressure) or preempted it for
a critical pod: Kubernetes' words, not kubeforge's."""


def disruption_reasons(d: StatusDraft, ctx: TrainingContext, current: Sequence[Pod], plan: TrainingPlan) -> list[str]:
    """Why the current gang is disrupted (empty: it is not). Asks for a requeue when a node
    of the placement is NotReady but still inside its grace period."""
    reasons = []
    ranks = {p.rank for p in current}
    for p in current:
        if p.disruption:
            reasons.append(f"pod {p.name}: DisruptionTarget ({p.disruption})")
        elif p.phase == "Failed" and p.reason in EVICTION_REASONS:
            reasons.append(f"pod {p.name} {p.reason}")
        elif d.phase == RUNNING and rejected_by_kubelet(p):  # e.g. after a kubelet restart
            reasons.append(f"pod {p.name} refused by the kubelet ({p.reason})")
        elif p.deleting and not p.terminal:
            reasons.append(f"pod {p.name} deleted")
    if d.phase == RUNNING:
        reasons += [f"rank {r}'s pod disappeared from the running gang" for r in range(d.spec.replicas) if r not in ranks]
    pl = d.placement
    for node in sorted(set(pl.nodes) if pl else ()):
        view = ctx.nodes.get(node)
        why = interruption_reason(view, node, ctx.now, ctx.not_ready_grace)
        if why:
            reasons.append(why)
        elif view is not None:
            wait = not_ready_wait(view, ctx.now, ctx.not_ready_grace)
            if wait is not None:
                plan.requeue(wait)
    return sorted(set(reasons))


def disruption_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, current: Sequence[Pod]) -> bool:
    """Restart the gang as a preemption when it is disrupted (unless every worker already
    succeeded); past ``maxPreemptions`` the job is Failed (``PreemptionLimitExceeded``)."""
    reasons = disruption_reasons(d, ctx, current, plan)
    why = PREEMPTED
    if ctx.preempted_by is not None and d.placement is not None:
        why, message = ctx.preempted_by
        reasons = [message] + reasons
    done = len(current) == d.spec.replicas and all(p.phase == "Succeeded" for p in current)
    if not reasons or done:
        return False
    count = d.count(RestartCause.PREEMPTION)  # the last one counts, even past the limit
    msg = "; ".join(reasons[:5])
    limit = d.spec.failure_policy.max_preemptions
    if count > limit:
        fail_job(d, ctx, plan, reason=PREEMPTION_LIMIT_EXCEEDED,
                 message=f"preempted {count} times, more than maxPreemptions {limit}: {msg}")
        return True
    plan.restart = RestartCause.PREEMPTION
    d.condition(PREEMPTED, True, why, msg)
    d.condition(RUNNING, False, PREEMPTED, "gang stopped to checkpoint and move")
    d.condition(READY, False, PREEMPTED, "gang stopped to checkpoint and move")
    d.condition(ADMITTED, False, PREEMPTED, "waiting to be placed again away from the lost nodes")
    stop_gang(d, ctx, plan, phase=RESTARTING,
              event=(WARNING, PREEMPTED, f"restarting the gang (preemption {count}): {msg}"))
    return True
