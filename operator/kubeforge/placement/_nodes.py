"""Reading nodes: capacity type and a pure builder from a raw Kubernetes Node dict."""

from __future__ import annotations

from typing import Any, Collection, Literal, Mapping

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

INTERRUPTION_TAINT_PREFIXES: tuple[str, ...] = (
    "aws-node-termination-handler/",
    "karpenter.sh/disrupted",
    "cloud.google.com/impending-node-termination",
    "node.kubernetes.io/out-of-service",
)
"""Taint key prefixes that mean the node is being reclaimed or shut down: AWS Node
Termination Handler (``aws-node-termination-handler/spot-itn``, ``.../rebalance-recommendation``
...), Karpenter disruption, GKE's impending termination, and the upstream out-of-service
taint."""

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


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


def _parse_count(value: Any, what: str) -> int:
    """Parse an integer resource quantity (``8``, ``"8"``, ``"2k"``)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"{what}: not a GPU count: {value!r}")
    if isinstance(value, int):
        return max(0, value)
    text = str(value).strip()
    multipliers = {"k": 10**3, "M": 10**6, "G": 10**9}
    factor = 1
    if text and text[-1] in multipliers:
        factor = multipliers[text[-1]]
        text = text[:-1]
    if not text.isdigit():
        raise ValueError(f"{what}: not an integer GPU quantity: {value!r}")
    return int(text) * factor


def node_info_from_k8s(
    node: Mapping[str, Any],
    gpu_resource: str = "nvidia.com/gpu",
    allocated: int = 0,
    tolerated_taint_keys: Collection[str] = (),
) -> NodeInfo:
    """Build a :class:`NodeInfo` from a Kubernetes Node object as a plain dict.

    Args:
        node: The Node as returned by the API (``metadata``, ``spec``, ``status``).
        gpu_resource: Extended resource name that counts GPUs.
        allocated: GPUs already requested by pods bound or assigned to this node (the
            caller sums them; placement never lists pods).
        tolerated_taint_keys: Taint keys the pool's pods tolerate; such taints do not make
            the node unschedulable.

    Returns:
        The node's :class:`NodeInfo`:

        * ``ready``: the ``Ready`` condition has status ``"True"`` (absent: not ready);
        * ``schedulable``: ``spec.unschedulable`` is not true and no ``NoSchedule`` or
          ``NoExecute`` taint has a key outside ``tolerated_taint_keys``;
        * ``interrupted``: some taint key starts with one of
          :data:`INTERRUPTION_TAINT_PREFIXES` (whatever its effect, tolerated or not);
        * GPU counts from ``status.allocatable`` and ``status.capacity`` (absent: 0).

    Raises:
        ValueError: If the node has no name or a GPU quantity is not an integer.
    """
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = metadata.get("name") or ""
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}

    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    taints = spec.get("taints") or []
    tolerated = set(tolerated_taint_keys)
    blocked = any(
        t.get("effect") in _BLOCKING_EFFECTS and t.get("key") not in tolerated for t in taints
    )
    schedulable = not bool(spec.get("unschedulable")) and not blocked
    interrupted = any(
        str(t.get("key", "")).startswith(INTERRUPTION_TAINT_PREFIXES) for t in taints
    )

    allocatable = _parse_count((status.get("allocatable") or {}).get(gpu_resource), f"node {name}")
    capacity = _parse_count((status.get("capacity") or {}).get(gpu_resource), f"node {name}")
    return NodeInfo(
        name=name,
        labels=labels,
        gpus_allocatable=allocatable,
        gpus_allocated=max(0, int(allocated)),
        ready=ready,
        schedulable=schedulable,
        interrupted=interrupted,
        gpus_capacity=max(capacity, allocatable),
    )
