"""A pool's candidates and domain totals kept from one gang to the next of an admission round, so
that placing a gang does not look at every node of the pool.

:func:`~kubeforge.placement.place_gang` rebuilds, for every gang, every node's candidate (free
GPUs less what is promised, replica slots) and every domain's totals: O(nodes) per gang, most of
a cold round's CPU on a large fleet. Within a round the nodes, their labels and the levels do not
change; only what is promised does, a few nodes per admitted gang. :class:`PoolIndex` keeps, per
kind of request (everything :func:`~kubeforge.placement._gang.candidates` reads but the promised
GPUs), the candidates in the nodes' order and each domain's slots and free GPUs at every level,
and refreshes only the nodes it is told changed. It then decides with the very same functions
(:func:`~kubeforge.placement._fit.place_in_mode`, :func:`~kubeforge.placement._fit.choose_domain`),
so its answer is :func:`place_gang`'s, tie-breaking included: same candidates, same totals, same
members of a domain in the same order.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Sequence

from ._fit import Best, _fitting_nodes, choose_domain, place_gang, place_in_mode, spread_checked
from ._gang import Cand, candidates
from ._model import GangRequest, NodeInfo, NoFit, Placement, Result, TopologyLevel
from ._topology import check_levels


class _Kind:
    """The candidates of one kind of request and their totals per domain of every level."""

    __slots__ = ("request", "fitting", "cands", "pos", "slots", "free", "members", "synced")

    def __init__(self, request: GangRequest, fitting: Sequence[NodeInfo]) -> None:
        self.request = request  # the first request of the kind: its candidates are every one's
        self.fitting = fitting
        self.cands: list[Cand] = []
        self.pos: dict[str, int] = {}
        self.slots: list[dict[str, int]] = []
        self.free: list[dict[str, int]] = []
        self.members: list[dict[str, list[int]]] = []
        self.synced = 0

    def build(self, levels: Sequence[TopologyLevel], reserved: Mapping[str, int], synced: int) -> None:
        """Candidates and totals from scratch (as :func:`~kubeforge.placement._fit.domain_totals`
        sums them: domains in the order of their first candidate)."""
        self.cands = candidates(self.request, self.fitting, levels, reserved)
        self.pos = {c.name: i for i, c in enumerate(self.cands)}
        self.slots, self.free, self.members = [], [], []
        for level in levels:
            slots: dict[str, int] = {}
            free: dict[str, int] = {}
            members: dict[str, list[int]] = {}
            label = level.node_label
            for i, cand in enumerate(self.cands):
                value = cand.node.labels.get(label)
                if value is not None:
                    members.setdefault(value, []).append(i)
                    slots[value] = slots.get(value, 0) + cand.slots
                    free[value] = free.get(value, 0) + cand.free
            self.slots.append(slots)
            self.free.append(free)
            self.members.append(members)
        self.synced = synced

    def sync(self, log: Sequence[str], levels: Sequence[TopologyLevel], reserved: Mapping[str, int],
             fresh: Mapping[str, NodeInfo]) -> None:
        """Catch up with the nodes whose promised GPUs changed since the last call (``log`` from
        the position reached then): each one's candidate again (from its record in ``fresh``
        when a later round replaced it, :meth:`PoolIndex.rebase`) and its domains' totals moved
        by the difference; from scratch when more changed than a quarter of the candidates."""
        if self.synced == len(log):
            return
        changed = dict.fromkeys(log[self.synced:])
        if len(changed) * 4 > len(self.cands):
            self.build(levels, reserved, len(log))
            return
        self.synced = len(log)
        for name in changed:
            i = self.pos.get(name)
            if i is None:
                continue  # not a candidate of this kind (another pool's, avoided, unusable)
            old = self.cands[i]
            new = candidates(self.request, (fresh.get(name, old.node),), levels, reserved)[0]
            self.cands[i] = new
            for k, level in enumerate(levels):
                value = old.node.labels.get(level.node_label)
                if value is not None:
                    self.slots[k][value] += new.slots - old.slots
                    self.free[k][value] += new.free - old.free

    def domains_at(self, levels: Sequence[TopologyLevel], i: int, replicas: int,
                   gpus: int) -> tuple[Best | None, int, Mapping[str, int]]:
        """:func:`~kubeforge.placement._fit.choose_domain` at ``levels[i]`` from the kept totals."""
        members, cands = self.members[i], self.cands
        return choose_domain(self.slots[i], self.free[i], lambda name: [cands[j] for j in members[name]],
                             levels[:i], replicas, gpus)


class PoolIndex:
    """:func:`~kubeforge.placement.place_gang` over one pool for the gangs of one admission
    round, without its O(nodes) work per gang.

    Args:
        nodes: The pool's nodes (as for :func:`place_gang`); they must not change while the
            index is used.
        levels: The pool's levels, narrowest first.
        reserved: GPUs per node promised so far, the caller's own mapping, read when a gang is
            placed. The caller changes it only together with :meth:`changed`.

    ``index.place(request)`` returns what ``place_gang(request, nodes, levels, reserved)`` would,
    tie-breaking, reasons and errors included (levels that repeat a name or a label: the
    :class:`ValueError` of :func:`place_gang`, which then decides every gang).
    """

    def __init__(self, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel],
                 reserved: Mapping[str, int]) -> None:
        self.nodes = nodes
        self.levels = tuple(levels)
        self.reserved = reserved
        self._log: list[str] = []  # node names whose promised GPUs changed, in order
        self._kinds: dict[GangRequest, _Kind | None] = {}  # None: place_gang decides that kind
        self._used: set[GangRequest] = set()  # kinds placed since the last rebase
        self._fresh: dict[str, NodeInfo] = {}  # nodes replaced by the last rebase
        self._by_name: dict[str, NodeInfo] | None = None
        try:
            check_levels(self.levels)
            self._valid = True
        except ValueError:
            self._valid = False

    def changed(self, names: Iterable[str]) -> None:
        """Say that ``reserved`` changed on these nodes (any node name; others are ignored)."""
        self._log.extend(names)

    def place(self, request: GangRequest) -> Result:
        """Place ``request`` as :func:`place_gang` would against ``reserved`` now.

        Returns:
            A :class:`~kubeforge.placement.Placement` or a :class:`~kubeforge.placement.NoFit`.

        Raises:
            ValueError: If the levels repeat a name or a node label.
        """
        kind = self._kind(request) if self._valid else None
        if kind is None:
            return place_gang(request, self.nodes, self.levels, self.reserved)
        kind.sync(self._log, self.levels, self.reserved, self._fresh)
        levels, replicas, g = self.levels, request.replicas, request.gpus_per_replica
        result = place_in_mode(request, kind.fitting, kind.cands, levels,
                               lambda i: kind.domains_at(levels, i, replicas, g))
        if request.spread_keys and isinstance(result, Placement):
            if self._by_name is None:
                self._by_name = {n.name: n for n in self.nodes}
            return spread_checked(request, result, self._by_name)
        return result

    def _kind(self, request: GangRequest) -> _Kind | None:
        """The kept candidates of the request's kind, built on its first gang; None for a kind
        no node can hold a replica of (:func:`place_gang` says why)."""
        key = dataclasses.replace(request, replicas=1, mode="None", level=None, spread_keys=(), spare_nodes=0)
        self._used.add(key)
        if key in self._kinds:
            return self._kinds[key]
        fitting = _fitting_nodes(request, self.nodes)
        kind = None
        if not isinstance(fitting, NoFit):
            kind = _Kind(request, fitting)
            kind.build(self.levels, self.reserved, len(self._log))
        self._kinds[key] = kind
        return kind

    def rebase(self, nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel], reserved: Mapping[str, int]) -> bool:
        """Carry the index into a later admission round: ``nodes`` (that round's pool view),
        ``levels`` and ``reserved`` (that round's promises) replace the ones it was built for.

        The kinds placed since the last rebase are kept (the others dropped, so the index does
        not grow with every request shape ever seen) and refresh, on their next gang, only the
        nodes that differ: a node record that is not the very same object, and every node
        promised GPUs in the old round or the new one. That is a few nodes per admitted gang,
        not the pool: at 5,000 nodes, building every kind's candidates was a fifth of a live
        round (e2e/README-scale-bench.md, "Live at 5,000 nodes").

        Returns:
            False (nothing changed) when the index cannot be carried and a new one must be built:
            other levels, other nodes (names, in order), a node changed in more than the GPUs
            pods hold (labels, readiness, taints, resources: the candidates' filters), or more
            than a quarter of the records replaced (every kind would be built again anyway).
        """
        if tuple(levels) != self.levels or len(nodes) != len(self.nodes):
            return False
        fresh = {}
        for old, new in zip(self.nodes, nodes):
            if old is not new:
                if not _same_but_held(old, new) or len(fresh) * 4 >= len(nodes):
                    return False
                fresh[new.name] = new
        self._kinds = {key: kind for key, kind in self._kinds.items() if key in self._used}
        for kind in self._kinds.values():
            if kind is not None:
                kind.fitting = nodes if kind.fitting is self.nodes else [fresh.get(n.name, n) for n in kind.fitting]
                kind.synced = 0
        self._log = [*fresh, *self.reserved, *reserved]
        self.nodes, self.reserved, self._fresh = nodes, reserved, fresh
        self._used, self._by_name = set(), None
        return True


def _same_but_held(old: NodeInfo, new: NodeInfo) -> bool:
    """Whether two records of a node differ at most in ``gpus_allocated`` (and so in nothing a
    kind's node filter or candidate path reads)."""
    return (old.name == new.name and old.path == new.path and old.resources == new.resources
            and dataclasses.replace(old, gpus_allocated=new.gpus_allocated) == new)
