"""Progress lines, timestamps and bounded waits.

Every wait here is bounded by its ``timeout``; nothing asserts a time.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from typing import Callable, TypeVar

__all__ = ["Abort", "epoch", "iso", "logger", "poll", "say", "ts", "wait_until"]

T = TypeVar("T")


class Abort(Exception):
    """A bench step cannot go on (the operator exited, ...); the message says why."""


def logger(tag: str) -> Callable[[str], None]:
    """A progress printer: ``[<tag> HH:MM:SS] msg`` on stderr, flushed."""
    def log(msg: str) -> None:
        print(f"[{tag} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    return log


say = logger("bench")
"""The cluster benches' progress line, ``[bench HH:MM:SS] msg`` on stderr."""


def ts(s: str) -> float:
    """RFC 3339 timestamp of the API server (1 s resolution) as epoch seconds.

    Raises:
        ValueError: not a timestamp.
    """
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def epoch(s: str | None) -> float | None:
    """:func:`ts`, or None when ``s`` is absent or unreadable."""
    try:
        return ts(s) if s else None
    except ValueError:
        return None


def iso(t: float) -> str:
    """Epoch seconds as the API server writes a time: ``2027-01-15T08:00:00Z`` (UTC, 1 s)."""
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_until(pred: Callable[[], object], timeout: float, what: str, interval: float = 1.0,
               log: Callable[[str], None] = say) -> bool:
    """Poll ``pred`` until true or ``timeout`` s; API errors count as false. Returns success
    (a line through ``log`` when it gives up).

    Raises:
        Abort: raised by ``pred`` itself, passed through.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return True
        except Abort:
            raise
        except Exception:  # noqa: BLE001 - transient API errors while waiting
            pass
        time.sleep(interval)
    log(f"gave up waiting for {what} after {timeout:.0f}s")
    return False


def poll(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.5,
         log: Callable[[str], None] = say) -> T | None:
    """Poll ``pred`` until it returns something truthy (returned) or ``timeout`` s pass (None,
    and a line through ``log``). Errors of ``pred`` propagate."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    log(f"gave up waiting for {what} after {timeout:.0f}s")
    return None
