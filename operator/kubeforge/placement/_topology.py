"""Topology levels: the well-known node labels, detection, and domain helpers."""

from __future__ import annotations

from typing import Iterable, Sequence

from kubeforge.accelerators import TOPOLOGY_LEVELS as VENDOR_LEVELS

from ._model import NodeInfo, TopologyLevel

CLOUD_LEVELS: tuple[tuple[int, str, str], ...] = (
    # Tier 1: the first network tier above a node.
    # GKE compact placement / A3-A4 reservations: sub-block, then block
    # (cloud.google.com/gce-topology-{subblock,block}; gce-topology-host is per host).
    (1, "subblock", "cloud.google.com/gce-topology-subblock"),
    # AWS EC2 instance topology (EKS labels topology.k8s.aws/network-node-layer-N):
    # layer 3 is the network node closest to the instance, layer 1 the farthest.
    (1, "aws-layer-3", "topology.k8s.aws/network-node-layer-3"),
    # OCI RDMA topology labels on OKE: local block < network block < HPC island.
    (1, "local-block", "oci.oraclecloud.com/rdma.local_block_id"),
    # Tier 2.
    (2, "block", "cloud.google.com/gce-topology-block"),
    (2, "aws-layer-2", "topology.k8s.aws/network-node-layer-2"),
    (2, "network-block", "oci.oraclecloud.com/rdma.network_block_id"),
    # Tier 3: the widest tiers.
    (3, "aws-layer-1", "topology.k8s.aws/network-node-layer-1"),
    (3, "hpc-island", "oci.oraclecloud.com/rdma.hpc_island_id"),
)
"""``(tier, level name, node label)`` of the clouds' well-known topology labels, narrowest first
within each cloud (tiers as in :mod:`kubeforge.accelerators`: 0 the accelerator interconnect,
1 the first network tier, 2 the second, 3 the widest; no cloud label is tier 0)."""


def _by_tier(clouds: Sequence[tuple[int, str, str]],
             vendors: Sequence[tuple[int, str, str]]) -> tuple[TopologyLevel, ...]:
    """One table of topology levels, narrowest tier first: each tier's cloud levels in their
    order, then its vendor levels in theirs.

    Args:
        clouds: ``(tier, name, node label)`` of cloud labels (:data:`CLOUD_LEVELS`).
        vendors: The same of GPU vendors' labels
            (:data:`kubeforge.accelerators.TOPOLOGY_LEVELS`).

    Returns:
        The levels, as :class:`TopologyLevel`.
    """
    rows = (*clouds, *vendors)
    return tuple(TopologyLevel(name, label) for tier in sorted({r[0] for r in rows})
                 for t, name, label in rows if t == tier)


WELL_KNOWN_LEVELS: tuple[TopologyLevel, ...] = _by_tier(CLOUD_LEVELS, VENDOR_LEVELS)
"""Well-known topology labels, narrowest first: the GPU vendors' (NVLink cliques, NVIDIA
Topograph: :mod:`kubeforge.accelerators`) and the clouds' (:data:`CLOUD_LEVELS`), by tier.

Within one provider the order is the provider's own nesting (GCE subblock < block; AWS
layer-3 < layer-2 < layer-1; OCI local block < network block < HPC island; Topograph
accelerator < leaf < spine < core). Across providers the table interleaves them by tier
(NVLink domain, first switch tier, second, widest); :func:`detect_levels` only falls back to
this order where the observed nodes do not say which level nests in which.

Sources: GKE documentation on compact placement and topology labels
(``cloud.google.com/gce-topology-*``); Amazon EKS / EC2 instance topology
(``topology.k8s.aws/network-node-layer-*``); OCI OKE RDMA node labels (``oci.oraclecloud.com/rdma.*``);
the vendors' in their modules.
"""


def level_names(levels: Iterable[TopologyLevel]) -> list[str]:
    """Names of ``levels`` in order."""
    return [lvl.name for lvl in levels]


def check_levels(levels: Sequence[TopologyLevel]) -> None:
    """Raise :class:`ValueError` if two levels share a name or a node label."""
    names = [lvl.name for lvl in levels]
    labels = [lvl.node_label for lvl in levels]
    if len(set(names)) != len(names):
        raise ValueError(f"topology level names must be unique: {names}")
    if len(set(labels)) != len(labels):
        raise ValueError(f"topology level node labels must be unique: {labels}")


def _nests(inner: TopologyLevel, outer: TopologyLevel, nodes: Sequence[NodeInfo]) -> bool:
    """Each ``inner`` domain lies inside one ``outer`` domain on nodes carrying both."""
    parent: dict[str, str] = {}
    overlap = False
    for node in nodes:
        a = node.labels.get(inner.node_label)
        b = node.labels.get(outer.node_label)
        if a is None or b is None:
            continue
        overlap = True
        if parent.setdefault(a, b) != b:
            return False
    return overlap


def detect_levels(
    nodes: Sequence[NodeInfo],
    table: Sequence[TopologyLevel] = WELL_KNOWN_LEVELS,
) -> list[TopologyLevel]:
    """Find the well-known topology levels that a pool's nodes carry, narrowest first.

    A level is kept when at least one node carries its label. Order rule: level A goes
    before level B when A is *strictly narrower* on the observed nodes: among the nodes
    carrying both labels (at least one), every A domain lies inside a single B domain, and
    not the other way round. Levels the nodes do not order this way (no node carries both,
    identical partitions, or domains that cross) keep their order in ``table``. The result
    is a topological sort of "strictly narrower" that breaks ties by table position (and,
    should inconsistent labels make a cycle, takes the earliest table entry left).

    Args:
        nodes: The pool's nodes (any readiness).
        table: Candidate levels, narrowest first; defaults to :data:`WELL_KNOWN_LEVELS`.

    Returns:
        The detected levels, narrowest first (possibly empty).
    """
    present = [lvl for lvl in table if any(lvl.node_label in n.labels for n in nodes)]
    count = len(present)
    before: dict[int, set[int]] = {i: set() for i in range(count)}  # j in before[i]: j first
    for i in range(count):
        for j in range(count):
            if i != j and _nests(present[j], present[i], nodes) and not _nests(
                present[i], present[j], nodes
            ):
                before[i].add(j)
    ordered: list[int] = []
    remaining = set(range(count))
    while remaining:
        ready = [i for i in sorted(remaining) if not (before[i] & remaining)]
        pick = ready[0] if ready else min(remaining)
        ordered.append(pick)
        remaining.discard(pick)
    return [present[i] for i in ordered]


def domain_path(node: NodeInfo, levels: Sequence[TopologyLevel]) -> tuple[tuple[int, str], ...]:
    """Sort key: the node's domains from the widest level to the narrowest.

    A node lacking a level's label sorts after the nodes that carry it.
    """
    key = []
    for lvl in reversed(levels):
        value = node.labels.get(lvl.node_label)
        key.append((1, "") if value is None else (0, value))
    return tuple(key)


def group_by_domain(
    nodes: Iterable[NodeInfo], level: TopologyLevel
) -> dict[str, list[NodeInfo]]:
    """Nodes by their domain at ``level``; nodes without the label are left out."""
    groups: dict[str, list[NodeInfo]] = {}
    for node in nodes:
        value = node.labels.get(level.node_label)
        if value is not None:
            groups.setdefault(value, []).append(node)
    return groups


def find_level(levels: Sequence[TopologyLevel], name: str) -> int | None:
    """Index of the level called ``name`` in ``levels``, or ``None``."""
    for i, lvl in enumerate(levels):
        if lvl.name == name:
            return i
    return None



def with_paths(nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel]) -> list[NodeInfo]:
    """``nodes`` carrying their :func:`domain_path` for ``levels`` (computed once per pool and
    round instead of once per node and gang). The path is a cache: it is set on the given
    objects in place (they are the pool view's own, made for this round)."""
    key = tuple(levels)
    for n in nodes:
        object.__setattr__(n, "path", (key, domain_path(n, levels)))
    return list(nodes)
