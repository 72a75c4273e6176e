"""The node caches of the replay: what each node holds, when each copy is complete, what was
downloaded, and LRU eviction through kubeforge's :func:`kubeforge.modelcache.choose_evictions`.

Two kinds of copy:

* a **node copy** (kubeforge, with or without preference; KServe's LocalModelNodeGroup): one per
  node and model, fetched once, shared by every replica on the node, kept until the cache needs
  its room and nobody uses it (least recently used first);
* a **pod copy** (KServe's storage initializer into the pod's emptyDir): fetched by the pod for
  itself, gone when the pod goes; never shared, never reused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kubeforge.modelcache import Held, choose_evictions
from kubeforge.sim.weights import WeightTimes, download_seconds, start_seconds

__all__ = ["Copy", "NodeCaches"]


@dataclass
class Copy:
    """One node copy: its size, when it is complete (seconds of the day), when a replica last
    used it, and how many replicas use it now."""

    size: int
    ready_at: float
    last_used: float
    users: int = 0


@dataclass
class NodeCaches:
    """Every node's copies and the day's download counts.

    Attributes:
        capacity: Bytes a node's cache holds (None: no limit).
        times: The start-time model.
        copies: node -> model key -> :class:`Copy`.
        downloads: (node, key) -> downloads on that node (node and pod copies alike).
        refetches: (node, key) -> downloads of a copy this node had held and evicted.
        evicted: (node, key) pairs evicted at least once.
        bytes: Bytes downloaded in the day (node and pod copies).
        prewarm_bytes: Bytes fetched before the day (KServe's node group).
        disk_full: Starts whose node could not make room (they read a pod copy instead).
        warmed: Copies fetched ahead of a replica (:meth:`warm`).
    """

    capacity: int | None
    times: WeightTimes
    copies: dict[str, dict[str, Copy]] = field(default_factory=dict)
    downloads: Counter = field(default_factory=Counter)
    refetches: Counter = field(default_factory=Counter)
    evicted: set = field(default_factory=set)
    bytes: int = 0
    prewarm_bytes: int = 0
    disk_full: int = 0
    warmed: int = 0

    def ready(self, key: str, now: float) -> frozenset[str]:
        """Nodes holding a complete copy of ``key`` at ``now`` (ModelCacheNode phase Ready)."""
        return frozenset(n for n, held in self.copies.items() if (c := held.get(key)) and c.ready_at <= now)

    def has(self, node: str, key: str) -> bool:
        """``node`` holds or is fetching ``key``."""
        return key in self.copies.get(node, {})

    def prewarm(self, node: str, key: str, size: int) -> bool:
        """Put a complete copy on ``node`` before the day; False when it does not fit."""
        if not self._make_room(node, size, -1.0):
            return False
        self.copies.setdefault(node, {})[key] = Copy(size, -1.0, -1.0)
        self.prewarm_bytes += size
        return True

    def _make_room(self, node: str, need: int, now: float) -> bool:
        held = self.copies.setdefault(node, {})
        hs = [Held(k, c.size, c.last_used, c.users > 0 or c.ready_at > now) for k, c in held.items()]
        out = choose_evictions(hs, self.capacity, need)
        if out is None:
            return False
        for k in out:
            del held[k]
            self.evicted.add((node, k))
        return True

    def start_on_node(self, node: str, key: str, size: int, now: float) -> tuple[float, bool, bool]:
        """A replica's pod starts on ``node`` using the node copy: (seconds to serving-ready, whether
        the copy was complete, whether the pod uses the node copy). Fetches the copy when the node
        has none (one download a node; a start that finds a download under way waits for it);
        counts the pod as a user. A node that cannot make room (every copy in use) lets the pod
        fetch a copy of its own rather than wait."""
        held = self.copies.setdefault(node, {})
        c = held.get(key)
        if c is None:
            if not self._make_room(node, size, now):
                self.disk_full += 1
                return self.start_pod_copy(node, key, size), False, False
            c = held[key] = Copy(size, now + download_seconds(size, self.times), now)
            self._count(node, key, size)
        c.users += 1
        c.last_used = now
        if c.ready_at <= now:
            return start_seconds(size, True, self.times), True, True
        return start_seconds(size, False, self.times, wait_s=c.ready_at - now), False, True

    def warm(self, node: str, key: str, size: int, now: float) -> bool:
        """Start fetching ``key`` onto ``node`` ahead of a replica (a Forecast want); False when the
        node holds or fetches it already, or has no room."""
        if self.has(node, key) or not self._make_room(node, size, now):
            return False
        self.copies[node][key] = Copy(size, now + download_seconds(size, self.times), now)
        self._count(node, key, size)
        self.warmed += 1
        return True

    def fetching_or_ready(self, key: str) -> frozenset[str]:
        """Nodes holding or fetching ``key``."""
        return frozenset(n for n, held in self.copies.items() if key in held)

    def release(self, node: str, key: str, now: float) -> None:
        """A pod that used ``node``'s copy of ``key`` is gone."""
        c = self.copies.get(node, {}).get(key)
        if c is not None and c.users > 0:
            c.users -= 1
            c.last_used = now

    def start_pod_copy(self, node: str, key: str, size: int) -> float:
        """A pod fetches its own copy (an emptyDir): always a cold start, always a download."""
        self._count(node, key, size)
        return start_seconds(size, False, self.times)

    def _count(self, node: str, key: str, size: int) -> None:
        if (node, key) in self.evicted:
            self.refetches[(node, key)] += 1
        self.downloads[(node, key)] += 1
        self.bytes += size
