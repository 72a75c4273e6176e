"""kopf indexes: in-memory mirrors of what the loops read, kept current by watches.

Each index keeps a small frozen record (:mod:`kubeforge.objects`), not the object, so memory
grows with the number of GPU nodes and pods, not with the size of every object. Index
handlers also wake what must react (a job's reconcile, the admission round), and only when
the change can matter. kopf calls no index handler when an object is deleted (it drops the
entry); the ``on.event`` handlers at the end react to deletions.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kopf

from kubeforge import GROUP, VERSION
from kubeforge.api import InferenceServiceSpec, TrainingJobSpec, GPUPoolSpec
from kubeforge.api._base import MAX_LABEL_LENGTH, name_error
from kubeforge.api._trainingjob import MAX_JOB_NAME_LENGTH
from kubeforge.objects import (
    ADMISSION_GATE, JOB_NAME, SERVICE_NAME, Pod, deployment_from_k8s, node_from_k8s, placement_of, pod_from_k8s, record_from_k8s,
)

_last_pod: list[Any] = [None, None]  # (uid, resourceVersion), Pod: the three pod indexes see the same event in a row


def _pod(body: Any) -> Pod:
    md = body.get("metadata") or {}
    key = (md.get("uid"), md.get("resourceVersion"))
    if _last_pod[0] != key:
        _last_pod[0], _last_pod[1] = key, pod_from_k8s(body)
    return _last_pod[1]


def _frees_gpus(pod: Pod) -> bool:
    return pod.terminal or pod.deleting


@kopf.index("nodes")
async def kf_nodes(name: str, body: Any, memo: Any, **_: Any) -> dict:
    """node name -> :class:`~kubeforge.objects.Node`."""
    rt = memo.rt
    node = node_from_k8s(body)
    old = rt.cache.node(name)
    if old != node:
        rt.wake_admission()
        if old is not None and (old.taints != node.taints or old.ready != node.ready):
            for rec in rt.cache.jobs():  # a gang with a rank there may have to move
                pl = placement_of(rec.status)
                if pl is not None and name in pl.nodes:
                    rt.queue_job(rec.key)
    return {name: node}


@kopf.index("pods")
async def kf_gpu_pods(body: Any, memo: Any, **_: Any) -> dict:
    """node name -> pods holding extended resources there (bound, or assigned by us).

    Returns ``{}`` (never None) for a pod that holds nothing: kopf keeps an object's previous
    entries when a handler returns None, and a pod that just finished must drop out.
    """
    pod = _pod(body)
    if not pod.requests or pod.where is None:
        return {}
    if _frees_gpus(pod) and pod.job is None and pod.service is None:
        memo.rt.wake_admission()
    if pod.terminal:
        return {}
    return {pod.where: pod}


@kopf.index("pods", labels={JOB_NAME: kopf.PRESENT})
async def kf_job_pods(namespace: str, labels: Any, body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, job) -> the job's pods, every attempt."""
    pod = _pod(body)
    key = (namespace, labels[JOB_NAME])
    memo.rt.queue_job(key)
    if _frees_gpus(pod):
        memo.rt.wake_admission()
    return {key: pod}


@kopf.index("pods", labels={SERVICE_NAME: kopf.PRESENT})
async def kf_service_pods(namespace: str, labels: Any, body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, service) -> the InferenceService's replica pods."""
    pod = _pod(body)
    key = (namespace, labels[SERVICE_NAME])
    memo.rt.queue_service(key)
    if ADMISSION_GATE in pod.gates or _frees_gpus(pod):
        memo.rt.wake_admission()  # a replica waits for a node, or one gives its GPUs back
    return {key: pod}


@kopf.index(GROUP, VERSION, "trainingjobs")
async def kf_jobs(body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> :class:`~kubeforge.objects.TrainingJobRecord`."""
    rec = record_from_k8s(TrainingJobSpec, body)
    bad = name_error("TrainingJob", rec.name, MAX_JOB_NAME_LENGTH)
    if bad:
        rec = replace(rec, spec=None, spec_error=bad)
    memo.rt.queue_job(rec.key)
    if placement_of(rec.status) is None:
        memo.rt.wake_admission()
    return {rec.key: rec}


@kopf.index(GROUP, VERSION, "gpupools")
async def kf_pools(body: Any, memo: Any, **_: Any) -> dict:
    """pool name -> :class:`~kubeforge.objects.PoolRecord`."""
    rec = record_from_k8s(GPUPoolSpec, body)
    memo.rt.wake_admission()
    return {rec.name: rec}


@kopf.index(GROUP, VERSION, "inferenceservices")
async def kf_services(body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> :class:`~kubeforge.objects.InferenceServiceRecord`."""
    rec = record_from_k8s(InferenceServiceSpec, body)
    bad = name_error("InferenceService", rec.name, MAX_LABEL_LENGTH)
    if bad:
        rec = replace(rec, spec=None, spec_error=bad)
    memo.rt.queue_service(rec.key)
    return {rec.key: rec}


@kopf.index("apps", "v1", "deployments", labels={SERVICE_NAME: kopf.PRESENT})
async def kf_deployments(namespace: str, labels: Any, body: Any, **_: Any) -> dict:
    """(namespace, service) -> :class:`~kubeforge.objects.DeploymentState` of its Deployment."""
    return {(namespace, labels[SERVICE_NAME]): deployment_from_k8s(body)}


@kopf.index("persistentvolumeclaims")
async def kf_claims(namespace: str, name: str, status: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> phase of every PersistentVolumeClaim (a job's checkpoint claim
    must exist before it holds GPUs)."""
    memo.rt.wake_admission()
    return {(namespace, name): (status or {}).get("phase") or "Pending"}


@kopf.index("storage.k8s.io", "v1", "storageclasses")
async def kf_storage_classes(name: str, body: Any, memo: Any, **_: Any) -> dict:
    """StorageClass name -> volumeBindingMode."""
    memo.rt.wake_admission()
    return {name: body.get("volumeBindingMode") or "Immediate"}


def _deleted(event: Any, **_: Any) -> bool:
    return (event or {}).get("type") == "DELETED"


@kopf.on.event(GROUP, VERSION, "trainingjobs", when=_deleted)
async def kf_job_deleted(namespace: str, name: str, memo: Any, **_: Any) -> None:
    """A deleted job releases its GPUs (its children go with it through owner references)."""
    rt = memo.rt
    rt.cache.forget((namespace, name))
    if rt.jobs is not None:
        rt.jobs.forget((namespace, name))
    rt.wake_admission()


@kopf.on.event("pods", labels={JOB_NAME: kopf.PRESENT}, when=_deleted)
async def kf_job_pod_deleted(namespace: str, labels: Any, memo: Any, **_: Any) -> None:
    memo.rt.queue_job((namespace, labels[JOB_NAME]))
    memo.rt.wake_admission()


@kopf.on.event(GROUP, VERSION, "inferenceservices", when=_deleted)
async def kf_service_deleted(namespace: str, name: str, memo: Any, **_: Any) -> None:
    from kubeforge.runtime.inference import forget
    forget((namespace, name))
    memo.rt.cache.forget((namespace, name))


@kopf.on.event("namespaces", when=lambda memo, **_: not memo.rt.ready.is_set())
async def kf_indexes_ready(memo: Any, **_: Any) -> None:
    """kopf runs non-index handlers only once every index is filled; the first namespace
    event (there is always one: ``default``) therefore marks readiness."""
    memo.rt.ready.set()
