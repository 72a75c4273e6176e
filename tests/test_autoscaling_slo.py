"""SLO mode of the pure autoscaler: the queue model, each step of decide alone, and decisions over time."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest

from kubeforge.api import InferenceServiceSpec
from kubeforge.autoscaling import (
    AutoscalerState, AutoscalingPolicy, Limit, Signals, SLOPolicy, bound, decide, erlang_c, fit_itl,
    itl_concurrency, rate_limit, read_metrics, reasons as R, recommend, replicas_for_wait, size_for_slo,
    stabilize, update_itl_fit, wait_quantile,
)

T0 = 1_700_000_000.0
TEMPLATE = {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.0"}]}}


def slo_policy(ttft=2.0, itl=None, percentile=90, max_replicas=32, min_replicas=1, **auto) -> AutoscalingPolicy:
    """The API-default policy of a spec with an slo (through from_spec)."""
    slo = {"percentile": percentile}
    if ttft is not None:
        slo["timeToFirstTokenSeconds"] = ttft
    if itl is not None:
        slo["interTokenLatencySeconds"] = itl
    spec = InferenceServiceSpec.model_validate({
        "pools": ["p"], "template": TEMPLATE, "minReplicas": min_replicas, "maxReplicas": max_replicas,
        "autoscaling": {"slo": slo, **auto}})
    return AutoscalingPolicy.from_spec(spec)


def sig(**kw) -> Signals:
    """Signals of a healthy service (1 replica, idle) with overrides."""
    base = dict(time=T0, percentile=90.0, window_seconds=60.0, waiting=0.0, held=0.0, running=0.0, replicas=1.0,
                kv_cache_usage=0.0, admission_rate=0.0, service_seconds=2.0, ttft=0.5, itl=0.05, prefill=0.4)
    base.update(kw)
    return Signals(**base)


def steady(lam: float, n: int, s: float = 2.0, k: float = 8.0, **kw) -> Signals:
    """What a service of ``n`` replicas (``k`` requests each at most) shows under ``lam`` req/s, no queue."""
    running = lam * s
    return sig(admission_rate=lam, running=running, replicas=float(n), kv_cache_usage=running / (n * k), **kw)


# --- the queue model alone -------------------------------------------------------------------


@pytest.mark.parametrize("c,a,expected", [(1, 0.5, 0.5), (2, 1.0, 1 / 3), (10, 8.0, 0.40918)])
def test_erlang_c_textbook_values(c, a, expected):
    assert erlang_c(c, a) == pytest.approx(expected, rel=1e-4)
    assert erlang_c(c, 0.0) == 0.0 and erlang_c(c, c) == 1.0


def test_wait_quantile_of_mm1_is_exponential():
    # M/M/1, rho 0.5, S 1: P(W > t) = 0.5 exp(-0.5 t); the 90% quantile is 2 ln(5)
    assert wait_quantile(1, 0.5, 1.0, 0.9) == pytest.approx(2 * math.log(5))
    assert wait_quantile(1, 0.5, 1.0, 0.4) == 0.0  # more than 60% never wait
    assert wait_quantile(2, 2.5, 1.0, 0.9) == math.inf


def test_replicas_for_wait_is_the_fewest_that_fit():
    n = replicas_for_wait(40.0, 2.0, 8.0, 0.5, 0.99, 64)
    c = int(n * 8)
    assert wait_quantile(c, 80.0, 2.0, 0.99) <= 0.5 < wait_quantile(int((n - 1) * 8), 80.0, 2.0, 0.99)
    assert replicas_for_wait(0.0, 2.0, 8.0, 0.5, 0.99, 64) == 0
    assert replicas_for_wait(400.0, 2.0, 8.0, 0.5, 0.99, 64) is None  # needs 100+
    more = [replicas_for_wait(lam, 2.0, 8.0, 0.5, 0.99, 64) for lam in (5, 10, 20, 40)]
    assert more == sorted(more) and more[0] < more[-1]


def test_itl_fit_recovers_a_line_and_bounds_running_per_replica():
    sums, t = (), None
    for i, b in enumerate([2, 4, 6, 8, 10, 12]):
        sums, t = update_itl_fit(sums, t, T0 + i, b, 0.04 + 0.005 * b), T0 + i
    a, s = fit_itl(sums)
    assert (a, s) == (pytest.approx(0.04), pytest.approx(0.005))
    assert itl_concurrency(0.08, (a, s), 12, 0.1) == pytest.approx(8.0)
    flat = update_itl_fit(update_itl_fit((), None, T0, 5, 0.05), T0, T0 + 1, 5, 0.06)
    assert fit_itl(flat) is None  # too few samples, no spread
    assert itl_concurrency(0.05, None, 10.0, 0.1) == pytest.approx(5.0)  # proportional, above target
    assert itl_concurrency(0.05, None, 10.0, 0.04) is None  # below target: no bound known


def test_itl_fit_forgets_old_samples():
    old = update_itl_fit((), None, T0, 4, 0.1)
    newer = update_itl_fit(old, T0, T0 + 3600, 4, 0.1)
    assert newer[0] == pytest.approx(1.5)  # the old one weighs half after one half-life


# --- each step of decide alone ---------------------------------------------------------------


def test_read_metrics_slo_needs_a_queue_or_an_admission_rate():
    p = slo_policy()
    ok = read_metrics(p, sig(waiting=3.0, running=5.0))
    assert ok.usable and ok.slo and ok.value == 8.0 and ok.active_reason == R.VALID_METRIC_FOUND
    gone = read_metrics(p, Signals(errors=(("waiting", "HTTP 503"), ("admission_rate", "HTTP 503"))))
    assert not gone.usable and gone.active_reason == R.FAILED_GET_METRIC and "HTTP 503" in gone.problem
    held_only = read_metrics(p, Signals(held=4.0, errors=(("waiting", "no series"),)))
    assert held_only.usable and held_only.value == 4.0  # the activator's queue alone is demand


def test_an_empty_answer_reads_as_zero_only_at_zero_replicas():
    """No pod, nothing held: Prometheus has no series to answer with, which is not an outage
    (KEDA's ignoreNullValues); with replicas running the same answer is a scrape problem."""
    empty = Signals(errors=(("waiting", "no series"), ("held", "no series"), ("queue", "no series")),
                    absent=("waiting", "held", "queue"))
    q = replace(slo_policy(), slo=None, min_replicas=0)
    for p in (q, replace(slo_policy(), min_replicas=0)):
        at_zero = read_metrics(p, empty, 0)
        assert at_zero.usable and at_zero.value == 0.0 and at_zero.active_reason == R.VALID_METRIC_FOUND
        assert "ignoreNullValues" in at_zero.note
        running = read_metrics(p, empty, 2)
        assert not running.usable and running.active_reason == R.FAILED_GET_METRIC
        d = decide(p, AutoscalerState(), 0, empty, T0)
        assert d.scaling_active and d.desired == 0, d.reason
    # an outage is never read as 0, at zero either
    down = Signals(errors=(("waiting", "HTTP 503"), ("held", "HTTP 503"), ("queue", "HTTP 503")))
    assert not read_metrics(q, down, 0).usable
    assert not decide(q, AutoscalerState(), 0, down, T0).scaling_active


def test_read_metrics_queue_mode_reads_signals_queue_and_slo_falls_back_on_a_number():
    q = replace(slo_policy(), slo=None)
    assert read_metrics(q, Signals(queue=6.0)).value == 6.0
    bad = read_metrics(q, Signals(errors=(("queue", "timeout after 2s"),)))
    assert bad.active_reason == R.FAILED_GET_METRIC and "timeout after 2s" in bad.problem
    fallback = read_metrics(slo_policy(), 12.0)
    assert fallback.usable and not fallback.slo and "SLO mode needs the service's signals" in fallback.note
    assert read_metrics(q, math.nan).active_reason == R.INVALID_METRIC


def test_recommend_slo_uses_the_queue_model():
    p = slo_policy(ttft=1.0)
    r = recommend(p, read_metrics(p, steady(30.0, 4)), AutoscalerState(), 4, T0)
    expected = replicas_for_wait(30.0, 2.0, 8.0, 1.0 - 0.4, 0.9, 32)
    assert r.raw == expected == r.sizing.needed and r.active
    assert "queue model needs" in r.note


def test_recommend_holds_while_the_model_has_no_data():
    p = slo_policy()
    r = recommend(p, read_metrics(p, Signals(held=3.0)), AutoscalerState(), 0, T0)
    assert r.sizing.needed is None and r.raw == 1  # at zero with demand: one replica, then measure
    r2 = recommend(p, read_metrics(p, Signals(waiting=2.0, running=1.0)), AutoscalerState(), 3, T0)
    assert r2.raw == 3 and "holding 3 replicas" in r2.note


def test_stabilize_takes_the_window_extremes():
    p = slo_policy()
    hist = ((T0 - 100, 6), (T0 - 400, 20))
    assert stabilize(p, hist, 5, 8, T0)[0] == 6  # down to the highest of the last 300 s (20 is older)
    assert stabilize(p, hist, 12, 8, T0) == (12, None)  # up at once (no up window by default)


def test_rate_limit_slo_has_no_scale_up_limit_but_keeps_the_scale_down_one():
    p = slo_policy()
    assert rate_limit(p, AutoscalerState(), 20, 1, T0, slo=True) == Limit(20)
    q = replace(p, slo=None)
    assert rate_limit(q, AutoscalerState(), 20, 1, T0, queue=4.0).reason == R.SCALE_UP_LIMIT
    down = rate_limit(p, AutoscalerState(), 2, 10, T0, slo=True)
    assert (down.desired, down.reason) == (9, R.SCALE_DOWN_LIMIT)


def test_bound_clamps_then_caps_to_the_pool():
    p = slo_policy(max_replicas=16)
    assert bound(p, Limit(40), 4, None).desired == 16 and bound(p, Limit(40), 4, None).reason == R.TOO_MANY_REPLICAS
    capped = bound(p, Limit(12), 4, 6)
    assert (capped.desired, capped.reason) == (6, R.INSUFFICIENT_CAPACITY) and "6 short" in capped.message
    assert bound(p, Limit(2), 4, 1).desired == 2  # never down because of capacity


# --- decisions -------------------------------------------------------------------------------


def cold_ramp_signals(lam: float, dt: float, s: float = 2.0, k: float = 8.0) -> Signals:
    """One replica, saturated, ``dt`` seconds into a stream of ``lam`` req/s."""
    mu = k / s
    return sig(admission_rate=mu, running=k, replicas=1.0, kv_cache_usage=0.95, saturated_running=k,
               waiting=(lam - mu) * dt, ttft=dt, prefill=0.4)


def test_cold_ramp_goes_to_the_needed_replicas_in_one_decision():
    p = slo_policy(ttft=2.0, percentile=99, max_replicas=32)
    lam = 70.0  # 140 requests in service at 2 s each, 8 per replica: 18+ replicas
    before = decide(p, AutoscalerState(), 1, sig(admission_rate=1.0, running=2.0, kv_cache_usage=0.25), T0 - 5)
    d = decide(p, before.state, 1, cold_ramp_signals(lam, 5.0), T0)
    needed = replicas_for_wait(lam + (lam - 4.0) * 5 / 60, 2.0, 8.0, 2.0 - 0.4, 0.99, 32)
    assert d.desired == needed >= 16 and d.direction == "Up", d.reason
    assert d.sizing.arrival_rate == pytest.approx(lam + (lam - 4.0) * 5 / 60)
    assert d.limited_condition_reason == R.DESIRED_WITHIN_RANGE and d.slo_mode
    assert d.slo.met is False and d.slo.reason == R.TIME_TO_FIRST_TOKEN_ABOVE_TARGET
    # the next decisions, replicas starting, hold it (no second jump, no step back)
    d2 = decide(p, d.state, d.desired, cold_ramp_signals(lam, 10.0), T0 + 5)
    assert d2.desired >= d.desired and d2.desired - d.desired <= 2


def test_ramp_is_bounded_by_max_replicas_and_the_pool():
    p = slo_policy(max_replicas=12)
    before = decide(p, AutoscalerState(), 1, sig(), T0 - 5)
    d = decide(p, before.state, 1, cold_ramp_signals(70.0, 5.0), T0, placeable_replicas=9)
    assert d.desired == 9 and d.limited_condition_reason == R.INSUFFICIENT_CAPACITY
    d2 = decide(p, before.state, 1, cold_ramp_signals(70.0, 5.0), T0)
    assert d2.desired == 12 and d2.limited_condition_reason == R.TOO_MANY_REPLICAS


def test_no_flapping_on_a_steady_load_with_noise():
    p = slo_policy(ttft=1.0)
    rng = random.Random(7)
    state, n, directions = AutoscalerState(), 6, []
    for i in range(2 * 3600 // 5):  # two hours, a decision every 5 s
        lam = 30.0 * (1 + rng.gauss(0, 0.1))
        d = decide(p, state, n, steady(lam, n), T0 + 5 * i)
        if d.direction:
            directions.append(d.direction)
        state, n = d.state, d.desired
    reversals = sum(1 for a, b in zip(directions, directions[1:]) if a != b)
    assert reversals == 0 and len(directions) <= 3, directions
    assert n == replicas_for_wait(30.0 * 1.3, 2.0, 8.0, 0.6, 0.9, 32) or abs(
        n - replicas_for_wait(30.0, 2.0, 8.0, 0.6, 0.9, 32)) <= 2


def test_slo_breach_with_a_queue_scales_up_even_when_the_model_says_enough():
    p = slo_policy(ttft=1.0)
    s = steady(4.0, 4, ttft=3.0, waiting=2.0)  # 4 replicas are plenty by the model, yet TTFT breaches
    d = decide(p, AutoscalerState(last_decision_time=T0 - 600), 4, s, T0)
    assert d.desired == 5 and d.sizing.breach, d.reason
    assert d.slo.met is False and d.slo.reason == R.TIME_TO_FIRST_TOKEN_ABOVE_TARGET
    assert "p90 time to first token 3s (target 1s)" in d.slo.message


def test_target_below_the_prefill_time_is_reported_not_chased():
    p = slo_policy(ttft=0.3)
    s = steady(4.0, 4, ttft=0.6, prefill=0.5, waiting=1.0)
    d = decide(p, AutoscalerState(last_decision_time=T0 - 600), 4, s, T0)
    assert d.slo.reason == R.PREFILL_ABOVE_TARGET and not d.sizing.breach
    assert "more replicas cannot meet the target" in d.slo.message


def test_slo_met_and_unknown():
    p = slo_policy(ttft=1.0, itl=0.1)
    d = decide(p, AutoscalerState(), 2, steady(4.0, 2), T0)
    assert d.slo.met is True and d.slo.reason == R.TARGET_MET
    idle = decide(p, AutoscalerState(), 2, sig(ttft=None, itl=None, errors=(("ttft", "no requests in the window"),)), T0)
    assert idle.slo.met is None and idle.slo.reason == R.NO_RECENT_REQUESTS


def test_itl_target_bounds_the_running_requests_per_replica():
    p = slo_policy(ttft=None, itl=0.06)
    state = AutoscalerState()
    for i, b in enumerate([2.0, 4.0, 6.0, 8.0, 10.0, 3.0]):  # learn ITL = 0.02 + 0.005 b
        n = 4
        s = sig(admission_rate=b * n / 2.0, running=b * n, replicas=float(n), itl=0.02 + 0.005 * b,
                kv_cache_usage=b / 16)
        state = decide(p, state, n, s, T0 + 5 * i).state
    s = sig(admission_rate=40.0, running=80.0, replicas=8.0, itl=0.07, kv_cache_usage=0.6)
    d = decide(p, state, 8, s, T0 + 60)
    assert d.sizing.itl_concurrency == pytest.approx(8.0, rel=0.01)  # (0.06 - 0.02) / 0.005
    assert d.desired == 10  # 80 running / 8 per replica
    assert d.slo.reason == R.INTER_TOKEN_LATENCY_ABOVE_TARGET


def test_scale_from_zero_on_the_activators_queue():
    p = slo_policy(min_replicas=0)
    d = decide(p, AutoscalerState(), 0, Signals(held=5.0, errors=(("waiting", "no series"),)), T0)
    assert d.desired == 1 and d.scaling_active
    q = replace(p, slo=None)
    d2 = decide(q, AutoscalerState(), 0, Signals(queue=5.0), T0)
    assert d2.desired == 2  # ceil(5 / 4), queue-depth mode on the same held requests


def test_a_service_at_zero_that_ran_before_comes_back_for_its_queue():
    """At zero with its running time remembered but no replica's capacity ever measured, the
    activator's held requests still bring one replica back (the capacity bound never keeps 0)."""
    p = slo_policy(min_replicas=0)
    ran = AutoscalerState(service_seconds=2.0, prefill_seconds=0.3)
    d = decide(p, ran, 0, Signals(held=3.0, replicas=0.0), T0)
    assert d.desired == 1, d.reason
    sized = size_for_slo(p.slo, Signals(held=3.0, replicas=0.0), ran, 0, 8, T0)
    assert sized.needed == 1 and sized.held, sized.message  # the sizing says so itself


def test_scale_down_after_the_window_one_step_at_a_time_and_to_zero_when_idle():
    p = slo_policy(min_replicas=0)
    busy = decide(p, AutoscalerState(), 6, steady(20.0, 6), T0)
    state, n, seen = busy.state, busy.desired, []
    for t in range(5, 1300, 5):
        d = decide(p, state, n, sig(running=0.0, replicas=float(n), ttft=None, itl=None, prefill=None), T0 + t)
        if d.direction == "Down":
            seen.append((t, d.scale_down_count))
        state, n = d.state, d.desired
    assert seen[0][0] >= 300  # held for the HPA's 300 s window
    assert all(c == 1 for _, c in seen[:-1])  # then one per 30 s (each one drained by the runtime)
    assert n == 0  # idle for scaleToZeroAfterSeconds: zero


def test_missing_signals_hold_and_state_round_trips():
    p = slo_policy()
    d = decide(p, AutoscalerState(), 3, Signals(errors=(("waiting", "connection failed"),)), T0)
    assert d.desired == 3 and not d.scaling_active and d.active_condition_reason == R.FAILED_GET_METRIC
    d2 = decide(p, AutoscalerState(), 1, cold_ramp_signals(30.0, 5.0), T0)
    restored = AutoscalerState.from_dict(json.loads(json.dumps(d2.state.to_dict())))
    assert restored == d2.state and restored.concurrency == 8.0 and restored.queue_sample is not None


def test_size_for_slo_remembers_measurements_for_idle_windows():
    slo = SLOPolicy(1.0, None, 90.0, 60.0)
    first = size_for_slo(slo, steady(10.0, 2, saturated_running=8.0), AutoscalerState(), 2, 32, T0)
    later = size_for_slo(slo, sig(admission_rate=0.0, held=3.0, service_seconds=None, prefill=None),
                         first.state, 0, 32, T0 + 600)
    assert later.service_seconds == 2.0 and later.concurrency == 8.0 and later.needed == 1


def test_below_the_kv_usage_that_measures_a_replicas_capacity_the_count_is_held():
    """A capacity measured from KV usage is not carried into a lull (one measured at low usage
    is noisy, and a lull sized with a high one leaves no replica for the next burst)."""
    slo = SLOPolicy(1.0, None, 90.0, 60.0)
    busy = size_for_slo(slo, steady(10.0, 2), AutoscalerState(), 2, 32, T0)  # KV usage 0.625: k = 8
    assert busy.concurrency == pytest.approx(8.0) and not busy.held
    quiet = size_for_slo(slo, steady(0.5, 8, k=400.0), busy.state, 8, 32, T0 + 60)  # usage 0.0003
    assert quiet.concurrency is None and quiet.held and quiet.needed <= 8, quiet.message


def _polls(slo: SLOPolicy, state: AutoscalerState, seconds: float, k: float = 15.0, **kw):
    """``seconds`` of 5 s SLO decisions on 4 replicas at 20 req/s x 2 s (10 running each) whose
    KV usage says each holds ``k`` (usage 10 / k), from ``state``; the last sizing."""
    r = None
    for i in range(int(seconds // 5)):
        now = T0 + 5.0 * (i + 1)
        r = size_for_slo(slo, steady(20.0, 4, k=k, time=now, **kw), state, 4, 32, now)
        state = r.state
    return r


def test_a_cap_measured_low_once_rises_toward_a_trusted_kv_estimate():
    """Issue 28's seed-3 day: one replica full of long prompts queued at 5 running, and the
    cap, a maximum, stayed 5 all day while the KV estimate said 12: the service sized from it
    was over-provisioned, so no replica queued again to correct it. Now the KV estimate at
    >= KV_USAGE_TRUSTED usage raises it, by a few percent per poll (noise cannot lift it)."""
    slo = SLOPolicy(2.0, None, 90.0, 60.0)
    low = AutoscalerState(concurrency=5.0, queue_sample=(T0, 0.0))
    one = _polls(slo, low, 5.0)
    assert 5.0 < one.state.concurrency < 6.0, one.state.concurrency  # one poll: 4 % of the gap
    later = _polls(slo, low, 600.0)
    assert later.state.concurrency == pytest.approx(15.0, rel=0.01) and later.concurrency == pytest.approx(15.0, rel=0.01)
    stuck = size_for_slo(slo, steady(20.0, 4, k=15.0, time=T0 + 5), low, 4, 32, T0 + 5)  # what the cap of 5 asks for
    assert later.needed < stuck.needed, (later.message, stuck.message)
    restored = AutoscalerState.from_dict(json.loads(json.dumps(later.state.to_dict())))
    assert restored.concurrency == later.state.concurrency  # the raised cap survives a round trip


def test_a_cap_that_replicas_queue_at_stays_low():
    """A low cap that replicas keep queueing at (``--max-num-seqs`` binding before the KV cache:
    the usage says 15, the queue says 5) is not raised, nor is it from a KV estimate below
    KV_USAGE_TRUSTED; the same service without the queue has its cap raised."""
    slo = SLOPolicy(2.0, None, 90.0, 60.0)
    low = AutoscalerState(concurrency=5.0, queue_sample=(T0, 0.0))
    queueing = _polls(slo, low, 600.0, saturated_running=5.0, waiting=3.0)
    assert queueing.state.concurrency == 5.0 and queueing.concurrency == 5.0, queueing.message
    quiet = _polls(slo, low, 600.0, k=33.0)  # usage 0.3: a KV estimate of 33, untrusted
    assert quiet.state.concurrency == 5.0, quiet.message
    free = _polls(slo, low, 600.0)
    assert free.state.concurrency > 10.0, free.message


def test_an_idle_service_whose_capacity_was_never_measured_comes_down_to_the_one_request_bound():
    """No KV usage to measure and no replica ever queued: the count is held, but not above what
    one request per replica would need (an upper bound), so 16 idle replicas come down; a busy
    service with the same blind spot is never scaled up on that guess."""
    slo = SLOPolicy(2.0, None, 90.0, 60.0)
    idle = sig(admission_rate=1.0, running=2.0, replicas=16.0, kv_cache_usage=0.01)
    r = size_for_slo(slo, idle, AutoscalerState(), 16, 32, T0)
    bound = replicas_for_wait(1.0, 2.0, 1.0, 2.0 - 0.4, 0.9, 32)
    assert r.needed == bound < 16 and r.held and r.concurrency is None and "no replica capacity measured yet" in r.message
    busy = sig(admission_rate=6.0, running=12.0, replicas=2.0, kv_cache_usage=0.01)
    assert size_for_slo(slo, busy, AutoscalerState(), 2, 32, T0).needed == 2  # the bound is above 2: held


@pytest.mark.parametrize("kw", [
    {"replicas": 2e-313, "running": 4.0, "kv_cache_usage": 0.5, "admission_rate": 3.0},
    {"admission_rate": 5e-324, "running": 1e308, "replicas": 1.0, "kv_cache_usage": 0.9},
    {"itl": 5e-324, "running": 2.0, "replicas": 1.0, "admission_rate": 2.0},
])
def test_subnormal_and_huge_signals_never_overflow_the_sizing(kw):
    """Found while moving the I/O out (issue 30): a subnormal replica count or a huge running
    count made the M/M/c count or the ITL count raise OverflowError (int of infinity) inside a
    reconcile. The sizing answers instead (a count, or None when it cannot)."""
    slo = SLOPolicy(ttft_seconds=1.0, itl_seconds=0.1, percentile=90.0, window_seconds=60.0)
    out = size_for_slo(slo, sig(**kw), AutoscalerState(), 2, 32, T0)
    assert out.needed is None or 0 <= out.needed <= 33
