"""The TrainingJob state machine, as a pure function.

``plan_training(job, pods, nodes, now)`` looks at the job (spec and status, defaults applied),
the pods of the job that exist, and the nodes they sit on, and returns a :class:`TrainingPlan`:
which ranks to create, which pods to ungate or delete, the status to write and the Events to
post. Handlers apply the plan; nothing here does I/O. The machine is level-based: running the
same inputs twice gives the same plan, so a reconcile interrupted half-way is simply redone.

Rules (and where they come from):

- Admission is not decided here: a job with no ``status.placement`` waits (the admission
  loop places whole gangs, see :mod:`kubeforge.placement`). Pods are only created for an
  admitted placement, with a scheduling gate, and ungated together once all ranks exist.
- Disruption (restart with reason ``Preempted``, counted in ``restarts.preemptions``, never in
  ``failures``): a pod with condition ``DisruptionTarget=True`` (any reason:
  ``PreemptionByScheduler``, ``DeletionByTaintManager``, ``EvictionByEvictionAPI``,
  ``DeletionByPodGC``, ``TerminationByKubelet``); a pod deleted by someone else; a pod whose
  node carries an interruption taint (``aws-node-termination-handler/*``,
  ``karpenter.sh/disrupted``, ``cloud.google.com/impending-node-termination``,
  ``node.kubernetes.io/out-of-service``), is gone, or is NotReady for longer than
  ``not_ready_grace`` seconds.
- Failure (restart counted in ``restarts.failures``): a worker that ends ``Failed`` without a
  disruption. The whole gang restarts after an exponential backoff
  (``backoffSeconds * 2**(failures-1)``, capped by ``maxBackoffSeconds``, as Job's
  backoffLimit does); past ``maxRestarts`` the job is ``Failed`` naming the pod.
- Success: every worker ``Succeeded`` (JobSet's default success policy, "All"). A rank that
  exits 0 while others still run is waited for; torchrun exits every rank together.
- Suspend: pods deleted, placement released, PVC and status kept; resume is admission again.
- Lost placement: if an ungated worker stays ``Unschedulable`` for ``schedule_timeout``
  seconds for a reason other than its volumes (something outside kubeforge took the GPUs the
  gang was promised between admission and binding), the gang is placed again from scratch: a new attempt, counted neither as a
  failure nor as a preemption, condition ``Admitted=False`` reason ``PlacementLost``.
- Fallback: with several ``spec.pools``, the job moves to the next pool after
  ``preemptionsBeforeFallback`` preemptions (per pool), like a Kueue flavor fallback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kubeforge.builders.common import get_condition, parse_time, rfc3339, set_condition
from kubeforge.placement import INTERRUPTION_TAINT_PREFIXES

TERMINAL_PHASES = ("Succeeded", "Failed")
GPU_HOURS_FOLD_SECONDS = 60.0  # status.gpuHours of a running job is brought up to date this often


@dataclass(frozen=True)
class PodView:
    """What the lifecycle needs of one worker pod.

    ``disruption`` is the ``DisruptionTarget`` reason when that condition is True.
    ``termination_message`` is the GPU container's last termination message (may hold the
    checkpoint JSON). ``exit_code`` is None while running.
    """

    name: str
    rank: int
    attempt: int
    phase: str = "Pending"
    node: str | None = None
    gated: bool = False
    deleting: bool = False
    ready: bool = False
    disruption: str | None = None
    exit_code: int | None = None
    termination_message: str | None = None
    unschedulable_since: float | None = None
    unschedulable_message: str | None = None


@dataclass(frozen=True)
class NodeView:
    """What the lifecycle needs of one node: readiness (and since when) and taints."""

    name: str
    ready: bool = True
    not_ready_since: float | None = None
    taint_keys: tuple[str, ...] = ()


@dataclass
class TrainingPlan:
    """The actions a reconcile should apply, in order: delete, create, ungate, status, events.

    ``status`` is a merge patch for ``.status`` (None: nothing to write). ``release`` means the
    job's GPUs go back to the pool (the admission ledger drops the job). ``requeue_after`` asks
    for another reconcile in that many seconds (backoff, NotReady grace), None for none.
    """

    create_ranks: list[int] = field(default_factory=list)
    ungate: list[str] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    delete_grace_seconds: int | None = None
    status: dict[str, Any] | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)
    release: bool = False
    requeue_after: float | None = None


def interruption_reason(node: NodeView | None, now: float, not_ready_grace: float) -> str | None:
    """Why a node must be treated as lost, or None: interruption taint, gone, NotReady too long."""
    if node is None:
        return "node deleted"
    for k in node.taint_keys:
        if any(k == p or k.startswith(p) for p in INTERRUPTION_TAINT_PREFIXES):
            return f"node {node.name} has interruption taint {k}"
    if not node.ready and node.not_ready_since is not None and now - node.not_ready_since >= not_ready_grace:
        return f"node {node.name} NotReady for {now - node.not_ready_since:.0f}s"
    return None


def restart_attempt(status: Mapping[str, Any] | None) -> int:
    """The gang's current attempt (``status.attempt``): +1 every time the whole gang is
    stopped (failure, preemption, suspend), so pods of an earlier run never count as the
    current gang. Older statuses without the field: failures + preemptions."""
    st = status or {}
    if st.get("attempt") is not None:
        return int(st["attempt"])
    r = st.get("restarts") or {}
    return int(r.get("failures", 0)) + int(r.get("preemptions", 0))


def current_pool(spec: Mapping[str, Any], status: Mapping[str, Any] | None) -> str:
    """The pool the job should be placed in now: ``spec.pools[i]`` where ``i`` advances by one
    every ``preemptionsBeforeFallback`` preemptions (0 disables fallback), capped at the last."""
    pools = list(spec.get("pools") or [])
    fp = spec.get("failurePolicy") or {}
    per_pool = int(fp.get("preemptionsBeforeFallback", 2))
    pre = int(((status or {}).get("restarts") or {}).get("preemptions", 0))
    idx = min(pre // per_pool, len(pools) - 1) if per_pool > 0 else 0
    return pools[idx]


def pod_view(pod: Mapping[str, Any], gpu_container_names: Sequence[str] = ("trainer", "pytorch")) -> PodView:
    """Build a :class:`PodView` from a Pod dict (camelCase, as the API returns it)."""
    md = pod.get("metadata") or {}
    labels = md.get("labels") or {}
    spec = pod.get("spec") or {}
    st = pod.get("status") or {}
    conds = st.get("conditions") or []
    disruption = next((c.get("reason") or "DisruptionTarget" for c in conds
                       if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    unsched = next((c for c in conds if c.get("type") == "PodScheduled" and c.get("status") == "False"
                    and c.get("reason") == "Unschedulable"), None)
    exit_code = None
    message = None
    cstatuses = st.get("containerStatuses") or []
    names = [c.get("name") for c in spec.get("containers") or []]
    main = next((n for n in names if n in gpu_container_names), names[0] if names else None)
    for cs in cstatuses:
        if cs.get("name") != main:
            continue
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term:
            exit_code = term.get("exitCode")
            message = term.get("message")
    return PodView(
        name=md.get("name", ""),
        rank=int(labels.get("kubeforge.io/replica-index", 0)),
        attempt=int(labels.get("kubeforge.io/restart-attempt", 0)),
        phase=st.get("phase") or "Pending",
        node=spec.get("nodeName"),
        gated=bool(spec.get("schedulingGates")),
        deleting=bool(md.get("deletionTimestamp")),
        ready=ready,
        disruption=disruption,
        exit_code=exit_code,
        termination_message=message,
        unschedulable_since=parse_time(unsched.get("lastTransitionTime")) if unsched else None,
        unschedulable_message=unsched.get("message") if unsched else None,
    )


def _checkpoint_from(pods: Sequence[PodView]) -> dict[str, Any] | None:
    """The newest checkpoint reported in termination messages: JSON ``{"step", "path", "time"}``."""
    best = None
    for p in pods:
        if not p.termination_message:
            continue
        try:
            data = json.loads(p.termination_message.strip().splitlines()[-1])
        except (ValueError, IndexError):
            continue
        if not isinstance(data, dict) or "step" not in data:
            continue
        try:
            ck = {"step": int(data["step"]), "path": str(data.get("path", "")), "time": str(data.get("time", ""))}
        except (TypeError, ValueError):
            continue
        if not ck["time"]:
            ck.pop("time")
        if best is None or ck["step"] > best["step"]:
            best = ck
    return best


def _waits_for_volume(message: str | None) -> bool:
    """True when kube-scheduler holds the pod for its volumes (an unbound PVC, a claim not
    found yet): the GPUs are still ours, the storage is just slow; not a lost placement."""
    m = (message or "").lower()
    return "persistentvolumeclaim" in m or "volume" in m


def _backoff(fp: Mapping[str, Any], failures: int) -> float:
    base = float(fp.get("backoffSeconds", 10))
    cap = float(fp.get("maxBackoffSeconds", 600))
    return min(cap, base * (2 ** max(0, failures - 1)))


def _gpu_hours(status: Mapping[str, Any], spec: Mapping[str, Any], now: float) -> float:
    """GPU-hours so far: the stored total plus the running segment since ``runningSince``."""
    total = float(status.get("gpuHours") or 0.0)
    since = parse_time(status.get("runningSince"))
    if since is not None:
        total += (now - since) / 3600.0 * int(spec["replicas"]) * int(spec["gpusPerReplica"])
    return round(total, 6)


def plan_training(
    job: Mapping[str, Any],
    pods: Sequence[PodView],
    nodes: Mapping[str, NodeView],
    now: float,
    *,
    price_per_gpu_hour: float | None = None,
    not_ready_grace: float = 60.0,
    schedule_timeout: float = 30.0,
) -> TrainingPlan:
    """Decide the next actions for one TrainingJob.

    Args:
        job: the TrainingJob body (``metadata``, ``spec`` with API defaults, ``status``).
        pods: every existing pod of the job (any attempt), as :class:`PodView`.
        nodes: node views by name, for the nodes those pods are bound or assigned to.
        now: unix seconds.
        price_per_gpu_hour: the pool's price, for ``status.cost``.
        not_ready_grace: seconds a node may be NotReady before its pods count as disrupted.
        schedule_timeout: seconds an ungated worker may stay Unschedulable before the gang
            is placed again.

    Returns:
        A :class:`TrainingPlan`; an empty plan when nothing needs doing.
    """
    spec = job["spec"]
    status = dict(job.get("status") or {})
    gen = job["metadata"].get("generation")
    replicas = int(spec["replicas"])
    fp = spec.get("failurePolicy") or {}
    phase = status.get("phase") or "Pending"
    conds = status.get("conditions") or []
    restarts = dict(status.get("restarts") or {"failures": 0, "preemptions": 0})
    restarts.setdefault("failures", 0)
    restarts.setdefault("preemptions", 0)
    attempt = restart_attempt(status)
    placement = status.get("placement") or None
    plan = TrainingPlan()
    new: dict[str, Any] = {}

    def cond(type_, st, reason, msg):
        nonlocal conds
        conds = set_condition(conds, type_, st, reason, msg, now, gen)
        new["conditions"] = conds

    current = [p for p in pods if p.attempt == attempt]
    stale = [p for p in pods if p.attempt != attempt and not p.deleting and p.phase not in TERMINAL_PHASES]

    ck = _checkpoint_from(pods)
    if ck and (not status.get("lastCheckpoint") or ck["step"] > int(status["lastCheckpoint"].get("step", -1))):
        new["lastCheckpoint"] = ck
        plan.events.append(("Normal", "CheckpointReported", f"checkpoint step {ck['step']} at {ck['path']}"))

    def finish_running_segment():
        if status.get("runningSince"):
            hours = _gpu_hours(status, spec, now)
            new["gpuHours"] = hours
            new["runningSince"] = None
            if price_per_gpu_hour is not None:
                new["cost"] = round(hours * price_per_gpu_hour, 4)

    # --- terminal: nothing more, but GPUs go back ----------------------------------------
    if phase in TERMINAL_PHASES:
        if placement:
            new["placement"] = None
            plan.release = True
        plan.status = new or None
        return plan

    # --- suspend ------------------------------------------------------------------------------
    if spec.get("suspend"):
        live = [p for p in pods if not p.deleting]
        plan.delete_pods = [p.name for p in live]
        if phase != "Suspended" or placement:
            finish_running_segment()
            new.update({"phase": "Suspended", "placement": None, "attempt": attempt + 1})
            cond("Suspended", True, "JobSuspended", "spec.suspend is true: pods deleted, checkpoint PVC and status kept")
            cond("Running", False, "JobSuspended", "suspended")
            cond("Admitted", False, "JobSuspended", "suspended jobs hold no GPUs")
            plan.events.append(("Normal", "Suspended", "job suspended; pods deleted"))
            plan.release = True
        plan.status = new or None
        return plan
    if phase == "Suspended":
        new["phase"] = "Pending"
        cond("Suspended", False, "JobResumed", "spec.suspend is false: waiting for admission")
        plan.events.append(("Normal", "Resumed", "job resumed; waiting for admission"))

    # Old attempts' pods go away whatever happens next.
    plan.delete_pods = [p.name for p in stale]

    # --- not admitted: wait ----------------------------------------------------------------------
    if not placement:
        if phase not in ("Pending", "Restarting") and "phase" not in new:
            new["phase"] = "Pending"
        not_before = parse_time(status.get("restartNotBefore"))
        if not_before and not_before > now:
            plan.requeue_after = not_before - now
        plan.status = new or None
        return plan

    nodes_of = list(placement.get("nodes") or [])

    # --- disruption -------------------------------------------------------------------------
    reasons = []
    by_rank = {p.rank: p for p in current}
    for p in current:
        if p.disruption:
            reasons.append(f"pod {p.name}: DisruptionTarget ({p.disruption})")
        elif p.deleting and p.phase not in TERMINAL_PHASES:
            reasons.append(f"pod {p.name} deleted")
    if phase == "Running":
        for rank in range(replicas):
            if rank not in by_rank:
                reasons.append(f"rank {rank}'s pod disappeared from the running gang")
    for node in sorted(set(nodes_of)):
        view = nodes.get(node)
        r = interruption_reason(view, now, not_ready_grace)
        if r:
            reasons.append(r)
        elif view is not None and not view.ready and view.not_ready_since is not None:
            wait = not_ready_grace - (now - view.not_ready_since)
            plan.requeue_after = wait if plan.requeue_after is None else min(plan.requeue_after, wait)
    all_done = len(current) == replicas and all(p.phase == "Succeeded" for p in current)
    if reasons and not all_done:
        restarts["preemptions"] += 1
        finish_running_segment()
        msg = "; ".join(sorted(set(reasons))[:5])
        new.update({"phase": "Restarting", "restarts": restarts, "placement": None, "attempt": attempt + 1})
        cond("Preempted", True, "Preempted", msg)
        cond("Running", False, "Preempted", "gang stopped to checkpoint and move")
        cond("Admitted", False, "Preempted", "waiting to be placed again away from the lost nodes")
        plan.delete_pods = [p.name for p in pods if not p.deleting]
        plan.delete_grace_seconds = None  # the template's terminationGracePeriodSeconds: SIGTERM, checkpoint
        plan.release = True
        plan.events.append(("Warning", "Preempted", f"restarting the gang (preemption {restarts['preemptions']}): {msg}"))
        plan.status = new
        return plan

    # --- failure --------------------------------------------------------------------------------
    failed = [p for p in current if p.phase == "Failed"]
    if failed:
        first = sorted(failed, key=lambda p: p.rank)[0]
        why = f"pod {first.name} (rank {first.rank}) failed with exit code {first.exit_code}"
        finish_running_segment()
        max_restarts = int(fp.get("maxRestarts", 3))
        if restarts["failures"] >= max_restarts:
            new.update({"phase": "Failed", "placement": None, "completionTime": rfc3339(now)})
            cond("Failed", True, "BackoffLimitExceeded", f"{why}; {restarts['failures']} restarts used of maxRestarts {max_restarts}")
            cond("Running", False, "Failed", why)
            plan.events.append(("Warning", "Failed", f"{why}; maxRestarts {max_restarts} reached"))
        else:
            restarts["failures"] += 1
            delay = _backoff(fp, restarts["failures"])
            new.update({"phase": "Restarting", "restarts": restarts, "placement": None,
                        "restartNotBefore": rfc3339(now + delay), "attempt": attempt + 1})
            cond("Running", False, "WorkerFailed", f"{why}; restart {restarts['failures']}/{max_restarts} in {delay:.0f}s")
            cond("Admitted", False, "Backoff", f"restarting after {delay:.0f}s backoff")
            plan.events.append(("Warning", "WorkerFailed", f"{why}; restarting the gang in {delay:.0f}s ({restarts['failures']}/{max_restarts})"))
            plan.requeue_after = delay
        plan.delete_pods = [p.name for p in pods if not p.deleting and p.phase not in TERMINAL_PHASES]
        plan.release = True
        plan.status = new
        return plan

    # --- success ----------------------------------------------------------------------------------
    if len(current) == replicas and all(p.phase == "Succeeded" for p in current):
        finish_running_segment()
        new.update({"phase": "Succeeded", "placement": None, "completionTime": rfc3339(now)})
        cond("Succeeded", True, "AllWorkersSucceeded", f"all {replicas} workers succeeded")
        cond("Running", False, "Succeeded", "finished")
        plan.events.append(("Normal", "Succeeded", f"all {replicas} workers succeeded"))
        plan.release = True
        plan.status = new
        return plan

    # --- lost placement: a worker the scheduler cannot bind where we placed it ----------------------
    stuck = sorted((p for p in current if p.phase == "Pending" and not p.gated and not p.deleting
                    and p.unschedulable_since is not None and not _waits_for_volume(p.unschedulable_message)),
                   key=lambda p: p.rank)
    if stuck:
        waited = now - stuck[0].unschedulable_since
        if waited >= schedule_timeout:
            msg = (f"pod {stuck[0].name} could not be scheduled on its node for {waited:.0f}s "
                   f"({stuck[0].unschedulable_message or 'Unschedulable'}); placing the gang again")
            new.update({"phase": "Pending", "placement": None, "attempt": attempt + 1})
            cond("Admitted", False, "PlacementLost", msg)
            plan.delete_pods = [p.name for p in pods if not p.deleting]
            plan.release = True
            plan.events.append(("Warning", "PlacementLost", msg))
            plan.status = new
            return plan
        plan.requeue_after = schedule_timeout - waited

    # --- create / ungate / running -------------------------------------------------------------------
    present = {p.rank for p in current}
    plan.create_ranks = [r for r in range(replicas) if r not in present]
    if not plan.create_ranks:
        plan.ungate = [p.name for p in sorted(current, key=lambda p: p.rank) if p.gated]
    running = [p for p in current if p.phase == "Running"]
    if len(running) == replicas:
        if phase != "Running":
            new["phase"] = "Running"
            new.setdefault("startTime", status.get("startTime") or rfc3339(now))
            if not status.get("runningSince"):
                new["runningSince"] = rfc3339(now)
            cond("Running", True, "AllWorkersRunning", f"{replicas} workers running on {len(set(nodes_of))} nodes")
            pre = get_condition(conds, "Preempted")
            if pre and pre["status"] == "True":
                cond("Preempted", False, "Recovered", f"gang running again after: {pre.get('message', '')}")
            plan.events.append(("Normal", "Running", f"all {replicas} workers running in {placement.get('level') or 'pool'} {placement.get('domain') or placement.get('pool')}"))
    new["replicas"] = {
        "active": sum(1 for p in current if p.phase in ("Pending", "Running")),
        "ready": sum(1 for p in current if p.ready),
        "succeeded": sum(1 for p in current if p.phase == "Succeeded"),
        "failed": sum(1 for p in current if p.phase == "Failed"),
    }
    since = parse_time(status.get("runningSince"))
    if since is not None and "runningSince" not in new and now - since >= GPU_HOURS_FOLD_SECONDS:
        # Fold the running segment into gpuHours (at most once a minute), moving its start to now.
        hours = _gpu_hours(status, spec, now)
        new["gpuHours"] = hours
        new["runningSince"] = rfc3339(now)
        if price_per_gpu_hour is not None:
            new["cost"] = round(hours * price_per_gpu_hour, 4)
    if new.get("replicas") == status.get("replicas"):
        new.pop("replicas")
    plan.status = new or None
    return plan
