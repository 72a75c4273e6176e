"""Node affinity that pins one rank of a placed gang."""

from __future__ import annotations

from typing import Any, Sequence

from ._model import Placement, TopologyLevel
from ._topology import find_level



def node_affinity(
    placement: Placement, rank: int, levels: Sequence[TopologyLevel]
) -> dict[str, Any]:
    """The ``affinity.nodeAffinity`` value for the pod of one rank.

    The result goes under ``spec.affinity.nodeAffinity`` of the Pod, e.g. for a placement
    in nvlink domain ``nvl-a`` and rank 0 on ``node-1``::

        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}],
             "matchExpressions": [
                {"key": "nvidia.com/gpu.clique", "operator": "In", "values": ["nvl-a"]}]}]}}

    The node is pinned by ``matchFields`` on ``metadata.name`` rather than by the
    ``kubernetes.io/hostname`` label, which some clouds set to something other than the
    node name. The domain expression is present only when the placement has a level and
    a domain; both parts of the one term must hold (they are ANDed).

    Args:
        placement: A :class:`Placement` from :func:`place_gang` or :func:`admit`.
        rank: The replica's rank, ``0 <= rank < len(placement.nodes)``.
        levels: The pool's levels, to find the placement level's node label.

    Returns:
        A fresh dict with camelCase keys, as in a Pod spec.

    Raises:
        IndexError: If ``rank`` is out of range.
        ValueError: If the placement's level is not among ``levels``.
    """
    if not 0 <= rank < len(placement.nodes):
        raise IndexError(f"rank {rank} out of range for {len(placement.nodes)} replicas")
    fields = [{"key": "metadata.name", "operator": "In", "values": [placement.nodes[rank]]}]
    expressions: list[dict[str, Any]] = []
    if placement.level is not None and placement.domain is not None:
        index = find_level(levels, placement.level)
        if index is None:
            names = ", ".join(lvl.name for lvl in levels) or "none"
            raise ValueError(
                f"placement level {placement.level!r} is not among the levels: {names}"
            )
        expressions.append(
            {"key": levels[index].node_label, "operator": "In", "values": [placement.domain]}
        )
    term: dict[str, Any] = {"matchFields": fields}
    if expressions:
        term["matchExpressions"] = expressions
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
