"""kubeforge.modelcache: the pure decisions of the node model caches (issue 29).

No I/O, no clock: the runtime and the node agent (:mod:`kubeforge.cacheagent`) hand it what
they read.

* :func:`cache_key` names a node copy (one per pinned source and sharing scope) and
  :func:`listing_digest` pins an ``s3://`` / ``gs://`` source; :func:`cache_state` reads the
  ModelCacheNode statuses;
* :func:`place_preferring_cache` is placement's scoring step: nodes that hold the model first,
  their domains next, the whole pool last (prefer, never require);
* :func:`node_specs` is what each node should hold (replicas placed, forecasts, keepWarm);
* :func:`choose_evictions` makes room, least recently used first;
* :func:`pool_models` and :func:`group_weights` are what the statuses say.
"""

from ._evict import Held, choose_evictions
from ._keys import (
    DOWNLOADING, FAILED, PENDING, READY, READY_MARKER, CacheState, CopyState, NodeCache, cache_key, cache_state, listing_digest,
    node_cache_from_k8s, ready_nodes, short_name,
)
from ._prefer import Placer, Preferred, place_preferring_cache
from ._status import group_weights, pool_models
from ._wants import PoolNodes, Want, keep_warm_nodes, node_specs, pool_wants

__all__ = [
    "DOWNLOADING", "FAILED", "PENDING", "READY", "READY_MARKER",
    "CacheState", "CopyState", "Held", "NodeCache", "node_cache_from_k8s", "Placer", "PoolNodes", "Preferred", "Want",
    "cache_key", "cache_state", "choose_evictions", "group_weights", "keep_warm_nodes", "listing_digest",
    "node_specs", "place_preferring_cache", "pool_models", "pool_wants", "ready_nodes", "short_name",
]
