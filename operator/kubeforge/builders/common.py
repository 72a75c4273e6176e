"""Shared pieces of the builders: owner references, timestamps, conditions.

Everything here is pure: dicts in, dicts out, ``now`` passed in where time matters. Label and
annotation names live in :mod:`kubeforge.objects`.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

from kubeforge import API_VERSION


def owner_reference(kind: str, name: str, uid: str, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to one of our objects (so the garbage collector deletes the child
    with it). ``blockOwnerDeletion`` lets foreground deletion of the owner wait for it."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def rfc3339(ts: float) -> str:
    """Unix seconds to the RFC 3339 form Kubernetes uses (``2026-01-02T03:04:05Z``)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (as in ``metadata.creationTimestamp``) to unix seconds; None stays None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def set_condition(
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Return a new conditions list with ``type_`` set (metav1.Condition semantics).

    ``lastTransitionTime`` changes only when the status changes, as the Kubernetes API
    conventions ask. Messages are cut to 32768 characters (the metav1.Condition bound).
    """
    status_s = status if isinstance(status, str) else ("True" if status else "False")
    out = [copy.deepcopy(c) for c in (conditions or []) if c.get("type") != type_]
    old = next((c for c in (conditions or []) if c.get("type") == type_), None)
    changed = old is None or old.get("status") != status_s
    cond = {
        "type": type_,
        "status": status_s,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": rfc3339(now) if changed else old.get("lastTransitionTime", rfc3339(now)),
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    out.append(cond)
    out.sort(key=lambda c: c["type"])
    return out


def conditions_equal(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> bool:
    """Whether two conditions lists say the same, ignoring ``lastTransitionTime`` (which
    :func:`set_condition` keeps or moves on its own): used to skip status writes that would
    change nothing a reader cares about."""
    def strip(cs):
        return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []]
    return strip(a) == strip(b)


