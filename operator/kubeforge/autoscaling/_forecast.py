"""Predictive scale-up's pure half: the demand one lead time ahead, from the service's own
history, and the replicas it needs (issue 28, item 2). Samples in, forecast out; no I/O.

A replica that takes minutes to start must be asked for minutes before the demand it serves.
The lead time is the service's measured p90 start (``status.startTime.cold.p90Seconds``) or
``predictive.leadSeconds``; the demand is vLLM's admission rate (``rate`` of
``vllm:time_to_first_token_seconds_count``, the requests that leave the queue each second,
:mod:`kubeforge.autoscaling.prometheus`), as the runtime reads it from Prometheus
(:func:`kubeforge.autoscaling.prometheus.demand_query`, a range query) into a
:class:`DemandHistory`. Two forecasts:

* **Trend**: a least-squares line through the last ``trendWindowSeconds`` of the rate, read at
  ``now + lead`` (what PromQL's ``predict_linear(v[window], lead)`` computes), capped at
  :data:`MAX_TREND_GROWTH` times the window's highest rate so that one noisy slope cannot ask
  for the whole pool. The slope counts only where it stands out of the samples' scatter (at
  least :data:`MIN_TREND_T` standard errors, the samples counted once per
  :data:`RATE_WINDOW_SECONDS` since the one-minute rates overlap); otherwise the forecast is
  the window's mean, the level (a bursty series swings 0 to 10 req/s a minute, and a line
  through that noise extended minutes ahead is noise too);
* **Seasonal**: today's level (the window's mean) times the growth the service saw one week
  ago (else one day ago: Prometheus' ``offset 7d`` / ``offset 1d``) from that day's window to
  that day's ``now + lead`` (a seasonal-naive forecast of the change with today's level, the
  multiplicative Holt-Winters idea without fitted smoothing); the growth kept within
  [1/:data:`MAX_SEASONAL_RATIO`, :data:`MAX_SEASONAL_RATIO`], and 1 unless it stands out of
  that day's scatter like the trend's slope. Without that history it is the trend.

Anchors: NVIDIA Dynamo's planner forecasts the next interval's load from a buffer of past
intervals with a constant, ARIMA or Prophet predictor
(``components/planner/src/dynamo/planner/utils/load_predictor.py``) and sizes the workers for
it; KEDA's PredictKube scaler forecasts a Prometheus query ``predictHorizon`` ahead from
``historyTimeWindow`` of it; AWS EC2 Auto Scaling's predictive scaling forecasts from up to 14
days of history, launches ``SchedulingBufferTime`` (default 300 s) ahead, and only raises the
group's capacity (its ``ForecastOnly`` mode shows the forecast without acting). Here the
forecast is a floor under the reactive count: it adds or keeps replicas, never removes one.
The replicas it needs are the reactive count scaled by the forecast's growth over the
window's level (:attr:`Forecast.level`, the fitted line at ``now``), not over the last
one-minute sample: a lull of 0.2 req/s in a 5 req/s service would otherwise multiply the
count by 25. That growth is bounded by :data:`MAX_GROWTH`, and growth within
:data:`GROWTH_TOLERANCE` of the level is none (a flat series asks for the reactive count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DAY_SECONDS", "GROWTH_TOLERANCE", "MAX_GROWTH", "MAX_SEASONAL_RATIO", "MAX_TREND_GROWTH", "WEEK_SECONDS",
           "DemandHistory", "Forecast", "PredictivePolicy", "forecast_demand", "forecast_replicas"]

DAY_SECONDS = 86400.0
WEEK_SECONDS = 7 * DAY_SECONDS
MAX_TREND_GROWTH = 3.0
"""A trend's forecast is at most this many times the highest rate of its window."""
MAX_SEASONAL_RATIO = 4.0
"""The past period's growth over the lead is trusted within [1/4, 4]."""
SEASONAL_SMOOTH_SECONDS = 120.0
"""The past period's rate at ``now + lead`` is its mean over the 2 minutes up to then (and one
after): one sample swings with its Poisson noise and the trace's bursts."""
MIN_POINTS = 3
"""A trend needs at least this many samples (PromQL's predict_linear needs 2; 3 leaves a residual)."""
MIN_TREND_T = 2.0
"""A slope counts when it is at least this many standard errors from flat (about 95 %)."""
RATE_WINDOW_SECONDS = 60.0
"""The admission rate's own window (``rate(...[1m])``): samples closer than this overlap, so the
slope's standard error counts one independent sample per this many seconds of the window."""
MAX_GROWTH = 4.0
"""The replicas a forecast asks for are at most this many times the reactive count (the same
bound as :data:`MAX_SEASONAL_RATIO`)."""
GROWTH_TOLERANCE = 0.1
"""A forecast within 10 % of the level is no rise (the HPA's default tolerance)."""
MODES = ("Trend", "Seasonal")

Series = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class PredictivePolicy:
    """``spec.autoscaling.predictive`` as plain data (mode Off is no policy at all).

    Attributes:
        mode: ``"Trend"`` or ``"Seasonal"``.
        trend_window_seconds: The recent window the trend is fitted over and today's level
            measured on, s (> 0).
        lead_seconds: How far ahead to forecast, s, or None: the measured p90 start.
        forecast_only: Compute and report, never act.

    Raises:
        ValueError: An unknown mode or a window that is not > 0.
    """

    mode: str
    trend_window_seconds: float
    lead_seconds: float | None = None
    forecast_only: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"predictive mode must be one of {MODES}, got {self.mode!r}")
        if not (math.isfinite(self.trend_window_seconds) and self.trend_window_seconds > 0):
            raise ValueError(f"trend_window_seconds must be > 0, got {self.trend_window_seconds!r}")
        if self.lead_seconds is not None and not (math.isfinite(self.lead_seconds) and self.lead_seconds > 0):
            raise ValueError(f"lead_seconds must be None or > 0, got {self.lead_seconds!r}")


@dataclass(frozen=True)
class DemandHistory:
    """The service's admission rate as Prometheus kept it, requests/s at unix seconds, oldest first.

    Attributes:
        recent: From ``now - trend_window`` to ``now``.
        day: From ``now - 1d - trend_window`` to ``now - 1d + lead`` (the same hours yesterday,
            stamped as they were), or empty where Prometheus has no such history.
        week: The same, one week earlier.
    """

    recent: Series = ()
    day: Series = ()
    week: Series = ()


@dataclass(frozen=True)
class Forecast:
    """A forecast of the demand one lead time ahead.

    Attributes:
        method: ``"Trend"``, ``"Seasonal1d"`` or ``"Seasonal7d"``.
        lead_seconds: How far ahead, s.
        current_rate: The admission rate now (the last sample), requests/s.
        rate: The forecast at ``now + lead``, requests/s (>= 0).
        message: One sentence with the numbers.
        level: The window's level now, requests/s: the trend's fitted value at ``now`` (the
            window's mean where the slope is noise), today's mean for Seasonal; None: use
            ``current_rate`` (a forecast built by hand).
    """

    method: str
    lead_seconds: float
    current_rate: float
    rate: float
    message: str
    level: float | None = None


def _clean(series: Series) -> list[tuple[float, float]]:
    return sorted((float(t), float(v)) for t, v in series
                  if math.isfinite(t) and math.isfinite(v) and v >= 0)


def _fit(points: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """``(mean time, mean rate, slope, slope's standard error)`` of the least-squares line
    through ``points``; the error counts one sample per :data:`RATE_WINDOW_SECONDS` (the
    one-minute rates overlap) and is 0 for a perfect line or too few samples to tell."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return mt, mv, 0.0, 0.0
    slope = sum((t - mt) * (v - mv) for t, v in points) / var
    sse = sum((v - mv - slope * (t - mt)) ** 2 for t, v in points)
    span = points[-1][0] - points[0][0]
    independent = min(float(n), 1.0 + span / RATE_WINDOW_SECONDS)
    if n <= 2 or independent <= 2.0:
        return mt, mv, slope, 0.0
    se = math.sqrt(sse / (n - 2) / var) * math.sqrt(n / independent)
    return mt, mv, slope, se


def _trend(recent: list[tuple[float, float]], now: float, lead: float) -> tuple[float, float, str]:
    """``(forecast, level now, how)``: the line where its slope stands out of the scatter
    (:data:`MIN_TREND_T`), else the window's mean; capped at :data:`MAX_TREND_GROWTH` x the
    window's highest rate."""
    mt, mv, b, se = _fit(recent)
    span = recent[-1][0] - recent[0][0]
    if abs(b) < MIN_TREND_T * se:
        how = (f"no trend over the last {span:.0f}s (slope {b * 60:+.3g} +- {se * 60:.2g} req/s per minute): "
               f"the window's mean")
        return mv, mv, how
    level = max(0.0, mv + b * (now - mt))
    raw = max(0.0, mv + b * (now + lead - mt))
    cap = MAX_TREND_GROWTH * max(v for _, v in recent)
    capped = f", capped at {MAX_TREND_GROWTH:g}x the window's highest" if raw > cap else ""
    return min(raw, cap), level, f"trend {b * 60:+.3g} req/s per minute over the last {span:.0f}s{capped}"


def _mean(points: list[tuple[float, float]], lo: float, hi: float) -> float | None:
    vals = [v for t, v in points if lo <= t <= hi]
    return sum(vals) / len(vals) if vals else None


def _spread(values: list[float], span: float) -> tuple[float, float]:
    """``(mean, standard error of the mean)`` of rate samples over ``span`` seconds, counting one
    independent sample per :data:`RATE_WINDOW_SECONDS` (the one-minute rates overlap)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / min(float(n), 1.0 + span / RATE_WINDOW_SECONDS))


def _seasonal(past: list[tuple[float, float]], recent: list[tuple[float, float]], period: float, now: float,
              lead: float, window: float) -> tuple[float, float, str] | None:
    """Today's level times the past period's growth from ``now - period`` to ``now + lead -
    period`` (its mean over the window before, against its mean over the
    :data:`SEASONAL_SMOOTH_SECONDS` up to the lead), or None when that history does not cover
    both. The growth counts only where it stands out of the past samples' scatter
    (:data:`MIN_TREND_T` standard errors, as the trend's slope does); otherwise today's level:
    a bursty series' minute-to-minute swings are not a season, and a forecast that follows them
    asks for a replica one poll and releases it, still starting, the next (821 reversals over
    the autoscaling bench's day with the growth read from one sample)."""
    then = now - period
    ahead = [(t, v) for t, v in past if then + lead - SEASONAL_SMOOTH_SECONDS <= t <= then + lead + 60.0]
    before = [v for t, v in past if then - window <= t <= then]
    if not ahead or not before or ahead[-1][0] < then + lead - 60.0:
        return None
    level_then, se_then = _spread(before, window)
    at_lead, se_lead = _spread([v for _, v in ahead], ahead[-1][0] - ahead[0][0])
    level_now = _mean(recent, now - window, now) or 0.0
    when = "last week" if period >= WEEK_SECONDS else "yesterday"
    if level_then <= 1e-9:
        return at_lead, level_now, f"{at_lead:.3g} req/s at the same time {when}, after a silent window"
    if abs(at_lead - level_then) < MIN_TREND_T * math.hypot(se_then, se_lead):
        return level_now, level_now, (f"{when}: {level_then:.3g} then {at_lead:.3g} req/s, no change out of the "
                                      f"scatter: today's level")
    growth = min(MAX_SEASONAL_RATIO, max(1.0 / MAX_SEASONAL_RATIO, at_lead / level_then))
    return level_now * growth, level_now, (f"{when}: {level_then:.3g} then {at_lead:.3g} req/s, x{growth:.2f} on "
                                           f"today's level {level_now:.3g} req/s")


def forecast_demand(policy: PredictivePolicy, history: DemandHistory, now: float, lead: float) -> Forecast | str:
    """The demand at ``now + lead``, by ``policy.mode`` (see the module).

    Args:
        policy: Mode and window.
        history: The admission rate's samples (:class:`DemandHistory`).
        now: Unix seconds.
        lead: Seconds ahead (> 0).

    Returns:
        The :class:`Forecast`, or a sentence saying why there is none (too few recent samples).
    """
    recent = [p for p in _clean(history.recent) if now - policy.trend_window_seconds <= p[0] <= now]
    if len(recent) < MIN_POINTS:
        return (f"no forecast: {len(recent)} sample(s) of the admission rate in the last "
                f"{policy.trend_window_seconds:.0f}s (needs {MIN_POINTS})")
    current = recent[-1][1]
    method, found = "Trend", None
    if policy.mode == "Seasonal":
        for period, series, name in ((WEEK_SECONDS, history.week, "Seasonal7d"), (DAY_SECONDS, history.day, "Seasonal1d")):
            found = _seasonal(_clean(series), recent, period, now, lead, policy.trend_window_seconds)
            if found is not None:
                method = name
                break
    if found is None:
        found = _trend(recent, now, lead)
        if policy.mode == "Seasonal":
            found = (found[0], found[1], found[2] + " (no history a day or a week ago: the trend)")
    rate, level, how = found
    return Forecast(method, float(lead), current, rate,
                    f"forecast {rate:.3g} req/s in {lead:.0f}s (now {current:.3g}, level {level:.3g}): {how}", level)


def forecast_replicas(forecast: Forecast, basis: int) -> int:
    """The replicas the forecast demand needs, scaled from ``basis``, the replicas the current
    demand needs (the reactive count): ``ceil(basis x growth)``, where growth is the forecast
    over the window's level (``forecast.level``, else ``current_rate``), at most
    :data:`MAX_GROWTH`, and 1 within :data:`GROWTH_TOLERANCE` of it. With no level to scale
    from, one replica for any forecast demand (a service at zero comes back before the demand
    does), none otherwise.

    Args:
        forecast: The forecast.
        basis: Replicas for the current demand, >= 0.

    Returns:
        Replicas, >= 0 (not bounded: the caller bounds it by maxReplicas and the pool).
    """
    if forecast.rate <= 0:
        return 0
    level = forecast.current_rate if forecast.level is None else forecast.level
    if level <= 1e-9 or basis <= 0:
        return 1
    growth = min(MAX_GROWTH, forecast.rate / level)
    if abs(growth - 1.0) <= GROWTH_TOLERANCE:
        growth = 1.0
    return max(1, math.ceil(basis * growth - 1e-9))
