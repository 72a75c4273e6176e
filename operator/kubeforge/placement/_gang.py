"""What every gang placer shares (:mod:`._fit` for replicas on any free GPUs, :mod:`._whole` for
gangs of whole free nodes): the candidate nodes with their free GPUs and replica slots, the
best-fit choice of nodes, the :class:`~kubeforge.placement.Placement` of a choice, and the
reasons a gang does not fit the pool or one domain of a level."""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

from ._model import GangRequest, NodeInfo, NoFit, Placement, TopologyLevel
from ._topology import domain_path, group_by_domain


class Cand(NamedTuple):
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


def candidates(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    levels: Sequence[TopologyLevel],
    reserved: Mapping[str, int],
) -> list[Cand]:
    """The nodes of ``nodes`` the gang may use (not avoided, usable with its tolerations), each
    with its free GPUs less ``reserved`` and its replica slots: 0 on a node that is not wholly
    free for a ``whole_nodes`` gang, at most 1 for a ``one_per_node`` gang."""
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
        cands.append(Cand(node, free, slots, path))
    return cands


def greedy(cands: Sequence[Cand], replicas: int, gpus: int) -> Choice | None:
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


def ranked(choice: Choice, cands: Sequence[Cand]) -> tuple[str, ...]:
    """Node names, one per replica, ordered by (topology path, node name)."""
    path = {c.node.name: c.path for c in cands if c.node.name in choice}
    order = sorted(choice, key=lambda n: (path[n], n))
    return tuple(n for n in order for _ in range(choice[n]))


def placement(
    choice: Choice,
    cands: Sequence[Cand],
    request: GangRequest,
    level: str | None,
    domain: str | None,
    reason: str,
) -> Placement:
    """The :class:`Placement` of ``choice`` at ``level`` / ``domain`` (None: the pool), its nodes
    ranked as :func:`ranked` orders them."""
    nodes = ranked(choice, cands)
    gpus_by_node = {n: choice[n] * request.gpus_per_replica for n in dict.fromkeys(nodes)}
    return Placement(
        level=level, domain=domain, nodes=nodes, gpus_by_node=gpus_by_node, reason=reason
    )


def plural(count: int, word: str) -> str:
    """``1 node``, ``2 nodes``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def gpus_needed(request: GangRequest) -> str:
    """``64 GPUs (8 x 8)``: what the gang needs, for a reason."""
    return f"{request.gpus} GPUs ({request.replicas} x {request.gpus_per_replica})"


def slots_capacity(nodes: Sequence[NodeInfo], gpus: int, one_per_node: bool = False) -> int:
    """Replicas of ``gpus`` GPUs that ``nodes`` hold when empty (one a node for ``one_per_node``)."""
    return sum(min(n.gpus_allocatable // gpus, 1) if one_per_node else n.gpus_allocatable // gpus for n in nodes)


def pool_nofit(
    request: GangRequest, nodes: Sequence[NodeInfo], cands: Sequence[Cand], where: str
) -> NoFit:
    """Why the gang does not fit ``where`` in the pool: permanent when the pool cannot hold it
    even empty, else the GPUs short on the usable nodes."""
    g = request.gpus_per_replica
    most = slots_capacity(nodes, g, request.one_per_node)
    if most < request.replicas:
        return NoFit(
            reason=(
                f"needs {gpus_needed(request)} {where}; even with every node empty the pool holds "
                f"{plural(most, 'replica')} ({most * g} GPUs)"
            ),
            level=None,
            gpus_short=(request.replicas - most) * g,
            permanent=True,
        )
    room = sum(c.slots for c in cands)
    short = (request.replicas - min(room, request.replicas)) * g
    return NoFit(
        reason=(
            f"needs {gpus_needed(request)} {where}; usable nodes have room for "
            f"{plural(room, 'replica')} ({room * g} GPUs): {short} GPUs short"
        ),
        level=None,
        gpus_short=short,
    )


def level_nofit(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    level: TopologyLevel,
    slots: Mapping[str, int],
) -> NoFit:
    """Why the gang fits in no single domain of ``level`` (``slots``: each domain's free replica
    slots): permanent when no node carries the level's label or the largest domain cannot hold
    it even empty, else the GPUs short in the roomiest domain."""
    g = request.gpus_per_replica
    need = f"needs {gpus_needed(request)} inside one {level.name} domain"
    capacity = {
        name: slots_capacity(members, g, request.one_per_node)
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
                f"{need}; the largest ({biggest}) holds {plural(most, 'replica')} "
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
            f"{need}; the roomiest ({roomiest}) has room for {plural(room, 'replica')} "
            f"({room * g} GPUs free): {short} GPUs short"
        ),
        level=level.name,
        gpus_short=short,
    )
