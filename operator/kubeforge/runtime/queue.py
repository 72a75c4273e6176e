"""A controller-runtime style work queue: deduplicated keys, one worker per key at a time,
delayed re-adds, bounded backoff, one log line per failure, an urgent lane and a follow-up lane.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, Hashable

from kubeforge import metrics
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.slots import URGENT_WORK

log = logging.getLogger("kubeforge.queue")

URGENT, FOLLOW_UP, NORMAL = 0, 1, 2
"""The lanes, taken in this order."""
MAX_BACKOFF = 300.0
"""Seconds: the longest wait before a failing key is retried (controller-runtime: 1000 s)."""


class WorkQueue:
    """Keys in, one ``handler(key)`` call per key at a time out, ``workers`` at once.

    ``handler`` returns seconds until the key wants another look (or None). When it raises,
    the key is retried after an exponential backoff (0.5 s doubling to MAX_BACKOFF). The
    failure is logged in one line; a traceback is logged only the first time a key fails with
    an error that is not an :class:`~kubeforge.runtime.client.ApiError` (a bug, not the
    cluster), so a permanent problem never floods the log.

    ``gate`` (an :class:`asyncio.Event`), when given, must be set for work to start: the
    operator's leadership.

    Three lanes, first in first out within each: a key added with ``urgent=True`` is taken
    before every other key (a key already queued in another lane moves up). The admission
    round adds the gangs it has just admitted or chosen as victims that way, so that writing a
    decision never waits behind the reconciles that a burst of pod and claim watch events
    queues (each of which usually finds nothing to do). kube-scheduler keeps its active queue
    ahead of its backoff queue for the same reason. A key added with ``follow_up=True`` comes
    after every urgent key and before the normal lane: a job that wrote its admission while
    more admissions waited creates its claim and pods from there, so those creates never
    delay a later round's admissions (in a burst, they took most of the workers' time).
    """

    def __init__(self, handler: Callable[[Hashable], Awaitable[float | None]], workers: int = 8,
                 name: str = "queue", gate: asyncio.Event | None = None):
        self._handler = handler
        self._workers = workers
        self._name = name
        self._gate = gate
        self._queue: asyncio.PriorityQueue = asyncio.PriorityQueue()  # (lane, seq, key): URGENT, FOLLOW_UP, NORMAL
        self._seq = 0
        self._pending: dict[Hashable, int] = {}  # key -> its lane; older entries of a key that moved up are skipped
        self._urgent = 0  # keys of _pending in the urgent lane
        self._active: set = set()
        self._dirty: dict[Hashable, int] = {}
        self._failures: dict[Hashable, int] = {}
        # key -> (due, handle): the due time kept here, since uvloop's call_at for a time already
        # past returns a plain Handle, which has no when() (asyncio's always a TimerHandle)
        self._timers: dict[Hashable, tuple[float, asyncio.Handle]] = {}
        self._tasks: list[asyncio.Task] = []

    def add(self, key: Hashable, urgent: bool = False, follow_up: bool = False) -> None:
        """Queue ``key`` unless already queued (an add to a more urgent lane moves a queued key
        up); a key being processed is re-run once after, in the most urgent of its lanes.
        ``follow_up``: the lane between the two, for the rest of work an urgent run left
        (see the class docstring)."""
        self._add(key, URGENT if urgent else FOLLOW_UP if follow_up else NORMAL)

    def _add(self, key: Hashable, lane: int) -> None:
        if key in self._active:
            self._dirty[key] = min(lane, self._dirty.get(key, lane))
            return
        if self._pending.get(key, NORMAL + 1) <= lane:
            return
        self._pending[key] = lane
        self._urgent += lane == URGENT
        self._seq += 1
        self._queue.put_nowait((lane, self._seq, key))

    def add_after(self, key: Hashable, seconds: float) -> None:
        """Queue ``key`` in ``seconds`` (at most one hour); an earlier timer for the same key
        wins, so a key never has more than one timer. A key already queued gets no timer: its
        coming run looks at everything and asks for its own next look."""
        if key in self._pending:
            return
        seconds = min(max(seconds, 0.0), 3600.0)
        loop = asyncio.get_running_loop()
        old = self._timers.get(key)
        due = loop.time() + seconds
        if old is not None and not old[1].cancelled() and old[0] <= due:
            return
        if old is not None:
            old[1].cancel()
        self._timers[key] = (due, loop.call_at(due, self._fire, key))

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def forget(self, key: Hashable) -> None:
        """Drop the key's timer and failure count (the object is gone)."""
        t = self._timers.pop(key, None)
        if t is not None:
            t[1].cancel()
        self._failures.pop(key, None)

    def start(self) -> None:
        """Start the workers; the ``kubeforge_max_concurrent_reconciles`` gauge says how many."""
        metrics.MAX_CONCURRENT_RECONCILES.labels(controller=self._name).set(self._workers)
        for i in range(self._workers):
            self._tasks.append(asyncio.create_task(self._work(), name=f"{self._name}-{i}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for _, handle in self._timers.values():
            handle.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._pending)

    def urgent_waiting(self, besides: Hashable = None) -> int:
        """How many keys other than ``besides`` wait in the urgent lane (a key being
        processed is not waiting: one added meanwhile is re-run after, see :meth:`add`)."""
        return self._urgent - (self._pending.get(besides) == URGENT)

    async def _work(self) -> None:
        while True:
            # Yield to the loop between two keys: a get from a queue that holds keys does not,
            # and a reconcile that finds nothing to write may not either, so one worker could
            # take a whole backlog while the watches and the admission round wait (a restart
            # at 5,000 nodes with 2,000 running jobs: no round in 4 minutes, 2026-12-07).
            await asyncio.sleep(0)
            lane, _, key = await self._queue.get()
            if self._pending.get(key) != lane:
                continue  # the key moved to the urgent lane and was taken from there
            if self._gate is not None and not self._gate.is_set():
                await self._gate.wait()
            if self._pending.get(key) != lane:
                continue
            del self._pending[key]
            self._urgent -= lane == URGENT
            self._active.add(key)
            started = time.monotonic()
            urgent = URGENT_WORK.set(lane == URGENT)  # its API requests go first (kubeforge.runtime.slots)
            try:
                requeue = await self._handler(key)
                metrics.RECONCILES.labels(kind=self._name, result="success").inc()
                self._failures.pop(key, None)
                if requeue is not None:
                    self.add_after(key, requeue)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # one bad object must never stop the others
                metrics.RECONCILES.labels(kind=self._name, result="error").inc()
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (n - 1))
                if isinstance(e, ApiError) or n > 1:
                    log.warning("%s %s: %s; retry %d in %.1fs", self._name, key, e, n, delay)
                else:
                    log.exception("%s %s: unexpected error; retrying in %.1fs", self._name, key, delay)
                self.add_after(key, delay)
            finally:
                URGENT_WORK.reset(urgent)
                metrics.RECONCILE_SECONDS.labels(kind=self._name).observe(time.monotonic() - started)
                self._active.discard(key)
                if key in self._dirty:
                    self._add(key, self._dirty.pop(key))
