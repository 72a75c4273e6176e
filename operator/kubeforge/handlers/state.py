"""The operator's in-memory state: kopf indexes, a work queue, and a short-lived status overlay.

- kopf indexes (see :mod:`kubeforge.handlers.indexes`) mirror nodes, GPU pods, our pods and
  our custom objects from watches; nothing here lists the cluster per reconcile.
- :class:`WorkQueue` deduplicates keys and runs one reconcile per key at a time with a fixed
  number of workers (controller-runtime's model), with delayed re-adds for backoff.
- The overlay holds the status this process wrote for a job during the last
  ``OVERLAY_TTL`` seconds, so the admission loop never acts on an index that has not caught
  up with our own write yet (that is how two jobs could otherwise get the same GPUs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Hashable

from kubeforge import metrics

log = logging.getLogger("kubeforge.state")
OVERLAY_TTL = 30.0


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
        self._overlay: dict[Hashable, tuple[float, dict[str, Any]]] = {}
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
    def remember_status(self, key: Hashable, status_patch: dict[str, Any], base: dict[str, Any] | None) -> None:
        """Record the status we just wrote (merged over ``base``) for ``OVERLAY_TTL`` seconds."""
        merged = dict(base or {})
        merged.update(status_patch)
        self._overlay[key] = (time.monotonic(), merged)

    def effective_status(self, key: Hashable, indexed: dict[str, Any] | None) -> dict[str, Any]:
        """Our own recent write if there is one, else the indexed status."""
        entry = self._overlay.get(key)
        if entry and time.monotonic() - entry[0] < OVERLAY_TTL:
            return entry[1]
        if entry:
            self._overlay.pop(key, None)
        return dict(indexed or {})

    def forget(self, key: Hashable) -> None:
        self._overlay.pop(key, None)

    def wake_admission(self) -> None:
        self.admission_wakeup.set()


STATE = State()
