"""Node affinity that pins one rank of a placed gang."""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

from ._model import Placement, TopologyLevel
from ._topology import find_level

def node_affinity(
    placement: Placement, rank: int, levels: Sequence[TopologyLevel],
    base: Mapping[str, Any] | None = None,
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

    ``base`` is the template's own ``nodeAffinity``: its preferred terms are kept, and the pin
    is added to each of its required terms (terms are ORed, the expressions inside one term
    ANDed, so the pin must go into every term to hold whichever term matches).

    Args:
        placement: A :class:`Placement` from :func:`place_gang`.
        rank: The replica's rank, ``0 <= rank < len(placement.nodes)``.
        levels: The pool's levels, to find the placement level's node label.
        base: The pod template's ``affinity.nodeAffinity``, or None.

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
    out = copy.deepcopy(dict(base or {}))
    required = out.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = []
    for base_term in required.get("nodeSelectorTerms") or [{}]:
        term: dict[str, Any] = dict(base_term)
        term["matchFields"] = list(term.get("matchFields") or []) + fields
        if expressions or term.get("matchExpressions"):
            term["matchExpressions"] = list(term.get("matchExpressions") or []) + expressions
        terms.append(term)
    out["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    return out
