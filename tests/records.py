"""Keyword helpers over ``tests/builders.py`` and what ``plan_admission`` reads.

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
from typing import Any, Iterable, Mapping

import builders as b
from builders import GPU, NOW, NS, iso
from kubeforge.admission import JobView, Snapshot
from kubeforge.api import InferenceServiceSpec, TrainingJobSpec
from kubeforge.objects import Node, PlacementRecord, Pod, Taint, TrainingJobRecord, record_from_k8s

CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
SPOT = "karpenter.sh/capacity-type"


# --------------------------------------------------------------------------------- builders
# Keyword spellings of the fluent builders in ``tests/builders.py``, for the tests written
# before them; new tests use the builders.


def mk_node(name: str, gpus: int = 8, labels: Mapping[str, str] | None = None, *, resource: str = GPU,
            taints: Iterable[Taint] = (), ready: bool = True, unschedulable: bool = False,
            extra: Mapping[str, int] | None = None) -> Node:
    """A Node with ``gpus`` of ``resource`` (allocatable = capacity) and ``extra`` resources."""
    return (b.Node(name).gpus(gpus, resource).labels(labels).taints(taints).ready(ready)
            .unschedulable(unschedulable).extra(extra).record())


def node_body(name: str, gpus: int = 8, labels: Mapping[str, str] | None = None, *, resource: str = GPU,
              taints: Iterable[Mapping[str, str]] = ()) -> dict[str, Any]:
    """A Ready Node as the API server holds it: ``gpus`` of ``resource`` (allocatable =
    capacity), 96 CPUs, 1 TiB of memory; ``taints`` as core/v1 Taint dicts."""
    return b.Node(name).gpus(gpus, resource).labels(labels).taints(taints).body()


def mk_pool(name: str, selector: Mapping[str, Any] | None = None, **kw: Any):
    """A GPUPool record (see :func:`pool_body` for the keywords)."""
    return _pool(name, selector, **kw).record()


def pool_body(name: str, selector: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """A GPUPool as the API server holds it. ``selector`` is a LabelSelector dict (None: empty,
    every GPU node); ``levels`` (name, label) pairs, narrowest first (None: detected)."""
    return _pool(name, selector, **kw).body()


def _pool(name: str, selector: Mapping[str, Any] | None = None, *, resource: str | None = None,
          levels: list[tuple[str, str]] | None = None, capacity_type: str | None = None,
          tolerations: list[dict] | None = None, price: float | None = None, generation: int = 1,
          status: Mapping[str, Any] | None = None, preemption: Mapping[str, Any] | None = None) -> b.GPUPool:
    pool = b.GPUPool(name).generation(generation).status(status)
    if selector is not None:
        pool.selector(selector)
    if resource is not None:
        pool.resource(resource)
    if levels is not None:
        pool.levels(*levels)
    if capacity_type is not None:
        pool.capacity_type(capacity_type)
    if tolerations is not None:
        pool.tolerations(tolerations)
    if price is not None:
        pool.price(price)
    if preemption is not None:
        pool.preemption(preemption)
    return pool


def job_body(name: str, *, ns: str = NS, replicas: int = 1, gpus: int = 8, pools=("p",),
             topology: Mapping[str, Any] | None = None, priority: int = 0, created: float = NOW - 600,
             generation: int = 1, status: Mapping[str, Any] | None = None, template: Mapping[str, Any] | None = None,
             uid: str | None = None, **spec_extra: Any) -> dict[str, Any]:
    """A TrainingJob body as the API server holds it (camelCase spec keys in ``spec_extra``)."""
    job = (b.TrainingJob(name).ns(ns).replicas(replicas).gpus(gpus).pools(*pools).priority(priority)
           .created(created).generation(generation).status(status).spec(**spec_extra))
    if topology:
        job.spec(topology=dict(topology))
    if template:
        job.template(template)
    if uid:
        job.uid(uid)
    return job.body()


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
    svc = (b.InferenceService(name).ns(ns).pools(*pools).gpus(gpus).generation(generation).status(status)
           .spec(**spec_extra))
    if topology:
        svc.spec(topology=dict(topology))
    if template:
        svc.template(template)
    return svc.body()


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
    """The manifest of rank ``rank`` that ``build_worker_pod`` makes, with a creationTimestamp and a uid."""
    return (b.WorkerPod(job, rank).attempt(attempt).placed(placement.nodes, placement.pool).resource(resource)
            .created(created).gates(*gates).body())


def worker_pod(job: TrainingJobRecord, rank: int, attempt: int = 0, *, nodes: Iterable[str] | None = None,
               pool: str = "p", phase: str = "Running", bound: bool = True, deleting: bool = False,
               resource: str = GPU, **changes: Any) -> Pod:
    """The Pod view of a worker built by ``build_worker_pod``; ``nodes`` is the placement
    (default: the job's ``status.placement``)."""
    w = b.WorkerPod(job, rank).attempt(attempt).resource(resource).phase(phase).unbound(not bound)
    if nodes is not None:
        w.placed(nodes, pool)
    return w.changes(deleting=deleting, **changes).record()


def foreign_pod(name: str, node: str | None, gpus: int, *, ns: str = "other", resource: str = GPU,
                phase: str = "Running", spec: Mapping[str, Any] | None = None) -> Pod:
    """A pod of neither a job nor a service, bound to ``node``; ``spec`` overrides its pod spec."""
    pod = b.Pod(name).ns(ns).on(node).gpus(gpus, resource).phase(phase)
    if spec is not None:
        pod.spec(spec)
    return pod.record()


def snapshot(pools=(), nodes=(), pods=(), jobs=(), services=(), storage_classes=("standard",), claims=None) -> Snapshot:
    """A Snapshot from lists: pools and nodes by name, jobs (JobView or records) by key."""
    jv = {}
    for j in jobs:
        j = j if isinstance(j, JobView) else view(j)
        jv[j.key] = j
    return Snapshot(pools={p.name: p for p in pools}, nodes={n.name: n for n in nodes}, pods=list(pods), jobs=jv,
                    services={s.key: s for s in services}, storage_classes=frozenset(storage_classes),
                    claims=dict(claims or {}))
