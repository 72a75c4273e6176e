"""Nodes as placement sees them: capacity type, and the per-pool view of a node."""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME
from kubeforge.objects import BLOCKING_EFFECTS, Node, is_interrupted, tolerates

from ._model import NodeInfo

CapacityType = Literal["spot", "on-demand"]

SPOT_LABELS: tuple[tuple[str, str], ...] = (
    ("karpenter.sh/capacity-type", "spot"),
    ("cloud.google.com/gke-spot", "true"),
    ("eks.amazonaws.com/capacityType", "spot"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
)
"""Label and value (compared case-insensitively) that mark a spot / preemptible node:
Karpenter, GKE Spot VMs, EKS managed node groups (``SPOT``) and AKS spot node pools."""

def capacity_type(labels: Mapping[str, str]) -> CapacityType:
    """Tell spot nodes from on-demand ones by their labels.

    Args:
        labels: Node labels.

    Returns:
        ``"spot"`` if any label of :data:`SPOT_LABELS` carries its spot value (case is
        ignored), otherwise ``"on-demand"``.
    """
    for key, value in SPOT_LABELS:
        got = labels.get(key)
        if got is not None and str(got).lower() == value:
            return "spot"
    return "on-demand"


def node_info(
    node: Node,
    gpu_resource: str = DEFAULT_GPU_RESOURCE_NAME,
    allocated: int = 0,
    pool_tolerations: Sequence[Mapping[str, Any]] = (),
    capacity: CapacityType | None = None,
) -> NodeInfo:
    """The placement view of one :class:`~kubeforge.objects.Node` in a pool.

    Args:
        node: The node.
        gpu_resource: Extended resource name that counts GPUs.
        allocated: GPUs already held on this node (the ledger's count; placement never
            lists pods).
        pool_tolerations: The pool's tolerations (core/v1 Toleration dicts): taints they
            tolerate do not make the node unschedulable.
        capacity: ``"spot"`` or ``"on-demand"`` when the pool says so
            (``spec.capacityType``), else None to detect it from the node's labels.

    Returns:
        The node's :class:`NodeInfo`: ``ready`` from the Ready condition; ``cordoned`` from
        ``spec.unschedulable``; ``taints``, the ``NoSchedule`` / ``NoExecute`` taints the
        pool does not tolerate (a job's own tolerations may still tolerate them);
        ``schedulable`` when neither cordoned nor tainted so; ``interrupted`` when a taint
        key starts with an interruption prefix (whatever its effect, tolerated or not); GPU
        counts from allocatable and capacity (0 when absent or malformed).
    """
    blocking = tuple(t for t in node.taints
                     if t.effect in BLOCKING_EFFECTS and not tolerates(pool_tolerations, t))
    allocatable = node.allocatable.get(gpu_resource, 0)
    return NodeInfo(
        name=node.name,
        labels=node.labels,
        gpus_allocatable=allocatable,
        gpus_allocated=max(0, int(allocated)),
        ready=node.ready,
        schedulable=not node.unschedulable and not blocking,
        interrupted=is_interrupted(node),
        gpus_capacity=max(node.capacity.get(gpu_resource, 0), allocatable),
        cordoned=node.unschedulable,
        taints=blocking,
        capacity_type=capacity,
        resources={k: v for k, v in node.allocatable.items() if k != gpu_resource},
    )


