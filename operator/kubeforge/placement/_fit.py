"""Gang fitting: choose a topology domain and nodes for a gang, best fit first.

The shared pieces (candidates, the per-node best fit, NoFit reasons) live in :mod:`._gang`;
gangs of whole free nodes are placed by :mod:`._whole`. :class:`~kubeforge.placement.PoolIndex`
(:mod:`._index`) decides with the same functions from candidates and domain totals it keeps
through a round (:func:`place_in_mode`, :func:`choose_domain`).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ._gang import Cand, Choice, candidates, greedy, level_nofit, placement, plural, pool_nofit
from ._misfit import needs_misfit, needs_nofit_reason, spread_violation
from ._model import GangRequest, NodeInfo, NoFit, Placement, Result, TopologyLevel
from ._topology import check_levels, find_level, level_names
from ._whole import place_whole_nodes

_EMPTY: Mapping[str, int] = {}


Best = tuple[tuple[int, int, str], str, Choice, int, Sequence[Cand]]
"""A fitting domain: (rank key, domain, choice, domain free GPUs, the domain's candidates); the
key is (free GPUs left in the domain, nodes touched, domain name)."""

DomainsAt = Callable[[int], "tuple[Best | None, int, Mapping[str, int]]"]
"""``i -> (best, fitting, slots)``: :func:`choose_domain`'s answer for the pool's ``levels[i]``,
narrower levels ``levels[:i]``, for the request being placed."""


def domain_totals(
    cands: Sequence[Cand], level: TopologyLevel
) -> tuple[dict[str, int], dict[str, int], dict[str, list[Cand]]]:
    """Per domain of ``level`` (in the order its first candidate comes), the replica slots and
    the free GPUs of its candidates, and the candidates themselves; candidates without the
    level's label are left out."""
    slots: dict[str, int] = {}
    free: dict[str, int] = {}
    groups: dict[str, list[Cand]] = {}
    label = level.node_label
    for cand in cands:
        value = cand.node.labels.get(label)
        if value is not None:
            groups.setdefault(value, []).append(cand)
            slots[value] = slots.get(value, 0) + cand.slots
            free[value] = free.get(value, 0) + cand.free
    return slots, free, groups


def choose_domain(
    slots: Mapping[str, int],
    free: Mapping[str, int],
    members: Callable[[str], Sequence[Cand]],
    narrower: Sequence[TopologyLevel],
    replicas: int,
    gpus: int,
) -> tuple[Best | None, int, Mapping[str, int]]:
    """The best fitting domain (None when none fits), how many fit, and ``slots``, from every
    domain's totals (:func:`domain_totals`) and ``members(domain)``, its candidates.

    A domain fits exactly when its nodes have ``replicas`` slots in all (the greedy choice
    inside it then always succeeds), so nodes are chosen only for the domains that tie for the
    fewest GPUs left over: the rest cannot win on the rank key. Those are tried in name order,
    and one whose nodes cannot hold the gang on fewer nodes than the best so far (a choice takes
    at least ``replicas / its largest node's slots`` nodes) is skipped, since it would lose on
    the nodes touched or, tied there, on its name: on an empty fleet of 625 NVLink domains all
    tie, and choosing nodes in each was most of a live admission round at 5,000 nodes.
    """
    need = replicas * gpus
    fit = [name for name, n in slots.items() if n >= replicas]
    if not fit:
        return None, 0, slots
    least = min(free[name] - need for name in fit)
    best: Best | None = None
    for name in sorted(name for name in fit if free[name] - need == least):
        if best is not None and len(best[2]) == 1:
            break  # on one node: no later domain can touch fewer
        group = members(name)
        if best is not None:
            widest = max(c.slots for c in group)
            if widest <= 0 or -(-replicas // widest) >= len(best[2]):
                continue
        choice = _place_within(group, narrower, replicas, gpus)
        assert choice is not None  # enough slots: the greedy choice always succeeds
        entry = ((least, len(choice), name), name, choice, free[name], group)
        if best is None or entry[0] < best[0]:
            best = entry
    return best, len(fit), slots


def _best_domain(
    cands: Sequence[Cand],
    level: TopologyLevel,
    narrower: Sequence[TopologyLevel],
    replicas: int,
    gpus: int,
) -> tuple[Best | None, int, Mapping[str, int]]:
    """The best fitting domain of ``level`` among ``cands`` (None when none fits), how many
    fit, and every domain's slot count (:func:`choose_domain` of :func:`domain_totals`)."""
    slots, free, groups = domain_totals(cands, level)
    return choose_domain(slots, free, groups.__getitem__, narrower, replicas, gpus)


def _place_within(
    cands: Sequence[Cand], narrower: Sequence[TopologyLevel], replicas: int, gpus: int
) -> Choice | None:
    """Choose nodes among ``cands``, inside one domain of the narrowest level that fits."""
    for level in narrower:
        best, _, _ = _best_domain(cands, level, (), replicas, gpus)
        if best is not None:
            return best[2]
    return greedy(cands, replicas, gpus)


def _others(count: int) -> str:
    if count == 0:
        return "no other domain fits"
    return f"{count} other {'domain fits' if count == 1 else 'domains fit'}"


def _domain_reason(level: str, best: Best, n_fitting: int, request: GangRequest) -> str:
    _, name, choice, free, _ = best
    left = free - request.gpus
    return (
        f"best fit: {level} domain {name} leaves {left} of its {free} free GPUs "
        f"({_others(n_fitting - 1)}); {request.replicas} x {request.gpus_per_replica} GPUs "
        f"on {plural(len(choice), 'node')}"
    )


def _pool_leftover(choice: Choice, cands: Sequence[Cand], request: GangRequest) -> int:
    free = {c.name: c.free for c in cands}
    return sum(free[n] - k * request.gpus_per_replica for n, k in choice.items())


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
        return spread_checked(request, result, {n.name: n for n in nodes})
    return result


def spread_checked(request: GangRequest, result: Placement, by_name: Mapping[str, NodeInfo]) -> Result:
    """``result``, or the permanent :class:`NoFit` of its breaking ``request.spread_keys``
    (``by_name``: the pool's nodes by name)."""
    why = spread_violation(request, by_name, result.nodes)
    if why:
        return NoFit(reason=why, level=result.level, gpus_short=request.gpus, permanent=True)
    return result


def _place_gang(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    levels: Sequence[TopologyLevel],
    reserved: Mapping[str, int],
) -> Result:
    """:func:`place_gang` before the spread check, in steps: the nodes that can hold a replica
    at all (:func:`_fitting_nodes`), their candidates, then the rule of the gang's mode
    (:func:`~kubeforge.placement._whole.place_whole_nodes` for whole-node gangs with a
    topology, :func:`_place_anywhere`, :func:`_place_required` or :func:`_place_preferred`)."""
    check_levels(levels)
    fitting = _fitting_nodes(request, nodes)
    if isinstance(fitting, NoFit):
        return fitting
    cands = candidates(request, fitting, levels, reserved)
    replicas, g = request.replicas, request.gpus_per_replica
    return place_in_mode(request, fitting, cands, levels,
                         lambda i: _best_domain(cands, levels[i], levels[:i], replicas, g))


def place_in_mode(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    cands: Sequence[Cand],
    levels: Sequence[TopologyLevel],
    domains_at: DomainsAt,
) -> Result:
    """The rule of the gang's mode (:func:`~kubeforge.placement._whole.place_whole_nodes` for
    whole-node gangs with a topology, :func:`_place_anywhere`, :func:`_place_required` or
    :func:`_place_preferred`) over the fitting ``nodes`` and their ``cands``
    (:func:`~kubeforge.placement._gang.candidates`, in the order of ``nodes``); ``domains_at``
    answers what :func:`_best_domain` over ``cands`` would (:class:`~kubeforge.placement.PoolIndex`
    answers it from totals it keeps)."""
    if request.whole_nodes and request.mode != "None":
        return place_whole_nodes(request, nodes, cands, levels)
    if request.mode == "None":
        return _place_anywhere(request, nodes, cands)
    if request.mode == "Required":
        return _place_required(request, nodes, cands, levels, domains_at)
    return _place_preferred(request, nodes, cands, levels, domains_at)


def _fitting_nodes(request: GangRequest, nodes: Sequence[NodeInfo]) -> Sequence[NodeInfo] | NoFit:
    """The pool's nodes that match the template's node filter and offer what a replica needs
    besides GPUs, or a permanent :class:`NoFit` when none does (or none has a replica's GPUs)."""
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
    return nodes


def _place_anywhere(request: GangRequest, nodes: Sequence[NodeInfo], cands: Sequence[Cand]) -> Result:
    """``None`` mode: the per-node best fit over the whole pool, topology ignored."""
    g = request.gpus_per_replica
    choice = greedy(cands, request.replicas, g)
    if choice is None:
        return pool_nofit(request, nodes, cands, "anywhere in the pool")
    left = _pool_leftover(choice, cands, request)
    return placement(
        choice, cands, request, None, None,
        f"packed {request.replicas} x {g} GPUs onto {plural(len(choice), 'node')} anywhere "
        f"in the pool (best fit, topology ignored), leaving {left} free GPUs on them",
    )


def _place_required(
    request: GangRequest, nodes: Sequence[NodeInfo], cands: Sequence[Cand], levels: Sequence[TopologyLevel],
    domains_at: DomainsAt,
) -> Result:
    """``Required`` mode: the best-fit domain of the request's level, or a :class:`NoFit`
    (permanent for an unknown level)."""
    index = find_level(levels, request.level) if request.level else None
    if index is None:
        known = ", ".join(level_names(levels)) or "none"
        return NoFit(
            reason=f"unknown topology level {request.level!r}; this pool's levels are: {known}",
            level=request.level,
            gpus_short=request.gpus,
            permanent=True,
        )
    level = levels[index]
    best, n_fitting, slots = domains_at(index)
    if best is None:
        return level_nofit(request, nodes, level, slots)
    return placement(
        best[2], best[4], request, level.name, best[1],
        _domain_reason(level.name, best, n_fitting, request),
    )


def _place_preferred(
    request: GangRequest, nodes: Sequence[NodeInfo], cands: Sequence[Cand], levels: Sequence[TopologyLevel],
    domains_at: DomainsAt,
) -> Result:
    """``Preferred`` mode: the best-fit domain of the first level, from the request's (or the
    narrowest) towards wider ones, where one fits; else the per-node best fit over the pool."""
    g = request.gpus_per_replica
    index = find_level(levels, request.level) if request.level else None
    known = ", ".join(level_names(levels)) or "none"
    prefix = ""
    start = index
    if request.level and index is None:
        prefix = f"preferred level {request.level!r} is not one of this pool's levels ({known}); "
    if start is None:
        start = 0
    missed: list[str] = []
    for i in range(start, len(levels)):
        level = levels[i]
        best, n_fitting, _ = domains_at(i)
        if best is not None:
            lead = prefix
            if missed:
                lead += f"no {' or '.join(missed)} domain fits; "
            return placement(
                best[2], best[4], request, level.name, best[1],
                lead + _domain_reason(level.name, best, n_fitting, request),
            )
        missed.append(level.name)
    tried = f" (no single {' or '.join(missed)} domain fits)" if missed else ""
    choice = greedy(cands, request.replicas, g)
    if choice is None:
        nofit = pool_nofit(request, nodes, cands, "anywhere in the pool" + tried)
        return NoFit(prefix + nofit.reason, None, nofit.gpus_short, nofit.permanent)
    left = _pool_leftover(choice, cands, request)
    return placement(
        choice, cands, request, None, None,
        prefix
        + f"spread {request.replicas} x {g} GPUs over {plural(len(choice), 'node')} of the pool"
        + tried
        + f", best fit, leaving {left} free GPUs on them",
    )
