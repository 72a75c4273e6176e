"""Starting a gang: a spec that changed under it, creates the API server refused, a placement
lost to another pod, and the startup timeout (Kueue's ``waitForPodsReady``).

Every path here ends the attempt, releases its GPUs at once and says why in the ``Admitted``
condition and a Warning Event: a gang never holds GPUs without running pods past its timeout.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from kubeforge.lifecycle._accounting import backoff
from kubeforge.lifecycle._plan import RestartCause, StatusDraft, TrainingContext, TrainingPlan
from kubeforge.lifecycle._stop import back_to_admission, fail_job, stop_gang
from kubeforge.objects import (
    ADMITTED, CREATE_FAILED, INVALID_SPEC, NORMAL, PENDING, PLACEMENT_LOST, READY, RUNNING, SECRET_NOT_FOUND,
    SPEC_CHANGED, STARTUP_RETRY_LIMIT_EXCEEDED, STARTUP_TIMEOUT, UNSCHEDULABLE, UNSCHEDULABLE_TEMPLATE,
    VOLUME_NOT_BOUND, WARNING,
    Pod, own_constraint_cause, rejected_by_kubelet, status_time, waits_for_volume,
)
from kubeforge.placement import node_misfit

_CAMEL = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


def spec_change_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> bool:
    """The spec's replicas, GPUs, topology, pools or template changed since the gang was
    placed: restart it as a deliberate new attempt with the new spec (reason SpecChanged),
    counted neither as a failure nor as a preemption."""
    pl = d.get("placement") or {}
    old = pl.get("specHash")
    if not old or not ctx.spec_hash or old == ctx.spec_hash:
        return False
    msg = "the spec changed (replicas, gpusPerReplica, topology, pools or template): restarting the gang with it"
    back_to_admission(d, ctx, plan, NORMAL, SPEC_CHANGED, msg)
    return True


def startup_failure(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, reason: str, message: str) -> None:
    """End an attempt that failed to start: requeue after backoff, counted in
    ``restarts.startupFailures``; past ``maxStartupRetries`` the job is Failed
    (``StartupRetryLimitExceeded``)."""
    fp = d.spec.failure_policy
    used = d.restarts_of(RestartCause.STARTUP)
    if used >= fp.max_startup_retries:
        d.condition(ADMITTED, False, reason, message)
        fail_job(d, ctx, plan, reason=STARTUP_RETRY_LIMIT_EXCEEDED,
                 message=f"{message}; {used} startup retries used of maxStartupRetries {fp.max_startup_retries}")
        return
    count = d.count(RestartCause.STARTUP)
    plan.restart, plan.startup_failure = RestartCause.STARTUP, reason
    delay = backoff(fp.backoff_seconds, fp.max_backoff_seconds, count)
    d.condition(ADMITTED, False, reason, f"{message}; GPUs released, retry {count}/"
                f"{fp.max_startup_retries} in {delay:.0f}s")
    d.condition(RUNNING, False, reason, message)
    d.condition(READY, False, reason, message)
    stop_gang(d, ctx, plan, phase=PENDING, not_before=ctx.now + delay,
              event=(WARNING, reason, f"{message}; GPUs released, retrying in {delay:.0f}s "
                     f"({count}/{fp.max_startup_retries})"))


def create_error_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> bool:
    """The API server refused a Pod, volume claim or Service of this attempt. 422/400: only an
    edit can fix it, so the job waits for one (``Admitted=False/InvalidSpec`` at this
    generation). Anything else (403 from quota, PodSecurity or a webhook): a startup failure,
    retried with backoff (``CreateFailed``). A Secret the pods need that does not exist (the
    object store's credentials, kind ``Secret``): a startup failure too (``SecretNotFound``)."""
    err = ctx.create_error
    if err is None or err.attempt != d.attempt:
        return False
    if err.kind == "Secret":
        startup_failure(d, ctx, plan, SECRET_NOT_FOUND, f"checkpoint.objectStore.secretName: Secret {err.name!r} "
                        "does not exist in the job's namespace (the workers' object-store credentials)")
        return True
    what = f"the API server refused {err.kind} {err.name} (HTTP {err.code}): {err.message}"
    if err.needs_spec_change:
        back_to_admission(d, ctx, plan, WARNING, INVALID_SPEC, f"{what}; fix the spec to retry")
        return True
    startup_failure(d, ctx, plan, CREATE_FAILED, what)
    return True


def _not_started(current: Sequence[Pod], replicas: int, claim_wait: str | None = None) -> tuple[str, str]:
    """(reason, message) of a gang that has not started, from its pods: the first stuck
    container reason (ErrImagePull, ...), else Unschedulable, else a claim that never bound
    (VolumeNotBound), else StartupTimeout."""
    by_rank = {p.rank: p for p in current}
    parts: list[str] = [claim_wait] if claim_wait else []
    reason = "" if not claim_wait else VOLUME_NOT_BOUND
    for r in range(replicas):
        p = by_rank.get(r)
        if p is None:
            if not claim_wait:
                parts.append(f"rank {r}: no pod")
        elif p.phase == "Running":
            continue
        elif p.waiting:
            parts.append(f"rank {r}: {p.waiting}")
            reason = reason or p.waiting_reason
        elif p.unschedulable_message:
            parts.append(f"rank {r}: {UNSCHEDULABLE}: {p.unschedulable_message}")
            reason = reason or UNSCHEDULABLE
        else:
            parts.append(f"rank {r}: {p.phase}" + (f" on node {p.node}" if p.node else " (not bound)"))
    running = sum(1 for p in current if p.phase == "Running")
    more = f"; {len(parts) - 3} more" if len(parts) > 3 else ""
    detail = "; ".join(parts[:3]) + more
    return (reason if _CAMEL.match(reason or "") else STARTUP_TIMEOUT,
            f"{running} of {replicas} workers Running: {detail}")


def template_cause(ctx: TrainingContext, template: Mapping[str, Any], pod: Pod) -> str | None:
    """Why the job's own template keeps ``pod`` off its node, or None when it does not explain
    kube-scheduler's (or the kubelet's) answer: the same predicate placement filters nodes with
    (:func:`kubeforge.placement.node_misfit`: GPUs, cpu, memory and other resources, node
    constraints, taints), then the template's own hard inter-pod constraints when the
    scheduler's message names their filter (:data:`kubeforge.objects.SCHEDULER_OWN_CONSTRAINT_REASONS`)."""
    node = pod.where
    info = ctx.pool_nodes.get(node) if node else None
    if ctx.request is not None and info is not None:
        why = node_misfit(ctx.request, info)
        if why:
            return why
    return own_constraint_cause(template, pod)


def blame_template(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, pod: Pod, cause: str) -> None:
    """A worker cannot start because of the job's own template: release the GPUs at once, say
    which part of the template and why (``Admitted=False``, :data:`UNSCHEDULABLE_TEMPLATE`, and a
    Warning Event), count no startup retry, and wait for the spec to change (admission skips the
    job until then: placing it again would fail the same way)."""
    msg = f"rank {pod.rank} ({pod.name}) cannot run on node {pod.where}: {cause}; GPUs released, fix the spec to retry"
    back_to_admission(d, ctx, plan, WARNING, UNSCHEDULABLE_TEMPLATE, msg)


def startup_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan, current: Sequence[Pod]) -> bool:
    """While the gang is starting: a lost placement (a worker the kubelet refused, or one
    kube-scheduler cannot bind on its node for ``schedule_timeout`` s for a reason other than
    its volumes) or the startup timeout (not every worker Running ``startupTimeoutSeconds``
    after admission) ends the attempt as a startup failure. Otherwise asks to be looked at
    again when the next of those deadlines passes."""
    if d.phase == RUNNING or (len(current) == d.spec.replicas and all(p.phase == "Running" for p in current)):
        return False  # running (the progress step records it), whatever the clock says
    template = d.spec.template.spec
    rejected = next((p for p in sorted(current, key=lambda p: p.rank) if rejected_by_kubelet(p)), None)
    if rejected is not None:
        cause = template_cause(ctx, template, rejected)
        if cause:
            blame_template(d, ctx, plan, rejected, cause)
            return True
        startup_failure(d, ctx, plan, PLACEMENT_LOST,
                        f"the kubelet refused pod {rejected.name} on node {rejected.node} ({rejected.reason})")
        return True
    stuck = sorted((p for p in current if p.phase == "Pending" and not p.gated and not p.deleting
                    and p.unschedulable_since is not None and not waits_for_volume(p.unschedulable_message)),
                   key=lambda p: p.unschedulable_since or 0.0)
    for p in stuck:  # the template's own doing is known at once: no GPUs held for the timeout
        cause = template_cause(ctx, template, p)
        if cause:
            blame_template(d, ctx, plan, p, cause)
            return True
    if stuck:
        waited = ctx.now - (stuck[0].unschedulable_since or ctx.now)
        if waited >= ctx.schedule_timeout:
            startup_failure(d, ctx, plan, PLACEMENT_LOST,
                            f"pod {stuck[0].name} could not be scheduled on its node for {waited:.0f}s "
                            f"({stuck[0].unschedulable_message or UNSCHEDULABLE})")
            return True
        plan.requeue(ctx.schedule_timeout - waited)
    admitted = status_time(d.get("placement") or {}, "admittedAt")
    if admitted is not None:
        left = admitted + d.spec.startup_timeout_seconds - ctx.now
        if left <= 0:
            reason, message = _not_started(current, d.spec.replicas, ctx.claim_wait)
            startup_failure(d, ctx, plan, reason,
                            f"not every worker Running {d.spec.startup_timeout_seconds}s after admission ({message})")
            return True
        plan.requeue(left)
    return False

