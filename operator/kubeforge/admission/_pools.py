"""A GPUPool as placement sees it: its nodes (with the GPUs the ledger says are held) and its
topology levels. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Mapping

from kubeforge.admission._snapshot import is_dra_pool, pool_capacity_type, pool_resource
from kubeforge.api import LevelSource
from kubeforge.objects import DEVICE_CLASS_NOT_FOUND, Node, PoolRecord
from kubeforge.placement import GangRequest, NodeInfo, Placement, TopologyLevel, detect_levels, node_info, place_gang, with_paths
from kubeforge.selectors import selector_matches


@dataclass(frozen=True)
class PoolView:
    """One GPUPool, ready for placement and for its status.

    Attributes:
        name: The pool's name.
        record: The pool object.
        resource: Its GPU resource name.
        nodes: Its nodes as :class:`~kubeforge.placement.NodeInfo`, sorted by name, with the
            ledger's allocated GPUs.
        levels: Topology levels, narrowest first.
        levels_source: ``"Spec"`` or ``"Detected"``.
        tolerations: The pool's tolerations (core/v1 dicts), added to every pod placed in it.
        price: ``spec.pricePerGPUHour`` or None.
        basis: What the view was built from: ``(the pool's name, its spec, the cluster's node
            records)``, so that a later round given an equal spec and the very same node
            objects (in any order) can reuse it (:func:`pool_view`'s ``reuse``).
        labels_key: A hash of the nodes' names and labels (the topology a placement reads),
            computed once per build: :class:`~kubeforge.admission.AdmissionMemo` compares it
            between rounds.
        unavailable: ``(reason, message)`` when the pool can place nothing whatever its nodes
            offer (a DRA pool whose DeviceClass does not exist), else None: admission puts
            nothing there and its ``Ready`` condition says why.
    """

    name: str
    record: PoolRecord
    resource: str
    nodes: tuple[NodeInfo, ...]
    levels: tuple[TopologyLevel, ...]
    levels_source: str
    tolerations: tuple[Mapping[str, Any], ...] = field(default=())
    price: float | None = None
    basis: tuple = field(default=(), compare=False, repr=False)
    labels_key: int = field(default=0, compare=False, repr=False)
    unavailable: tuple[str, str] | None = None

    @cached_property
    def by_name(self) -> Mapping[str, NodeInfo]:
        """The pool's nodes by name, built on first use (once per view, not per reader: a
        job's reconcile reads its own few nodes from it)."""
        return {n.name: n for n in self.nodes}


def pool_members(pool: PoolRecord, nodes: Mapping[str, Node]) -> list[Node]:
    """The nodes ``pool`` selects, by name. An empty ``nodeSelector`` (no ``matchLabels`` and no
    ``matchExpressions``) selects every node that has the pool's GPU resource (as the API
    documents: a count above 0; for a DRA pool, devices of its driver), so a device-plugin pool
    never counts DRA nodes (which may list the resource at 0), nor a DRA pool device-plugin ones;
    a pool whose spec does not parse selects nothing."""
    if pool.spec is None:
        return []
    selector = pool.spec.node_selector.to_dict()
    empty = not selector.get("matchLabels") and not selector.get("matchExpressions")
    resource = pool_resource(pool)
    out = []
    for name in sorted(nodes):
        node = nodes[name]
        if empty:
            if node.capacity.get(resource, 0) > 0 or node.allocatable.get(resource, 0) > 0:
                out.append(node)
        elif selector_matches(selector, node.labels):
            out.append(node)
    return out


def missing_gpus(view: PoolView) -> str | None:
    """Why none of the pool's nodes can hold a GPU at all, naming the resource, or None: the
    nodes its selector matches offer none of ``view.resource`` (a typo in ``gpuResourceName``,
    an AMD pool with no AMD node, the device plugin not running). Read by the pool's ``Ready``
    condition and by every wait message, so a gang says what is missing rather than "the
    largest node's 0 allocatable GPUs"."""
    if not view.nodes or any(n.gpus_capacity for n in view.nodes):
        return None
    if is_dra_pool(view.record):
        driver = view.record.spec.dra.driver  # type: ignore[union-attr]
        return (f"nodeSelector of pool {view.name} matches {len(view.nodes)} nodes but no ResourceSlice of DRA driver "
                f"{driver} (spec.dra.driver) lists GPUs on them: is the driver's kubelet plugin running there?")
    others = sorted({k for n in view.nodes for k in n.resources if "/" in k})
    return (f"nodeSelector of pool {view.name} matches {len(view.nodes)} nodes but none of them has {view.resource} "
            f"(gpuResourceName)" + (f"; they offer {', '.join(others[:5])}" if others else "; they offer no extended resource"))


def pool_unavailable(pool: PoolRecord, device_classes: frozenset[str] | None) -> tuple[str, str] | None:
    """``(reason, message)`` when ``pool`` can place nothing whatever its nodes offer, else None:
    a DRA pool whose ``spec.dra.deviceClassName`` is not among ``device_classes`` (None: not
    known, nothing is refused). Every ResourceClaim kubeforge would make names that class, and
    the API server refuses a pod whose claim's class does not exist, so admitting there would
    hold GPUs for pods that can never start (issue 32.3)."""
    if device_classes is None or not is_dra_pool(pool):
        return None
    name = pool.spec.dra.device_class_name  # type: ignore[union-attr]
    if name in device_classes:
        return None
    known = ", ".join(sorted(device_classes)[:5]) or "none"
    return DEVICE_CLASS_NOT_FOUND, (f"DeviceClass {name} (spec.dra.deviceClassName) does not exist: install the DRA "
                                    f"driver that provides it, or name one that exists ({known})")


def pool_view(pool: PoolRecord, nodes: Mapping[str, Node], allocated: Mapping[str, int],
              reuse: PoolView | None = None, device_classes: frozenset[str] | None = None) -> PoolView:
    """Build the :class:`PoolView` of ``pool`` from the cluster's nodes and the ledger's
    GPUs held per node (``allocated``); ``device_classes``: the DeviceClasses that exist
    (:attr:`Snapshot.device_classes`), for :attr:`PoolView.unavailable`.

    ``reuse``: the same pool's view from an earlier round. When it was built from an equal
    pool spec and the very same node records (:attr:`PoolView.basis`; the cache replaces a
    node's record on every change it sees), only the GPUs held per node (and the pool's
    status) can differ: its members, levels and domain paths are kept, and only the nodes
    whose count changed are copied. The answer is the same as a fresh build's; at 1,024 nodes
    a fresh build was a sixth of the operator's CPU in an admission burst (one per pool and
    round).
    """
    if reuse is not None and _same_basis(reuse.basis, pool, nodes):
        infos = tuple(n if n.gpus_allocated == (held := max(0, int(allocated.get(n.name, 0))))
                      else replace(n, gpus_allocated=held) for n in reuse.nodes)
        return replace(reuse, record=pool, nodes=infos, unavailable=pool_unavailable(pool, device_classes))
    tolerations = tuple(t.to_dict() for t in pool.spec.tolerations) if pool.spec else ()
    capacity = pool_capacity_type(pool)
    resource = pool_resource(pool)
    infos = tuple(node_info(n, resource, allocated.get(n.name, 0), tolerations, capacity)  # type: ignore[arg-type]
                  for n in pool_members(pool, nodes))
    if pool.spec is not None and pool.spec.topology_levels:
        levels = tuple(TopologyLevel(lv.name, lv.node_label) for lv in pool.spec.topology_levels)
        source = LevelSource.SPEC.value
    else:
        levels = tuple(detect_levels(infos))
        source = LevelSource.DETECTED.value
    infos = tuple(with_paths(infos, levels))
    price = pool.spec.price_per_gpu_hour if pool.spec else None
    labels_key = hash(tuple((n.name, frozenset(n.labels.items())) for n in infos))
    basis = (pool.name, pool.spec, tuple(nodes.values()))
    return PoolView(pool.name, pool, resource, infos, levels, source, tolerations, price, basis, labels_key,
                    pool_unavailable(pool, device_classes))


def _same_basis(basis: tuple, pool: PoolRecord, nodes: Mapping[str, Node]) -> bool:
    """Whether a :attr:`PoolView.basis` names ``pool`` with an equal spec and ``nodes`` (by
    name) are the very same node objects it was built from, in any order: the operator's
    index store moves a node to the end of its order on every event, a heartbeat included."""
    if len(basis) != 3 or basis[0] != pool.name or basis[1] != pool.spec or len(basis[2]) != len(nodes):
        return False
    get = nodes.get
    return all(get(n.name) is n for n in basis[2])


def placeable(view: PoolView, held: Mapping[str, int], gpus_per_replica: int, current: int, unplaced: int = 0) -> int:
    """Replicas of ``gpus_per_replica`` GPUs the pool can hold in total now: ``current`` plus
    whole replicas that fit in the free GPUs of its usable nodes, less ``unplaced`` (replicas
    asked for and not bound yet: their GPUs do not show as held, yet they will take them).

    Args:
        view: The pool.
        held: GPUs held per node (the ledger after the last admission round).
        gpus_per_replica: GPUs one replica needs (>= 1).
        current: Replicas the service has now.
        unplaced: Replicas asked for and not yet given a node.
    """
    extra = sum(max(0, n.gpus_allocatable - held.get(n.name, 0)) // gpus_per_replica for n in view.nodes if n.usable)
    return current + max(0, extra - unplaced)


def groups_that_fit(view: PoolView, held: Mapping[str, int], request: GangRequest, limit: int) -> tuple[int, str | None]:
    """How many more whole replica groups of ``request`` the pool can place now (at most
    ``limit``), placing them one after another on what ``held`` leaves free, and, when fewer than
    ``limit`` fit, placement's reason why the next one does not (which domain lacks how much).

    Args:
        view: The pool.
        held: GPUs held per node (the ledger after the last admission round).
        request: One group (:func:`kubeforge.admission.group_request`).
        limit: The most groups wanted (>= 0).
    """
    nodes = [replace(n, gpus_allocated=held.get(n.name, n.gpus_allocated)) for n in view.nodes]
    taken: dict[str, int] = {}
    for n in range(limit):
        result = place_gang(request, nodes, view.levels, taken)
        if not isinstance(result, Placement):
            return n, result.reason
        for node, gpus in result.gpus_by_node.items():
            taken[node] = taken.get(node, 0) + gpus
    return limit, None
