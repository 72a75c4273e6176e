"""Predictive scale-up (kubeforge.autoscaling's forecast, autoscaling/_forecast.py), the pure half
(issue 28, item 2): the forecast one lead time ahead from the service's own history, the
replicas it needs, and :func:`decide` using it as a floor that never scales down.
Table-driven, no I/O, but for the last test (the reconcile on a fake cluster)."""

from __future__ import annotations

import json

import pytest

from kubeforge.api import InferenceServiceSpec
from kubeforge.autoscaling import (
    AutoscalerState, AutoscalingPolicy, DemandHistory, PredictivePolicy, decide, forecast_demand, forecast_replicas,
)
from kubeforge.autoscaling.prometheus import demand_query, history_ranges, parse_range_response

NOW = 1_000_000.0
DAY, WEEK = 86400.0, 7 * 86400.0


def series(start: float, end: float, rate, step: float = 30.0) -> tuple[tuple[float, float], ...]:
    """``rate(t)`` sampled every ``step`` s over ``[start, end]``."""
    n = int((end - start) // step)
    return tuple((start + i * step, float(rate(start + i * step))) for i in range(n + 1))


def policy(mode: str = "Trend", window: float = 600.0, lead: float | None = None, **spec) -> AutoscalingPolicy:
    pred = {"mode": mode, "trendWindowSeconds": int(window)}
    if lead is not None:
        pred["leadSeconds"] = int(lead)
    s = InferenceServiceSpec.model_validate({
        "pools": ["p"], "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}},
        "minReplicas": 1, "maxReplicas": spec.pop("max_replicas", 16),
        "autoscaling": {"predictive": pred, "scaleDown": {"stabilizationWindowSeconds": 0}, **spec}})
    return AutoscalingPolicy.from_spec(s)


@pytest.mark.parametrize("rate, lead, want", [
    (lambda t: 2.0, 300, 2.0),                                  # flat: the level
    (lambda t: 2.0 + (t - NOW) / 60 * 0.1, 300, 2.5),           # +0.1 req/s a minute, 5 minutes ahead
    (lambda t: 4.0 - (t - NOW) / 60 * 0.1, 300, 3.5),           # falling
    (lambda t: max(0.0, 1.0 - (t - NOW) / 60 * 0.5), 600, 0.0),  # never below zero
])
def test_trend_is_the_least_squares_line_one_lead_ahead(rate, lead, want):
    hist = DemandHistory(recent=series(NOW - 600, NOW, rate))
    fc = forecast_demand(PredictivePolicy("Trend", 600.0), hist, NOW, lead)
    assert fc.method == "Trend" and fc.rate == pytest.approx(want, abs=1e-6)
    assert fc.current_rate == pytest.approx(rate(NOW))


def test_a_steep_trend_is_capped_at_three_times_the_windows_highest():
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 1.0 + (t - NOW + 600) / 600 * 9))  # 1 -> 10 req/s
    fc = forecast_demand(PredictivePolicy("Trend", 600.0), hist, NOW, 3600)
    assert fc.rate == pytest.approx(30.0) and "capped" in fc.message


def test_too_few_recent_samples_is_no_forecast_and_says_why():
    fc = forecast_demand(PredictivePolicy("Trend", 600.0), DemandHistory(recent=((NOW - 10, 1.0), (NOW, 1.0))), NOW, 300)
    assert isinstance(fc, str) and "2 sample(s)" in fc


def test_seasonal_reads_the_growth_at_the_same_time_last_week_on_todays_level():
    # last week: 2 req/s, rising to 8 from now+120 (a morning ramp, x4); today at 4 req/s
    week = series(NOW - WEEK - 600, NOW - WEEK + 300, lambda t: 8.0 if t >= NOW - WEEK + 120 else 2.0)
    day = series(NOW - DAY - 600, NOW - DAY + 300, lambda t: 1.0)
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 4.0), day=day, week=week)
    fc = forecast_demand(PredictivePolicy("Seasonal", 600.0), hist, NOW, 300)
    assert fc.method == "Seasonal7d" and fc.rate == pytest.approx(16.0), fc.message
    assert "last week" in fc.message and "x4.00" in fc.message


def test_a_past_days_swings_that_do_not_stand_out_of_its_scatter_are_no_growth():
    """Yesterday swung between 1 and 5 req/s minute to minute (a bursty trace) and was a little
    higher at the lead by chance: no season in that, so the forecast is today's level."""
    day = series(NOW - DAY - 600, NOW - DAY + 300, lambda t: 5.0 if int(t) // 60 % 2 else 1.0)
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 3.0), day=day)
    fc = forecast_demand(PredictivePolicy("Seasonal", 600.0), hist, NOW, 300)
    assert fc.method == "Seasonal1d" and fc.rate == pytest.approx(3.0) and "no change out of the scatter" in fc.message


def test_seasonal_falls_back_to_yesterday_then_to_the_trend():
    recent = series(NOW - 600, NOW, lambda t: 3.0)
    day = series(NOW - DAY - 600, NOW - DAY + 300, lambda t: 6.0 if t > NOW - DAY else 3.0)
    fc = forecast_demand(PredictivePolicy("Seasonal", 600.0), DemandHistory(recent=recent, day=day), NOW, 300)
    assert fc.method == "Seasonal1d" and fc.rate == pytest.approx(6.0)
    # a day of history that stops before now + lead does not cover the lead: the trend
    short = tuple(p for p in day if p[0] <= NOW - DAY + 60)
    fc = forecast_demand(PredictivePolicy("Seasonal", 600.0), DemandHistory(recent=recent, day=short), NOW, 300)
    assert fc.method == "Trend" and "no history a day or a week ago" in fc.message


def test_seasonal_growth_is_bounded_and_a_silent_past_window_gives_the_past_rate():
    recent = series(NOW - 600, NOW, lambda t: 100.0)
    day = series(NOW - DAY - 600, NOW - DAY + 300, lambda t: 10.0 if t > NOW - DAY + 60 else 1.0)
    fc = forecast_demand(PredictivePolicy("Seasonal", 600.0), DemandHistory(recent=recent, day=day), NOW, 300)
    assert fc.rate == pytest.approx(400.0)  # x4 at most, not x10
    silent = series(NOW - DAY - 600, NOW - DAY + 300, lambda t: 0.0 if t <= NOW - DAY else 5.0)
    fc = forecast_demand(PredictivePolicy("Seasonal", 600.0), DemandHistory(recent=recent, day=silent), NOW, 300)
    assert fc.rate == pytest.approx(5.0)


@pytest.mark.parametrize("current, rate, basis, want", [
    (2.0, 4.0, 3, 6), (2.0, 2.0, 3, 3), (2.0, 1.0, 3, 2), (0.0, 1.0, 0, 1), (0.0, 0.0, 0, 0), (2.0, 3.0, 0, 1),
])
def test_forecast_replicas_scale_the_current_count_by_the_forecast_growth(current, rate, basis, want):
    from kubeforge.autoscaling import Forecast
    assert forecast_replicas(Forecast("Trend", 300.0, current, rate, ""), basis) == want


def test_decide_asks_one_start_ahead_of_a_rising_demand():
    p = policy(lead=300)
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 2.0 + (t - NOW) / 60 * 0.4))  # 2 -> 4 in 5 min
    d = decide(p, AutoscalerState(), 2, 0.0, NOW, 16, history=hist)
    assert d.predicted == 4 and d.desired == 4 and d.direction == "Up"
    assert d.forecast is not None and d.forecast.rate == pytest.approx(4.0)
    # the floor is not the recommendation: the scale-down window keeps the reactive count only
    assert "one start ahead" in d.reason and d.recommendation == 0


BURSTY = (6.1, 0.4, 9.8, 2.2, 7.5, 0.0, 8.9, 3.1, 10.0, 1.2, 5.6, 9.1, 0.6, 4.4, 7.7, 0.9, 6.8, 2.9, 9.5, 3.8, 0.3)


def test_a_bursty_series_whose_last_sample_is_low_does_not_ask_for_max_replicas():
    """One-minute rates swinging 0 to 10 req/s with a lull of 0.3 at the end: no trend stands
    out of that scatter, so the forecast is the window's level and growth over it is none; the
    reactive count (4) is all it asks for, not 4 x 5 / 0.3."""
    hist = DemandHistory(recent=tuple((NOW - 600 + 30 * i, v) for i, v in enumerate(BURSTY)))
    fc = forecast_demand(PredictivePolicy("Trend", 600.0), hist, NOW, 300)
    mean = sum(BURSTY) / len(BURSTY)
    assert fc.rate == pytest.approx(mean) and fc.level == pytest.approx(mean) and "no trend" in fc.message
    assert fc.current_rate == pytest.approx(0.3)
    d = decide(policy(lead=300), AutoscalerState(), 4, 16.0, NOW, 16, history=hist)  # the queue wants 4
    assert d.predicted == 4 and d.desired == 4, d.reason


def test_growth_over_the_level_is_bounded():
    from kubeforge.autoscaling import MAX_GROWTH, Forecast
    assert forecast_replicas(Forecast("Trend", 300.0, 0.2, 50.0, "", level=1.0), 3) == 3 * MAX_GROWTH
    assert forecast_replicas(Forecast("Trend", 300.0, 0.2, 5.0, "", level=5.2), 3) == 3  # within 10 %: no rise


def test_a_noisy_steady_ramp_still_asks_for_more_one_lead_ahead():
    """2 -> 4 req/s over the last 5 minutes, +0.4 a minute, with +-0.15 of scatter and a last
    sample 0.15 low: the slope stands out, the forecast is the line at now + 300 s (about 4, twice
    the level of 2), so 2 replicas become 4, whatever the last sample says."""
    wobble = (0.15, -0.15)
    hist = DemandHistory(recent=series(NOW - 300, NOW, lambda t: 2.0 + (t - NOW) / 60 * 0.4
                                       + wobble[int((NOW - t) // 30) % 2] * (1 if t < NOW else -1)))
    fc = forecast_demand(PredictivePolicy("Trend", 600.0), hist, NOW, 300)
    assert fc.method == "Trend" and "no trend" not in fc.message
    assert fc.level == pytest.approx(2.0, abs=0.15) and fc.rate == pytest.approx(4.0, abs=0.3)
    d = decide(policy(lead=300), AutoscalerState(), 2, 8.0, NOW, 16, history=hist)  # the queue wants 2
    assert d.predicted == 4 and d.desired == 4 and "one start ahead" in d.reason


def test_a_flat_series_asks_for_no_more_than_the_reactive_count():
    """5 req/s +-1 with a last sample of 4: the forecast is the level, 4 replicas stay 4 (scaled by
    the last sample they would be 5)."""
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 4.0 if t >= NOW else (6.0 if int(t) // 30 % 2 else 4.0)))
    fc = forecast_demand(PredictivePolicy("Trend", 600.0), hist, NOW, 300)
    assert fc.rate == pytest.approx(fc.level) and fc.current_rate == 4.0
    d = decide(policy(lead=300), AutoscalerState(), 4, 16.0, NOW, 16, history=hist)
    assert d.predicted <= 4 and d.desired == 4, d.reason


def test_replicas_asked_for_ahead_of_a_rise_that_does_not_come_go_when_the_forecast_falls():
    """A ramp asks for 4 one start ahead; a minute later the rate is flat again and the queue still
    wants 2: with a 300 s scale-down window the reactive count alone would have held 2, so the
    forecast's 4 is not held for the window either (it is not recorded as a recommendation)."""
    ramp = DemandHistory(recent=series(NOW - 300, NOW, lambda t: 2.0 + (t - NOW) / 60 * 0.4))
    p = policy(lead=300, scaleDown={"stabilizationWindowSeconds": 300})
    d = decide(p, AutoscalerState(), 2, 8.0, NOW, 16, history=ramp)
    assert d.desired == 4
    flat = DemandHistory(recent=series(NOW - 540, NOW + 60, lambda t: 2.0))
    d2 = decide(p, d.state, 4, 8.0, NOW + 60, 16, history=flat)
    assert d2.predicted == 2 and d2.desired == 3 and d2.direction == "Down", d2.reason  # the step limit: 1 per 30s


def test_the_measured_lead_is_used_unless_lead_seconds_is_set_and_none_means_wait():
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 2.0 + (t - NOW) / 60 * 0.4))
    d = decide(policy(), AutoscalerState(), 2, 0.0, NOW, 16, history=hist, lead_seconds=150)
    assert d.forecast.lead_seconds == 150 and d.desired == 3
    d = decide(policy(lead=600), AutoscalerState(), 2, 0.0, NOW, 16, history=hist, lead_seconds=150)
    assert d.forecast.lead_seconds == 600
    d = decide(policy(), AutoscalerState(), 2, 0.0, NOW, 16, history=hist, lead_seconds=None)
    assert d.forecast is None and d.desired == 1 and "no start measured yet" in d.reason  # the reactive count


def test_a_forecast_never_scales_down():
    p = policy(lead=300)
    falling = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 4.0 - (t - NOW + 600) / 600 * 3.0))  # 4 -> 1
    d = decide(p, AutoscalerState(), 4, 40.0, NOW, 16, history=falling)  # the queue wants 10
    assert d.desired >= 4 and d.predicted is not None and d.predicted < 4
    # the reactive path holds 4 (queue 16 = 4 x target): a forecast of less does not lower it
    d = decide(p, AutoscalerState(), 4, 16.0, NOW, 16, history=falling)
    assert d.desired == 4 and d.predicted < 4


def test_slo_mode_without_a_count_for_the_demand_asks_for_nothing_ahead():
    """The SLO model cannot count yet (no running time measured): the reactive path holds the
    current count, and the forecast does not grow it. Growing ``current`` instead raised the
    count the forecast had raised, every decision, up to maxReplicas (the bench's day, held
    there for 24 h)."""
    from kubeforge.autoscaling import Signals
    rising = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 2.0 + (t - NOW) / 60 * 0.4))
    p = policy(lead=300, slo={"timeToFirstTokenSeconds": 2})
    state, current = AutoscalerState(), 4
    for i in range(5):
        blind = Signals(time=NOW + 5 * i, waiting=2.0, running=1.0, replicas=float(current))
        d = decide(p, state, current, blind, NOW + 5 * i, 16, history=rising)
        state, current = d.state, d.desired
        assert d.desired == 4 and d.predicted is None, d.reason
    assert "no replica count for the current demand yet" in d.reason
    # the running time measured but no replica's capacity: the count held under its bound is no
    # count for the demand either
    for i in range(5):
        blind = Signals(time=NOW + 60 + 5 * i, waiting=0.0, running=2.0, replicas=float(current), admission_rate=1.0,
                        service_seconds=2.0, kv_cache_usage=0.01, prefill=0.2, percentile=90.0, window_seconds=60.0)
        d = decide(p, state, current, blind, NOW + 60 + 5 * i, 16, history=rising)
        state, current = d.state, d.desired
        assert d.predicted is None and d.desired <= 4, d.reason


def test_forecast_only_reports_without_acting_and_bounds_still_hold():
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 2.0 + (t - NOW) / 60 * 0.4))
    s = InferenceServiceSpec.model_validate({
        "pools": ["p"], "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}, "maxReplicas": 3,
        "autoscaling": {"predictive": {"mode": "Trend", "leadSeconds": 300, "forecastOnly": True}}})
    d = decide(AutoscalingPolicy.from_spec(s), AutoscalerState(), 2, 0.0, NOW, 16, history=hist)
    assert d.desired == 2 and d.predicted == 4 and "(forecastOnly)" in d.reason
    d = decide(policy(lead=300, max_replicas=3), AutoscalerState(), 2, 0.0, NOW, 16, history=hist)
    assert d.desired == 3 and d.limited_condition_reason == "TooManyReplicas"
    d = decide(policy(lead=300), AutoscalerState(), 2, 0.0, NOW, 3, history=hist)  # the pool holds 3 in all
    assert d.desired == 3 and d.limited_condition_reason == "InsufficientCapacity"


def test_no_history_or_no_metric_leaves_the_reactive_decision_alone():
    d = decide(policy(lead=300), AutoscalerState(), 2, 0.0, NOW, 16)
    assert d.forecast is None and d.predicted is None
    hist = DemandHistory(recent=series(NOW - 600, NOW, lambda t: 9.0))
    d = decide(policy(lead=300), AutoscalerState(), 2, None, NOW, 16, history=hist)  # metric unreadable: hold
    assert d.desired == 2 and d.forecast is None


def test_off_is_the_default_and_predictive_needs_vllms_metric():
    s = InferenceServiceSpec.model_validate({"pools": ["p"], "template": {"spec": {"containers": [{"name": "v", "image": "v"}]}}})
    assert s.autoscaling.predictive.mode.value == "Off" and AutoscalingPolicy.from_spec(s).predictive is None
    with pytest.raises(ValueError, match="predictive forecasts vLLM"):
        InferenceServiceSpec.model_validate({
            "pools": ["p"], "template": {"spec": {"containers": [{"name": "v", "image": "v"}]}},
            "autoscaling": {"metric": "SGLangQueue", "predictive": {"mode": "Trend"}}})


def test_the_history_queries_and_their_answers():
    q = demand_query("ns", "chat")
    assert q == 'sum(rate(vllm:time_to_first_token_seconds_count{namespace="ns",service="chat"}[1m]))'
    r = history_ranges(NOW, 600, 300)
    assert r["recent"] == (NOW - 600, NOW) and r["day"] == (NOW - DAY - 600, NOW - DAY + 300)
    assert r["week"] == (NOW - WEEK - 600, NOW - WEEK + 300)
    ok = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {}, "values": [[1, "0.5"], [2, "NaN"], [3, "2"]]}]}})
    assert parse_range_response(200, ok) == ((1.0, 0.5), (3.0, 2.0))
    empty = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})
    assert parse_range_response(200, empty) == ()
    assert parse_range_response(503, ok) is None and parse_range_response(200, "not json") is None


# --------------------------------------------------------------------------- through the reconcile (a fake cluster)


def test_the_reconcile_reads_the_history_and_asks_one_start_ahead(monkeypatch):
    """A service with predictive Trend and leadSeconds 300: the reconcile reads the admission rate's
    three ranges through the runtime's metrics source, decides with them, and writes the forecast
    and the replicas it asks for (2 -> 4 req/s in 5 minutes: from 1 replica to 2)."""
    import asyncio

    from fakekube import small_cluster
    from kubeforge.autoscaling import Signals
    from kubeforge.runtime.inference import reconcile_service
    from kubeforge.runtime.metrics_source import FakeMetrics
    from records import NS, service_body, submitted

    url = "http://prometheus.monitoring.svc:9090"

    async def go():
        kube = await small_cluster()
        kube.use_clock(monkeypatch)
        fake = FakeMetrics()
        now = kube.now
        fake.signals_of[(NS, "chat")] = Signals(time=now, waiting=0.0, running=1.0, replicas=1.0)
        fake.series[demand_query(NS, "chat")] = series(now - 600, now, lambda t: 2.0 + (t - now) / 60 * 0.4)
        kube.rt.metrics = fake
        await kube.client_create("InferenceService", submitted(service_body(
            "chat", minReplicas=1, maxReplicas=4, status={"desiredReplicas": 1},
            autoscaling={"prometheusURL": url, "predictive": {"mode": "Trend", "leadSeconds": 300}})))
        await reconcile_service(kube.rt, (NS, "chat"))
        st = kube.get("InferenceService", NS, "chat")["status"]
        assert st["desiredReplicas"] == 2 and st["forecast"]["replicas"] == 2, st.get("forecast")
        assert st["forecast"]["method"] == "Trend" and st["forecast"]["forecastRate"] == pytest.approx(4.0, rel=0.01)
        assert [c[0] for c in fake.calls].count("history") == 3

    asyncio.run(go())
