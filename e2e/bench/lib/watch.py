"""List-then-watch loops with raw JSON (no model deserialization), bounded by a stop event.

A relist after an error replays the objects as ``ADDED``; an object deleted while the watch was
down is then missed (counted in ``restarts[what]``, which the benches print with their figures).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

__all__ = ["watch_events", "watch_raw"]


def watch_events(list_call: Callable, on_event: Callable[[str, dict, float], None], stop: threading.Event,
                 restarts: dict[str, int], what: str, log: Callable[[str], None]) -> None:
    """List, then watch (raw JSON), calling ``on_event(type, object, monotonic time)`` for every
    ``ADDED`` / ``MODIFIED`` / ``DELETED``, until ``stop`` is set (within one 5 s watch timeout).

    Args:
        list_call: a kubernetes-client list method bound to its namespace/resource, called with
            ``_preload_content=False`` (and ``watch=True`` for the watch).
        on_event: called with each event's type, object and the monotonic time it arrived.
        stop: ends the loop.
        restarts: ``restarts[what]`` counts re-lists after errors.
        what: a short name for messages.
        log: where the first restarts are said.
    """
    rv = None
    while not stop.is_set():
        try:
            if rv is None:
                data = json.loads(list_call(_preload_content=False, _request_timeout=120).data)
                now = time.monotonic()
                for obj in data.get("items") or []:
                    on_event("ADDED", obj, now)
                rv = data["metadata"]["resourceVersion"]
            resp = list_call(watch=True, resource_version=rv, timeout_seconds=5, allow_watch_bookmarks=True,
                             _preload_content=False, _request_timeout=(10, 30))
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        rv = None
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        on_event(ev["type"], obj, time.monotonic())
                if rv is None or stop.is_set():
                    break
            resp.release_conn()
        except Exception as e:  # noqa: BLE001 - keep watching; counted and reported
            restarts[what] = restarts.get(what, 0) + 1
            rv = None
            if restarts[what] < 5:
                log(f"{what} watch restarted ({type(e).__name__}: {str(e)[:120]})")
            time.sleep(0.5)


def watch_raw(list_call: Callable, on_obj: Callable[[dict, float], None], stop: threading.Event,
              restarts: dict[str, int], what: str, log: Callable[[str], None] | None = None) -> None:
    """:func:`watch_events` for objects listed, added or modified (deletions are ignored):
    ``on_obj(object, monotonic time)``; ``log`` defaults to the benches' progress line."""
    from e2e.bench.lib.timing import say

    def on_event(kind: str, obj: dict, now: float) -> None:
        if kind != "DELETED":
            on_obj(obj, now)

    watch_events(list_call, on_event, stop, restarts, what, log or say)
