"""Pool totals and per-domain aggregates, for ``GPUPool.status``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ._model import NodeInfo, TopologyLevel
from ._nodes import capacity_type
from ._topology import check_levels, group_by_domain

DEFAULT_MAX_DOMAINS_PER_LEVEL = 64
"""Default bound on the domains listed per level in a :class:`PoolSummary`."""


@dataclass(frozen=True)
class GpuCounts:
    """GPU counts over a set of nodes. ``allocated + free == allocatable`` always.

    Attributes:
        capacity: Sum of ``gpus_capacity`` over all nodes.
        allocatable: Sum of ``gpus_allocatable`` over *usable* nodes (ready, schedulable,
            not interrupted): the GPUs pods can be given.
        allocated: GPUs held on those usable nodes (capped at each node's allocatable).
        free: ``allocatable - allocated``: GPUs new work could get now.
        unavailable: Sum of ``gpus_allocatable`` over nodes that are not usable (NotReady,
            cordoned, tainted, about to be reclaimed), whether or not pods still hold them.
    """

    capacity: int = 0
    allocatable: int = 0
    allocated: int = 0
    free: int = 0
    unavailable: int = 0


def _count(nodes: Iterable[NodeInfo]) -> GpuCounts:
    capacity = allocatable = allocated = unavailable = 0
    for node in nodes:
        capacity += node.gpus_capacity or 0
        if node.usable:
            allocatable += node.gpus_allocatable
            allocated += min(node.gpus_allocated, node.gpus_allocatable)
        else:
            unavailable += node.gpus_allocatable
    return GpuCounts(capacity, allocatable, allocated, allocatable - allocated, unavailable)


@dataclass(frozen=True)
class DomainSummary:
    """Aggregates for one topology domain.

    Attributes:
        level: Level name.
        name: Domain name (the node label's value).
        nodes: Number of nodes carrying this value, whatever their state.
        gpus: The domain's :class:`GpuCounts`.
    """

    level: str
    name: str
    nodes: int
    gpus: GpuCounts

    @property
    def gpus_free(self) -> int:
        return self.gpus.free


@dataclass(frozen=True)
class PoolSummary:
    """Totals for a pool, as ``GPUPool.status`` reports them.

    Attributes:
        nodes_total: All nodes given.
        nodes_ready: Nodes whose ``Ready`` condition is true.
        nodes_usable: Ready, schedulable and not interrupted nodes.
        nodes_spot: Nodes :func:`capacity_type` calls spot.
        nodes_on_demand: The other nodes.
        gpus: GPU counts over all nodes (see :class:`GpuCounts` for ``free``).
        gpus_spot: The same over spot nodes.
        gpus_on_demand: The same over on-demand nodes.
        domains: Per-domain aggregates, ordered by level (narrowest first, as given) and
            then domain name; at most ``max_domains_per_level`` per level.
        domains_omitted: Domains left out by that bound (those with the fewest free GPUs).
    """

    nodes_total: int
    nodes_ready: int
    nodes_usable: int
    nodes_spot: int
    nodes_on_demand: int
    gpus: GpuCounts
    gpus_spot: GpuCounts
    gpus_on_demand: GpuCounts
    domains: tuple[DomainSummary, ...]
    domains_omitted: int = 0


def summarize_pool(
    nodes: Sequence[NodeInfo],
    levels: Sequence[TopologyLevel],
    max_domains_per_level: int = DEFAULT_MAX_DOMAINS_PER_LEVEL,
) -> PoolSummary:
    """Sum up a pool's nodes and GPUs, in total, by capacity type and per domain.

    Args:
        nodes: The pool's nodes.
        levels: The pool's topology levels, narrowest first.
        max_domains_per_level: Bound on the domains listed per level (>= 0). When a level
            has more, the ones with the most free GPUs are kept (ties: by name) and the
            rest counted in ``domains_omitted``.

    Returns:
        The :class:`PoolSummary`. Nodes lacking a level's label belong to no domain of
        that level.

    Raises:
        ValueError: If ``max_domains_per_level`` is negative or levels repeat a name or
            label.
    """
    if max_domains_per_level < 0:
        raise ValueError("max_domains_per_level must be >= 0")
    check_levels(levels)
    spot = [n for n in nodes if (n.capacity_type or capacity_type(n.labels)) == "spot"]
    on_demand = [n for n in nodes if (n.capacity_type or capacity_type(n.labels)) != "spot"]

    domains: list[DomainSummary] = []
    omitted = 0
    for level in levels:
        level_domains = []
        for name, members in group_by_domain(nodes, level).items():
            level_domains.append(DomainSummary(level.name, name, len(members), _count(members)))
        if len(level_domains) > max_domains_per_level:
            level_domains.sort(key=lambda d: (-d.gpus_free, d.name))
            omitted += len(level_domains) - max_domains_per_level
            level_domains = level_domains[:max_domains_per_level]
        domains.extend(sorted(level_domains, key=lambda d: d.name))

    return PoolSummary(
        nodes_total=len(nodes),
        nodes_ready=sum(1 for n in nodes if n.ready),
        nodes_usable=sum(1 for n in nodes if n.usable),
        nodes_spot=len(spot),
        nodes_on_demand=len(on_demand),
        gpus=_count(nodes),
        gpus_spot=_count(spot),
        gpus_on_demand=_count(on_demand),
        domains=tuple(domains),
        domains_omitted=omitted,
    )
