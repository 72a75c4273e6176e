"""Measured starts, pure (issue 28, item 1): each group's start phases from its pods, and the
service's estimate over its last starts and wakes, kept in ``status.startTime``.

A group's phases (:class:`~kubeforge.objects.GroupStart`: scheduled, initialized, started,
ready, seconds after ``admittedAt``) are read from its current pods while it starts and frozen
once it is Ready (a later readiness flap does not rewrite its start). Each group that becomes
Ready adds its ``ready`` seconds to the cold samples; each standby replica that wakes adds its
wake (wake asked to awake) to the wake samples. Both keep the last
:data:`~kubeforge.api.MAX_START_SAMPLES`, with their p50 and p90 (nearest rank); the cold p90 is
predictive scale-up's lead time (:func:`lead_seconds`). Kept in status, not in memory: an
operator restart loses none.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from kubeforge.api import MAX_START_SAMPLES, GroupPhase
from kubeforge.objects import GroupRecord, Pod, group_start

__all__ = ["estimate", "lead_seconds", "nearest_rank", "new_cold_samples", "start_times", "with_start"]

READY = GroupPhase.READY.value


def with_start(g: GroupRecord, cur: Sequence[Pod]) -> GroupRecord:
    """``g`` with its start phases read from its current pods ``cur``; a start that reached
    Ready is kept as it was (frozen)."""
    if g.start is not None and g.start.ready is not None and g.phase == READY:
        return g
    if g.admitted_at is None or not g.nodes:
        return g
    start = group_start(g.admitted_at, (p.start for p in cur if not p.terminal), len(g.nodes))
    return g if start == g.start else replace(g, start=start)


def new_cold_samples(old: Mapping[int, GroupRecord], new: Mapping[int, GroupRecord]) -> list[float]:
    """The ``ready`` seconds of the groups that became Ready in this decision (a group not Ready
    before, or a new attempt of it), in index order."""
    out = []
    for index in sorted(new):
        g, before = new[index], old.get(index)
        if g.phase != READY or g.start is None or g.start.ready is None:
            continue
        if before is None or before.phase != READY or before.attempt != g.attempt:
            out.append(g.start.ready)
    return out


def nearest_rank(samples: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of ``samples`` by nearest rank, or None when empty."""
    if not samples:
        return None
    ranked = sorted(samples)
    return ranked[min(len(ranked), max(1, math.ceil(q * len(ranked)))) - 1]


def _samples(doc: Any) -> list[float]:
    raw = doc.get("samples") if isinstance(doc, Mapping) else None
    return [float(x) for x in raw or [] if isinstance(x, (int, float)) and not isinstance(x, bool)
            and math.isfinite(x) and x >= 0]


def estimate(samples: Iterable[float]) -> dict[str, Any]:
    """``{samples, p50Seconds, p90Seconds}`` of the last :data:`~kubeforge.api.MAX_START_SAMPLES`."""
    kept = [round(float(s), 1) for s in samples][-MAX_START_SAMPLES:]
    out: dict[str, Any] = {"samples": kept}
    if kept:
        out["p50Seconds"], out["p90Seconds"] = nearest_rank(kept, 0.5), nearest_rank(kept, 0.9)
    return out


def start_times(status: Mapping[str, Any], cold: Sequence[float], wake: Sequence[float]) -> dict[str, Any] | None:
    """``status.startTime`` with the new ``cold`` and ``wake`` samples added, or None when there
    is nothing to write (no sample ever)."""
    old = status.get("startTime") if isinstance(status.get("startTime"), Mapping) else {}
    c, w = _samples(old.get("cold")) + list(cold), _samples(old.get("wake")) + list(wake)
    if not c and not w:
        return None
    return {"cold": estimate(c), "wake": estimate(w)}


def lead_seconds(status: Mapping[str, Any] | None) -> float | None:
    """Predictive scale-up's lead time: the p90 of the service's cold starts
    (``status.startTime.cold``, recomputed from its samples), or None before any start."""
    doc = (status or {}).get("startTime")
    cold = doc.get("cold") if isinstance(doc, Mapping) else None
    return nearest_rank(_samples(cold), 0.9)

