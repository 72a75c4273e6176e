"""kopf indexes: in-memory mirrors of what the loops read, kept current by watches.

Each index keeps a slim copy (only the fields we read), so memory stays proportional to the
number of GPU nodes and GPU pods, not to the size of every object in the cluster. Index
handlers also wake whatever must react: the job's reconcile, the admission loop.
"""

from __future__ import annotations

import copy
from typing import Any

import kopf

from kubeforge import GROUP, VERSION
from kubeforge.builders.common import ASSIGNED_NODE, JOB_NAME, RESTART_ATTEMPT, SERVICE_NAME
from kubeforge.handlers.state import STATE

TERMINAL = ("Succeeded", "Failed")


def _plain(obj: Any) -> Any:
    return copy.deepcopy(dict(obj)) if obj is not None else None


def extended_requests(spec: dict[str, Any]) -> dict[str, int]:
    """Sum of extended-resource requests (names with a ``/``, e.g. ``nvidia.com/gpu``) over
    a pod's containers; limits count when requests are absent (as for device plugins)."""
    out: dict[str, int] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            if "/" in k:
                try:
                    out[k] = out.get(k, 0) + int(str(v))
                except ValueError:
                    continue
    return out


def slim_node(body: Any) -> dict[str, Any]:
    md = body.get("metadata") or {}
    st = body.get("status") or {}
    spec = body.get("spec") or {}
    return {
        "metadata": {"name": md.get("name"), "labels": dict(md.get("labels") or {})},
        "spec": {"unschedulable": bool(spec.get("unschedulable")), "taints": _plain_list(spec.get("taints"))},
        "status": {
            "allocatable": dict(st.get("allocatable") or {}),
            "capacity": dict(st.get("capacity") or {}),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status"), "lastTransitionTime": c.get("lastTransitionTime")}
                for c in st.get("conditions") or [] if c.get("type") == "Ready"
            ],
        },
    }


def _plain_list(items: Any) -> list[dict[str, Any]]:
    return [dict(i) for i in items or []]


def slim_pod(body: Any) -> dict[str, Any]:
    md = body.get("metadata") or {}
    spec = body.get("spec") or {}
    st = body.get("status") or {}
    return {
        "metadata": {
            "name": md.get("name"), "namespace": md.get("namespace"),
            "labels": dict(md.get("labels") or {}), "annotations": dict(md.get("annotations") or {}),
            "deletionTimestamp": md.get("deletionTimestamp"),
            "ownerReferences": _plain_list(md.get("ownerReferences")),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "affinity": _plain(spec.get("affinity")),
            "schedulingGates": _plain_list(spec.get("schedulingGates")),
            "containers": [{"name": c.get("name")} for c in spec.get("containers") or []],
        },
        "status": {
            "phase": st.get("phase"),
            "conditions": [
                {"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason"),
                 "message": c.get("message"), "lastTransitionTime": c.get("lastTransitionTime")}
                for c in st.get("conditions") or [] if c.get("type") in ("Ready", "DisruptionTarget", "PodScheduled")
            ],
            "containerStatuses": _plain(st).get("containerStatuses") if st else None,
        },
    }


@kopf.index("nodes")
async def kf_nodes(name: str, body: Any, **_: Any) -> dict:
    STATE.wake_admission()
    return {name: slim_node(body)}


@kopf.index("pods")
async def kf_gpu_pods(namespace: str, name: str, body: Any, spec: Any, status: Any, labels: Any, **_: Any) -> dict:
    """node name -> {pod, gpus by resource, job key or None, attempt} for non-terminal GPU pods.

    Returns ``{}`` (never None) for a pod that holds no GPUs: kopf keeps an object's previous
    entries when a handler returns None, and a pod that just finished must drop out.
    """
    req = extended_requests(dict(spec))
    # A pod the admission loop released onto a node holds its GPUs there from that moment,
    # before kube-scheduler binds it.
    node = (spec or {}).get("nodeName") or (body.get("metadata", {}).get("annotations") or {}).get(ASSIGNED_NODE)
    if not req or not node or (status or {}).get("phase") in TERMINAL:
        return {}
    job = labels.get(JOB_NAME)
    return {node: {
        "pod": f"{namespace}/{name}",
        "gpus": req,
        "job": (namespace, job) if job else None,
        "attempt": int(labels.get(RESTART_ATTEMPT, 0)) if job else None,
        "inference": (namespace, labels[SERVICE_NAME]) if labels.get(SERVICE_NAME) else None,
    }}


@kopf.index("pods", labels={JOB_NAME: kopf.PRESENT})
async def kf_job_pods(namespace: str, labels: Any, body: Any, **_: Any) -> dict:
    key = (namespace, labels[JOB_NAME])
    if STATE.jobs is not None:
        STATE.jobs.add(key)
    STATE.wake_admission()
    return {key: slim_pod(body)}


@kopf.index("pods", labels={SERVICE_NAME: kopf.PRESENT})
async def kf_service_pods(namespace: str, labels: Any, body: Any, **_: Any) -> dict:
    key = (namespace, labels[SERVICE_NAME])
    if STATE.services is not None:
        STATE.services.add(key)
    if body.get("spec", {}).get("schedulingGates"):
        STATE.wake_admission()  # a replica waits for the admission loop to give it a node
    return {key: slim_pod(body)}


def _slim_custom(body: Any) -> dict[str, Any]:
    md = body.get("metadata") or {}
    return {
        "apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
        "metadata": {k: _plain(md.get(k)) if isinstance(md.get(k), dict) else md.get(k)
                     for k in ("name", "namespace", "uid", "generation", "creationTimestamp", "deletionTimestamp", "resourceVersion")},
        "spec": _plain(body.get("spec") or {}),
        "status": _plain(body.get("status") or {}),
    }


@kopf.index(GROUP, VERSION, "trainingjobs")
async def kf_jobs(namespace: str, name: str, body: Any, **_: Any) -> dict:
    if STATE.jobs is not None:
        STATE.jobs.add((namespace, name))
    STATE.wake_admission()
    return {(namespace, name): _slim_custom(body)}


@kopf.index(GROUP, VERSION, "gpupools")
async def kf_pools(name: str, body: Any, **_: Any) -> dict:
    STATE.wake_admission()
    return {name: _slim_custom(body)}


@kopf.index(GROUP, VERSION, "inferenceservices")
async def kf_services(namespace: str, name: str, body: Any, **_: Any) -> dict:
    if STATE.services is not None:
        STATE.services.add((namespace, name))
    return {(namespace, name): _slim_custom(body)}


@kopf.on.event("namespaces", when=lambda **_: not STATE.ready.is_set())
async def kf_indexes_ready(**_: Any) -> None:
    """kopf runs non-index handlers only once every index is pre-populated; the first
    namespace event (there is always one: ``default``) therefore marks readiness."""
    if not STATE.ready.is_set():
        STATE.ready.set()
