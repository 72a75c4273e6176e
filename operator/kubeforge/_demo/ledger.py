"""Pure: what the pods hold, and whether a GPUPool's status says the same.

The demo prints a pool's GPUs only once its status agrees with the pods the demo just placed
(issue 19: a status written before the placements showed every domain free). "Agrees" is
checked against the pods themselves, not the operator's ledger: every pod bound to a node of the
pool and not terminal holds its GPU requests there (kube-scheduler's rule,
:func:`kubeforge.objects.pod_requests`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME
from kubeforge.objects import JOB_NAME, SERVICE_NAME, pod_requests

__all__ = ["Holding", "disagreements", "holdings", "per_domain", "per_workload", "workload_of"]

TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Holding:
    """One pod's GPUs on one node: ``workload`` is (kind, namespace, name)."""

    pod: str
    node: str
    gpus: int
    workload: tuple[str, str, str]


def workload_of(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of the workload a pod belongs to, by kubeforge's labels:
    TrainingJob (``kubeforge.io/job-name``), InferenceService (``kubeforge.io/inference-service``),
    else the pod itself (kind ``Pod``), as the pool's ``status.workloads`` counts it."""
    md = pod.get("metadata") or {}
    labels, ns = md.get("labels") or {}, md.get("namespace", "")
    if labels.get(JOB_NAME):
        return "TrainingJob", ns, labels[JOB_NAME]
    if labels.get(SERVICE_NAME):
        return "InferenceService", ns, labels[SERVICE_NAME]
    return "Pod", ns, md.get("name", "")


def holdings(pods: Iterable[Mapping[str, Any]], resource: str = DEFAULT_GPU_RESOURCE_NAME) -> list[Holding]:
    """The pods that hold GPUs of ``resource`` now: bound (``spec.nodeName``) and not terminal."""
    out = []
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if not node or (p.get("status") or {}).get("phase") in TERMINAL:
            continue
        gpus = int(pod_requests(p.get("spec") or {}).get(resource, 0))
        if gpus:
            out.append(Holding(p["metadata"]["name"], node, gpus, workload_of(p)))
    return out


def per_domain(held: Iterable[Holding], node_domain: Mapping[str, str]) -> dict[str, int]:
    """GPUs held per domain (``node_domain``: node name -> domain; other nodes are left out)."""
    out: dict[str, int] = {}
    for h in held:
        d = node_domain.get(h.node)
        if d is not None:
            out[d] = out.get(d, 0) + h.gpus
    return out


def per_workload(held: Iterable[Holding], nodes: Iterable[str]) -> dict[tuple[str, str, str], int]:
    """GPUs held per workload on ``nodes`` (a pool's)."""
    names = set(nodes)
    out: dict[tuple[str, str, str], int] = {}
    for h in held:
        if h.node in names:
            out[h.workload] = out.get(h.workload, 0) + h.gpus
    return out


def disagreements(status: Mapping[str, Any], held: list[Holding], node_domains: Mapping[str, Mapping[str, str]],
                  expected: Iterable[tuple[str, str, str]] = ()) -> list[str]:
    """What a GPUPool status says that the pods do not; empty when it agrees.

    Args:
        status: The pool's ``.status``.
        held: :func:`holdings` of every pod.
        node_domains: Per topology level name (``nvlink``, ``block``...), node -> domain, for
            the pool's nodes.
        expected: Workloads that must be listed in ``status.workloads`` (the demo's).

    Returns:
        One line per difference: a domain's ``gpus.allocated``, the pool's total, a workload's
        GPUs (listed or holding, not both, counts as a difference: a workload admitted whose
        pods do not exist yet too), an expected workload missing.
    """
    out = []
    pool_nodes = {n for m in node_domains.values() for n in m}
    for d in status.get("domains") or []:
        want = per_domain(held, node_domains.get(d["level"], {})).get(d["name"], 0)
        got = (d.get("gpus") or {}).get("allocated", 0)
        if got != want:
            out.append(f"{d['level']} {d['name']}: status {got} allocated, pods hold {want}")
    total = sum(h.gpus for h in held if h.node in pool_nodes)
    got = (status.get("gpus") or {}).get("allocated", 0)
    if got != total:
        out.append(f"pool: status {got} allocated, pods hold {total}")
    listed = {(w["kind"], w["namespace"], w["name"]): w.get("gpus", 0) for w in status.get("workloads") or []}
    holding = per_workload(held, pool_nodes)
    for w in sorted(set(holding) | set(listed)):
        if listed.get(w, 0) != holding.get(w, 0):
            out.append(f"{w[0]} {w[1]}/{w[2]}: status {listed.get(w, 0)} GPUs, pods hold {holding.get(w, 0)}")
    for w in expected:
        if w not in listed:
            out.append(f"{w[0]} {w[1]}/{w[2]}: not in status.workloads yet")
    return out
