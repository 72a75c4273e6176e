"""Whether a gang can be placed, kept up to date while nodes change, without placing it.

:func:`~kubeforge.placement.place_gang` answers with a placement; a caller that only needs to
know *whether* the gang fits after a few nodes changed (the victim search of
:mod:`kubeforge.admission._victims`, which asks it once per victim taken or dropped: issue 31)
can count instead. Which requests' answer is a count, and why (read off :mod:`._fit`,
:mod:`._gang` and :mod:`._whole`, replicas >= 1, every replica on one node):

- Before any rule, ``_fitting_nodes`` refuses the gang (no node, none matching the node filter
  or offering the replica's other resources, a replica larger than every node) from the nodes'
  names, labels, resources and allocatable GPUs, none of which a change of allocated GPUs
  touches; on the rest, :func:`~._gang.candidates` gives each usable node its replica slots.
- ``None`` mode, and ``Preferred`` without whole nodes: a domain that fits is a subset of the
  candidates and the pool-wide best fit :func:`~._gang.greedy` succeeds exactly when the
  candidates' slots add up to the replicas, so the gang fits iff the pool's slots do.
- ``Required`` without whole nodes: a known level's domain fits exactly when its candidates'
  slots add up to the replicas (:func:`~._fit.choose_domain`; the node choice inside it then
  always succeeds); an unknown level never fits.
- Whole-node gangs (``Required`` or ``Preferred``) at their level (the request's, else the
  narrowest): one domain whose slots (0 on a node not wholly free) hold the replicas; an
  unknown level never fits. A ``Preferred`` one may also be split over several domains
  (``_split``, not a count): exact only when the nodes carry at most one domain of the level,
  where no split exists.
- Not a count, so :attr:`GangRoom.exact` is False and the caller must place: a request with
  ``spread_keys`` (checked on the chosen nodes), a whole-node ``Preferred`` gang over several
  domains, levels :func:`~._topology.check_levels` refuses, nodes sharing a name.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ._fit import _fitting_nodes
from ._gang import candidates
from ._model import GangRequest, NodeInfo, NoFit, TopologyLevel
from ._topology import check_levels, find_level

_NEVER = object()
_POOL = object()


def _scope(request: GangRequest, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel]):
    """(what the count is over: ``_POOL``, a level's node label, ``_NEVER``, or None when the
    answer is not a count; the fitting nodes)."""
    if request.spread_keys or len({n.name for n in nodes}) != len(nodes):
        return None, ()
    try:
        check_levels(levels)
    except ValueError:
        return None, ()
    fitting = _fitting_nodes(request, nodes)
    if isinstance(fitting, NoFit):
        return _NEVER, ()
    if request.whole_nodes and request.mode != "None":
        index = find_level(levels, request.level) if request.level else (0 if levels else None)
        if index is None:
            return _NEVER, ()
        label = levels[index].node_label
        if request.mode == "Preferred" and len({n.labels.get(label) for n in fitting} - {None}) > 1:
            return None, ()
        return label, fitting
    if request.mode == "Required":
        index = find_level(levels, request.level) if request.level else None
        return (_NEVER, ()) if index is None else (levels[index].node_label, fitting)
    return _POOL, fitting


class GangRoom:
    """Whether :func:`~kubeforge.placement.place_gang` would place ``request`` on ``nodes`` (the
    pool's, in any order) with ``reserved`` GPUs promised per node, kept as nodes are replaced
    by others of the same name (another count of allocated GPUs): the replica slots of
    :func:`~kubeforge.placement._gang.candidates` per node, summed over the pool or per domain of
    the gang's level (the module docstring says which and why). O(nodes) once, then O(nodes
    changed) per question, where a placement is O(nodes).

    Attributes:
        exact: Whether the answers are place_gang's (False: the request is not one a count
            decides, module docstring; :attr:`fits` and :meth:`fits_with` are then meaningless).
    """

    def __init__(self, request: GangRequest, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel],
                 reserved: Mapping[str, int]):
        self._request, self._levels, self._reserved = request, tuple(levels), reserved
        self._over, fitting = _scope(request, nodes, levels)
        self.exact = self._over is not None
        self._slots: dict[str, int] = {}
        self._domain: dict[str, str | None] = {}
        self._sums: dict[str, int] = {}
        self._total = 0
        self._full = 0  # domains whose slots hold the gang
        cands = {c.name: c.slots for c in candidates(request, fitting, levels, reserved)}
        label = self._over if isinstance(self._over, str) else None
        for node in fitting:
            slots = self._slots[node.name] = cands.get(node.name, 0)
            self._total += slots
            if label is not None:
                domain = self._domain[node.name] = node.labels.get(label)
                if domain is not None:
                    self._sums[domain] = self._sums.get(domain, 0) + slots
        self._full = sum(1 for s in self._sums.values() if s >= request.replicas)

    @property
    def fits(self) -> bool:
        """Whether the gang is placed on the nodes as they are now."""
        if self._over is _POOL:
            return self._total >= self._request.replicas
        return self._over is not _NEVER and self._full > 0

    def _moves(self, nodes: Iterable[NodeInfo]) -> tuple[dict[str, int], dict[str | None, int]]:
        """The new slots of the fitting ones of ``nodes``, and the change per domain."""
        slots: dict[str, int] = {}
        by_domain: dict[str | None, int] = {}
        for node in nodes:
            old = self._slots.get(node.name)
            if old is None:
                continue  # not a fitting node: never a candidate
            got = candidates(self._request, [node], self._levels, self._reserved)
            new = slots[node.name] = got[0].slots if got else 0
            domain = self._domain.get(node.name)
            by_domain[domain] = by_domain.get(domain, 0) + new - old
        return slots, by_domain

    def _full_after(self, by_domain: Mapping[str | None, int]) -> int:
        r = self._request.replicas
        return self._full + sum((self._sums[d] + g >= r) - (self._sums[d] >= r)
                                for d, g in by_domain.items() if d is not None)

    def fits_with(self, nodes: Iterable[NodeInfo]) -> bool:
        """Whether the gang is placed once ``nodes`` (distinct names) replace the nodes of their
        names; nothing is changed. Nodes not among the pool's fitting ones count nothing."""
        _, by_domain = self._moves(nodes)
        if self._over is _POOL:
            return self._total + sum(by_domain.values()) >= self._request.replicas
        return self._over is not _NEVER and self._full_after(by_domain) > 0

    def update(self, nodes: Iterable[NodeInfo]) -> None:
        """Replace the nodes of ``nodes``' names (distinct) by them."""
        slots, by_domain = self._moves(nodes)
        self._full = self._full_after(by_domain) if isinstance(self._over, str) else self._full
        for domain, change in by_domain.items():
            self._total += change
            if domain is not None:
                self._sums[domain] += change
        self._slots.update(slots)
