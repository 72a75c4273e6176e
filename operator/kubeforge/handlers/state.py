"""The operator's in-memory state: kopf indexes, a work queue, and a short-lived status overlay.

- kopf indexes (see :mod:`kubeforge.handlers.indexes`) mirror nodes, GPU pods, our pods and
  our custom objects from watches; nothing here lists the cluster per reconcile.
- :class:`WorkQueue` deduplicates keys and runs one reconcile per key at a time with a fixed
  number of workers (controller-runtime's model), with delayed re-adds for backoff.
- The overlay holds the status this process last wrote for a job until the index has caught
  up with that write (by resourceVersion), so the admission loop never acts on a lagging
  copy (that is how two jobs could otherwise get the same GPUs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Hashable

from kubeforge import metrics

log = logging.getLogger("kubeforge.state")
OVERLAY_TTL = 300.0  # only when resourceVersions are not comparable integers


class WorkQueue:
    """A deduplicating async work queue with per-key exclusivity and delayed adds."""

    def __init__(self, handler: Callable[[Hashable], Awaitable[float | None]], workers: int = 8, name: str = "queue"):
        self._handler = handler
        self._workers = workers
        self._name = name
        self._queue: asyncio.Queue = asyncio.Queue()
        self._pending: set = set()
        self._active: set = set()
        self._dirty: set = set()
        self._tasks: list[asyncio.Task] = []

    def add(self, key: Hashable) -> None:
        """Queue ``key`` unless already queued; a key being processed is re-run once after."""
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._pending:
            return
        self._pending.add(key)
        self._queue.put_nowait(key)

    def add_after(self, key: Hashable, seconds: float) -> None:
        """Queue ``key`` in ``seconds`` (bounded: at most one hour)."""
        asyncio.get_running_loop().call_later(min(max(seconds, 0.0), 3600.0), self.add, key)

    def start(self) -> None:
        for i in range(self._workers):
            self._tasks.append(asyncio.create_task(self._work(), name=f"{self._name}-{i}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _work(self) -> None:
        backoff: dict = {}
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            self._active.add(key)
            started = time.monotonic()
            try:
                requeue = await self._handler(key)
                metrics.RECONCILES.labels(kind=self._name, result="success").inc()
                backoff.pop(key, None)
                if requeue is not None:
                    self.add_after(key, requeue)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad object must never stop the others
                metrics.RECONCILES.labels(kind=self._name, result="error").inc()
                delay = min(60.0, backoff.get(key, 0.5) * 2)
                backoff[key] = delay
                log.exception("%s: reconcile of %s failed; retrying in %.1fs", self._name, key, delay)
                self.add_after(key, delay)
            finally:
                metrics.RECONCILE_SECONDS.labels(kind=self._name).observe(time.monotonic() - started)
                self._active.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)


class State:
    """Everything the loops share. One instance per operator process."""

    def __init__(self) -> None:
        self.indexes: Any = None  # kopf's OperatorIndices, captured at startup
        self.ready = asyncio.Event()  # set once kopf has pre-populated every index
        self.jobs: WorkQueue | None = None
        self.services: WorkQueue | None = None
        self.admission_wakeup = asyncio.Event()
        self.admission_lock = asyncio.Lock()
        self._overlay: dict[Hashable, tuple[float, dict[str, Any], str | None]] = {}
        self.tasks: list[asyncio.Task] = []

    # indexes ---------------------------------------------------------------------------------
    def index(self, name: str):
        return self.indexes[name]

    def one(self, index: str, key: Hashable) -> Any | None:
        store = self.indexes[index].get(key)
        return next(iter(store), None) if store else None

    def many(self, index: str, key: Hashable) -> list[Any]:
        store = self.indexes[index].get(key)
        return list(store) if store else []

    # overlay ---------------------------------------------------------------------------------
    def remember_status(self, key: Hashable, written: dict[str, Any] | None) -> None:
        """Record the object as the API server returned it after our status write (its whole
        status, as it stands after every writer, and its resourceVersion)."""
        if written is None:  # deleted meanwhile
            self._overlay.pop(key, None)
            return
        rv = (written.get("metadata") or {}).get("resourceVersion")
        old = self._overlay.get(key)
        if old is not None and old[2] is not None and rv is not None:
            try:
                if int(rv) < int(old[2]):
                    return  # two writes finished out of order: keep the newer one
            except ValueError:
                pass
        self._overlay[key] = (time.monotonic(), dict(written.get("status") or {}), rv)

    def effective_status(self, key: Hashable, indexed: dict[str, Any] | None) -> dict[str, Any]:
        """The status to act on: our own last write until the index has caught up with it.

        ``indexed`` is the object as the index holds it (``status`` and
        ``metadata.resourceVersion``). The overlay entry is dropped once the index holds our
        write or a later version. resourceVersions are compared as integers (etcd revisions,
        as the API server's own watch cache does); when either is not an integer, the entry
        lives OVERLAY_TTL seconds. Under load the index can lag our writes by many seconds,
        and acting on the lagging copy would promise a job's GPUs twice.
        """
        entry = self._overlay.get(key)
        indexed = indexed or {}
        if entry:
            written_at, status, rv = entry
            seen = (indexed.get("metadata") or {}).get("resourceVersion")
            try:
                caught_up = seen is not None and rv is not None and int(seen) >= int(rv)
            except ValueError:
                caught_up = time.monotonic() - written_at >= OVERLAY_TTL
            if not caught_up:
                return status
            self._overlay.pop(key, None)
        return dict(indexed.get("status") or {})

    def forget(self, key: Hashable) -> None:
        self._overlay.pop(key, None)

    def wake_admission(self) -> None:
        self.admission_wakeup.set()


STATE = State()
