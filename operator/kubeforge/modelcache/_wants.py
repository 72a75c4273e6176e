"""What each node's cache should hold (the ModelCacheNode specs the operator writes), from the
pools' keepWarm lists, the replicas placed and the forecasts' warm targets. Pure.

Reasons, in the order the agent fetches them: ``Placed`` (a replica's pods are on the node and
wait for the copy: first), ``Forecast`` (the node the next replica would most likely use), then
``KeepWarm``. A copy no longer wanted stays on the node until the cache needs its room (LRU):
a later replica may still start cached from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from kubeforge.api import KeepWarm, ModelCachePolicy, ModelSource, WantReason

from ._keys import cache_key

_ORDER = {WantReason.PLACED.value: 0, WantReason.FORECAST.value: 1, WantReason.KEEP_WARM.value: 2}


@dataclass(frozen=True)
class PoolNodes:
    """A pool's nodes as the cache planner sees them.

    Attributes:
        name: The pool.
        policy: Its ``spec.modelCache``.
        nodes: Its node names, sorted.
        domain: Each node's domain at the widest topology level (keepWarm spreads over them).
        free: Each node's free GPUs (keepWarm picks the emptiest nodes first).
        kept: Each node's keys that its ModelCacheNode keeps warm now (KeepWarm in its spec);
            keepWarm keeps those nodes first, so its copies do not move as replicas fill the
            nodes they sit on.
        held: Each node's keys with a verified copy (preferred next: no new download).
    """

    name: str
    policy: ModelCachePolicy
    nodes: Sequence[str]
    domain: Mapping[str, str] = field(default_factory=dict)
    free: Mapping[str, int] = field(default_factory=dict)
    kept: Mapping[str, frozenset[str]] = field(default_factory=dict)
    held: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Want:
    """One copy wanted on some nodes of a pool.

    Attributes:
        pool: The pool.
        nodes: The nodes.
        source: The model.
        namespace: The namespace of its Secret and sharing scope.
        reason: Placed, Forecast or KeepWarm.
    """

    pool: str
    nodes: Sequence[str]
    source: ModelSource
    namespace: str | None
    reason: WantReason


def keep_warm_nodes(pool: PoolNodes, entry: KeepWarm) -> list[str]:
    """The nodes of ``pool`` that keep ``entry`` warm: all of them, or ``entry.nodes`` spread
    round-robin over the widest level's domains, in each domain the nodes that keep it warm now
    first (a warm copy stays where it is), then those holding a verified copy, then the emptiest
    (ties by name): a new keepWarm copy then sits where a replica most likely fits."""
    if entry.nodes is None or entry.nodes >= len(pool.nodes):
        return list(pool.nodes)
    key = cache_key(entry.model, entry.namespace)
    by_domain: dict[str, list[str]] = {}
    for n in sorted(pool.nodes, key=lambda n: (key not in pool.kept.get(n, ()), key not in pool.held.get(n, ()),
                                               -pool.free.get(n, 0), n)):
        by_domain.setdefault(pool.domain.get(n, ""), []).append(n)
    queues = [by_domain[d] for d in sorted(by_domain)]
    out: list[str] = []
    while len(out) < entry.nodes:
        for q in queues:
            if q and len(out) < entry.nodes:
                out.append(q.pop(0))
    return out


def pool_wants(pools: Iterable[PoolNodes]) -> list[Want]:
    """The keepWarm wants of every pool."""
    return [Want(p.name, keep_warm_nodes(p, kw), kw.model, kw.namespace, WantReason.KEEP_WARM)
            for p in pools for kw in p.policy.keep_warm if kw.model.cached]


def _entry(source: ModelSource, namespace: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": cache_key(source, namespace), "uri": source.uri, "reasons": []}
    if source.revision:
        entry["revision"] = source.revision
    if source.digest:
        entry["digest"] = source.digest
    if source.size_bytes:
        entry["sizeBytes"] = source.size_bytes
    if source.credentials_secret and namespace:
        entry["credentials"] = {"namespace": namespace, "name": source.credentials_secret}
    return entry


def node_specs(pools: Iterable[PoolNodes], wants: Iterable[Want]) -> dict[str, dict[str, Any]]:
    """Each pool node's ModelCacheNode ``spec``: its pool, the pool's hostPath and capacity, and
    the copies wanted there (one entry a key, its reasons merged), Placed first, then Forecast,
    then KeepWarm, then by key. Nodes of no pool with a cache want nothing and are left out; a
    node in several pools is the first pool's."""
    specs: dict[str, dict[str, Any]] = {}
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    for p in pools:
        for n in p.nodes:
            if n in specs:
                continue
            spec: dict[str, Any] = {"pool": p.name, "hostPath": p.policy.host_path, "models": []}
            if p.policy.capacity_bytes:
                spec["capacityBytes"] = p.policy.capacity_bytes
            specs[n] = spec
            by_key[n] = {}
    for w in wants:
        if not w.source.cached:
            continue
        for n in w.nodes:
            if n not in specs:
                continue
            entry = _entry(w.source, w.namespace)
            entry = by_key[n].setdefault(entry["key"], entry)
            if w.reason.value not in entry["reasons"]:
                entry["reasons"].append(w.reason.value)
    for n, entries in by_key.items():
        for e in entries.values():
            e["reasons"].sort(key=_ORDER.__getitem__)
        specs[n]["models"] = sorted(entries.values(), key=lambda e: (_ORDER[e["reasons"][0]], e["key"]))
    return specs
