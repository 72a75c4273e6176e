"""The node model caches the operator asks for (issue 29): which ModelCacheNode specs to write
and what each pool's ``status.models`` says. Pure: the runtime reads the snapshot, the pools'
views and the ModelCacheNode objects it knows, calls :func:`plan_node_caches`, and applies.

What a node should hold is :func:`kubeforge.modelcache.node_specs` of the wants:

* ``Placed``: every node of a replica group of a service with a cached ``spec.model`` (the
  groups in its status that hold nodes, and the groups admission placed that the status does
  not show yet), so a cold replica's node fetches its copy first;
* ``Forecast`` (``spec.modelCache.warmAhead``): when predictive scale-up forecasts more replicas
  (``status.forecast.replicas``) than the service has groups, the nodes the next ones would most
  likely get: placement (preferring the cache, as admission does) of up to
  :data:`MAX_WARM_AHEAD` more groups on what the pool has free now, so their weights are
  there before the scale-up is asked for;
* ``KeepWarm``: the pools' ``spec.modelCache.keepWarm`` entries.

A ModelCacheNode is written only where it matters: a node that some want names, or one whose
object exists already (its wants then go to none; the agent keeps the copies until the cache
needs their room, LRU, so a later replica may still start cached). A pool with no service
naming a model writes nothing, so a 5,000-node fleet that never uses the cache costs no object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kubeforge.api import WantReason
from kubeforge.modelcache import (
    READY, CacheState, PoolNodes, Want, cache_key, node_specs, place_preferring_cache, pool_models, pool_wants,
    ready_nodes,
)
from kubeforge.objects import groups_of
from kubeforge.placement import Placement, place_gang

from ._pools import PoolView
from ._request import group_request, group_shape
from ._snapshot import Snapshot


MAX_WARM_AHEAD = 2
"""At most this many forecast replicas are warmed ahead per service: a forecast's error grows with
what it adds, and each warmed group costs a download per node."""


@dataclass(frozen=True)
class NodeCachePlan:
    """What the runtime writes for the node caches.

    Attributes:
        writes: node -> the ModelCacheNode ``spec`` to create (``node`` not in ``existing``) or
            to replace (it differs from the object's).
        models: pool -> ``(status.models rows, status.modelsSummary)``
            (:func:`kubeforge.modelcache.pool_models`).
        deletes: ModelCacheNodes whose node is gone (the operator made them; nothing else owns
            them: a spot fleet's churn must not leave one per node that ever existed).
    """

    writes: dict[str, dict[str, Any]] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    models: dict[str, tuple[list[dict[str, Any]], str | None]] = field(default_factory=dict)


def _pool_nodes(view: PoolView, caches: CacheState, existing: Mapping[str, Mapping[str, Any]]) -> PoolNodes:
    widest = view.levels[-1].node_label if view.levels else None
    names = tuple(n.name for n in view.nodes)
    domain = {n.name: n.labels.get(widest, "") for n in view.nodes} if widest else {}
    free = {n.name: max(0, n.gpus_allocatable - n.gpus_allocated) for n in view.nodes}
    held = {n: frozenset(k for k, c in (caches.get(n) or {}).items() if c.phase == READY) for n in names}
    kept = {n: frozenset(m.get("key") for m in (existing.get(n) or {}).get("models") or []
                         if WantReason.KEEP_WARM.value in (m.get("reasons") or [])) for n in names}
    return PoolNodes(view.name, view.record.spec.model_cache, names, domain, free, kept,  # type: ignore[union-attr]
                     held)


def placed_wants(snapshot: Snapshot) -> list[Want]:
    """One ``Placed`` want per (service with a cached ``spec.model``, pool): the nodes of its
    groups that hold nodes, from its status and from admission's assumed groups."""
    nodes: dict[tuple[Any, str], list[str]] = {}
    for key, svc in sorted(snapshot.services.items()):
        model = svc.spec.model if svc.spec is not None else None
        if model is None or not model.cached:
            continue
        for g in groups_of(svc.status):
            if g.nodes and g.pool:
                nodes.setdefault((key, g.pool), []).extend(g.nodes)
        for (k, _), a in sorted(snapshot.assumed_groups.items()):
            if k == key:
                nodes.setdefault((key, a.placement.pool), []).extend(a.placement.nodes)
    out = []
    for (key, pool), names in nodes.items():
        svc = snapshot.services[key]
        out.append(Want(pool, sorted(set(names)), svc.spec.model, svc.namespace, WantReason.PLACED))  # type: ignore
    return out


def forecast_wants(snapshot: Snapshot, views: Mapping[str, PoolView]) -> list[Want]:
    """One ``Forecast`` want per service whose forecast exceeds its groups, in its first pool
    with a view and ``warmAhead``: the nodes of up to :data:`MAX_WARM_AHEAD` more groups, placed
    as admission would place them now (nodes holding the model first); none when they do not fit."""
    out = []
    for key, svc in sorted(snapshot.services.items()):
        spec = svc.spec
        model = spec.model if spec is not None else None
        forecast = (svc.status or {}).get("forecast") or {}
        if model is None or not model.cached or not isinstance(forecast.get("replicas"), int):
            continue
        groups = sum(1 for g in groups_of(svc.status) if g.nodes) + \
            sum(1 for (k, _) in snapshot.assumed_groups if k == key)
        extra = min(MAX_WARM_AHEAD, forecast["replicas"] - groups)
        view = next((views[p] for p in spec.pools if p in views), None)  # type: ignore[union-attr]
        if extra <= 0 or view is None or view.record.spec is None or not view.record.spec.model_cache.warm_ahead:
            continue
        shape = group_shape(svc, view)
        if isinstance(shape, str):
            continue
        ready = ready_nodes(snapshot.model_caches, cache_key(model, svc.namespace))
        taken: dict[str, int] = {}
        nodes: set[str] = set()
        for _ in range(extra):
            got = place_preferring_cache(place_gang, group_request(svc, view, shape), view.nodes, view.levels,
                                         taken, ready).result
            if not isinstance(got, Placement):
                break
            for node, gpus in got.gpus_by_node.items():
                taken[node] = taken.get(node, 0) + gpus
            nodes.update(got.nodes)
        if nodes:
            out.append(Want(view.name, sorted(nodes), model, svc.namespace, WantReason.FORECAST))
    return out


def plan_node_caches(snapshot: Snapshot, views: Mapping[str, PoolView],
                     existing: Mapping[str, Mapping[str, Any]]) -> NodeCachePlan:
    """The ModelCacheNode specs to write and each pool's model counts.

    Args:
        snapshot: The round's snapshot (services, assumed groups, ``model_caches``: the
            nodes' copies from the ModelCacheNode statuses).
        views: The pools' views by name (their nodes, levels and free GPUs); pools without a
            view (no spec) are left out.
        existing: node -> the ``spec`` of its ModelCacheNode object, for the nodes that have one.

    Returns:
        A :class:`NodeCachePlan`; ``writes`` is empty when every object already says what it
        should (this runs every 2 s: a plan that changes nothing writes nothing).
    """
    pools = [_pool_nodes(views[name], snapshot.model_caches, existing) for name in sorted(views) if views[name].record.spec is not None]
    wants = placed_wants(snapshot) + forecast_wants(snapshot, views) + pool_wants(pools)
    if not wants and not existing:
        return NodeCachePlan()  # no model anywhere: a fleet that never caches pays one scan of the services
    specs = node_specs(pools, wants)
    writes = {}
    for node, spec in specs.items():
        current = existing.get(node)
        if current is None and not spec["models"]:
            continue  # nothing wanted and no object: write none
        if current is None or dict(current) != spec:
            writes[node] = spec
    models: dict[str, tuple[list[dict[str, Any]], str | None]] = {}
    for p in pools:
        models[p.name] = pool_models(p.nodes, {n: specs.get(n) or existing.get(n) or {} for n in p.nodes},
                                     snapshot.model_caches)
    deletes = sorted(n for n in existing if n not in snapshot.nodes)
    return NodeCachePlan(writes=writes, deletes=deletes, models=models)
