"""Gang fitting: choose a topology domain and nodes for a gang, best fit first."""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

from ._misfit import needs_misfit, needs_nofit_reason, spread_violation
from ._model import GangRequest, NodeInfo, NoFit, Placement, Result, TopologyLevel
from ._topology import check_levels, domain_path, find_level, group_by_domain, level_names

_EMPTY: Mapping[str, int] = {}


class _Cand(NamedTuple):
    """A usable node with its free GPUs after reservations and whole-replica slots (a plain
    tuple: thousands are made per admission round)."""

    node: NodeInfo
    free: int
    slots: int
    path: tuple[tuple[int, str], ...]

    @property
    def name(self) -> str:
        return self.node.name


Choice = dict[str, int]  # node name -> replicas placed on it


def _candidates(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    levels: Sequence[TopologyLevel],
    reserved: Mapping[str, int],
) -> list[_Cand]:
    cands = []
    g = request.gpus_per_replica
    key = tuple(levels)
    avoid = request.avoid_nodes
    tolerations = request.tolerations
    for node in nodes:
        if (avoid and node.name in avoid) or not node.usable_for(tolerations):
            continue
        free = node.gpus_allocatable - node.gpus_allocated - max(0, reserved.get(node.name, 0))
        free = free if free > 0 else 0
        cached = node.path
        path = cached[1] if cached is not None and cached[0] == key else domain_path(node, levels)
        slots = free // g
        if request.whole_nodes and (node.gpus_allocated > 0 or free < node.gpus_allocatable):
            slots = 0  # a node shared with other work cannot join the gang's IMEX domain
        if request.one_per_node and slots > 1:
            slots = 1  # the template's own hostname anti-affinity: one rank per node
        cands.append(_Cand(node, free, slots, path))
    return cands


def _greedy(cands: Sequence[_Cand], replicas: int, gpus: int) -> Choice | None:
    """Best-fit node choice over ``cands``, or ``None`` when they lack room.

    While replicas remain: if some node can take all remaining ones, take the node that
    is left with the fewest free GPUs after doing so (exact fits first); otherwise fill
    the node with the most replica slots (fewest nodes), preferring the one whose free
    GPUs are used up exactly. Ties go by topology path, then node name.
    """
    pool = [c for c in cands if c.slots > 0]
    if sum(c.slots for c in pool) < replicas:
        return None
    choice: Choice = {}
    remaining = replicas
    while remaining > 0:
        finishing = [c for c in pool if c.slots >= remaining]
        if finishing:
            best = min(finishing, key=lambda c: (c.free - remaining * gpus, c.path, c.name))
            take = remaining
        else:
            best = min(pool, key=lambda c: (-c.slots, c.free - c.slots * gpus, c.path, c.name))
            take = best.slots
        choice[best.name] = take
        pool.remove(best)
        remaining -= take
    return choice


Best = tuple[tuple[int, int, str], str, Choice, int]
"""A fitting domain: (rank key, domain, choice, domain free GPUs); the key is (free GPUs left
in the domain, nodes touched, domain name)."""


def _best_domain(
    cands: Sequence[_Cand],
    level: TopologyLevel,
    narrower: Sequence[TopologyLevel],
    replicas: int,
    gpus: int,
) -> tuple[Best | None, int, dict[str, int]]:
    """The best fitting domain of ``level`` (None when none fits), how many fit, and every
    domain's slot count.

    A domain fits exactly when its nodes have ``replicas`` slots in all (the greedy choice
    inside it then always succeeds), so nodes are chosen only for the domains that tie for the
    fewest GPUs left over: the rest cannot win on the rank key.
    """
    slots: dict[str, int] = {}
    free: dict[str, int] = {}
    groups: dict[str, list[_Cand]] = {}
    label = level.node_label
    for cand in cands:
        value = cand.node.labels.get(label)
        if value is not None:
            groups.setdefault(value, []).append(cand)
            slots[value] = slots.get(value, 0) + cand.slots
            free[value] = free.get(value, 0) + cand.free
    need = replicas * gpus
    fit = [name for name, n in slots.items() if n >= replicas]
    if not fit:
        return None, 0, slots
    least = min(free[name] - need for name in fit)
    best: Best | None = None
    for name in fit:
        if free[name] - need != least:
            continue
        choice = _place_within(groups[name], narrower, replicas, gpus)
        assert choice is not None  # enough slots: the greedy choice always succeeds
        entry = ((least, len(choice), name), name, choice, free[name])
        if best is None or entry[0] < best[0]:
            best = entry
    return best, len(fit), slots


def _place_within(
    cands: Sequence[_Cand], narrower: Sequence[TopologyLevel], replicas: int, gpus: int
) -> Choice | None:
    """Choose nodes among ``cands``, inside one domain of the narrowest level that fits."""
    for level in narrower:
        best, _, _ = _best_domain(cands, level, (), replicas, gpus)
        if best is not None:
            return best[2]
    return _greedy(cands, replicas, gpus)


def _ranked(choice: Choice, cands: Sequence[_Cand]) -> tuple[str, ...]:
    """Node names, one per replica, ordered by (topology path, node name)."""
    path = {c.node.name: c.path for c in cands if c.node.name in choice}
    order = sorted(choice, key=lambda n: (path[n], n))
    return tuple(n for n in order for _ in range(choice[n]))


def _placement(
    choice: Choice,
    cands: Sequence[_Cand],
    request: GangRequest,
    level: str | None,
    domain: str | None,
    reason: str,
) -> Placement:
    nodes = _ranked(choice, cands)
    gpus_by_node = {n: choice[n] * request.gpus_per_replica for n in dict.fromkeys(nodes)}
    return Placement(
        level=level, domain=domain, nodes=nodes, gpus_by_node=gpus_by_node, reason=reason
    )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _need(request: GangRequest) -> str:
    return f"{request.gpus} GPUs ({request.replicas} x {request.gpus_per_replica})"


def _others(count: int) -> str:
    if count == 0:
        return "no other domain fits"
    return f"{count} other {'domain fits' if count == 1 else 'domains fit'}"


def _domain_reason(level: str, best: Best, n_fitting: int, request: GangRequest) -> str:
    _, name, choice, free = best
    left = free - request.gpus
    return (
        f"best fit: {level} domain {name} leaves {left} of its {free} free GPUs "
        f"({_others(n_fitting - 1)}); {request.replicas} x {request.gpus_per_replica} GPUs "
        f"on {_plural(len(choice), 'node')}"
    )


def _pool_leftover(choice: Choice, cands: Sequence[_Cand], request: GangRequest) -> int:
    free = {c.name: c.free for c in cands}
    return sum(free[n] - k * request.gpus_per_replica for n, k in choice.items())


def _slots_capacity(nodes: Sequence[NodeInfo], gpus: int, one_per_node: bool = False) -> int:
    return sum(min(n.gpus_allocatable // gpus, 1) if one_per_node else n.gpus_allocatable // gpus for n in nodes)


def _pool_nofit(
    request: GangRequest, nodes: Sequence[NodeInfo], cands: Sequence[_Cand], where: str
) -> NoFit:
    g = request.gpus_per_replica
    most = _slots_capacity(nodes, g, request.one_per_node)
    if most < request.replicas:
        return NoFit(
            reason=(
                f"needs {_need(request)} {where}; even with every node empty the pool holds "
                f"{_plural(most, 'replica')} ({most * g} GPUs)"
            ),
            level=None,
            gpus_short=(request.replicas - most) * g,
            permanent=True,
        )
    room = sum(c.slots for c in cands)
    short = (request.replicas - min(room, request.replicas)) * g
    return NoFit(
        reason=(
            f"needs {_need(request)} {where}; usable nodes have room for "
            f"{_plural(room, 'replica')} ({room * g} GPUs): {short} GPUs short"
        ),
        level=None,
        gpus_short=short,
    )


def _level_nofit(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    level: TopologyLevel,
    slots: Mapping[str, int],
) -> NoFit:
    g = request.gpus_per_replica
    need = f"needs {_need(request)} inside one {level.name} domain"
    capacity = {
        name: _slots_capacity(members, g, request.one_per_node)
        for name, members in group_by_domain(nodes, level).items()
    }
    if not capacity:
        return NoFit(
            reason=f"{need}; no node carries the label {level.node_label}",
            level=level.name,
            gpus_short=request.gpus,
            permanent=True,
        )
    most = max(capacity.values())
    if most < request.replicas:
        biggest = min(n for n, v in capacity.items() if v == most)
        return NoFit(
            reason=(
                f"{need}; the largest ({biggest}) holds {_plural(most, 'replica')} "
                f"({most * g} GPUs) even when empty: {(request.replicas - most) * g} GPUs short"
            ),
            level=level.name,
            gpus_short=(request.replicas - most) * g,
            permanent=True,
        )
    if not slots:
        return NoFit(
            reason=f"{need}; no usable node carries the label {level.node_label}: "
            f"{request.gpus} GPUs short",
            level=level.name,
            gpus_short=request.gpus,
        )
    room = max(slots.values())
    roomiest = min(n for n, v in slots.items() if v == room)
    room = min(room, request.replicas)
    short = (request.replicas - room) * g
    return NoFit(
        reason=(
            f"{need}; the roomiest ({roomiest}) has room for {_plural(room, 'replica')} "
            f"({room * g} GPUs free): {short} GPUs short"
        ),
        level=level.name,
        gpus_short=short,
    )


def place_gang(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    levels: Sequence[TopologyLevel],
    reserved: Mapping[str, int] = _EMPTY,
) -> Result:
    """Place a gang on a pool, or say why it cannot be placed.

    Only nodes that match ``request.node_filter`` and offer what one replica needs besides
    GPUs (``request.needs``: cpu, memory, other extended resources) count at all; of those, usable nodes
    (ready, not interrupted, not cordoned, every blocking taint tolerated by the pool or the
    request) outside ``request.avoid_nodes`` are used. A node's free GPUs are ``gpus_free`` minus
    ``reserved[node]``. A replica needs ``gpus_per_replica`` free GPUs on one node;
    several replicas may share a node.

    Modes:

    * ``Required`` at level L: the whole gang inside one domain of L, or :class:`NoFit`.
    * ``Preferred``: the first level, from ``request.level`` (or the narrowest level)
      towards wider ones, where some domain fits; then the whole pool. A gang is never
      split across domains of a level when one domain of it could hold the gang. An
      unknown preferred level is noted in the reason and all levels are tried.
    * ``None``: anywhere in the pool; ``level`` and ``domain`` are ``None``.

    Choices (deterministic):

    * Domain: best fit, the fitting domain with the fewest free GPUs left after
      placing; ties: fewer nodes touched, then domain name.
    * Nodes inside the domain: first the best-fit domain of the narrowest narrower level
      that can hold the gang, then per node best fit (a node whose free GPUs are used
      up exactly, fewest nodes); ties by topology path, then node name. ``None`` mode
      uses the per-node rule only.
    * Ranks: nodes sorted by their domain values from widest level to narrowest, then
      node name; replicas on one node get consecutive ranks, so ranks that share a
      narrow domain are neighbours.

    Args:
        request: The gang.
        nodes: The pool's nodes (all of them: unusable ones are skipped here but count
            for the "can never fit" test).
        levels: The pool's levels, narrowest first.
        reserved: GPUs per node already promised to admitted, not yet bound work.

    Returns:
        A :class:`Placement`, or a :class:`NoFit` whose ``permanent`` says whether only a
        spec change or new nodes can help (a replica larger than every node, an unknown
        Required level, a gang larger than the largest domain or the pool even when
        empty).

    The template's own anti-affinity is honoured: ``one_per_node`` puts one replica per node;
    ``spread_keys`` are checked on the chosen nodes (a violation is a permanent NoFit: the
    placement packs by GPUs first and does not search for a spread).

    Raises:
        ValueError: If levels repeat a name or a node label.
    """
    result = _place_gang(request, nodes, levels, reserved)
    if request.spread_keys and isinstance(result, Placement):
        why = spread_violation(request, {n.name: n for n in nodes}, result.nodes)
        if why:
            return NoFit(reason=why, level=result.level, gpus_short=request.gpus, permanent=True)
    return result


def _place_gang(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    levels: Sequence[TopologyLevel],
    reserved: Mapping[str, int],
) -> Result:
    check_levels(levels)
    g = request.gpus_per_replica
    if not nodes:
        return NoFit(
            reason="the pool has no nodes",
            level=request.level,
            gpus_short=request.gpus,
            permanent=True,
        )
    if request.node_filter is not None:
        nodes = [n for n in nodes if request.node_filter.matches(n.name, n.labels)]
        if not nodes:
            return NoFit(
                reason=f"no node of the pool matches the template's {request.node_filter.describe()}",
                level=request.level if request.mode != "None" else None,
                gpus_short=request.gpus,
                permanent=True,
            )
    if request.needs:
        fitting = [n for n in nodes if needs_misfit(request, n) is None]
        if not fitting:
            return NoFit(
                reason=needs_nofit_reason(request, nodes),
                level=request.level if request.mode != "None" else None,
                gpus_short=request.gpus,
                permanent=True,
            )
        nodes = fitting
    largest = max((n.gpus_allocatable for n in nodes), default=0)
    if g > largest:
        return NoFit(
            reason=f"a replica needs {g} GPUs, more than the largest node's {largest} allocatable GPUs"
            " (gpusPerReplica, plus what its sidecars and init containers request by the scheduler's rule)",
            level=request.level if request.mode != "None" else None,
            gpus_short=request.gpus,
            permanent=True,
        )
    cands = _candidates(request, nodes, levels, reserved)
    if request.whole_nodes and request.mode != "None":
        from ._whole import place_whole_nodes  # noqa: PLC0415 (the one caller; avoids an import cycle)

        return place_whole_nodes(request, nodes, cands, levels)

    if request.mode == "None":
        choice = _greedy(cands, request.replicas, g)
        if choice is None:
            return _pool_nofit(request, nodes, cands, "anywhere in the pool")
        left = _pool_leftover(choice, cands, request)
        return _placement(
            choice, cands, request, None, None,
            f"packed {request.replicas} x {g} GPUs onto {_plural(len(choice), 'node')} anywhere "
            f"in the pool (best fit, topology ignored), leaving {left} free GPUs on them",
        )

    index = find_level(levels, request.level) if request.level else None
    known = ", ".join(level_names(levels)) or "none"
    if request.mode == "Required":
        if index is None:
            return NoFit(
                reason=f"unknown topology level {request.level!r}; this pool's levels are: {known}",
                level=request.level,
                gpus_short=request.gpus,
                permanent=True,
            )
        level = levels[index]
        best, n_fitting, slots = _best_domain(cands, level, levels[:index], request.replicas, g)
        if best is None:
            return _level_nofit(request, nodes, level, slots)
        return _placement(
            best[2], cands, request, level.name, best[1],
            _domain_reason(level.name, best, n_fitting, request),
        )

    # Preferred.
    prefix = ""
    start = index
    if request.level and index is None:
        prefix = f"preferred level {request.level!r} is not one of this pool's levels ({known}); "
    if start is None:
        start = 0
    missed: list[str] = []
    for i in range(start, len(levels)):
        level = levels[i]
        best, n_fitting, slots = _best_domain(cands, level, levels[:i], request.replicas, g)
        if best is not None:
            lead = prefix
            if missed:
                lead += f"no {' or '.join(missed)} domain fits; "
            return _placement(
                best[2], cands, request, level.name, best[1],
                lead + _domain_reason(level.name, best, n_fitting, request),
            )
        missed.append(level.name)
    tried = f" (no single {' or '.join(missed)} domain fits)" if missed else ""
    choice = _greedy(cands, request.replicas, g)
    if choice is None:
        nofit = _pool_nofit(request, nodes, cands, "anywhere in the pool" + tried)
        return NoFit(prefix + nofit.reason, None, nofit.gpus_short, nofit.permanent)
    left = _pool_leftover(choice, cands, request)
    return _placement(
        choice, cands, request, None, None,
        prefix
        + f"spread {request.replicas} x {g} GPUs over {_plural(len(choice), 'node')} of the pool"
        + tried
        + f", best fit, leaving {left} free GPUs on them",
    )
