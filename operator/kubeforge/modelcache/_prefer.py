"""Placement prefers nodes that hold the model, never requires them: a small scoring step in
front of :func:`kubeforge.placement.place_gang`. Pure.

The step tries the same placement on narrower node sets first, widest last:

1. the nodes that hold a verified copy (every pod of the group starts cached);
2. for a group of several pods, the domains (of the service's topology level, or the pool's
   narrowest level) that hold a copy on some node (the group shares the domain with a copy: the cold pods there still
   fetch once a node, and the domain becomes a cached one);
3. every node of the pool, exactly the call placement makes without a cache.

The first tier where the group fits wins; the last one is the unchanged placement, so a replica
that fits anywhere is placed (cold) rather than wait for a cache, and the reason a group does not
fit is always the one the whole pool gives: no pod is ever unschedulable because of the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from kubeforge.placement import GangRequest, NodeInfo, Placement, Result, TopologyLevel

Placer = Callable[[GangRequest, Sequence[NodeInfo], Sequence[TopologyLevel], Mapping[str, int]], Result]


@dataclass(frozen=True)
class Preferred:
    """A placement and how cached it is.

    Attributes:
        result: The :class:`~kubeforge.placement.Placement`, or the whole pool's NoFit.
        cached: Nodes of the placement holding a copy (empty for a NoFit).
        tier: 1 (every node cached), 2 (a domain with a copy), 3 (the whole pool), 0 (no model).
    """

    result: Result
    cached: frozenset[str] = frozenset()
    tier: int = 0

    @property
    def all_cached(self) -> bool:
        """Every node of the placement held the model when it was chosen."""
        return isinstance(self.result, Placement) and bool(self.result.nodes) and \
            set(self.result.nodes) <= self.cached


def _domain_level(request: GangRequest, levels: Sequence[TopologyLevel]) -> TopologyLevel | None:
    for level in levels:
        if level.name == request.level:
            return level
    return levels[0] if levels else None


def _tiers(request: GangRequest, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel],
           ready: frozenset[str]) -> list[tuple[int, Sequence[NodeInfo]]]:
    holding = [n for n in nodes if n.name in ready]
    if not holding:
        return []
    tiers: list[tuple[int, Sequence[NodeInfo]]] = [(1, holding)]
    level = _domain_level(request, levels)
    if level is not None and request.replicas > 1:  # a one-pod replica gains nothing from a domain
        domains = {n.labels.get(level.node_label) for n in holding} - {None}
        around = [n for n in nodes if n.labels.get(level.node_label) in domains]
        if len(around) > len(holding):
            tiers.append((2, around))
    return tiers


def place_preferring_cache(place: Placer, request: GangRequest, nodes: Sequence[NodeInfo],
                           levels: Sequence[TopologyLevel], reserved: Mapping[str, int],
                           ready: frozenset[str]) -> Preferred:
    """Place ``request`` with ``place`` (:func:`kubeforge.placement.place_gang`), preferring the
    nodes in ``ready`` (see the module).

    Args:
        place: The placer.
        request: The group.
        nodes: The pool's nodes.
        levels: The pool's levels, narrowest first.
        reserved: GPUs per node already promised.
        ready: Nodes holding a verified copy of the service's model (empty: no preference).

    Returns:
        A :class:`Preferred`: the first tier's placement, or the whole pool's result.
    """
    for tier, subset in _tiers(request, nodes, levels, ready):
        result = place(request, subset, levels, reserved)
        if isinstance(result, Placement):
            why = ("weights cached on every node; " if tier == 1 else "weights cached in the domain; ")
            result = Placement(result.level, result.domain, result.nodes, result.gpus_by_node, why + result.reason)
            return Preferred(result, ready & frozenset(result.nodes), tier)
    result = place(request, nodes, levels, reserved)
    cached = ready & frozenset(result.nodes) if isinstance(result, Placement) else frozenset()
    return Preferred(result, cached, 3 if ready else 0)
