"""Whether the TrainingJob watch still delivers: the echo of the operator's own status writes.

Every TrainingJob the operator acts on reaches it through kopf's watch of the resource (the
``kf_jobs`` index). If that watch stops, the operator goes blind without a word: new jobs are
never admitted, and nothing fails. It happened once (2026-12-07, e2e/README-scale-bench.md): an
operator restarted on a 5,000-node cluster with 2,000 running jobs wrote 1,718 of their statuses
at once, admitted two new jobs 2.5 minutes after its start, and none of the 48 created after
them in the next 4 minutes (a job created then was not even seen; a second restart did not do
it again). kopf starts a watcher once per resource and, when that task ends by cancellation,
neither logs it nor starts another. The likely canceller, kopf's watch inactivity timer, is held
off by ``runtime/kopf_watching.py``; this check stays for any other.

The operator knows what it must see: each of its status writes of a job comes back through the
watch as an event of at least the written ``resourceVersion``. :class:`WatchEcho` keeps, per
job, the newest write not seen yet and since when one has been waiting; :func:`watch_watchdog`
looks every :data:`CHECK_SECONDS`. When a write has waited more than :data:`STALL_SECONDS` and
no TrainingJob event at all arrived meanwhile, it reads that job once: if the API server holds
the written version while the index still does not, the watch is stalled, and the operator
logs an error and stops with exit code :data:`EXIT_WATCH_STALLED`, for its Deployment to start
it again (as a lost Lease stops it with exit code 3); a job deleted meanwhile is forgotten. A
watch that lags but delivers (seconds, under load) is never taken for stalled: any event resets
the wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeforge import metrics
from kubeforge.runtime.cache_overlay import resource_version
from kubeforge.runtime.client import ApiError

__all__ = ["CHECK_SECONDS", "EXIT_WATCH_STALLED", "STALL_SECONDS", "WatchEcho", "watch_watchdog"]

log = logging.getLogger("kubeforge.watch")

STALL_SECONDS = 300.0
"""Seconds a write may wait for its watch event with no TrainingJob event at all meanwhile. A
live watch request ends after at most 300 s (kopf's ``server_timeout``, set at startup) and the
API server sends bookmarks about every minute, so a stream silent that long is not delivering."""

CHECK_SECONDS = 30.0
"""Seconds between two looks of :func:`watch_watchdog`."""

EXIT_WATCH_STALLED = 4
"""``kubeforge run``'s exit code when the TrainingJob watch stalled (3: the Lease was lost)."""


@dataclass
class WatchEcho:
    """The operator's own TrainingJob status writes its watch has not echoed yet.

    Attributes:
        clock: Monotonic seconds (the Cache's clock).
    """

    clock: Callable[[], float] = time.monotonic
    _pending: dict[Hashable, tuple[int, float]] = field(default_factory=dict)
    _last_event: float | None = None

    def wrote(self, key: Hashable, written: Mapping[str, Any] | None, shown: str | None) -> None:
        """A status write of ``key`` was answered with ``written`` (the object; its
        ``metadata.resourceVersion`` is read) while the index holds version ``shown``. A job
        already waiting keeps its first wait's time; a version the index already shows (the
        event can come before the write's answer) or that is not a number is not followed."""
        rv = resource_version(((written or {}).get("metadata") or {}).get("resourceVersion"))
        if rv is None or (resource_version(shown) or -1) >= rv:
            return
        old = self._pending.get(key)
        if old is not None and old[0] >= rv:
            return
        self._pending[key] = (rv, old[1] if old is not None else self.clock())

    def saw(self, key: Hashable, rv: str | None) -> None:
        """The watch delivered ``key`` at version ``rv``: the watch is alive, and a write of
        ``key`` at or below ``rv`` is echoed."""
        self._last_event = self.clock()
        seen = resource_version(rv)
        old = self._pending.get(key)
        if old is not None and seen is not None and seen >= old[0]:
            del self._pending[key]

    def forget(self, key: Hashable) -> None:
        """``key`` is gone (or its write is shown): its write is no longer waited for."""
        self._pending.pop(key, None)

    def stalled(self) -> tuple[Hashable, int, float] | None:
        """The job that has waited longest, its written version and the seconds waited since
        that write or the last TrainingJob event, whichever came later; None when nothing waits."""
        if not self._pending:
            return None
        key, (rv, since) = min(self._pending.items(), key=lambda kv: kv[1][1])
        if self._last_event is not None:
            since = max(since, self._last_event)
        return key, rv, max(0.0, self.clock() - since)


async def watch_watchdog(rt: Any, stop: asyncio.Event | None, check: float = CHECK_SECONDS,
                         stall: float = STALL_SECONDS) -> None:
    """Look every ``check`` seconds; stop the operator (``rt.exit_code`` =
    :data:`EXIT_WATCH_STALLED`, ``stop`` set) once the TrainingJob watch is found stalled for
    ``stall`` seconds (module docstring). Sets the ``kubeforge_watch_stalled_seconds`` gauge."""
    echo: WatchEcho = rt.cache.echo
    while True:
        await asyncio.sleep(check)
        worst = echo.stalled()
        metrics.WATCH_STALLED.labels(resource="trainingjobs").set(worst[2] if worst else 0.0)
        if worst is None or worst[2] <= stall:
            continue
        key, rv, waited = worst
        try:
            held = await rt.client.get("TrainingJob", key[0], key[1])
        except ApiError:
            continue  # cannot tell now: look again
        if held is None:
            echo.forget(key)
            continue
        index = rt.cache.job(key)
        if index is not None and (resource_version(index.resource_version) or 0) >= rv:
            echo.forget(key)  # shown after all
            continue
        log.error("the TrainingJob watch is stalled: the status write of %s/%s (resourceVersion %d) has "
                  "waited %.0f s for its watch event and no TrainingJob event came meanwhile; the index "
                  "holds %s, the API server %s. Stopping (exit code %d) for the Deployment to start the "
                  "operator again", key[0], key[1], rv, waited,
                  index.resource_version if index is not None else "nothing",
                  (held.get("metadata") or {}).get("resourceVersion"), EXIT_WATCH_STALLED)
        rt.exit_code = EXIT_WATCH_STALLED
        if stop is not None:
            stop.set()
        return
