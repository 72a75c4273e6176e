"""Kubernetes Events, off the hot path.

A reconcile never waits for an Event: :meth:`EventSink.post` puts it on a bounded queue and a
few background senders write it. The same Event about the same object within
:data:`DEDUPE_SECONDS` is posted once (kubectl describe shows it once, with the first
time), and when the queue is full the oldest are dropped and counted
(``kubeforge_events_dropped_total``): under a storm, decisions matter more than their
narration. A create that gets no answer, a 429 or a 5xx is sent again, at most
:data:`MAX_TRIES` times in all, :data:`RETRY_SECONDS` × the tries so far apart (client-go's
``tools/record`` broadcaster retries the same way, ``maxTriesPerEvent = 12`` every 10 s; ours
are fewer and sooner because a reconcile's Event is worth less once it is a minute late).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass

from kubeforge import metrics
from kubeforge.objects import rfc3339
from kubeforge.runtime.client import ApiError, KubeClient

log = logging.getLogger("kubeforge.events")

COMPONENT = "kubeforge-operator"
QUEUE_SIZE = 10_000
DEDUPE_SECONDS = 60.0
SENDERS = 4
MAX_TRIES = 4
RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about."""

    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str = "kubeforge.io/v1alpha1"


class EventSink:
    """Queue and send core/v1 Events; see the module docstring."""

    def __init__(self, client: KubeClient):
        self._client = client
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=QUEUE_SIZE)
        self._recent: OrderedDict[tuple, float] = OrderedDict()
        self._tasks: list[asyncio.Task] = []

    def post(self, ref: ObjectRef, type_: str, reason: str, message: str, now: float | None = None) -> None:
        """Queue an Event (Normal or Warning); never blocks, never raises."""
        now = now or time.time()
        key = (ref.uid, type_, reason, message)
        seen = self._recent.get(key)
        if seen is not None and now - seen < DEDUPE_SECONDS:
            return
        self._recent[key] = now
        self._recent.move_to_end(key)
        while len(self._recent) > QUEUE_SIZE:
            self._recent.popitem(last=False)
        if self._queue.full():
            try:
                self._queue.get_nowait()
                metrics.EVENTS_DROPPED.inc()
            except asyncio.QueueEmpty:
                pass
        self._queue.put_nowait((ref, type_, reason, message, now, 1))

    def _again(self, item: tuple) -> None:
        """Put a failed Event back on the queue (its try count raised), unless the queue is full."""
        if not self._queue.full():
            self._queue.put_nowait(item)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._send(), name=f"events-{i}") for i in range(SENDERS)]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _send(self) -> None:
        while True:
            item = await self._queue.get()
            ref, type_, reason, message, now, tries = item
            ns = ref.namespace or "default"
            ev = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{ref.name}.", "namespace": ns},
                "involvedObject": {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name,
                                   "namespace": ref.namespace or None, "uid": ref.uid},
                "type": type_,
                "reason": reason,
                "message": message[:1024],
                "firstTimestamp": rfc3339(now),
                "lastTimestamp": rfc3339(now),
                "count": 1,
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "reportingInstance": os.environ.get("HOSTNAME", "kubeforge"),
            }
            try:
                await self._client.create("Event", ns, ev)
            except ApiError as e:
                if e.code == 403 and "terminat" in e.message.lower():
                    log.debug("event %s on %s/%s dropped: namespace terminating", reason, ns, ref.name)
                elif e.transient and tries < MAX_TRIES:
                    log.debug("event %s on %s/%s: try %d failed (%s), again later", reason, ns, ref.name, tries, e)
                    asyncio.get_running_loop().call_later(RETRY_SECONDS * tries, self._again, item[:-1] + (tries + 1,))
                else:
                    log.warning("event %s on %s/%s not posted: %s", reason, ns, ref.name, e)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - an Event is best effort by design
                log.warning("event %s on %s/%s not posted: %s", reason, ns, ref.name, e)
