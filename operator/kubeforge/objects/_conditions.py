"""Kubernetes conditions (``metav1.Condition``): set one, compare two lists, pure.

The one place that decides when a condition's ``lastTransitionTime`` moves; the lifecycle,
serving, admission and pool status all write their conditions through :func:`set_condition`.
"""

from __future__ import annotations

import copy
from typing import Any

from kubeforge.objects._timestamps import rfc3339

MAX_CONDITION_MESSAGE = 32768
"""The longest condition message, characters (the ``metav1.Condition`` bound)."""


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

    Args:
        conditions: The current list (not modified); None is an empty one.
        type_: The condition type to set.
        status: ``True``/``False`` or the string ``"True"``, ``"False"``, ``"Unknown"``.
        reason: The CamelCase reason.
        message: The human-readable message.
        now: Unix seconds, the transition time when the status changes.
        generation: The ``observedGeneration`` to record, if any.

    Returns:
        A new list, sorted by type.
    """
    status_s = status if isinstance(status, str) else ("True" if status else "False")
    out = [copy.deepcopy(c) for c in (conditions or []) if c.get("type") != type_]
    old = next((c for c in (conditions or []) if c.get("type") == type_), None)
    changed = old is None or old.get("status") != status_s
    cond = {
        "type": type_,
        "status": status_s,
        "reason": reason,
        "message": message[:MAX_CONDITION_MESSAGE],
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
