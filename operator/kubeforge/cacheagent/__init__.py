"""The kubeforge node cache agent (issue 29): ``kubeforge cache-agent``, one a GPU node (the
chart's DaemonSet), holds the model copies its node's ModelCacheNode spec asks for.

It reads the spec (what to hold, in order), makes room by the pure LRU choice of
:func:`kubeforge.modelcache.choose_evictions`, downloads each copy once per node into the pool's
hostPath (an ``flock`` per copy: concurrent requests on one node never download twice), verifies
it, writes the ready marker last, and writes the ModelCacheNode status per copy: Pending,
Downloading n %, Ready, or Failed with a reason. Credentials come from the Secret the spec names
and are never logged.

Layers: :mod:`._report` builds the status (no I/O); :mod:`._fetch` (one maintained library a
scheme: huggingface_hub, the MinIO SDK, ORAS), :mod:`._store` (the disk), :mod:`._kube` (the API
server), :mod:`._agent` and :mod:`._main` do the I/O. The decisions live in
:mod:`kubeforge.modelcache`.
"""

from ._agent import CacheAgent
from ._fetch import Fetched, FetchError, Source, fetch, folder_bytes
from ._kube import CacheApi, KubeCacheApi, SecretMissing, decode_secret
from ._main import serve
from ._report import Copy, node_status
from ._store import CopyMeta, NodeStore

__all__ = [
    "CacheAgent", "CacheApi", "Copy", "CopyMeta", "Fetched", "FetchError", "KubeCacheApi", "NodeStore",
    "SecretMissing", "Source", "decode_secret", "fetch", "folder_bytes", "node_status", "serve",
]
