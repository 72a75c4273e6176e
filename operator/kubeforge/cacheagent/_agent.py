"""The node agent's loop: read the node's ModelCacheNode spec, make room (the pure LRU choice of
:func:`kubeforge.modelcache.choose_evictions`), fetch each wanted copy once into the hostPath
(:class:`~._store.NodeStore`), and write the status after every change.

Copies are fetched one at a time, in the spec's order (the operator lists the placed replicas'
models first). A failed copy is retried after a backoff doubling from ``retry_seconds`` up to
an hour, so a bad URI or a missing Secret does not hammer the source.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from kubeforge.modelcache import FAILED, READY, choose_evictions

from ._fetch import Fetched, FetchError, Source, fetch, folder_bytes
from ._kube import CacheApi, SecretMissing
from ._report import Copy, downloading, node_status
from ._store import NodeStore

log = logging.getLogger("kubeforge.cacheagent")

MAX_RETRY_SECONDS = 3600.0


class CacheAgent:
    """One node's agent.

    Args:
        node: The node's name (its ModelCacheNode's name).
        api: The API server (:class:`~._kube.KubeCacheApi`, or a fake in tests).
        identity: What ``status.agent`` says (the pod's name).
        hf_endpoint: The Hugging Face Hub endpoint (None: ``HF_ENDPOINT`` or the Hub).
        progress_seconds: Seconds between progress writes while downloading.
        retry_seconds: First wait before retrying a failed copy.
        clock: Unix seconds now.
    """

    def __init__(self, node: str, api: CacheApi, *, identity: str = "", hf_endpoint: str | None = None,
                 progress_seconds: float = 2.0, retry_seconds: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.node, self.api, self.identity = node, api, identity or node
        self.hf_endpoint, self.progress_seconds, self.retry_seconds = hf_endpoint, progress_seconds, retry_seconds
        self.clock = clock
        self.copies: dict[str, Copy] = {}
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (failures in a row, when the last)
        self._status_lock = threading.Lock()
        self._last_status: dict[str, Any] | None = None
        self._order: list[str] = []
        self._generation: int | None = None
        self.downloads = 0

    def sync_once(self) -> dict[str, Any] | None:
        """One pass: the spec read, evictions, every wanted copy fetched or found; returns the
        status written last (None when the node has no ModelCacheNode yet)."""
        obj = self.api.get_node_cache(self.node)
        if obj is None:
            log.debug("no ModelCacheNode %s yet", self.node)
            return None
        spec = obj.get("spec") or {}
        self._generation = (obj.get("metadata") or {}).get("generation")
        self._last_status = obj.get("status") or self._last_status
        store = NodeStore(Path(spec.get("hostPath") or "/var/lib/kubeforge/models"))
        wanted = [m for m in spec.get("models") or [] if m.get("key") and m.get("uri")]
        now = self.clock()
        self._refresh(store, wanted, now)
        self._write()
        for model in wanted:
            copy = self.copies[model["key"]]
            if copy.phase == READY or not self._due(model["key"], now):
                continue
            self._fetch_one(store, model, {m["key"] for m in wanted}, spec.get("capacityBytes"))
        return self._write()

    def _refresh(self, store: NodeStore, wanted: list[Mapping[str, Any]], now: float) -> None:
        """The copies: the wanted ones (Ready when on disk, else as last seen, else Pending),
        then the ready copies the spec no longer wants (kept until evicted)."""
        old, self.copies = self.copies, {}
        for m in wanted:
            key = m["key"]
            if store.is_ready(key):
                meta = store.touch(key, now)
                self.copies[key] = Copy(key, m["uri"], READY, meta.bytes, m.get("sizeBytes"), meta.digest,
                                        ready_at=meta.ready_at, last_used=meta.last_used)
                self._failures.pop(key, None)
            else:
                prev = old.get(key)
                self.copies[key] = prev if prev is not None and prev.phase == FAILED else \
                    Copy(key, m["uri"], size_bytes=m.get("sizeBytes"))
        for key in store.ready_keys():
            if key not in self.copies and (meta := store.meta(key)) is not None:
                self.copies[key] = Copy(key, meta.uri, READY, meta.bytes, None, meta.digest,
                                        ready_at=meta.ready_at, last_used=meta.last_used)

    def _due(self, key: str, now: float) -> bool:
        count, at = self._failures.get(key, (0, 0.0))
        return count == 0 or now - at >= min(MAX_RETRY_SECONDS, self.retry_seconds * 2 ** (count - 1))

    def _fetch_one(self, store: NodeStore, model: Mapping[str, Any], wanted: set[str],
                   capacity: int | None) -> None:
        key = model["key"]
        copy = self.copies[key]
        try:
            source = Source(model["uri"], model.get("revision"), model.get("digest"), model.get("sizeBytes"),
                            self._secret(model))
            self._make_room(store, key, wanted, capacity, int(model.get("sizeBytes") or 0))
            self._set(downloading(copy, 0))
            meta, fetched = store.ensure(key, model["uri"], lambda dest: self._download(key, source, dest),
                                         self.clock())
        except FetchError as e:
            self._failed(key, e.reason, str(e))
            return
        except OSError as e:  # the hostPath: not writable, full, gone
            self._failed(key, "DiskError", f"{type(e).__name__}: {e.strerror or e}")
            return
        if fetched:
            self.downloads += 1
            log.info("%s: %s fetched and verified, %d bytes", key, model["uri"], meta.bytes)
        self._failures.pop(key, None)
        self._set(Copy(key, model["uri"], READY, meta.bytes, model.get("sizeBytes"), meta.digest,
                       ready_at=meta.ready_at, last_used=meta.last_used))

    def _make_room(self, store: NodeStore, key: str, wanted: set[str], capacity: int | None, need: int) -> None:
        """Evict per the LRU choice; FetchError DiskFull when even that leaves too little room."""
        held = store.held(wanted)
        chosen = choose_evictions(held, capacity, need)
        if chosen is None:
            raise FetchError("DiskFull", f"{need} bytes do not fit in capacityBytes {capacity} beside the "
                             f"{sum(h.bytes for h in held if h.wanted)} bytes of copies still wanted")
        for victim in chosen:
            if store.evict(victim):
                log.info("evicted %s (least recently used, not wanted) to make room for %s", victim, key)
                self.copies.pop(victim, None)
        free = shutil.disk_usage(store.root).free
        if need > free:
            raise FetchError("DiskFull", f"{need} bytes needed, {free} free on the node's disk")

    def _secret(self, model: Mapping[str, Any]) -> dict[str, str]:
        ref = model.get("credentials")
        if not ref:
            return {}
        try:
            return self.api.read_secret(ref["namespace"], ref["name"])
        except SecretMissing as e:
            raise FetchError("SecretNotFound", str(e)) from None

    def _download(self, key: str, source: Source, dest: Path) -> tuple[int, str | None]:
        """Fetch into ``dest`` while a thread writes its progress every ``progress_seconds``."""
        done = threading.Event()

        def report() -> None:
            while not done.wait(self.progress_seconds):
                copy = self.copies.get(key)
                if copy is not None:
                    self._set(downloading(copy, folder_bytes(dest)))

        watcher = threading.Thread(target=report, name=f"progress-{key}", daemon=True)
        watcher.start()
        try:
            got: Fetched = fetch(source, dest, self.hf_endpoint)
        finally:
            done.set()
            watcher.join()
        return got.bytes, got.digest

    def _failed(self, key: str, reason: str, message: str) -> None:
        count, _ = self._failures.get(key, (0, 0.0))
        self._failures[key] = (count + 1, self.clock())
        log.warning("%s: %s: %s", key, reason, message)  # the message never holds a secret (see _fetch)
        self._set(replace(self.copies[key], bytes=0).failed(reason, message))

    def _set(self, copy: Copy) -> None:
        """Record a copy's new state and write the status."""
        self.copies[copy.key] = copy
        self._write()

    def _write(self) -> dict[str, Any]:
        with self._status_lock:
            status = node_status(self.copies.values(), generation=self._generation, agent=self.identity,
                                 now=self.clock(), previous=self._last_status)
            try:
                self.api.patch_status(self.node, status)
            except Exception as e:  # the API server away: the next write carries the state
                log.warning("status of %s not written: %s", self.node, type(e).__name__)
            self._last_status = status
            return status

    def run(self, stop: threading.Event, interval: float = 10.0) -> None:
        """Sync every ``interval`` seconds until ``stop`` is set; an error is logged and retried."""
        while not stop.is_set():
            try:
                self.sync_once()
            except Exception:
                log.exception("sync of %s failed; retrying in %.0fs", self.node, interval)
            stop.wait(interval)
