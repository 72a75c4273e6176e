"""Names of node copies: one key per (pinned source, sharing scope), the model's short name, the
S3 / GCS listing digest, and the node copies' state as placement and status read it. Pure."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kubeforge.api import ModelSource

READY = "Ready"
DOWNLOADING = "Downloading"
PENDING = "Pending"
FAILED = "Failed"
READY_MARKER = ".kubeforge-ready"
"""The file the agent writes last in a copy's directory, once verified: a pod (or anyone) that
sees it knows the copy is whole."""


def short_name(uri: str) -> str:
    """The model's short name: the last part of its URI without a tag or digest
    (``hf://meta-llama/Llama-3.1-8B`` -> ``Llama-3.1-8B``)."""
    path = uri.split("://", 1)[-1].rstrip("/")
    last = path.rsplit("/", 1)[-1]
    return re.split(r"[@:]", last, maxsplit=1)[0] or path


def cache_key(source: ModelSource, namespace: str | None = None) -> str:
    """The key of ``source``'s copy on a node: a DNS label (the copy's directory name),
    ``<short name>-<12 hex>`` where the hex hashes the URI, revision and digest, and the namespace
    when the source needs a Secret (a private model's copy is shared within that namespace only;
    a public one by the whole cluster).

    Args:
        source: The pinned source.
        namespace: The namespace of the service (or of the keepWarm entry).
    """
    scope = namespace if source.credentials_secret else ""
    raw = "\n".join((source.uri, source.revision or "", source.digest or "", scope or ""))
    digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
    slug = re.sub(r"[^a-z0-9-]+", "-", short_name(source.uri).lower()).strip("-")[:48].strip("-") or "model"
    return f"{slug}-{digest}"


def listing_digest(objects: Iterable[tuple[str, int, str]]) -> str:
    """``sha256:<hex>`` of an object listing: one line ``KEY SIZE ETAG`` per object (keys relative
    to the model's prefix, ETags without quotes), sorted by key. What ``spec.model.digest`` pins for
    ``s3://`` and ``gs://`` sources."""
    lines = sorted(f"{k} {int(s)} {e.strip(chr(34))}" for k, s, e in objects)
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


@dataclass(frozen=True)
class CopyState:
    """One copy on one node as its ModelCacheNode status says.

    Attributes:
        phase: Pending, Downloading, Ready or Failed.
        progress: Percent downloaded (0-100).
        bytes: Bytes on the node's disk.
        reason: Why it failed, or None.
    """

    phase: str
    progress: int = 0
    bytes: int = 0
    reason: str | None = None


CacheState = Mapping[str, Mapping[str, CopyState]]
"""node -> key -> the copy's state (nodes without a ModelCacheNode status are absent)."""


def cache_state(statuses: Mapping[str, Mapping]) -> dict[str, dict[str, CopyState]]:
    """The :data:`CacheState` of ModelCacheNode statuses (node name -> ``status`` dict)."""
    out: dict[str, dict[str, CopyState]] = {}
    for node, status in statuses.items():
        copies = {}
        for m in (status or {}).get("models") or []:
            if m.get("key"):
                copies[m["key"]] = CopyState(str(m.get("phase") or PENDING), int(m.get("progressPercent") or 0),
                                             int(m.get("bytes") or 0), m.get("reason"))
        out[node] = copies
    return out


@dataclass(frozen=True)
class NodeCache:
    """A ModelCacheNode as the operator's index keeps it.

    Attributes:
        spec: Its ``spec`` as written (what the operator compares its plan with).
        copies: key -> the copy's state, from its ``status`` (empty before the agent's first write).
        heartbeat: The agent's last write (``status.heartbeat``, RFC 3339), or None.
    """

    spec: Mapping[str, Any]
    copies: Mapping[str, CopyState]
    heartbeat: str | None = None


def node_cache_from_k8s(body: Mapping[str, Any]) -> NodeCache:
    """The :class:`NodeCache` of a ModelCacheNode object (a dict)."""
    name = (body.get("metadata") or {}).get("name") or ""
    status = body.get("status") or {}
    return NodeCache(dict(body.get("spec") or {}), cache_state({name: status}).get(name, {}), status.get("heartbeat"))


def ready_nodes(state: CacheState, key: str) -> frozenset[str]:
    """The nodes holding a verified copy of ``key``."""
    return frozenset(n for n, copies in state.items() if (c := copies.get(key)) is not None and c.phase == READY)
