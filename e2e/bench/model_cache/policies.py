"""Where each policy places a replica, and how its pods get their weights.

* ``kubeforge``: :func:`kubeforge.modelcache.place_preferring_cache` in front of
  :func:`kubeforge.placement.place_gang` (the admission step's call): nodes holding a complete
  copy first, their NVLink domains next (groups), the whole pool last. Pods use the node copy
  (one download a node, shared, LRU-evicted when the cache needs room).
  It also warms ahead (the issue's Forecast want, :func:`warm_target`): when a service's target
  rose at the last tick (a trend forecast: the next ticks likely ask for more), the nodes its
  next replicas would use (up to the operator's ``MAX_WARM_AHEAD``, 2, as its Forecast want
  does) get a copy now, if they hold none.
* ``kubeforge-no-warm``: the same placement without the warming, to show what each part buys.
* ``kubeforge-no-preference``: the same node caches, the same placement without the cache's
  tiers (plain ``place_gang``): caches fill where replicas happen to land.
* ``kserve-localmodelcache``: KServe's LocalModelCache as its docs describe it
  (kserve.github.io, "KServe Local Model Cache"): LocalModelCache resources name the models,
  one LocalModelNodeGroup (here the first 16 nodes, two NVLink domains, 2 TB each; the docs'
  example sets ``storageLimit: 1.7T``) is filled before the day by the node agent, as many models as fit,
  largest first. Placement is kube-scheduler's, cache-blind: the node with the most free GPUs
  (NodeResourcesFit LeastAllocated), ties at random; a group's pods on any distinct nodes (no
  topology). A pod on a group node whose model is cached starts cached; any other pod runs the
  storage initializer (an init container downloading into an emptyDir, kserve.github.io
  "Storage Containers"): cold, every time, never shared, never kept. This is generous to KServe:
  with a LocalModelCache the real pods mount the group's PVC and may not schedule off the group
  at all (kserve#5914); here they always may.
* ``oracle``: ``kubeforge-no-preference``'s placement, and every start as if cached (the
  physical bound: local read and engine init only); nothing downloaded.
"""

from __future__ import annotations

import random
from typing import Sequence

from kubeforge.admission import MAX_WARM_AHEAD
from kubeforge.modelcache import place_preferring_cache
from kubeforge.placement import GangRequest, NodeInfo, NoFit, Placement, Result, place_gang

from e2e.bench.model_cache.workload import LEVELS, Service

__all__ = ["POLICIES", "PREFERRING", "WARMING", "place", "request", "spread", "warm_target"]

POLICIES = ("kubeforge", "kubeforge-no-warm", "kubeforge-no-preference", "kserve-localmodelcache", "oracle")
PREFERRING = ("kubeforge", "kubeforge-no-warm")
"""The policies that place through :func:`place_preferring_cache`."""
WARMING = ("kubeforge",)
"""The policies that warm a node ahead of a predicted scale-up (the issue's Forecast want)."""


def request(svc: Service) -> GangRequest:
    """One replica of ``svc`` as the admission step asks for it: one pod anywhere, or a group of
    pods one per node inside one NVLink domain."""
    if svc.pods == 1:
        return GangRequest(1, svc.gpus, mode="None")
    return GangRequest(svc.pods, svc.gpus, mode="Required", level="nvlink", one_per_node=True)


def spread(req: GangRequest, nodes: Sequence[NodeInfo], rng: random.Random) -> Result:
    """kube-scheduler's default choice for each pod in turn: a node with room, the most free GPUs
    first, ties at random; the pods of a group on distinct nodes (all or none)."""
    free = {n.name: n.gpus_free for n in nodes if n.usable}
    chosen: list[str] = []
    for _ in range(req.replicas):
        fits = [n for n, f in free.items() if f >= req.gpus_per_replica and n not in chosen]
        if not fits:
            return NoFit(f"no node has {req.gpus_per_replica} free GPUs", None, req.gpus_per_replica)
        top = max(free[n] for n in fits)
        node = rng.choice(sorted(n for n in fits if free[n] == top))
        free[node] -= req.gpus_per_replica
        chosen.append(node)
    return Placement(None, None, tuple(chosen), {n: req.gpus_per_replica for n in chosen}, "spread")


def place(policy: str, svc: Service, nodes: Sequence[NodeInfo], ready: frozenset[str],
          rng: random.Random) -> tuple[Result, bool]:
    """``policy``'s placement of one replica of ``svc`` on ``nodes``, and whether it failed only
    because of the cache (a NoFit where the whole pool's placement fits: must never happen)."""
    req = request(svc)
    if policy == "kserve-localmodelcache":
        return spread(req, nodes, rng), False
    if policy in PREFERRING:
        result = place_preferring_cache(place_gang, req, nodes, LEVELS, {}, ready).result
        if isinstance(result, NoFit):
            return result, isinstance(place_gang(req, nodes, LEVELS), Placement)
        return result, False
    return place_gang(req, nodes, LEVELS), False


def warm_target(svc: Service, nodes: Sequence[NodeInfo], fetching: frozenset[str],
                ahead: int = MAX_WARM_AHEAD) -> tuple[str, ...]:
    """The nodes that should fetch ``svc``'s model now so that its next ``ahead`` replicas start
    cached (the operator's :data:`kubeforge.admission.MAX_WARM_AHEAD`, 2): where they would be
    placed one after the other (preferring nodes that hold or fetch a copy), less those that
    hold or fetch one; fewer when they do not fit."""
    taken: dict[str, int] = {}
    out: list[str] = []
    for _ in range(ahead):
        result = place_preferring_cache(place_gang, request(svc), nodes, LEVELS, taken, fetching).result
        if not isinstance(result, Placement):
            break
        for node, gpus in result.gpus_by_node.items():
            taken[node] = taken.get(node, 0) + gpus
        out += [n for n in result.nodes if n not in fetching and n not in out]
    return tuple(out)
