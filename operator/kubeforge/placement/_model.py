"""Plain frozen value types of the placement core.

Everything here is data: no I/O, no Kubernetes client, no clock. Validation happens in
``__post_init__`` and raises :class:`ValueError` for values that no caller should ever build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence, Union

from kubeforge.objects import Taint, tolerates

Mode = Literal["Required", "Preferred", "None"]
"""Topology mode of a gang, as in ``TrainingJob.spec.topology.mode``."""

MODES: tuple[str, ...] = ("Required", "Preferred", "None")


def _check_count(owner: str, name: str, value: object, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class TopologyLevel:
    """One level of a pool's network topology, e.g. an NVLink domain or a GCE block.

    Attributes:
        name: Short level name used in specs and statuses (``"nvlink"``, ``"block"``).
        node_label: Node label whose value names the domain a node belongs to at this
            level (``"nvidia.com/gpu.clique"``). Nodes without the label belong to no
            domain of this level.

    Raises:
        ValueError: If ``name`` or ``node_label`` is empty.
    """

    name: str
    node_label: str

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("TopologyLevel.name must not be empty")
        if not self.node_label:
            raise ValueError("TopologyLevel.node_label must not be empty")


@dataclass(frozen=True)
class NodeInfo:
    """What placement needs to know about one node.

    Attributes:
        name: Node name (``metadata.name``).
        labels: Node labels; only topology and capacity-type labels are read. Copied into
            a plain ``dict`` on construction; excluded from hashing.
        gpus_allocatable: GPUs the kubelet offers for pods (``status.allocatable``), count.
        gpus_allocated: GPUs already requested by pods bound or assigned to the node,
            count. May exceed ``gpus_allocatable`` (e.g. after a device went away).
        ready: The node's ``Ready`` condition is ``True``.
        schedulable: Not cordoned and no untolerated ``NoSchedule``/``NoExecute`` taint.
        interrupted: Carries a spot-interruption or termination taint; the node is about
            to go away and must not receive new work.
        gpus_capacity: GPUs the node has in total (``status.capacity``), count. Defaults to
            ``gpus_allocatable`` when left out.
        cordoned: ``spec.unschedulable`` is true: nothing new lands here.
        taints: The ``NoSchedule``/``NoExecute`` taints the pool does not tolerate; a gang
            whose own tolerations tolerate them all may still use the node.
        capacity_type: ``"spot"`` / ``"on-demand"`` when the pool fixes it
            (``spec.capacityType``); None: detected from the labels.
        path: ``(levels, domain path)`` computed once for a pool's levels (see
            :func:`~kubeforge.placement.with_paths`), so placement does not recompute it for
            every gang; ignored when the levels differ.
        resources: What the node offers pods besides GPUs, from ``status.allocatable``:
            ``cpu`` in millicores, ``memory`` in bytes, extended resources as counts
            (:func:`kubeforge.objects.quantity_value`). ``cpu`` / ``memory`` left out means
            unknown (never a reason to refuse the node); an extended resource left out means 0.

    Raises:
        ValueError: If a GPU count is negative or not an int, or ``name`` is empty.
    """

    name: str
    labels: Mapping[str, str] = field(hash=False)
    gpus_allocatable: int
    gpus_allocated: int
    ready: bool = True
    schedulable: bool = True
    interrupted: bool = False
    gpus_capacity: int | None = None
    cordoned: bool = False
    taints: tuple[Taint, ...] = ()
    capacity_type: str | None = None
    path: tuple | None = field(default=None, compare=False, repr=False)
    resources: Mapping[str, int] = field(default_factory=dict, hash=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("NodeInfo.name must not be empty")
        _check_count("NodeInfo", "gpus_allocatable", self.gpus_allocatable)
        _check_count("NodeInfo", "gpus_allocated", self.gpus_allocated)
        object.__setattr__(self, "labels", dict(self.labels))
        if self.gpus_capacity is None:
            object.__setattr__(self, "gpus_capacity", self.gpus_allocatable)
        _check_count("NodeInfo", "gpus_capacity", self.gpus_capacity)

    @property
    def gpus_free(self) -> int:
        """GPUs not yet requested by pods: ``allocatable - allocated``, never negative."""
        return max(0, self.gpus_allocatable - self.gpus_allocated)

    @property
    def usable(self) -> bool:
        """Whether new work may land here: ready, schedulable and not interrupted."""
        return self.ready and self.schedulable and not self.interrupted

    def usable_for(self, tolerations: Sequence[Mapping[str, Any]]) -> bool:
        """Whether a pod with ``tolerations`` (on top of the pool's) may land here: ready,
        not interrupted, not cordoned, and every taint that blocks the pool tolerated."""
        if not self.ready or self.interrupted:
            return False
        if self.schedulable:
            return True
        if self.cordoned or not self.taints:
            return False
        return all(tolerates(tolerations, t) for t in self.taints)


_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _requirement_holds(req: Mapping[str, Any], value: str | None) -> bool:
    op = req.get("operator")
    values = req.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):  # integer comparison, as kube-scheduler does
        try:
            a, b = int(value or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return a > b if op == "Gt" else a < b
    return False


@dataclass(frozen=True)
class NodeFilter:
    """The node constraints of a pod template that placement must honour, so that the node it
    picks is one kube-scheduler will accept: ``spec.nodeSelector`` and the required node
    affinity (``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``).

    Semantics are kube-scheduler's: every ``nodeSelector`` pair must match; then at least one
    term must match, a term matching when all its ``matchExpressions`` (on labels) and
    ``matchFields`` (on ``metadata.name``) hold; an empty term matches nothing. Operators In,
    NotIn, Exists, DoesNotExist, Gt, Lt.

    Attributes:
        node_selector: Label key -> value pairs.
        terms: The node selector terms (plain dicts); empty means no affinity constraint.
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)

    @classmethod
    def from_pod_spec(cls, spec: Mapping[str, Any]) -> "NodeFilter | None":
        """The filter of a PodSpec dict, or None when it constrains nothing."""
        sel = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
        req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
               .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = tuple(req.get("nodeSelectorTerms") or ())
        if not sel and not terms:
            return None
        return cls(sel, terms)

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether a node with this name and labels satisfies the filter."""
        if any(labels.get(k) != v for k, v in self.node_selector):
            return False
        if not self.terms:
            return True
        for term in self.terms:
            exprs = term.get("matchExpressions") or []
            fields = term.get("matchFields") or []
            if not exprs and not fields:
                continue
            if all(_requirement_holds(e, labels.get(e.get("key", ""))) for e in exprs) and all(
                _requirement_holds(f, name if f.get("key") == "metadata.name" else None) for f in fields
            ):
                return True
        return False

    def describe(self) -> str:
        """A short human description, for NoFit messages."""
        parts = []
        if self.node_selector:
            parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in self.node_selector))
        if self.terms:
            parts.append(f"required node affinity ({len(self.terms)} term{'s' if len(self.terms) != 1 else ''})")
        return " and ".join(parts)


@dataclass(frozen=True)
class GangRequest:
    """A gang of identical replicas that must all be placed at once.

    Attributes:
        replicas: Number of worker pods (ranks), >= 1.
        gpus_per_replica: GPUs each replica needs on a single node, >= 1. A replica never
            spans nodes; several replicas may share a node that has room.
        mode: ``"Required"`` (whole gang inside one domain of ``level`` or no placement),
            ``"Preferred"`` (narrowest fitting domain from ``level`` upward, else the whole
            pool) or ``"None"`` (anywhere in the pool).
        level: Topology level name. Mandatory for ``Required``; for ``Preferred`` the
            narrowest level to try (``None``: start at the pool's narrowest level);
            ignored for ``None``.
        avoid_nodes: Node names that must not be used (e.g. nodes where the job just
            failed).
        tolerations: The pods' own tolerations (core/v1 dicts, from the template); they may
            tolerate taints the pool does not.
        node_filter: The template's node selector and required node affinity, or None.
        needs: What one replica's pod requests besides the pool's GPUs (cpu millicores,
            memory bytes, other extended resources; :func:`kubeforge.objects.replica_requests`).
            A node that offers less of any can never run a replica and is not used.
        one_per_node: The template's required pod anti-affinity on ``kubernetes.io/hostname``
            selects the gang's own pods: at most one replica per node.
        spread_keys: Other topology keys of such anti-affinity terms: no two replicas on
            nodes that share a value of one of them (checked on the chosen nodes).
        whole_nodes: Every node used must be wholly free (nothing else holds GPUs there, before
            or after): a multi-node NVLink gang's nodes join its IMEX domain, and a node joins
            one IMEX domain only. See :func:`~kubeforge.placement.place_gang`.
        spare_nodes: With ``whole_nodes``: free nodes to leave in the chosen domain when some
            domain allows it (NVL72: 2 of 18 trays, so a failed tray is replaced inside the
            clique).

    Raises:
        ValueError: On a non-positive count, an unknown mode, or ``Required`` without a
            level.
    """

    replicas: int
    gpus_per_replica: int
    mode: Mode = "Required"
    level: str | None = None
    avoid_nodes: frozenset[str] = frozenset()
    tolerations: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    node_filter: NodeFilter | None = None
    needs: Mapping[str, int] = field(default_factory=dict, hash=False)
    one_per_node: bool = False
    spread_keys: tuple[str, ...] = ()
    whole_nodes: bool = False
    spare_nodes: int = 0

    def __post_init__(self) -> None:
        _check_count("GangRequest", "replicas", self.replicas, 1)
        _check_count("GangRequest", "spare_nodes", self.spare_nodes)
        _check_count("GangRequest", "gpus_per_replica", self.gpus_per_replica, 1)
        if self.mode not in MODES:
            allowed = ", ".join(MODES)
            raise ValueError(f"GangRequest.mode must be one of {allowed}, got {self.mode!r}")
        if self.mode == "Required" and not self.level:
            raise ValueError("GangRequest.level is required when mode is Required")
        object.__setattr__(self, "avoid_nodes", frozenset(self.avoid_nodes))

    @property
    def gpus(self) -> int:
        """Total GPUs the gang needs: ``replicas * gpus_per_replica``."""
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True)
class Placement:
    """A successful placement of a gang.

    Attributes:
        level: Level whose single domain holds the whole gang, or ``None`` when the gang
            was placed pool-wide (mode ``None``, or ``Preferred`` that fitted no domain).
        domain: That domain's label value, or ``None`` together with ``level``.
        nodes: One node name per replica in rank order: rank ``i`` runs on ``nodes[i]``.
            Ranks that share a narrow domain are neighbours; replicas on one node are
            consecutive.
        gpus_by_node: GPUs taken on each node used (``nodes.count(n) * gpus_per_replica``).
        reason: One human sentence explaining the choice.
    """

    level: str | None
    domain: str | None
    nodes: tuple[str, ...]
    gpus_by_node: Mapping[str, int] = field(hash=False)
    reason: str

    @property
    def replicas(self) -> int:
        """Number of replicas placed (``len(nodes)``)."""
        return len(self.nodes)

    @property
    def gpus(self) -> int:
        """Total GPUs taken."""
        return sum(self.gpus_by_node.values())


@dataclass(frozen=True)
class NoFit:
    """Why a gang cannot be placed now.

    Attributes:
        reason: One human sentence, naming the level and the shortfall.
        level: The level the gang had to fit in, or ``None`` for a pool-wide attempt.
        gpus_short: GPUs missing from the best candidate (the domain, or the pool, that
            could hold the most replicas), counted in whole replicas: a node's GPUs that
            cannot hold a full replica do not count. ``0`` when not meaningful.
        permanent: ``True`` when the gang can never fit this pool as it is, even with
            every node empty, ready and schedulable (a replica larger than any node, an
            unknown level, a gang larger than any domain); only a spec change or new nodes
            help. ``False`` means waiting for capacity may help.
    """

    reason: str
    level: str | None
    gpus_short: int
    permanent: bool = False


Result = Union[Placement, NoFit]
"""What :func:`place_gang` returns."""


@dataclass(frozen=True)
class PendingGang:
    """A gang waiting in the admission queue.

    Attributes:
        key: Unique key, e.g. ``"namespace/name"``; the last tie-break.
        request: What the gang needs.
        priority: Higher is admitted first.
        created: Creation time in seconds (any epoch); older is admitted first within a
            priority.
    """

    key: str
    request: GangRequest
    priority: int = 0
    created: float = 0.0


