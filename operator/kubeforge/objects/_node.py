"""One node model for the whole operator, and the one interruption predicate.

Placement (free GPUs, schedulability), the lifecycle (is this node going away?) and the pool
status all read :class:`Node`; nothing else parses a Kubernetes Node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, DecimalException, InvalidOperation
from typing import Any, Mapping, Sequence

from kubeforge.objects._timestamps import loose_time

INTERRUPTION_TAINT_PREFIXES: tuple[str, ...] = (
    "aws-node-termination-handler/",
    "karpenter.sh/disrupted",
    "cloud.google.com/impending-node-termination",
    "node.kubernetes.io/out-of-service",
)
"""Taint key prefixes that mean the node is being reclaimed or shut down: AWS Node
Termination Handler (``aws-node-termination-handler/spot-itn``, ``.../rebalance-recommendation``
...), Karpenter disruption, GKE's impending termination, and the upstream out-of-service
taint (KEP-2268)."""

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects that keep new pods off a node unless tolerated (PreferNoSchedule does not)."""

DEFAULT_NOT_READY_GRACE = 60.0
"""Seconds a node may stay NotReady before the pods on it count as lost. Shorter than the
node lifecycle controller's 300 s ``default-not-ready-toleration-seconds``: a gang cannot make
progress with a rank on a dead node, and its checkpoint is what it resumes from."""


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (core/v1 Taint): key, value and effect."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Node:
    """What kubeforge knows about one Node.

    Attributes:
        name: ``metadata.name``.
        labels: Node labels (topology, capacity type, GPU Feature Discovery).
        taints: ``spec.taints``.
        unschedulable: ``spec.unschedulable`` (cordoned).
        ready: The ``Ready`` condition is ``True``.
        ready_changed: When ``Ready`` last changed (unix seconds), None if unknown.
        allocatable: What the kubelet offers for pods: extended resources (names with a
            ``/``, e.g. ``nvidia.com/gpu``) as counts, and :data:`NATIVE_RESOURCES` (``cpu``
            in millicores, ``memory`` in bytes) when the node reports them.
        capacity: The same from ``status.capacity``.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    ready_changed: float | None = None
    allocatable: Mapping[str, int] = field(default_factory=dict)
    capacity: Mapping[str, int] = field(default_factory=dict)


def interruption_reason(node: Node | None, name: str, now: float,
                        not_ready_grace: float = DEFAULT_NOT_READY_GRACE) -> str | None:
    """Why the pods on a node must be treated as lost, or None.

    The one definition of an interrupted node, used by placement (no new work lands there)
    and by the lifecycle (a gang with a rank there restarts as a preemption):

    * the node is gone (``node`` is None);
    * it carries a taint whose key starts with one of :data:`INTERRUPTION_TAINT_PREFIXES`,
      whatever its effect;
    * it has been NotReady for ``not_ready_grace`` seconds or longer.

    Args:
        node: The node, or None when it no longer exists.
        name: The node's name (for the message when ``node`` is None).
        now: Unix seconds.
        not_ready_grace: Seconds of NotReady tolerated.

    Returns:
        A short human reason, or None when the node is fine (or NotReady for less than the
        grace period: see :func:`not_ready_wait`).
    """
    if node is None:
        return f"node {name} deleted"
    for t in node.taints:
        if t.key.startswith(INTERRUPTION_TAINT_PREFIXES):
            return f"node {name} has interruption taint {t.key}"
    wait = not_ready_wait(node, now, not_ready_grace)
    if wait is not None and wait <= 0:
        return f"node {name} NotReady for {now - (node.ready_changed or now):.0f}s"
    return None


def not_ready_wait(node: Node, now: float, not_ready_grace: float = DEFAULT_NOT_READY_GRACE) -> float | None:
    """Seconds left before a NotReady node counts as lost (<= 0: already), None if Ready or
    the time it went NotReady is unknown."""
    if node.ready or node.ready_changed is None:
        return None
    return not_ready_grace - (now - node.ready_changed)


def is_interrupted(node: Node) -> bool:
    """Whether the node carries an interruption taint (it is about to go away)."""
    return any(t.key.startswith(INTERRUPTION_TAINT_PREFIXES) for t in node.taints)


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    """Whether one of ``tolerations`` (core/v1 Toleration dicts) tolerates ``taint``.

    Kubernetes' rule (``v1.Toleration.ToleratesTaint``): the effects match when the
    toleration's is empty or equal; an empty key with ``Exists`` matches every key; otherwise
    the keys must be equal, and ``Exists`` matches any value while ``Equal`` (the default)
    needs the same value.
    """
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        op = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if not key:
            if op == "Exists":
                return True
            continue
        if key != taint.key:
            continue
        if op == "Exists" or (t.get("value") or "") == taint.value:
            return True
    return False


def parse_quantity_count(value: Any) -> int:
    """An integer resource quantity (``8``, ``"8"``, ``"2k"``) as an int; 0 for anything that
    is not a whole count (extended resources such as GPUs are always whole numbers).

    Never raises: a malformed quantity on a node or a pod must not stop the operator.
    """
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    text = str(value).strip()
    factor = {"k": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:], 1)
    if factor != 1:
        text = text[:-1]
    return int(text) * factor if text.isdigit() else 0


NATIVE_RESOURCES = ("cpu", "memory")
"""Native resources kept by :func:`pod_requests` with ``extended_only=False``: ``cpu`` in
millicores, ``memory`` in bytes (a replica asking more than any node offers can never run)."""


_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "K": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (``500m``, ``1Gi``, ``1e3``, ``2``) as a Decimal in base
    units, by the suffix rules of apimachinery's ``pkg/api/resource/quantity.go``: decimal SI
    ``n u m k M G T P E`` (and ``K``, which the client takes as ``k``), binary ``Ki Mi Gi Ti Pi
    Ei``, a decimal exponent ``e``/``E``. The same results as the Kubernetes Python client's
    ``kubernetes.utils.quantity.parse_quantity`` (a unit test compares the two). Written here
    because importing that module imports the whole synchronous client, about 7 MiB of the
    operator's memory for one function.

    Raises:
        ValueError: not a number with a known suffix.
    """
    if isinstance(value, (int, float, Decimal)):
        return Decimal(value)
    text = str(value)
    suffix = text[-2:] if text[-2:] in _BINARY_EXPONENTS else text[-1:] if text[-1:] in _DECIMAL_EXPONENTS else ""
    number = text[:len(text) - len(suffix)]
    try:
        num = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"invalid quantity {text!r}") from None
    try:
        if suffix in _BINARY_EXPONENTS:
            return num * (Decimal(2) ** _BINARY_EXPONENTS[suffix])
        return num.scaleb(_DECIMAL_EXPONENTS[suffix]) if suffix else num
    except DecimalException as e:
        raise ValueError(f"invalid quantity {text!r}") from e


def quantity_value(name: str, value: Any) -> int:
    """One resource quantity as an integer: ``cpu`` in millicores, ``memory`` in bytes, any
    other (extended) resource as a count (:func:`parse_quantity_count`). Parsed with
    :func:`parse_quantity` (the API server's suffix rules: ``500m``, ``1Gi``, ``1e3``). Never
    raises: a malformed quantity counts as 0 (the API server refuses such a pod anyway, and
    that refusal is reported)."""
    if name not in NATIVE_RESOURCES:
        return parse_quantity_count(value)
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return 0
    return max(0, int(q * 1000)) if name == "cpu" else max(0, int(q))


def node_from_k8s(body: Mapping[str, Any]) -> Node:
    """Build a :class:`Node` from a Kubernetes Node (a dict or kopf's body view).

    Extended resources (names containing ``/``) and :data:`NATIVE_RESOURCES` are kept in
    ``allocatable`` and ``capacity`` (:func:`quantity_value` units); malformed quantities
    count as 0.
    """
    md = body.get("metadata") or {}
    spec = body.get("spec") or {}
    st = body.get("status") or {}
    ready_c = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)

    def extended(res: Mapping[str, Any] | None) -> dict[str, int]:
        return {k: quantity_value(k, v) for k, v in (res or {}).items() if "/" in k or k in NATIVE_RESOURCES}

    return Node(
        name=md.get("name") or "",
        labels={str(k): str(v) for k, v in (md.get("labels") or {}).items()},
        taints=tuple(Taint(t.get("key") or "", t.get("value") or "", t.get("effect") or "")
                     for t in spec.get("taints") or []),
        unschedulable=bool(spec.get("unschedulable")),
        ready=bool(ready_c and ready_c.get("status") == "True"),
        ready_changed=loose_time(ready_c.get("lastTransitionTime")) if ready_c else None,
        allocatable=extended(st.get("allocatable")),
        capacity=extended(st.get("capacity")),
    )
