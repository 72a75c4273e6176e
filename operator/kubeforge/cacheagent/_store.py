"""One node's cache on disk: a directory a copy under the pool's hostPath, fetched once.

Layout under ``root`` (the ModelCacheNode's ``spec.hostPath``)::

    <key>/                      the verified copy (what pods mount read-only); its last file
    <key>/.kubeforge-ready      is the ready marker (:data:`kubeforge.modelcache.READY_MARKER`)
    .kubeforge/locks/<key>      an flock(2) per key: one download a copy on the node
    .kubeforge/partial/<key>/   a download in progress (removed on failure, renamed when verified)
    .kubeforge/meta/<key>.json  uri, digest, readyAt and lastUsed (LRU), kept outside the copy

Why a lock file and not a flag in memory: anyone on the node may ask for a copy at once (two
agent threads, an agent restarted while its old process still downloads, a second agent
container). ``flock`` is released by the kernel when its holder dies, so a crash never leaves a
copy locked; the partial directory is wiped by whoever takes the lock next.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from kubeforge.modelcache import READY_MARKER, Held

from ._fetch import folder_bytes

STATE_DIR = ".kubeforge"


@dataclass(frozen=True)
class CopyMeta:
    """What the store keeps beside a copy.

    Attributes:
        key: The copy's key (its directory).
        uri: Its source.
        bytes: Its size on disk.
        digest: The digest verified (or the hf commit), or None.
        ready_at: Unix seconds it was verified.
        last_used: Unix seconds the spec last wanted it.
    """

    key: str
    uri: str
    bytes: int
    digest: str | None
    ready_at: float
    last_used: float


class NodeStore:
    """The copies under ``root``; every method is safe across threads and processes."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._state = self.root / STATE_DIR
        for sub in ("locks", "partial", "meta"):
            (self._state / sub).mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        """The copy's directory (what the serving pods mount)."""
        return self.root / key

    def partial(self, key: str) -> Path:
        """Where the copy is downloaded before it is verified."""
        return self._state / "partial" / key

    def is_ready(self, key: str) -> bool:
        """The copy is whole: its ready marker exists."""
        return (self.path(key) / READY_MARKER).is_file()

    @contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Hold the copy's lock (blocks while another thread or process holds it)."""
        with open(self._state / "locks" / key, "a+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def ensure(self, key: str, uri: str, download: Callable[[Path], tuple[int, str | None]],
               now: float) -> tuple[CopyMeta, bool]:
        """The copy of ``key``, downloading it unless it is ready: under the key's lock, so of
        several callers at once one downloads and the others find it ready.

        Args:
            key: The copy's key.
            uri: Its source (kept in the meta file).
            download: Fetches into the empty folder it is given and verifies; returns (bytes,
                digest). Its exception propagates, the partial download removed.
            now: Unix seconds (readyAt, lastUsed).

        Returns:
            The copy's meta and whether this call downloaded it.
        """
        with self.locked(key):
            if self.is_ready(key):
                return self.touch(key, now), False
            staging = self.partial(key)
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            try:
                size, digest = download(staging)
                (staging / READY_MARKER).write_text(json.dumps({"uri": uri, "digest": digest}))
                shutil.rmtree(self.path(key), ignore_errors=True)  # a copy without its marker: torn
                os.rename(staging, self.path(key))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            meta = CopyMeta(key, uri, size, digest, now, now)
            self._write_meta(meta)
            return meta, True

    def touch(self, key: str, now: float) -> CopyMeta:
        """Record that the spec wants ``key`` now (its LRU time); returns its meta."""
        meta = self.meta(key)
        if meta is None:  # a copy from before the meta file (or its file lost): rebuild it
            meta = CopyMeta(key, "", folder_bytes(self.path(key)), None, now, now)
        meta = CopyMeta(meta.key, meta.uri, meta.bytes, meta.digest, meta.ready_at, max(now, meta.last_used))
        self._write_meta(meta)
        return meta

    def meta(self, key: str) -> CopyMeta | None:
        """The meta of a ready copy, or None."""
        try:
            raw: dict[str, Any] = json.loads((self._state / "meta" / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        return CopyMeta(key, str(raw.get("uri") or ""), int(raw.get("bytes") or 0), raw.get("digest"),
                        float(raw.get("readyAt") or 0), float(raw.get("lastUsed") or 0))

    def _write_meta(self, meta: CopyMeta) -> None:
        path = self._state / "meta" / f"{meta.key}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"uri": meta.uri, "bytes": meta.bytes, "digest": meta.digest,
                                   "readyAt": meta.ready_at, "lastUsed": meta.last_used}))
        os.replace(tmp, path)

    def ready_keys(self) -> list[str]:
        """Keys of the ready copies on disk, sorted."""
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and p.name != STATE_DIR and (p / READY_MARKER).is_file())

    def held(self, wanted: set[str]) -> list[Held]:
        """The ready copies as :func:`kubeforge.modelcache.choose_evictions` reads them."""
        out = []
        for key in self.ready_keys():
            meta = self.meta(key)
            size = meta.bytes if meta is not None else folder_bytes(self.path(key))
            out.append(Held(key, size, meta.last_used if meta is not None else 0.0, key in wanted))
        return out

    def evict(self, key: str) -> bool:
        """Delete a copy (under its lock: never one being fetched). The marker goes first, so a
        pod starting meanwhile sees no whole copy. Returns whether it existed."""
        with self.locked(key):
            path = self.path(key)
            if not path.exists():
                return False
            (path / READY_MARKER).unlink(missing_ok=True)
            shutil.rmtree(path, ignore_errors=True)
            (self._state / "meta" / f"{key}.json").unlink(missing_ok=True)
            return True
