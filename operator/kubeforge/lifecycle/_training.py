"""The TrainingJob decision: ``plan_training(job, ctx) -> TrainingPlan``, pure.

It looks at the job (spec parsed, status), its pods, their nodes and what this process knows
that the API server does not show yet (an assumed placement, a refused create), and returns
what to write, delete and create. Level-based: the same inputs give the same plan, so a
reconcile interrupted half-way is simply redone.

The policies, in the order they are asked (the first that acts ends the decision, as JobSet
orders its policies): a namespace being deleted, finished jobs, suspend, admission (write the placement, or why the job
waits), spec change, refused creates, disruption (preemption), failure, success, startup
(lost placement, startup timeout), then progress (create what is missing, Running/Ready). The time
limit (``spec.maxRunSeconds``) is asked before admission for a job that holds no placement and
after success for one that does; whichever policy ends a placement, its run is then counted in
``status.runSeconds``.
"""

from __future__ import annotations

from kubeforge.objects import set_condition
from kubeforge.lifecycle._accounting import fold_running, report_checkpoint
from kubeforge.lifecycle._admitted import admission_policy
from kubeforge.lifecycle._disruption import disruption_policy
from kubeforge.lifecycle._domain import compute_domain_policy
from kubeforge.lifecycle._outcome import failure_policy, success_policy
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.lifecycle._progress import progress_policy
from kubeforge.lifecycle._reports import report_policy
from kubeforge.lifecycle._startup import create_error_policy, spec_change_policy, startup_policy
from kubeforge.lifecycle._suspend import suspend_policy
from kubeforge.lifecycle._time_limit import account_run_time, time_limit_policy
from kubeforge.objects import (
    ADMITTED, INVALID_SPEC, NAMESPACE_TERMINATING, PENDING, TERMINAL_JOB_PHASES, WARNING, TrainingJobRecord, condition,
    current_attempt, placement_of, worker_pod_name,
)


def _invalid(job: TrainingJobRecord, ctx: TrainingContext, d: StatusDraft, plan: TrainingPlan) -> None:
    """A spec the models refuse (only objects made before a schema change get this far): say
    so once, and hold nothing: a placement is released and the gang's live pods deleted."""
    old = condition(job.status, ADMITTED)
    live = sorted(p.name for p in ctx.pods if not p.deleting and not p.terminal)
    if job.status.get("placement"):
        d.set(placement=None, attempt=d.attempt + 1)
        plan.release = True
    plan.delete_pods = live
    if old and old.get("reason") == INVALID_SPEC and old.get("message") == job.spec_error and not d.patch:
        return
    conds = set_condition(job.status.get("conditions"), ADMITTED, False, INVALID_SPEC, job.spec_error or "",
                          d.now, job.generation)
    d.set(conditions=conds, phase=job.status.get("phase") or PENDING)
    plan.events.append((WARNING, INVALID_SPEC, job.spec_error or "invalid spec"))


def _namespace_terminating(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> None:
    """The namespace is being deleted: its controller deletes the pods and the job. Nothing is
    created, restarted or counted (a deleted worker is not a preemption here); the placement is
    dropped from status so the ledger counts only the pods while they terminate, never GPUs
    nobody holds if the namespace's deletion hangs on something else."""
    if d.get("placement") or ctx.assumed is not None:
        fold_running(d, ctx, end=True)
        d.set(placement=None)
        d.condition(ADMITTED, False, NAMESPACE_TERMINATING,
                    "the namespace is being deleted: nothing is created or restarted any more")
        plan.release = True
        plan.forget_assumed = True


def plan_training(job: TrainingJobRecord, ctx: TrainingContext) -> TrainingPlan:
    """Decide the next actions for one TrainingJob.

    Args:
        job: The job (``spec`` parsed with API defaults, or None with ``spec_error``), with
            the status to act on (the effective one: this process's last write if the index
            has not caught up).
        ctx: Its pods (every attempt), their nodes, the clock and what this process knows.

    Returns:
        A :class:`TrainingPlan`; an empty one when nothing needs doing. Its ``status`` never
        includes ``observedGeneration``: the writer adds it.
    """
    plan = TrainingPlan()
    d = StatusDraft(job, ctx.now)
    _decide(job, ctx, d, plan)
    plan.delete_pods = sorted(set(plan.delete_pods) | set(_unseen_released(job, ctx, plan)))
    account_run_time(d)  # whichever policy ended the placement, its run counts toward maxRunSeconds
    plan.status = d.result()
    return plan


def _unseen_released(job: TrainingJobRecord, ctx: TrainingContext, plan: TrainingPlan) -> list[str]:
    """The pods of the placement this plan releases that the pod index has never shown, by name
    (one per rank of the placement: :func:`~kubeforge.objects.worker_pod_name`), to be deleted
    with the ones it shows. A watch lagging past the expectations' TTL hides pods this process
    created (a job restarted on its startup timeout because it never saw them); deleted only
    from the index, they would run on, pinned to nodes no placement holds any more, while the
    next admission round gave their GPUs again. A name never created costs one 404. Not while
    the namespace is being deleted (its controller deletes everything)."""
    old = placement_of(job.status)
    if not plan.release or old is None or ctx.namespace_terminating:
        return []
    attempt = current_attempt(job.status)
    seen = {p.name for p in ctx.pods}
    names = (worker_pod_name(job.name, rank, attempt) for rank in range(len(old.nodes)))
    return [n for n in names if n not in seen]


def _decide(job: TrainingJobRecord, ctx: TrainingContext, d: StatusDraft, plan: TrainingPlan) -> None:
    """The policies in order (module docstring); each writes into ``d`` and ``plan``."""
    if job.spec is None:
        _invalid(job, ctx, d, plan)
        return
    if ctx.namespace_terminating:
        _namespace_terminating(d, ctx, plan)
        return
    report_checkpoint(d, ctx, plan)
    report_policy(d, ctx, plan)
    if d.phase in TERMINAL_JOB_PHASES:
        if d.get("placement"):
            d.set(placement=None)
            plan.release = True
        compute_domain_policy(d, ctx, plan)
        # A finished job holds nothing, even a pod whose creation the watch showed only after
        # the job ended (created in the same pass that found the gang could not start).
        plan.delete_pods = sorted(p.name for p in ctx.pods if not p.deleting and not p.terminal)
        return
    attempt = d.attempt
    stale = sorted(p.name for p in ctx.pods if p.attempt != attempt and not p.deleting and not p.terminal)
    if suspend_policy(d, ctx, plan):
        return
    current = [p for p in ctx.pods if p.attempt == attempt]
    done = False
    if d.placement is None:
        done = time_limit_policy(d, ctx, plan) or admission_policy(d, ctx, plan)
    if not done:
        done = (spec_change_policy(d, ctx, plan) or create_error_policy(d, ctx, plan)
                or disruption_policy(d, ctx, plan, current) or failure_policy(d, ctx, plan, current)
                or success_policy(d, ctx, plan, current) or time_limit_policy(d, ctx, plan)
                or startup_policy(d, ctx, plan, current))
    if not done:
        progress_policy(d, ctx, plan, current)
    compute_domain_policy(d, ctx, plan)
    plan.delete_pods = sorted(set(plan.delete_pods) | set(stale))
