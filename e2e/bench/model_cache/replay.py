"""One policy's day: 5-minute ticks of scale-ups, scale-downs and training gangs, the node
caches, and every replica start with its time. Pure and deterministic for a seed.

Each tick, in this order: training gangs that ended free their GPUs; each service (in
:data:`~e2e.bench.model_cache.workload.SERVICES`' order) scales up to its target, one replica
at a time until one does not fit, or down by one replica (the newest); then arrived training
gangs are placed, oldest first, those that do not fit wait (serving goes first). A replica's
start time is its slowest pod's (:mod:`kubeforge.sim.weights`); it is cached when every pod's
node held a complete copy when it was placed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cache

from kubeforge.api import ModelSource
from kubeforge.admission import MAX_WARM_AHEAD
from kubeforge.modelcache import cache_key
from kubeforge.placement import GangRequest, NodeInfo, Placement, place_gang
from kubeforge.sim.weights import DEFAULT_TIMES, WeightTimes, start_seconds

from e2e.bench.model_cache.caches import NodeCaches
from e2e.bench.model_cache.policies import WARMING, place, warm_target
from e2e.bench.model_cache.workload import (
    GPUS_PER_NODE, LEVELS, SERVICES, TICK, Service, Training, demand, fleet_labels, training_stream,
)

__all__ = ["Day", "Start", "key_of", "make_day", "run_policy"]

CAPACITY = 2_000_000_000_000
"""Bytes a node's cache holds (2 TB; KServe's docs' node group has ``storageLimit: 1.7T``)."""
KSERVE_GROUP = 16
"""Nodes of KServe's LocalModelNodeGroup (two NVLink domains)."""


@dataclass(frozen=True)
class Start:
    """One replica start: seconds of the day, service, nodes, seconds to ready, cached or not."""

    t: float
    service: str
    nodes: tuple[str, ...]
    seconds: float
    cached: bool


@dataclass(frozen=True)
class Day:
    """The inputs every policy replays: fleet, targets per service and tick, training gangs."""

    nodes: int
    hours: float
    seed: int
    labels: dict
    targets: dict
    training: tuple[Training, ...]


@dataclass
class _State:
    used: dict[str, int]
    replicas: dict[str, list[tuple[tuple[str, ...], tuple[bool, ...]]]] = field(default_factory=dict)
    running: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    queue: list[Training] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    short: int = 0
    because_of_cache: int = 0
    train_waits: list[float] = field(default_factory=list)
    serving_gpu_s: float = 0.0


@cache
def key_of(svc: Service) -> str:
    """The node copy's key of ``svc``'s model (kubeforge's :func:`cache_key`)."""
    return cache_key(ModelSource(uri=svc.uri, size_bytes=svc.size, digest="sha256:" + "0" * 64))


def make_day(nodes: int = 64, hours: float = 24.0, seed: int = 1) -> Day:
    """The day of ``seed`` on ``nodes`` nodes (see :mod:`e2e.bench.model_cache.workload`)."""
    rng = random.Random(seed)
    targets = {s.name: demand(s, hours, rng) for s in SERVICES}
    return Day(nodes, hours, seed, fleet_labels(nodes), targets, tuple(training_stream(nodes, hours, rng)))


def _nodes(day: Day, st: _State) -> list[NodeInfo]:
    return [NodeInfo(n, lab, GPUS_PER_NODE, st.used.get(n, 0)) for n, lab in day.labels.items()]


def _take(st: _State, gpus_by_node, sign: int) -> None:
    for n, g in gpus_by_node.items():
        st.used[n] = st.used.get(n, 0) + sign * g


def _pod_start(policy: str, caches: NodeCaches, svc: Service, key: str, node: str, now: float,
               group: frozenset[str]) -> tuple[float, bool, bool]:
    """(seconds, cached, uses the node copy) of one pod of ``svc`` on ``node``."""
    if policy == "oracle":
        return start_seconds(svc.size, True, caches.times), True, False
    if policy == "kserve-localmodelcache" and not (node in group and caches.has(node, key)):
        return caches.start_pod_copy(node, key, svc.size), False, False
    return caches.start_on_node(node, key, svc.size, now)


def _scale(policy: str, day: Day, st: _State, caches: NodeCaches, svc: Service, target: int, now: float,
           rng: random.Random, group: frozenset[str]) -> None:
    key = key_of(svc)
    reps = st.replicas.setdefault(svc.name, [])
    if target < len(reps):
        nodes, shared = reps.pop()
        _take(st, {n: svc.gpus for n in nodes}, -1)
        for n, s in zip(nodes, shared):
            if s:
                caches.release(n, key, now)
        return
    while len(reps) < target:
        result, cache_only = place(policy, svc, _nodes(day, st), caches.ready(key, now), rng)
        if not isinstance(result, Placement):
            st.short += target - len(reps)
            st.because_of_cache += int(cache_only)
            return
        _take(st, result.gpus_by_node, +1)
        pods = [_pod_start(policy, caches, svc, key, n, now, group) for n in result.nodes]
        reps.append((result.nodes, tuple(p[2] for p in pods)))
        st.starts.append(Start(now, svc.name, result.nodes, max(p[0] for p in pods), all(p[1] for p in pods)))


def _warm(day: Day, st: _State, caches: NodeCaches, k: int, now: float) -> None:
    """Forecast wants: a service whose target rose at this tick and is met gets its next
    replicas' nodes warmed (up to ``MAX_WARM_AHEAD``, as the operator's Forecast want) (see :func:`e2e.bench.model_cache.policies.warm_target`)."""
    for svc in SERVICES:
        targets = day.targets[svc.name]
        if k == 0 or targets[k] <= targets[k - 1] or targets[k] >= svc.max:
            continue
        if len(st.replicas.get(svc.name, [])) < targets[k]:
            continue
        key = key_of(svc)
        ahead = min(MAX_WARM_AHEAD, svc.max - targets[k])
        for node in warm_target(svc, _nodes(day, st), caches.fetching_or_ready(key), ahead):
            caches.warm(node, key, svc.size, now)


def _training(day: Day, st: _State, now: float, arrived: list[Training]) -> None:
    st.queue.extend(arrived)
    waiting = []
    for job in st.queue:
        req = GangRequest(job.pods, job.gpus, mode="Preferred" if job.pods > 1 else "None",
                          level="nvlink" if job.pods > 1 else None, one_per_node=job.pods > 1)
        result = place_gang(req, _nodes(day, st), LEVELS)
        if isinstance(result, Placement):
            _take(st, result.gpus_by_node, +1)
            begin = job.arrival if job.arrival < 0 else now
            st.running.append((begin + job.run_s, dict(result.gpus_by_node)))
            st.train_waits.append(max(0.0, now - max(job.arrival, 0.0)))
        else:
            waiting.append(job)
    st.queue = waiting


def _prewarm(policy: str, day: Day, caches: NodeCaches) -> frozenset[str]:
    """KServe's node group, filled before the day (largest models first, as many as fit)."""
    if policy != "kserve-localmodelcache":
        return frozenset()
    group = frozenset(list(day.labels)[:KSERVE_GROUP])
    for node in sorted(group):
        room = caches.capacity or 0
        for svc in sorted(SERVICES, key=lambda s: -s.size):
            if svc.size <= room and caches.prewarm(node, key_of(svc), svc.size):
                room -= svc.size
    return group


def run_policy(policy: str, day: Day, times: WeightTimes = DEFAULT_TIMES,
               capacity: int | None = CAPACITY) -> dict:
    """Replay ``day`` under ``policy``; returns its starts, the caches and the side figures."""
    rng = random.Random(day.seed * 7919 + 1)
    caches = NodeCaches(capacity, times)
    group = _prewarm(policy, day, caches)
    st = _State({})
    pending = sorted(day.training, key=lambda j: j.arrival)
    ticks = len(next(iter(day.targets.values())))
    for k in range(ticks):
        now = k * TICK
        for end, gpus in [r for r in st.running if r[0] <= now]:
            st.running.remove((end, gpus))
            _take(st, gpus, -1)
        if k == 0:  # the steady state of the training stream is running when the day starts
            warm = [j for j in pending if j.arrival <= 0]
            pending = pending[len(warm):]
            _training(day, st, 0.0, warm)
            st.train_waits.clear()
            st.queue.clear()
        for svc in SERVICES:
            _scale(policy, day, st, caches, svc, day.targets[svc.name][k], now, rng, group)
        if policy in WARMING:
            _warm(day, st, caches, k, now)
        arrived = [j for j in pending if j.arrival <= now]
        pending = pending[len(arrived):]
        _training(day, st, now, arrived)
        st.serving_gpu_s += TICK * sum(len(r) * s.gpus * s.pods for s in SERVICES
                                       for r in [st.replicas.get(s.name, [])])
    return {"policy": policy, "starts": st.starts, "caches": caches, "short": st.short,
            "because_of_cache": st.because_of_cache, "train_waits": st.train_waits,
            "train_queued_at_end": len(st.queue), "serving_gpu_h": st.serving_gpu_s / 3600, "group": group}
