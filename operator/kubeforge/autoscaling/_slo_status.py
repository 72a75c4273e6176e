"""SLO mode's ``SLOMet`` outcome: the measured percentiles against the targets. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import _reasons as R
from ._policy import SLOPolicy
from ._signals import Signals

__all__ = ["SLOStatus", "slo_status"]


def _num(x: float | None) -> str:
    return f"{x:.3g}" if x is not None and math.isfinite(x) else "unbounded "


@dataclass(frozen=True)
class SLOStatus:
    """The ``SLOMet`` condition's content: status (``None`` = Unknown), reason constant, message."""

    met: bool | None
    reason: str
    message: str
    ttft: float | None = None
    itl: float | None = None


def slo_status(slo: SLOPolicy, signals: Signals, prefill: float | None) -> SLOStatus:
    """Measured percentiles against the targets.

    Returns:
        ``met`` True (:data:`TARGET_MET`) when every configured target holds; False with
        :data:`PREFILL_ABOVE_TARGET` (the TTFT target is below the prefill percentile alone),
        :data:`TIME_TO_FIRST_TOKEN_ABOVE_TARGET` or :data:`INTER_TOKEN_LATENCY_ABOVE_TARGET`;
        ``None`` with :data:`NO_RECENT_REQUESTS` when nothing was measured in the window.
    """
    p = f"p{slo.percentile:g}"
    ttft, itl = signals.value("ttft"), signals.value("itl")
    parts, reason, met = [], R.TARGET_MET, True
    measured = False
    if slo.ttft_seconds is not None and ttft is not None:
        measured = True
        parts.append(f"{p} time to first token {_num(ttft)}s (target {_num(slo.ttft_seconds)}s)")
        if ttft > slo.ttft_seconds:
            met = False
            reason = (R.PREFILL_ABOVE_TARGET if prefill is not None and prefill >= slo.ttft_seconds
                      else R.TIME_TO_FIRST_TOKEN_ABOVE_TARGET)
            if reason == R.PREFILL_ABOVE_TARGET:
                parts.append(f"the {p} prefill alone takes {_num(prefill)}s: more replicas cannot meet the target")
    if slo.itl_seconds is not None and itl is not None:
        measured = True
        parts.append(f"{p} inter-token latency {_num(itl)}s (target {_num(slo.itl_seconds)}s)")
        if itl > slo.itl_seconds and met:
            met, reason = False, R.INTER_TOKEN_LATENCY_ABOVE_TARGET
    if not measured:
        return SLOStatus(None, R.NO_RECENT_REQUESTS,
                         f"no request measured in the last {slo.window_seconds:g}s", ttft, itl)
    return SLOStatus(met, reason, "; ".join(parts), ttft, itl)
