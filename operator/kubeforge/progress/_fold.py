"""Fold an accepted report into a TrainingJob's status: ``status.progress`` and
``status.lastCheckpoint``. Pure: the status as written before and the report in, the fields to
write out.

- ``percent``: reported (Kubeflow's ``progressPercentage``), else ``100 x step / totalSteps``.
- ``eta``: the report's time plus ``estimatedRemainingSeconds`` when given; else extrapolated
  from the rate between the progress written before and this report (steps, else percent):
  ``eta = t + (total - step) x (t - t0) / (step - step0)``; unknown (removed) when there is no
  earlier sample, when the work went backwards (a resume from an older checkpoint) or stood
  still. Done (100 %): the report's time.
- ``lastCheckpoint`` only moves forward (a higher step); the termination-message fallback
  (:func:`kubeforge.lifecycle.checkpoint_from`) follows the same rule, so whichever is newer wins.
- ``metrics``: the report's values, then earlier ones of other names, at most 16, by name.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

from kubeforge.api import MAX_REPORTED_METRICS
from kubeforge.progress._report import CheckpointReport, Report, stamp

MIN_RATE_SECONDS = 1.0
"""Two samples closer than this give no rate (the previous ETA is kept)."""
MAX_ETA_SECONDS = 10 * 365 * 86400.0
"""An ETA further than ten years is written as ten years (a job that barely moves)."""


def stamp_ms(ts: float) -> str:
    """Unix seconds as RFC 3339 UTC with milliseconds (``2026-01-02T03:04:05.123Z``): the
    precision of ``progress.lastReportTime``, which the next rate is computed from."""
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_stamp(value: Any) -> float | None:
    """An RFC 3339 string (``Z`` or offset, any fraction) to unix seconds; None when absent or
    unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def last_report_time(status: Mapping[str, Any] | None) -> float | None:
    """``status.progress.lastReportTime`` in unix seconds, or None."""
    progress = (status or {}).get("progress") or {}
    return parse_stamp(progress.get("lastReportTime"))


def _percent(rep: Report, step: int | None, total: int | None) -> float | None:
    if rep.percent is not None:
        return round(min(100.0, max(0.0, rep.percent)), 2)
    if step is not None and total:
        return round(min(100.0, 100.0 * step / total), 2)
    return None


def _eta(old: Mapping[str, Any], rep: Report, step: int | None, total: int | None,
         percent: float | None) -> float | None:
    """When the training should end, in unix seconds, or None (see the module docstring)."""
    if rep.remaining_seconds is not None:
        return rep.received + min(rep.remaining_seconds, MAX_ETA_SECONDS)
    if percent is not None and percent >= 100.0:
        return rep.received
    t0 = parse_stamp(old.get("lastReportTime"))
    if t0 is None:
        return None
    dt = rep.received - t0
    if dt < MIN_RATE_SECONDS:
        return parse_stamp(old.get("eta"))
    left = None
    if rep.step is not None and total and old.get("step") is not None:
        done = rep.step - int(old["step"])
        left = (total - rep.step) * dt / done if done > 0 else None
    elif percent is not None and old.get("percent") is not None:
        done_pct = percent - float(old["percent"])
        left = (100.0 - percent) * dt / done_pct if done_pct > 0 else None
    return None if left is None else rep.received + min(left, MAX_ETA_SECONDS)


def _metrics(old: Mapping[str, Any], rep: Report) -> list[dict[str, str]]:
    names = {n for n, _ in rep.metrics}
    kept = [(m.get("name"), m.get("value")) for m in old.get("metrics") or []
            if isinstance(m, Mapping) and m.get("name") not in names and m.get("name") and m.get("value")]
    merged = (list(rep.metrics) + kept)[:MAX_REPORTED_METRICS]
    return [{"name": n, "value": v} for n, v in sorted(merged)]


def progress_status(old: Mapping[str, Any] | None, rep: Report) -> dict[str, Any]:
    """``status.progress`` after ``rep``, given the one written before (``old``, may be None).

    Every key is present (None removes one in the merge patch), so nothing stale survives: an
    ETA that can no longer be computed is removed, not left behind.
    """
    old = old or {}
    step = rep.step if rep.step is not None else old.get("step")
    total = rep.total_steps if rep.total_steps is not None else old.get("totalSteps")
    percent = _percent(rep, step, total)
    eta = _eta(old, rep, step, total, percent)
    return {
        "step": step,
        "totalSteps": total,
        "percent": percent,
        "eta": stamp(eta) if eta is not None else None,
        "lastReportTime": stamp_ms(rep.received),
        "reporter": rep.reporter or None,
        "metrics": _metrics(old, rep),
    }


def checkpoint_status(last: Mapping[str, Any] | None, ck: CheckpointReport | None) -> dict[str, Any] | None:
    """``status.lastCheckpoint`` to write when ``ck`` is newer (a higher step) than ``last``,
    else None (nothing to write: a checkpoint never moves back)."""
    if ck is None:
        return None
    prior = (last or {}).get("step")
    if prior is not None and ck.step <= int(prior):
        return None
    return {"step": ck.step, "path": ck.path, "time": ck.time}
