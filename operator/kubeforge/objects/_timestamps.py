"""Kubernetes timestamps: unix seconds to RFC 3339 and back, pure.

Every layer that writes a time into an object (conditions, status, Events) or reads one from it
uses these, so the form is the one Kubernetes writes (``2026-01-02T03:04:05Z``, whole seconds).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def rfc3339(ts: float) -> str:
    """Unix seconds to the RFC 3339 form Kubernetes uses (``2026-01-02T03:04:05Z``)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (as in ``metadata.creationTimestamp``) to unix seconds; None stays None.

    Raises:
        ValueError: ``value`` is not an ISO 8601 time.
    """
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def loose_time(value: Any) -> float | None:
    """Like :func:`parse_time` for a field read off the API server as it is: any value, None for
    an empty or unparseable one instead of raising."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
