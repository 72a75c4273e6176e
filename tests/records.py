"""Builders that make records through the operator's own parsers.

:func:`mk_node`, :func:`mk_pool`, :func:`mk_job`, :func:`mk_service`, :func:`worker_pod` and
:func:`foreign_pod` make the records the admission core and the lifecycle read, through the
same parsers the operator uses (``record_from_k8s``, ``pod_from_k8s``, ``build_worker_pod``),
so a test states its inputs in the shapes the API server holds; :func:`job_body` and
:func:`service_body` are those shapes, for tests that hand objects to an API server (the
in-memory one of ``tests/fakekube.py``). :func:`snapshot` and :func:`view` assemble what
``plan_admission`` reads; :func:`placed` is a ``status.placement``.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from kubeforge.admission import JobView, Snapshot
from kubeforge.api import GPUPoolSpec, InferenceServiceSpec, TrainingJobSpec
from kubeforge.builders.training import build_worker_pod
from kubeforge.objects import (
    Node, PlacementRecord, Pod, Taint, TrainingJobRecord, placement_of, pod_from_k8s, record_from_k8s,
)

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
SPOT = "karpenter.sh/capacity-type"
NOW = 1_800_000_000.0
NS = "team-a"

_uids = itertools.count(1)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------------- builders


def mk_node(name: str, gpus: int = 8, labels: Mapping[str, str] | None = None, *, resource: str = GPU,
            taints: Iterable[Taint] = (), ready: bool = True, unschedulable: bool = False,
            extra: Mapping[str, int] | None = None) -> Node:
    """A Node with ``gpus`` of ``resource`` (allocatable = capacity) and ``extra`` resources."""
    res = {resource: gpus, **(extra or {})}
    return Node(name=name, labels=dict(labels or {}), taints=tuple(taints), unschedulable=unschedulable,
                ready=ready, ready_changed=None, allocatable=dict(res), capacity=dict(res))


def node_body(name: str, gpus: int = 8, labels: Mapping[str, str] | None = None, *, resource: str = GPU,
              taints: Iterable[Mapping[str, str]] = ()) -> dict[str, Any]:
    """A Ready Node as the API server holds it: ``gpus`` of ``resource`` (allocatable =
    capacity), 96 CPUs, 1 TiB of memory; ``taints`` as core/v1 Taint dicts."""
    res = {resource: str(gpus), "cpu": "96", "memory": "1Ti"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            "status": {"allocatable": dict(res), "capacity": dict(res),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def mk_pool(name: str, selector: Mapping[str, Any] | None = None, **kw: Any):
    """A GPUPool record (see :func:`pool_body` for the keywords)."""
    rec = record_from_k8s(GPUPoolSpec, pool_body(name, selector, **kw))
    assert rec.spec is not None, rec.spec_error
    return rec


def pool_body(name: str, selector: Mapping[str, Any] | None = None, *, resource: str | None = None,
              levels: list[tuple[str, str]] | None = None, capacity_type: str | None = None,
              tolerations: list[dict] | None = None, price: float | None = None, generation: int = 1,
              status: Mapping[str, Any] | None = None, preemption: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A GPUPool as the API server holds it. ``selector`` is a LabelSelector dict (None: empty,
    every GPU node); ``levels`` (name, label) pairs, narrowest first (None: detected)."""
    spec: dict[str, Any] = {}
    if selector is not None:
        spec["nodeSelector"] = dict(selector)
    if resource is not None:
        spec["gpuResourceName"] = resource
    if levels is not None:
        spec["topologyLevels"] = [{"name": n, "nodeLabel": lb} for n, lb in levels]
    if capacity_type is not None:
        spec["capacityType"] = capacity_type
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if price is not None:
        spec["pricePerGPUHour"] = price
    if preemption is not None:
        spec["preemption"] = dict(preemption)
    return {"apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool",
            "metadata": {"name": name, "uid": f"pool-{next(_uids)}", "generation": generation,
                         "creationTimestamp": iso(NOW - 86400)},
            "spec": spec, "status": dict(status or {})}


def job_body(name: str, *, ns: str = NS, replicas: int = 1, gpus: int = 8, pools=("p",),
             topology: Mapping[str, Any] | None = None, priority: int = 0, created: float = NOW - 600,
             generation: int = 1, status: Mapping[str, Any] | None = None, template: Mapping[str, Any] | None = None,
             uid: str | None = None, **spec_extra: Any) -> dict[str, Any]:
    """A TrainingJob body as the API server holds it (camelCase spec keys in ``spec_extra``)."""
    spec: dict[str, Any] = {
        "pools": list(pools),
        "replicas": replicas,
        "gpusPerReplica": gpus,
        "topology": dict(topology or {"mode": "None"}),
        "priority": priority,
        "template": copy.deepcopy(template) if template else
        {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}]}},
    }
    spec.update(spec_extra)
    return {
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns, "uid": uid or f"job-{next(_uids)}", "generation": generation,
                     "resourceVersion": "1", "creationTimestamp": iso(created)},
        "spec": spec,
        "status": copy.deepcopy(dict(status or {})),
    }


def mk_job(name: str, **kw: Any) -> TrainingJobRecord:
    """A TrainingJob record (see :func:`job_body` for the keywords); the spec must parse."""
    rec = record_from_k8s(TrainingJobSpec, job_body(name, **kw))
    assert rec.spec is not None, rec.spec_error
    return rec


def view(rec: TrainingJobRecord, assumed: PlacementRecord | None = None) -> JobView:
    return JobView(rec, rec.status, assumed)


def placed(pool: str, nodes: Iterable[str], level: str | None = None, domain: str | None = None,
           admitted_at: float | None = None, spec_hash_: str | None = None) -> dict[str, Any]:
    """A ``status.placement`` value."""
    pl: dict[str, Any] = {"pool": pool, "nodes": list(nodes), "level": level, "domain": domain, "reason": "test"}
    if admitted_at is not None:
        pl["admittedAt"] = iso(admitted_at)
    if spec_hash_ is not None:
        pl["specHash"] = spec_hash_
    return pl


def service_body(name: str, *, ns: str = NS, pools=("p",), gpus: int | None = 1,
                 topology: Mapping[str, Any] | None = None, template: Mapping[str, Any] | None = None,
                 generation: int = 1, status: Mapping[str, Any] | None = None, **spec_extra: Any) -> dict[str, Any]:
    """An InferenceService body as the API server holds it (camelCase spec keys in ``spec_extra``)."""
    spec: dict[str, Any] = {
        "pools": list(pools),
        "template": copy.deepcopy(template) if template else
        {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai", "command": ["vllm", "serve", "m"]}]}},
    }
    if gpus is not None:
        spec["gpusPerReplica"] = gpus
    spec["topology"] = dict(topology or {"mode": "None"})
    spec.update(spec_extra)
    return {"apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns, "uid": f"svc-{next(_uids)}", "generation": generation,
                         "creationTimestamp": iso(NOW - 3600)}, "spec": spec, "status": copy.deepcopy(dict(status or {}))}


def submitted(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` (a :func:`job_body` or :func:`service_body`) as a user submits it: without what
    the API server sets (uid, creationTimestamp, resourceVersion)."""
    out = copy.deepcopy(dict(body))
    for k in ("uid", "creationTimestamp", "resourceVersion"):
        out["metadata"].pop(k, None)
    return out


def mk_service(name: str, **kw: Any):
    """An InferenceService record (see :func:`service_body` for the keywords)."""
    rec = record_from_k8s(InferenceServiceSpec, service_body(name, **kw))
    assert rec.spec is not None, rec.spec_error
    return rec


def worker_manifest(job: TrainingJobRecord, rank: int, attempt: int, placement: PlacementRecord,
                    resource: str = GPU, created: float = NOW - 60, gates: tuple[str, ...] = ()) -> dict[str, Any]:
    m = build_worker_pod(job, rank=rank, attempt=attempt, placement=placement, gpu_resource=resource,
                         scheduling_gates=gates)
    m["metadata"]["creationTimestamp"] = iso(created)
    m["metadata"]["uid"] = f"pod-{next(_uids)}"
    return m


def worker_pod(job: TrainingJobRecord, rank: int, attempt: int = 0, *, nodes: Iterable[str] | None = None,
               pool: str = "p", phase: str = "Running", bound: bool = True, deleting: bool = False,
               resource: str = GPU, **changes: Any) -> Pod:
    """The Pod view of a worker built by ``build_worker_pod``; ``nodes`` is the placement
    (default: the job's ``status.placement``)."""
    pl = placement_of(job.status) if nodes is None else PlacementRecord(pool, tuple(nodes))
    assert pl is not None
    p = pod_from_k8s(worker_manifest(job, rank, attempt, pl, resource))
    return replace(p, node=pl.nodes[rank] if bound else None, phase=phase, deleting=deleting, **changes)


def foreign_pod(name: str, node: str | None, gpus: int, *, ns: str = "other", resource: str = GPU,
                phase: str = "Running", spec: Mapping[str, Any] | None = None) -> Pod:
    """A pod of neither a job nor a service, bound to ``node``; ``spec`` overrides its pod spec."""
    body = {"metadata": {"name": name, "namespace": ns, "creationTimestamp": iso(NOW - 100)},
            "spec": dict(spec) if spec is not None else
            {"containers": [{"name": "c", "image": "x", "resources": {"limits": {resource: str(gpus)}}}]},
            "status": {"phase": phase}}
    if node:
        body["spec"]["nodeName"] = node
    return pod_from_k8s(body)


def snapshot(pools=(), nodes=(), pods=(), jobs=(), services=(), storage_classes=("standard",), claims=None) -> Snapshot:
    """A Snapshot from lists: pools and nodes by name, jobs (JobView or records) by key."""
    jv = {}
    for j in jobs:
        j = j if isinstance(j, JobView) else view(j)
        jv[j.key] = j
    return Snapshot(pools={p.name: p for p in pools}, nodes={n.name: n for n in nodes}, pods=list(pods), jobs=jv,
                    services={s.key: s for s in services}, storage_classes=frozenset(storage_classes),
                    claims=dict(claims or {}))
