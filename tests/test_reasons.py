"""The status vocabulary and the typed outcomes read instead of strings.

- Every phase, condition type and reason is defined once (``objects/_reasons.py``, and the
  autoscaler's and the activator's own ``_reasons.py``), documented, and no module of the
  operator writes one as a literal.
- A TrainingJob plan says which restart it counted (``plan.restart``, ``plan.startup_failure``):
  the same answer the runtime used to dig out of Event reasons and the written ``Admitted``
  condition, and the metrics are counted from it.
- Admission's wait reason comes from what it did (a missing pool, a quota refusal), not from the
  text of its own notes.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import kubeforge
from kubeforge.admission import JobView, Snapshot, plan_admission
from kubeforge.objects import rfc3339
from kubeforge.lifecycle import CreateError, RestartCause, TrainingPlan
from kubeforge.objects import (
    ADMITTED, CREATE_FAILED, FAILED, INVALID_SPEC, PREEMPTED, QUOTA_EXCEEDED, STARTUP_FAILURE_REASONS, STARTUP_TIMEOUT,
    UNSCHEDULABLE, WORKER_FAILED, Node, Pod, refusal_reason,
)
import builders as b
from training_builders import NOW, admitted, job, nodes, placement, plan, pod, pods, restarts

PACKAGE = Path(kubeforge.__file__).parent
VOCABULARIES = ("kubeforge.objects._reasons", "kubeforge.autoscaling._reasons", "kubeforge.activator._reasons")


# ------------------------------------------------------------------------------- the vocabulary


def _constants(module: str) -> dict[str, str]:
    mod = importlib.import_module(module)
    return {n: v for n, v in vars(mod).items() if n.isupper() and isinstance(v, str)}


def _words(module: str) -> dict[str, str]:
    """The CamelCase words (phases, condition types, reasons; not the activator's lowercase
    metric outcomes such as ``failed``)."""
    return {n: v for n, v in _constants(module).items() if v[:1].isupper()}


def test_every_word_is_defined_once_across_the_vocabularies():
    seen: dict[str, str] = {}
    for module in VOCABULARIES:
        for name, value in _constants(module).items():
            assert value not in seen, f"{value!r}: {seen.get(value)} and {module}.{name}"
            seen[value] = f"{module}.{name}"


def test_every_constant_of_the_status_vocabulary_says_what_it_means():
    tree = ast.parse((PACKAGE / "objects" / "_reasons.py").read_text())
    body = tree.body
    undocumented = []
    for i, node in enumerate(body):
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if not isinstance(target, ast.Name) or not target.id.isupper() or target.id == "__all__":
            continue
        nxt = body[i + 1] if i + 1 < len(body) else None
        if not (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            undocumented.append(target.id)
    assert undocumented == []


# Words of the vocabulary that are also Kubernetes' own, read where Kubernetes writes them.
KUBERNETES_WORDS = {
    "Pending": None, "Running": None, "Succeeded": None, "Failed": None,  # pod phases (and a PVC's Pending)
    "Ready": {"lifecycle/_domain.py", "objects/_node.py", "objects/_pod.py", "objects/_dra.py"},  # a node's,
    # a pod's condition; the ComputeDomain's status from NVIDIA's driver
    "Preempting": {"lifecycle/_disruption.py"},  # the kubelet's reason of a pod it preempted
    "Unschedulable": {"objects/_pod.py"},  # kube-scheduler's PodScheduled reason
}
SCANNED = ("admission", "lifecycle", "serving", "runtime", "autoscaling", "activator", "objects", "metrics.py")


def _literals(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def test_no_operator_module_writes_a_reason_as_a_literal():
    words = {v: f"{m}.{n}" for m in VOCABULARIES for n, v in _words(m).items()}
    files = [p for part in SCANNED for p in ([PACKAGE / part] if part.endswith(".py") else (PACKAGE / part).rglob("*.py"))]
    found = []
    for path in files:
        rel = str(path.relative_to(PACKAGE))
        if path.name == "_reasons.py":
            continue
        for value in _literals(path) & set(words):
            allowed = KUBERNETES_WORDS.get(value, set())
            if value in KUBERNETES_WORDS and (allowed is None or rel in allowed):
                continue
            found.append(f"{rel}: {value!r} (use {words[value]})")
    assert not found, "\n".join(sorted(found))


@pytest.mark.parametrize("code, reason", [(400, INVALID_SPEC), (422, INVALID_SPEC), (403, CREATE_FAILED),
                                          (409, CREATE_FAILED), (500, CREATE_FAILED)])
def test_a_refused_create_needs_a_spec_change_only_for_400_and_422(code, reason):
    assert refusal_reason(code) == reason
    assert CreateError(0, "Pod", "x", code, "").needs_spec_change == (reason == INVALID_SPEC)


# ------------------------------------------------------------------------------- typed outcome


def _startup(n=2, admitted_ago=600.0, **extra):
    return admitted(n, placement=placement(n, admittedAt=rfc3339(NOW - admitted_ago), specHash="h1"), **extra)


def _fp(**kw):
    return {"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600, "preemptionsBeforeFallback": 2, **kw}


def _run(j, pods_=(), nodes_=None, **ctx):
    """(the job's status before, the plan)."""
    return dict(j.status), plan(j, pods_, nodes_ if nodes_ is not None else nodes(2), **ctx)


SCENARIOS = {
    "worker failed": lambda: _run(job(2, status=admitted(2, phase="Running")),
                                  [pod(0), pod(1, phase="Failed", exit_code=1)]),
    "worker failed past maxRestarts": lambda: _run(
        job(2, status=admitted(2, phase="Running", restarts=restarts(failures=3)), failurePolicy=_fp()),
        [pod(0), pod(1, phase="Failed", exit_code=1)]),
    "preempted": lambda: _run(job(2, status=admitted(2, phase="Running")), pods(2, disruption="PreemptionByScheduler")),
    "preempted by admission": lambda: _run(job(2, status=admitted(2, phase="Running")), pods(2),
                                           preempted_by=("QuotaReclaimed", "reclaimed")),
    "preempted past maxPreemptions": lambda: _run(
        job(2, status=admitted(2, phase="Running", restarts=restarts(preemptions=1)), failurePolicy=_fp(maxPreemptions=1)),
        pods(2, disruption="PreemptionByScheduler")),
    "startup timeout": lambda: _run(job(2, status=_startup()), [pod(0)], spec_hash="h1"),
    "stuck container": lambda: _run(job(2, status=_startup()),
                                    [pod(0), pod(1, phase="Pending", waiting="ErrImagePull: denied")], spec_hash="h1"),
    "unschedulable": lambda: _run(job(2, status=_startup()),
                                  [pod(0), pod(1, phase="Pending", node=None, ready=False, unschedulable_since=NOW - 5,
                                               unschedulable_message="0/3 nodes: 1 Insufficient cpu")],
                                  spec_hash="h1"),
    "startup retries used up": lambda: _run(
        job(2, status=_startup(restarts=restarts(startup=5)), failurePolicy=_fp(maxStartupRetries=5)), spec_hash="h1"),
    "create refused (403)": lambda: _run(job(2, status=_startup(admitted_ago=5)), spec_hash="h1",
                                         create_error=CreateError(0, "Pod", "x", 403, "quota")),
    "create refused (422)": lambda: _run(job(2, status=_startup(admitted_ago=5)), spec_hash="h1",
                                         create_error=CreateError(0, "Pod", "x", 422, "invalid")),
    "spec changed": lambda: _run(job(2, status=_startup(admitted_ago=5)), pods(2), spec_hash="h2"),
    "succeeded": lambda: _run(job(2, status=admitted(2, phase="Running")), pods(2, phase="Succeeded")),
    "suspended": lambda: _run(job(2, status=admitted(2, phase="Running"), suspend=True), pods(2)),
    "running": lambda: _run(job(2, status=admitted(2)), pods(2)),
}
"""Plans of every kind of stop, and of none."""

EXPECTED = {
    "worker failed": (RestartCause.FAILURE, None),
    "preempted": (RestartCause.PREEMPTION, None),
    "preempted by admission": (RestartCause.PREEMPTION, None),
    "startup timeout": (RestartCause.STARTUP, STARTUP_TIMEOUT),
    "stuck container": (RestartCause.STARTUP, "ErrImagePull"),
    "unschedulable": (RestartCause.STARTUP, UNSCHEDULABLE),
    "create refused (403)": (RestartCause.STARTUP, CREATE_FAILED),
}
"""The scenarios that count a restart (the others count none: a final stop, a spec change...)."""


def _as_events_said(job_status: dict, p: TrainingPlan) -> tuple[RestartCause | None, str | None]:
    """What the runtime counted before the plan said it: Event reasons for the restarts, the
    startupFailures counter and the written Admitted reason for a failed start."""
    reasons = [e[1] for e in p.events]
    old = int((job_status.get("restarts") or {}).get("startupFailures", 0))
    new = int(((p.status or {}).get("restarts") or {}).get("startupFailures", old))
    if new > old:
        adm = next((c for c in (p.status or {}).get("conditions") or [] if c.get("type") == ADMITTED), {})
        return RestartCause.STARTUP, adm.get("reason") or "Unknown"
    if PREEMPTED in reasons:
        return RestartCause.PREEMPTION, None
    if WORKER_FAILED in reasons:
        return RestartCause.FAILURE, None
    return None, None


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_plan_says_which_restart_it_counted_as_the_events_did(name):
    before, p = SCENARIOS[name]()
    assert (p.restart, p.startup_failure) == EXPECTED.get(name, (None, None))
    assert (p.restart, p.startup_failure) == _as_events_said(before, p)
    if p.restart is not None:  # the counter it names moved by one, and the job goes on
        assert p.status["restarts"][p.restart.value] == before["restarts"][p.restart.value] + 1
        assert p.status["phase"] != FAILED
    if "past" in name or "used up" in name:  # a final stop counts no restart
        assert p.status["phase"] == FAILED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_startup_failure_reasons_known_in_advance_are_the_metric_labels(name):
    _, reason = EXPECTED[name]
    if reason is not None and reason != "ErrImagePull":
        assert reason in STARTUP_FAILURE_REASONS


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels or None) or 0.0


@pytest.mark.parametrize("cause, reason, metric, labels", [
    (RestartCause.PREEMPTION, None, "kubeforge_preemption_restarts_total", {}),
    (RestartCause.FAILURE, None, "kubeforge_failure_restarts_total", {}),
    (RestartCause.STARTUP, STARTUP_TIMEOUT, "kubeforge_startup_failures_total", {"reason": STARTUP_TIMEOUT}),
    (RestartCause.STARTUP, "ErrImagePull", "kubeforge_startup_failures_total", {"reason": "ErrImagePull"}),
])
def test_the_runtime_counts_restarts_from_the_plan(cause, reason, metric, labels):
    from kubeforge.runtime.training import _count_restart

    others = [m for m in ("kubeforge_preemption_restarts_total", "kubeforge_failure_restarts_total") if m != metric]
    before, before_others = _sample(metric, **labels), [_sample(m) for m in others]
    _count_restart(TrainingPlan(restart=cause, startup_failure=reason))
    _count_restart(TrainingPlan())  # no restart: nothing counted
    assert _sample(metric, **labels) == before + 1
    assert [_sample(m) for m in others] == before_others


# ------------------------------------------------------------------------------- admission's wait reason


def _pool(name: str, quotas: list[dict]) -> object:
    return b.GPUPool(name).uid(f"pool-{name}").quotas(quotas).record()


def _job(name: str, pools: list[str], gpus: int = 8, ns: str = "team-a"):
    return b.TrainingJob(name).ns(ns).uid(f"job-{name}").pools(*pools).gpus(gpus).record()


def _node(name: str, gpus: int = 8) -> Node:
    return b.Node(name).gpus(gpus).record()


@pytest.mark.parametrize("pools, reason", [
    (["capped"], QUOTA_EXCEEDED),  # its team may not borrow that much
    (["nope", "capped"], QUOTA_EXCEEDED),  # a missing pool besides does not make it PoolNotFound
])
def test_admission_waits_for_quota_because_a_quota_refused_it(pools, reason):
    capped = _pool("capped", [{"name": "team-a", "namespaces": ["team-a"], "nominalGPUs": 0, "borrowingLimitGPUs": 4}])
    j = _job("j", pools)
    snap = Snapshot(pools={"capped": capped}, nodes={"n0": _node("n0")}, jobs={j.key: JobView(j, j.status)},
                    storage_classes=frozenset({"standard"}))
    plan_ = plan_admission(snap, NOW)
    assert plan_.admit == [] and [w.reason for w in plan_.wait] == [reason]
    assert "quota team-a" in plan_.wait[0].message


def test_pod_waiting_reason_is_the_containers_own():
    assert Pod("ns", "p", waiting="ErrImagePull: denied").waiting_reason == "ErrImagePull"
    assert Pod("ns", "p", waiting="CrashLoopBackOff").waiting_reason == "CrashLoopBackOff"
    assert Pod("ns", "p").waiting_reason is None
