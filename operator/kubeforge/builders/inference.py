"""Manifests of an InferenceService's children: the model-server Deployment and its Service.

The Deployment's ``replicas`` belongs to the operator (the autoscaler's decision), never to
the user's spec, so a GitOps tool that owns the InferenceService sees no drift. Each replica
is one pod that requests ``gpusPerReplica`` GPUs of the pool's resource, so a multi-GPU
replica always sits on one node; pods are created behind the ``kubeforge.io/admission``
scheduling gate and released one by one by the admission loop onto a node it chose; with ``topology.mode: Required`` the pods also get a node
affinity for nodes that carry the chosen level's label (one NVLink domain per pod is then
implied by the node, as every node belongs to exactly one domain of a level).
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

from kubeforge.builders.common import ADMISSION_GATE, MANAGED_BY, MANAGER, POOL_LABEL, SERVICE_NAME, owner_reference

GPU_CONTAINER_NAMES = ("vllm", "sglang", "server", "model-server", "triton")


def service_labels(name: str) -> dict[str, str]:
    """Labels on every child of the service; the selector uses ``kubeforge.io/inference-service``."""
    return {MANAGED_BY: MANAGER, SERVICE_NAME: name}


def pool_node_affinity(node_selector: Mapping[str, Any] | None, level_label: str | None = None) -> dict[str, Any] | None:
    """A required ``nodeAffinity`` equivalent to a pool's LabelSelector (plus ``Exists`` on
    ``level_label`` when given); None when there is nothing to require."""
    exprs: list[dict[str, Any]] = []
    sel = node_selector or {}
    for k, v in sorted((sel.get("matchLabels") or {}).items()):
        exprs.append({"key": k, "operator": "In", "values": [v]})
    for e in sel.get("matchExpressions") or []:
        item = {"key": e["key"], "operator": e["operator"]}
        if e.get("values"):
            item["values"] = list(e["values"])
        exprs.append(item)
    if level_label:
        exprs.append({"key": level_label, "operator": "Exists"})
    if not exprs:
        return None
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}


def build_deployment(
    svc: Mapping[str, Any],
    *,
    replicas: int,
    gpu_resource: str = "nvidia.com/gpu",
    node_selector: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    pool: str | None = None,
    level_label: str | None = None,
) -> dict[str, Any]:
    """The Deployment running the model server.

    Args:
        svc: the InferenceService body (defaults applied).
        replicas: the autoscaler's desired replica count (>= 0).
        gpu_resource: the pool's GPU resource name.
        node_selector: the pool's ``spec.nodeSelector`` (a LabelSelector), as node affinity.
        tolerations: the pool's tolerations, appended to the template's.
        pool: the pool name, as a label.
        level_label: node label of ``spec.topology.level`` when the mode is Required.
    """
    md = svc["metadata"]
    spec = svc["spec"]
    name = md["name"]
    template = copy.deepcopy(spec.get("template") or {})
    tmd = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    containers = pod_spec.get("containers") or [{"name": "server", "image": "busybox"}]
    pod_spec["containers"] = containers
    main = next((c for c in containers if c.get("name") in GPU_CONTAINER_NAMES), containers[0])
    gpus = str(int(spec.get("gpusPerReplica", 1)))
    res = main.setdefault("resources", {})
    res.setdefault("limits", {})[gpu_resource] = gpus
    res.setdefault("requests", {})[gpu_resource] = gpus
    port = int(spec.get("port", 8000))
    if not any(p.get("containerPort") == port for p in main.get("ports") or []):
        main["ports"] = list(main.get("ports") or []) + [{"name": "http", "containerPort": port}]
    aff = pool_node_affinity(node_selector, level_label)
    if aff:
        pod_spec["affinity"] = {**(pod_spec.get("affinity") or {}), "nodeAffinity": aff}
    pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + [dict(t) for t in tolerations]
    # Each replica waits behind our gate until the admission loop, which also places training
    # gangs, gives it a node from the same GPU ledger: a serving pod never takes GPUs that were
    # promised to a gang whose pods are still being created.
    pod_spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    labels = {**(tmd.get("labels") or {}), **service_labels(name)}
    if pool:
        labels[POOL_LABEL] = pool
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": md["namespace"],
            "labels": service_labels(name),
            "ownerReferences": [owner_reference(svc)],
        },
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": {SERVICE_NAME: name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels, "annotations": dict(tmd.get("annotations") or {})},
                "spec": pod_spec,
            },
        },
    }


def build_service(svc: Mapping[str, Any]) -> dict[str, Any]:
    """The ClusterIP Service in front of the replicas: ``<name>.<namespace>.svc:<port>``."""
    md = svc["metadata"]
    port = int(svc["spec"].get("port", 8000))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": md["name"],
            "namespace": md["namespace"],
            "labels": service_labels(md["name"]),
            "ownerReferences": [owner_reference(svc)],
        },
        "spec": {
            "selector": {SERVICE_NAME: md["name"]},
            "ports": [{"name": "http", "port": port, "targetPort": port}],
        },
    }
