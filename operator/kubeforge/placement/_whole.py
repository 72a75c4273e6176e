"""Multi-node NVLink gangs: whole free nodes of one clique (NVL72 trays), spares left where the
gang allows, and a balanced split over the fewest cliques for gangs no clique can hold.

Why whole nodes: a node joins one IMEX domain (ComputeDomain) only, so a node shared with another
gang's pods could not serve both. Why spares: an NVL72 rack has 18 compute trays; a gang of at
most 16 leaves 2 free when some clique allows it, so that a failed tray is replaced inside the
clique and the gang keeps its ComputeDomain (operators of GB200 NVL72 racks run 16 + 2 hot
spares). Why a balanced split: a 32-tray gang on two racks as 16 + 16 leaves both racks their
spares; 18 + 14 leaves one rack none.
"""

from __future__ import annotations

import math
from typing import Sequence

from ._gang import Cand, greedy, level_nofit, placement, plural
from ._model import GangRequest, NodeInfo, NoFit, Result, TopologyLevel
from ._topology import find_level, group_by_domain


def _groups(cands: Sequence[Cand], level: TopologyLevel) -> dict[str, list[Cand]]:
    out: dict[str, list[Cand]] = {}
    for c in cands:
        value = c.node.labels.get(level.node_label)
        if value is not None and c.slots > 0:
            out.setdefault(value, []).append(c)
    return out


def _one_domain(request: GangRequest, groups: dict[str, list[Cand]]) -> tuple[str, dict[str, int], int] | None:
    """The best single domain: one that leaves ``spare_nodes`` wholly free nodes if any does, then
    the fewest free nodes left (best fit), fewest nodes used, name."""
    best = None
    for name, cs in groups.items():
        if sum(c.slots for c in cs) < request.replicas:
            continue
        choice = greedy(cs, request.replicas, request.gpus_per_replica)
        assert choice is not None
        left = len(cs) - len(choice)
        key = (left < request.spare_nodes, left, len(choice), name)
        if best is None or key < best[0]:
            best = (key, name, choice, left)
    return None if best is None else (best[1], best[2], best[3])


def _split(request: GangRequest, groups: dict[str, list[Cand]]) -> tuple[list[str], dict[str, int]] | None:
    """The fewest domains that hold the gang with nodes spread evenly over them (each gets
    ceil or floor of nodes / domains), leaving ``spare_nodes`` in each when possible."""
    per = max((c.slots for cs in groups.values() for c in cs), default=0)
    if per <= 0:
        return None
    need = math.ceil(request.replicas / per)
    full = {d: [c for c in cs if c.slots >= per] for d, cs in groups.items()}
    for k in range(2, len(full) + 1):
        q = math.ceil(need / k)
        for spares in (request.spare_nodes, 0):
            ok = sorted((len(cs) - q < spares, len(cs) - q, d) for d, cs in full.items() if len(cs) - q >= spares)
            if len(ok) < k:
                continue
            chosen = sorted(d for _, _, d in ok[:k])
            choice: dict[str, int] = {}
            left = request.replicas
            counts = [need // k + (1 if i < need % k else 0) for i in range(k)]
            for d, n in zip(chosen, counts):
                for c in sorted(full[d], key=lambda c: (c.path, c.name))[:n]:
                    take = min(per, left)
                    if take:
                        choice[c.name] = take
                        left -= take
            if left == 0:
                return chosen, choice
    return None


def place_whole_nodes(request: GangRequest, nodes: Sequence[NodeInfo], cands: Sequence[Cand],
                      levels: Sequence[TopologyLevel]) -> Result:
    """Place a ``whole_nodes`` gang (see the module docstring); ``cands`` are the usable nodes
    with their whole-replica slots, 0 on nodes that are not wholly free.

    * One domain of the request's level (for ``Preferred`` without a level: the narrowest) that
      holds the gang: the one leaving ``spare_nodes`` free nodes if any does, then best fit.
    * ``Required``: else a :class:`NoFit` (permanent when no domain could hold it even empty).
    * ``Preferred``: else the fewest domains of that level, nodes split evenly, inside one domain
      of the narrowest wider level that can hold it, else anywhere in the pool.
    """
    index = find_level(levels, request.level) if request.level else (0 if levels else None)
    if index is None:
        known = ", ".join(lv.name for lv in levels) or "none"
        return NoFit(f"unknown topology level {request.level!r}; this pool's levels are: {known}",
                     request.level, request.gpus, permanent=request.mode == "Required")
    level = levels[index]
    groups = _groups(cands, level)
    one = _one_domain(request, groups)
    if one is not None:
        name, choice, left = one
        spare = "" if left >= request.spare_nodes else f" (fewer than {request.spare_nodes} spare: no domain allows them)"
        why = (f"whole free nodes of {level.name} domain {name}: {plural(len(choice), 'node')} for "
               f"{request.replicas} x {request.gpus_per_replica} GPUs, {plural(left, 'wholly free node')} left{spare}")
        return placement(choice, cands, request, level.name, name, why)
    if request.mode == "Required":
        slots = {d: sum(c.slots for c in cs) for d, cs in groups.items()}
        nofit = level_nofit(request, nodes, level, slots)
        return NoFit(nofit.reason.replace("inside one", "on wholly free nodes (nothing else on them) of one"),
                     nofit.level, nofit.gpus_short, nofit.permanent)
    scopes: list[tuple[str | None, str | None, list[Cand]]] = []
    for wider in levels[index + 1:]:
        for value, members in sorted(group_by_domain([c.node for c in cands], wider).items()):
            names = {m.name for m in members}
            scopes.append((wider.name, value, [c for c in cands if c.name in names]))
    scopes.append((None, None, list(cands)))
    for wl, wd, scoped in scopes:
        split = _split(request, _groups(scoped, level))
        if split is not None:
            chosen, choice = split
            where = f"{wl} domain {wd}" if wl else "the pool"
            why = (f"no {level.name} domain has room for the gang on wholly free nodes; split evenly over "
                   f"{len(chosen)} {level.name} domains of {where} ({', '.join(chosen)}): "
                   f"{plural(len(choice), 'whole node')} for {request.replicas} x {request.gpus_per_replica} GPUs")
            return placement(choice, cands, request, wl, wd, why)
    free_nodes = sum(1 for c in cands if c.slots > 0)
    return NoFit(f"needs {request.replicas} x {request.gpus_per_replica} GPUs on wholly free nodes "
                 f"(nothing else on them) of the fewest {level.name} domains; {plural(free_nodes, 'node')} "
                 "wholly free", None, request.gpus)
