"""Small builders shared by the TrainingJob lifecycle tests (test_lifecycle*.py).

A job body is ``tests/builders.py``'s TrainingJob with these tests' defaults (two spot/on-demand
pools, NVLink required, a checkpoint, a failure policy), and its record is made the way the
operator makes it from a watch event (``record_from_k8s(TrainingJobSpec, body)``: the spec
parsed once, API defaults applied); pods
are :class:`kubeforge.objects.Pod` and nodes :class:`kubeforge.objects.Node` values, and one
call runs the decision with a :class:`kubeforge.lifecycle.TrainingContext`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import replace
from typing import Any, Iterable, Mapping

import builders as b
from kubeforge.api import TrainingJobSpec
from kubeforge.lifecycle import TrainingContext, TrainingPlan, plan_training
from kubeforge.objects import GANG_GATE, Node, Pod, TrainingJobRecord, record_from_k8s

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
T0 = NOW - 3600.0
NAME, NS = "llm", "team-a"
GENERATION = 3
SPOT, OD = "h100-spot", "h100-od"
CHECKPOINT = {"size": "10Gi", "accessModes": ["ReadWriteMany"], "mountPath": "/checkpoints", "deletionPolicy": "Retain"}
FAILURE_POLICY = {"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600, "preemptionsBeforeFallback": 2}


def job_body(replicas: int = 2, gpus: int = 8, status: Mapping[str, Any] | None = None,
             generation: int = GENERATION, **spec_overrides: Any) -> dict[str, Any]:
    """A TrainingJob body as a user writes it (the model applies the defaults), without a
    uid (:func:`record` gives it one); ``spec_overrides`` replace spec keys
    (``failurePolicy=...``, ``suspend=True``...)."""
    return (b.TrainingJob(NAME).ns(NS).uid(None).generation(generation).resource_version("100")
            .created("2027-01-15T06:00:00Z").pools(SPOT, OD).replicas(replicas).gpus(gpus)
            .topology("Required", "nvlink").checkpoint(CHECKPOINT)
            .spec(failurePolicy=copy.deepcopy(FAILURE_POLICY), suspend=False).status(status)
            .spec(**spec_overrides).body())


def record(body: Mapping[str, Any]) -> TrainingJobRecord:
    """The record of ``body``. Specs are parsed once per (uid, generation), so every distinct
    spec gets its own uid here (a test that edits a spec must not get the cached old one)."""
    body = copy.deepcopy(dict(body))
    digest = hashlib.sha256(json.dumps(body["spec"], sort_keys=True).encode()).hexdigest()[:12]
    body["metadata"].setdefault("uid", f"uid-{digest}")
    return record_from_k8s(TrainingJobSpec, body)


def job(replicas: int = 2, gpus: int = 8, status: Mapping[str, Any] | None = None, **kw: Any) -> TrainingJobRecord:
    """A job record; see :func:`job_body`."""
    return record(job_body(replicas, gpus, status, **kw))


def node_names(n: int) -> list[str]:
    return [f"ib0-nvl0-{i}" for i in range(n)]


def placement(n: int = 2, pool: str = SPOT, **extra: Any) -> dict[str, Any]:
    """``status.placement`` of a gang on ``node_names(n)`` (no admittedAt/specHash unless given:
    the startup timeout and the spec-change check stay out of tests about other rules)."""
    return {"pool": pool, "level": "nvlink", "domain": "sim-ib0.0", "nodes": node_names(n), **extra}


def admitted(n: int = 2, phase: str = "Pending", **extra: Any) -> dict[str, Any]:
    """The status of an admitted job (attempt 0 and all three restart counters at 0 unless given)."""
    st: dict[str, Any] = {"phase": phase, "placement": placement(n), "attempt": 0,
                          "restarts": {"failures": 0, "preemptions": 0, "startupFailures": 0}}
    st.update(extra)
    return st


def pod(rank: int, attempt: int = 0, phase: str = "Running", *, legacy_gate: bool = False, **kw: Any) -> Pod:
    """A worker of the gang as the index holds it. ``legacy_gate`` puts the 0.1 gang gate on it."""
    if legacy_gate:
        kw.setdefault("gates", (GANG_GATE,))
    kw.setdefault("node", f"ib0-nvl0-{rank}" if phase != "Pending" or not kw.get("gates") else None)
    kw.setdefault("ready", phase == "Running")
    return Pod(namespace=NS, name=f"{NAME}-worker-{rank}-{attempt}", rank=rank, attempt=attempt, phase=phase,
               job=NAME, pool=SPOT, **kw)


def pods(n: int = 2, attempt: int = 0, phase: str = "Running", **kw: Any) -> list[Pod]:
    return [pod(r, attempt, phase, **kw) for r in range(n)]


def nodes(n: int = 2, **overrides: Node | None) -> dict[str, Node]:
    """Ready nodes of the placement; ``overrides`` maps a node name to a Node or None (gone)."""
    out = {name: Node(name) for name in node_names(n)}
    for k, v in overrides.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def plan(job_: TrainingJobRecord, pods_: Iterable[Pod] = (), nodes_: Mapping[str, Node] | None = None,
         now: float = NOW, **ctx: Any) -> TrainingPlan:
    """``plan_training`` with a context of these pods and nodes; ``ctx`` sets the other fields
    (``pool_prices``, ``assumed``, ``waiting``, ``spec_hash``...)."""
    return plan_training(job_, TrainingContext(now=now, pods=list(pods_), nodes=dict(nodes_ or {}), **ctx))


def merged(job_: TrainingJobRecord, plan_: TrainingPlan, **status_overrides: Any) -> TrainingJobRecord:
    """The job after the plan's status merge patch is written (a None value deletes the key)."""
    st = copy.deepcopy(dict(job_.status))
    for k, v in (plan_.status or {}).items():
        if v is None:
            st.pop(k, None)
        else:
            st[k] = copy.deepcopy(v)
    st.update(status_overrides)
    return replace(job_, status=st)


def deleted(pods_: Iterable[Pod], names: Iterable[str]) -> list[Pod]:
    """``pods_`` after the plan's deletes went through (the pods are terminating)."""
    names = set(names)
    return [replace(p, deleting=p.deleting or p.name in names) for p in pods_]


def cond(status: Mapping[str, Any] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in (status or {}).get("conditions") or [] if c["type"] == type_), None)


def event_reasons(plan_: TrainingPlan) -> list[str]:
    return [e[1] for e in plan_.events]


def restarts(failures: int = 0, preemptions: int = 0, startup: int = 0) -> dict[str, int]:
    return {"failures": failures, "preemptions": preemptions, "startupFailures": startup}


def quiet(plan_: TrainingPlan) -> bool:
    """Nothing happens beyond bookkeeping: no phase change, no restart, nothing deleted,
    created or released."""
    st = plan_.status or {}
    return (plan_.delete_pods == [] and not plan_.release and plan_.events == [] and plan_.create_ranks == []
            and not {"phase", "restarts", "placement", "attempt"} & set(st))
