"""The API requests in flight from this process, urgent work first.

:class:`~kubeforge.runtime.client.KubeClient` lets at most ``MAX_IN_FLIGHT`` requests fly. Under a
burst the TrainingJob workers' pod creates (the work queue's follow-up lane) fill those slots, and
with a first-in first-out wait (``asyncio.Semaphore``) the admission writes of the urgent lane
queue behind hundreds of them: the 1,024-node burst at 64 workers took created -> Admitted p95
5-9 s where 16 workers took 2.7-4.6 (e2e/README-training-bench.md, issue 31). Here a request made
while the work queue runs an urgent key (:data:`URGENT_WORK`, set by
:class:`~kubeforge.runtime.queue.WorkQueue` for the key's task and the tasks it starts) takes the
next free slot before any other waiting request. Within each class, first in first out. A freed
slot is handed to the next waiter directly, so a request arriving meanwhile never overtakes one
that waits. Kubernetes' API Priority and Fairness orders requests on the server the same way
(priority levels, FIFO queues within each); client-go has no such order, so it lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections import deque
from typing import AsyncIterator

__all__ = ["URGENT_WORK", "PrioritySlots"]

URGENT_WORK: contextvars.ContextVar[bool] = contextvars.ContextVar("kubeforge_urgent_work", default=False)
"""True while a task runs urgent work (an admission round's decision being written)."""


class PrioritySlots:
    """At most ``size`` holders at once; waiters of urgent work are served before the others.

    Args:
        size: Slots, >= 1.

    Raises:
        ValueError: ``size`` < 1.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self._free = size
        self._waiting: tuple[deque[asyncio.Future], deque[asyncio.Future]] = (deque(), deque())  # urgent, others

    def waiting(self) -> tuple[int, int]:
        """``(urgent, others)`` waiting for a slot now (cancelled waiters not counted)."""
        return tuple(sum(not f.done() for f in q) for q in self._waiting)  # type: ignore[return-value]

    async def acquire(self, urgent: bool | None = None) -> None:
        """Take a slot, waiting for one when none is free. ``urgent``: None reads
        :data:`URGENT_WORK`."""
        if self._free > 0 and not (self._waiting[0] or self._waiting[1]):
            self._free -= 1
            return
        lane = self._waiting[0 if (URGENT_WORK.get() if urgent is None else urgent) else 1]
        fut = asyncio.get_running_loop().create_future()
        lane.append(fut)
        try:
            await fut  # release() hands its slot over by setting the result
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot as the wait was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    lane.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back: to the first urgent waiter, else the first other one, else free."""
        for lane in self._waiting:
            while lane:
                fut = lane.popleft()
                if not fut.done():
                    fut.set_result(None)
                    return
        self._free += 1

    @contextlib.asynccontextmanager
    async def slot(self, urgent: bool | None = None) -> AsyncIterator[None]:
        """``async with slots.slot():`` holds one slot for the block (see :meth:`acquire`)."""
        await self.acquire(urgent)
        try:
            yield
        finally:
            self.release()
