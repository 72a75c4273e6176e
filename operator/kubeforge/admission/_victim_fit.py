"""The victim search's question, pure: does the preemptor fit once the victims taken so far give
their GPUs back, and where. :func:`~kubeforge.admission._victims.choose_victims` asks it once per
victim taken and once per victim it tries to drop, about a hundred times a preemption at 256
nodes (issue 31, e2e/README-scale-bench.md, the rounds that reach victims).

Two ways to answer, the same answers (``tests/test_victims_grouped.py``):

- :class:`Counting` keeps the gang's replica slots per node and domain
  (:class:`~kubeforge.placement.GangRoom`) and places the gang once, at the end: O(nodes) once,
  O(a victim's nodes) per question. Used wherever the room's answer is place_gang's own.
- :class:`Placing` places the gang for each question (:func:`fits`, skipped when the
  :class:`SlotBound` rules it out): O(nodes) per question. The requests a count does not decide
  (``spread_keys``, whole-node ``Preferred`` gangs over several domains).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from kubeforge.placement import GangRequest, GangRoom, NodeInfo, Placement, TopologyLevel, place_gang


def rebuilt(node: NodeInfo, freed: int, made: dict) -> NodeInfo:
    """``node`` with ``freed`` of its allocated GPUs given back (itself when 0); ``made``: the
    nodes rebuilt so far by (name, GPUs freed), reused within one search."""
    if not freed:
        return node
    key = (node.name, freed)
    if (got := made.get(key)) is None:
        got = made[key] = replace(node, gpus_allocated=max(0, node.gpus_allocated - freed))
    return got


def fits(request: GangRequest, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel],
         taken: Mapping[str, int], freed: Mapping[str, int], made: dict) -> Placement | None:
    """The gang's placement on ``nodes`` with ``freed`` GPUs given back per node, or None."""
    result = place_gang(request, [rebuilt(n, freed.get(n.name, 0), made) for n in nodes], levels, taken)
    return result if isinstance(result, Placement) else None


class Placing:
    """The search's question answered by placing the gang each time (the way before
    :class:`Counting`), skipping the placements the :class:`SlotBound` rules out. Call
    :meth:`give` before updating ``freed``."""

    def __init__(self, request: GangRequest, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel],
                 taken: Mapping[str, int], made: dict):
        self._args = request, nodes, levels, taken
        self._made = made
        self._replicas = request.replicas
        self._bound = SlotBound(nodes, request.gpus_per_replica, taken)
        self._placement: Placement | None = None

    def give(self, freed: Mapping[str, int], change: Mapping[str, int]) -> None:
        """``change`` (GPUs by node, negative: taken back) is about to be added to ``freed``."""
        self._bound.change(freed, change)

    def fits(self, freed: Mapping[str, int]) -> bool:
        """Whether the gang fits with ``freed`` (after :meth:`give`)."""
        if self._bound.slots < self._replicas:
            return False  # cannot fit yet: no placement to try
        return self._try(freed)

    def fits_without(self, freed: Mapping[str, int], back: Mapping[str, int]) -> bool:
        """Whether the gang fits with ``freed`` plus ``back`` (GPUs by node, negative)."""
        if self._bound.slots + self._bound.delta(freed, back) < self._replicas:
            return False  # needed: without it the gang cannot fit
        return self._try({n: g + back.get(n, 0) for n, g in freed.items()})

    def _try(self, freed: Mapping[str, int]) -> bool:
        p = fits(*self._args, freed, self._made)
        if p is not None:
            self._placement = p
        return p is not None

    def placement(self, freed: Mapping[str, int]) -> Placement | None:
        """The placement of the last question answered yes (``freed`` is that question's)."""
        return self._placement


class Counting:
    """The search's question answered from the gang's replica slots
    (:class:`~kubeforge.placement.GangRoom`, exact only where :attr:`GangRoom.exact`), the
    placement made once for the final ``freed``. Call :meth:`give` before updating ``freed``."""

    def __init__(self, room: GangRoom, request: GangRequest, nodes: Sequence[NodeInfo],
                 levels: Sequence[TopologyLevel], taken: Mapping[str, int], made: dict):
        self._room = room
        self._args = request, nodes, levels, taken
        self._made = made
        self._nodes = {n.name: n for n in nodes}

    def _nodes_with(self, freed: Mapping[str, int], change: Mapping[str, int]) -> list[NodeInfo]:
        return [rebuilt(self._nodes[n], freed.get(n, 0) + g, self._made) for n, g in change.items()
                if n in self._nodes]

    def give(self, freed: Mapping[str, int], change: Mapping[str, int]) -> None:
        """``change`` (GPUs by node, negative: taken back) is about to be added to ``freed``."""
        self._room.update(self._nodes_with(freed, change))

    def fits(self, freed: Mapping[str, int]) -> bool:
        """Whether the gang fits with ``freed`` (after :meth:`give`)."""
        return self._room.fits

    def fits_without(self, freed: Mapping[str, int], back: Mapping[str, int]) -> bool:
        """Whether the gang fits with ``freed`` plus ``back`` (GPUs by node, negative)."""
        return self._room.fits_with(self._nodes_with(freed, back))

    def placement(self, freed: Mapping[str, int]) -> Placement | None:
        """The gang's placement with ``freed``: the one placement of the search."""
        return fits(*self._args, freed, self._made)


def search_for(request: GangRequest, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel],
               taken: Mapping[str, int], made: dict) -> Counting | Placing:
    """How one search asks its question: :class:`Counting` where a count is exact, else
    :class:`Placing`."""
    room = GangRoom(request, nodes, levels, taken)
    if room.exact:
        return Counting(room, request, nodes, levels, taken, made)
    return Placing(request, nodes, levels, taken, made)


class SlotBound:
    """An upper bound of how many replicas of ``gpus`` GPUs ``nodes`` could hold once ``freed``
    GPUs are given back: each node's free GPUs less those ``taken`` this round, as :func:`fits`
    and the placement's candidates count them, divided by ``gpus``, summed; other resources,
    taints and topology ignored (each only lowers what a placement finds; a replica needs its
    GPUs on one node). A gang of more replicas than :attr:`slots` cannot fit, so
    :class:`Placing` tries no placement for it (issue 31). O(nodes) once, then O(a victim's
    nodes) per change.

    Attributes:
        slots: The bound for the ``freed`` of the last :meth:`change`, replicas.
    """

    def __init__(self, nodes: Sequence[NodeInfo], gpus: int, taken: Mapping[str, int]):
        self._gpus = gpus
        self._taken = taken
        self._nodes = {n.name: n for n in nodes}
        self.slots = sum(self._at(n.name, 0) for n in self._nodes.values())

    def _at(self, name: str, freed: int) -> int:
        n = self._nodes[name]
        free = n.gpus_allocatable - max(0, n.gpus_allocated - freed) - max(0, self._taken.get(name, 0))
        return max(0, free) // self._gpus

    def delta(self, freed: Mapping[str, int], change: Mapping[str, int]) -> int:
        """How :attr:`slots` moves when ``change`` (GPUs by node, negative: taken back) is added
        to ``freed``."""
        return sum(self._at(n, freed.get(n, 0) + g) - self._at(n, freed.get(n, 0))
                   for n, g in change.items() if n in self._nodes)

    def change(self, freed: Mapping[str, int], change: Mapping[str, int]) -> None:
        """Move :attr:`slots` for ``change`` added to ``freed`` (call before updating ``freed``)."""
        self.slots += self.delta(freed, change)
