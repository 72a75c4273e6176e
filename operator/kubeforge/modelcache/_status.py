"""What the statuses say of the caches: a pool's count of nodes per model (``status.models`` and
the ``Models`` column of ``kubectl get gpupool``) and a replica group's weights
(``status.groups[].weights``). Pure."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from ._keys import DOWNLOADING, FAILED, PENDING, READY, CacheState, short_name

MAX_SUMMARY = 256


def pool_models(nodes: Sequence[str], specs: Mapping[str, Mapping[str, Any]],
                state: CacheState) -> tuple[list[dict[str, Any]], str | None]:
    """Each model wanted or held on the pool's ``nodes``: ``{name, uri, key, ready, downloading,
    failed}`` (nodes by the state of their copy), most nodes ready first, and the summary
    ``NAME READY/NODES, ...`` (None when no model), at most 256 characters."""
    uris: dict[str, str] = {}
    for n in nodes:
        for m in (specs.get(n) or {}).get("models") or []:
            uris.setdefault(m["key"], m["uri"])
    counts: dict[str, dict[str, int]] = {}
    for n in nodes:
        for key, copy in (state.get(n) or {}).items():
            c = counts.setdefault(key, {"ready": 0, "downloading": 0, "failed": 0})
            if copy.phase == READY:
                c["ready"] += 1
            elif copy.phase in (DOWNLOADING, PENDING):
                c["downloading"] += 1
            elif copy.phase == FAILED:
                c["failed"] += 1
    for key in uris:
        counts.setdefault(key, {"ready": 0, "downloading": 0, "failed": 0})
    rows = [{"name": short_name(uris.get(k, k)), "uri": uris.get(k, ""), "key": k, **c} for k, c in counts.items()]
    rows.sort(key=lambda r: (-r["ready"], r["name"], r["key"]))
    if not rows:
        return [], None
    parts = [f"{r['name']} {r['ready']}/{len(nodes)}" for r in rows]
    summary = ", ".join(parts)
    if len(summary) > MAX_SUMMARY:
        summary = summary[:MAX_SUMMARY - 3] + "..."
    return rows, summary


def group_weights(previous: Mapping[str, Any] | None, nodes: Iterable[str], key: str, state: CacheState,
                  ready: bool) -> dict[str, Any] | None:
    """A group's ``weights`` (:class:`~kubeforge.api.GroupWeights`): its source, fixed the first
    time it is computed with nodes (Cached when every node held a verified copy then, else Cold),
    and its phase: Downloading (a node's copy is not Ready: the slowest node's percent), then
    LoadingWeights until the group is Ready, then Loaded. None for a group without nodes. While a
    node's copy is Failed, ``message`` names the nodes and the agent's reasons.

    Args:
        previous: The group's last ``weights``, or None.
        nodes: The group's nodes.
        key: The model's cache key.
        state: The nodes' copies.
        ready: The group is Ready (every pod Running, the leader Ready).
    """
    nodes = list(nodes)
    if not nodes:
        return None
    copies = [(state.get(n) or {}).get(key) for n in nodes]
    all_ready = all(c is not None and c.phase == READY for c in copies)
    source = (previous or {}).get("source") or ("Cached" if all_ready else "Cold")
    if ready:
        return {"source": source, "phase": "Loaded"}
    if all_ready:
        return {"source": source, "phase": "LoadingWeights"}
    slowest = min((c.progress if c is not None and c.phase != READY else 100) for c in copies)
    out: dict[str, Any] = {"source": source, "phase": "Downloading", "progressPercent": slowest}
    failed = [f"{n}: {c.reason or 'Failed'}" for n, c in zip(nodes, copies) if c is not None and c.phase == FAILED]
    if failed:
        out["message"] = ("copy failed on " + ", ".join(failed) + " (the node agent retries)")[:1024]
    return out
