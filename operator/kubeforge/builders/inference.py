"""Manifests of an InferenceService's children: the model-server Deployment and its Service.

The Deployment's ``replicas`` belongs to the operator (the autoscaler's decision), never to
the user's spec, so a GitOps tool that owns the InferenceService sees no drift. Each replica
is one pod that requests ``gpusPerReplica`` GPUs of the pool's resource, so a multi-GPU
replica always sits on one node. Pods are created behind the ``kubeforge.io/admission``
scheduling gate and released one by one by the admission round onto a node it chose from
the GPU ledger; with ``topology.mode: Required`` the pods also need a node that carries the
level's label. Rollouts use ``maxSurge: 0``: an update never needs spare GPUs.

The pod template carries a hash of itself (annotation ``kubeforge.io/template-hash`` on the
Deployment): when the InferenceService's template, GPUs or pool change, the hash differs and
the operator writes the new template once (a rolling update).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Mapping, Sequence

from kubeforge.builders.common import owner_reference
from kubeforge.objects import (
    ADMISSION_GATE, ASSIGNED_NODE, MANAGED_BY, MANAGER, POOL_LABEL, SERVICE_NAME, TEMPLATE_HASH, InferenceServiceRecord,
    set_main_gpus,
)

KIND = "InferenceService"


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


def build_pod_template(
    svc: InferenceServiceRecord,
    *,
    gpu_resource: str = "nvidia.com/gpu",
    node_selector: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    pool: str | None = None,
    level_label: str | None = None,
) -> dict[str, Any]:
    """The replicas' pod template (metadata and spec), from the service's spec and its pool.

    Args:
        svc: The InferenceService (spec parsed, defaults applied).
        gpu_resource: The pool's GPU resource name.
        node_selector: The pool's ``spec.nodeSelector`` (a LabelSelector dict), as node
            affinity ANDed into the template's own.
        tolerations: The pool's tolerations, appended to the template's.
        pool: The pool name, as a label.
        level_label: Node label of ``spec.topology.level`` when the mode is Required.
    """
    spec = svc.spec
    assert spec is not None
    tmd = copy.deepcopy(spec.template.metadata)
    pod_spec = copy.deepcopy(spec.template.spec)
    main = set_main_gpus(pod_spec, spec.gpus_per_replica, gpu_resource)
    if not any(p.get("containerPort") == spec.port for p in main.get("ports") or []):
        main["ports"] = list(main.get("ports") or []) + [{"name": "http", "containerPort": spec.port}]
    pool_aff = pool_node_affinity(node_selector, level_label)
    if pool_aff:
        affinity = dict(pod_spec.get("affinity") or {})
        own = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        ours = pool_aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
        terms = [{**t, "matchExpressions": list(t.get("matchExpressions") or []) + ours}
                 for t in own.get("nodeSelectorTerms") or [{}]]
        affinity["nodeAffinity"] = {**(affinity.get("nodeAffinity") or {}),
                                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        pod_spec["affinity"] = affinity
    pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + [dict(t) for t in tolerations]
    # Each replica waits behind our gate until the admission round, which also places training
    # gangs, gives it a node from the same GPU ledger.
    pod_spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    labels = {**(tmd.get("labels") or {}), **service_labels(svc.name)}
    if pool:
        labels[POOL_LABEL] = pool
    return {"metadata": {"labels": labels, "annotations": dict(tmd.get("annotations") or {})}, "spec": pod_spec}


def template_hash(template: Mapping[str, Any]) -> str:
    """A short, stable hash of a pod template (for ``kubeforge.io/template-hash``)."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def build_deployment(svc: InferenceServiceRecord, *, replicas: int, template: Mapping[str, Any]) -> dict[str, Any]:
    """The Deployment running the model server.

    Args:
        svc: The InferenceService.
        replicas: The autoscaler's desired replica count (>= 0).
        template: From :func:`build_pod_template`.
    """
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": svc.name,
            "namespace": svc.namespace,
            "labels": service_labels(svc.name),
            "annotations": {TEMPLATE_HASH: template_hash(template)},
            "ownerReferences": [owner_reference(KIND, svc.name, svc.uid)],
        },
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": {SERVICE_NAME: svc.name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": copy.deepcopy(dict(template)),
        },
    }


def build_service(svc: InferenceServiceRecord) -> dict[str, Any]:
    """The ClusterIP Service in front of the replicas: ``<name>.<namespace>.svc:<port>``."""
    assert svc.spec is not None
    port = svc.spec.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": svc.name,
            "namespace": svc.namespace,
            "labels": service_labels(svc.name),
            "ownerReferences": [owner_reference(KIND, svc.name, svc.uid)],
        },
        "spec": {
            "selector": {SERVICE_NAME: svc.name},
            "ports": [{"name": "http", "port": port, "targetPort": port}],
        },
    }


def release_patch(affinity: Mapping[str, Any] | None, annotated: bool, node: str) -> list[dict[str, Any]]:
    """JSON patch that pins a gated replica to ``node`` and lifts the admission gate.

    While a pod is gated its node affinity may only be narrowed (KEP-3838, GA in 1.30):
    ``matchFields metadata.name In [node]`` is added to every existing nodeSelectorTerm (or
    one term is set when there is none), the node is recorded in
    ``kubeforge.io/assigned-node`` (the GPU ledger counts the pod there from now on) and the
    scheduling gates are removed.

    Args:
        affinity: The pod's ``spec.affinity`` (None or empty: none).
        annotated: Whether the pod has annotations already.
        node: The node admission chose.
    """
    field = [{"key": "metadata.name", "operator": "In", "values": [node]}]
    affinity = affinity or {}
    terms = (((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
             .get("nodeSelectorTerms") or [])
    ops: list[dict[str, Any]] = []
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    if terms:
        for i, term in enumerate(terms):
            if term.get("matchFields"):
                ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields/-", "value": field[0]})
            else:
                ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields", "value": field})
    elif affinity.get("nodeAffinity"):
        ops.append({"op": "add", "path": base, "value": {"nodeSelectorTerms": [{"matchFields": field}]}})
    elif affinity:
        ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity",
                    "value": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": field}]}}})
    else:
        ops.append({"op": "add", "path": "/spec/affinity",
                    "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": field}]}}}})
    if annotated:
        ops.append({"op": "add", "path": "/metadata/annotations/" + ASSIGNED_NODE.replace("/", "~1"), "value": node})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {ASSIGNED_NODE: node}})
    ops.append({"op": "remove", "path": "/spec/schedulingGates"})
    return ops
