"""Kubernetes LabelSelector matching (``matchLabels`` + ``matchExpressions``), pure."""

from __future__ import annotations

from typing import Any, Mapping


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy ``selector`` (None or empty selects everything).

    Operators: In, NotIn, Exists, DoesNotExist, as in metav1.LabelSelector.

    Raises:
        ValueError: an unknown operator.
    """
    if not selector:
        return True
    exprs = selector.get("matchExpressions") or []
    for e in exprs:  # an invalid selector is an error whatever the labels, as in Kubernetes
        if e.get("operator") not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown label selector operator {e.get('operator')!r}")
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in exprs:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In":
            if labels.get(key) not in values:
                return False
        elif op == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif op == "Exists":
            if key not in labels:
                return False
        elif key in labels:  # DoesNotExist
            return False
    return True
