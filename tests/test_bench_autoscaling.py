"""The autoscaling bench's own parts (issue 28): start times, the oracle, the sweep, the Dynamo
model, standby in the replay, names from the input. Pure: no cluster, simulated time only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kubeforge.sim.modelserver import Request

from e2e.bench.autoscaling import MODEL, Bounds, Result, StartTimes, allocate, replay, schedule, step_stream, sweep
from e2e.bench.autoscaling.cli import parse_args, parse_overrides, parse_rows
from e2e.bench.autoscaling.dynamo import DynamoLoad
from e2e.bench.autoscaling.oracle import MissCurves, Scripted, oracle
from e2e.bench.autoscaling.sweep import Family
from e2e.bench.lib.traces import AZURE_CODE, trace_credit, trace_label


def at(r: Result, t: float) -> tuple:
    """The timeline entry ``(t, existing, asked, ready, standby)`` last written at or before ``t``."""
    return [x for x in r.timeline if x[0] <= t][-1]


class Plan:
    """A scaler that returns what ``plan`` says at given times (replicas, or (replicas, standby))."""

    def __init__(self, plan, drain=True):
        self.plan, self.drain, self.name = plan, drain, "plan"

    def tick(self, now, current, view):
        return self.plan.get(now)


# --- start times -------------------------------------------------------------------------------


def test_start_times_default_to_five_minutes_cold_and_draw_within_the_jitter():
    st = StartTimes()
    assert (st.cold, st.cached, st.wake, st.cache) == (300.0, 18.0, 3.0, "none")
    assert not st.cached_for(0, 10)  # no node cache: every start cold
    nodes = StartTimes(cache="nodes", jitter=0.2, seed=4)
    assert nodes.cached_for(2, 3) and not nodes.cached_for(3, 3)
    rng = nodes.rng()
    draws = [nodes.draw(False, rng) for _ in range(200)]
    assert all(240.0 <= d <= 360.0 for d in draws) and len(set(draws)) > 100
    assert nodes.longest() == pytest.approx(360.0) and nodes.draw(True, None) == 18.0
    with pytest.raises(ValueError):
        StartTimes(cache="disk")
    with pytest.raises(ValueError):
        StartTimes(jitter=1.0)


def test_a_replica_is_ready_one_start_after_it_is_asked_for_and_paid_from_then():
    r = replay(Plan({10.0: 2}), [], 400.0, 1, True, MODEL, StartTimes(cold=300.0))
    assert r.starts == {"cold": 1}
    assert at(r, 301.0)[3] == 1 and at(r, 321.0)[3] == 2  # asked at 10 s, Ready at 310 s
    assert r.replica_seconds == pytest.approx(1 * 9.5 + 2 * 390.5)


def test_nodes_that_ran_the_model_start_cached():
    st = StartTimes(cold=300.0, cached=20.0, cache="nodes")
    r = replay(Plan({10.0: 1, 20.0: 2}), [], 400.0, 2, True, MODEL, st)  # 2 warm, down to 1, back to 2
    assert r.starts == {"cached": 1}
    assert at(r, 51.0)[3] == 2  # asked at 20 s, Ready at 40 s


def test_standby_replicas_are_paid_for_and_wake_in_seconds():
    st = StartTimes(cold=300.0, wake=3.0)
    r = replay(Plan({10.0: (1, 1), 400.0: 2}), [], 420.0, 1, True, MODEL, st)
    assert r.starts == {"cold": 2, "wake": 1}  # the standby started cold, woke, and a new one refills it
    assert at(r, 321.0)[1:] == (2, 1, 1, 1)  # started and asleep: paid for, not serving
    assert at(r, 411.0)[3] == 2  # woken at 400 s, serving 3 s later
    assert at(r, 411.0)[4] == 1  # the standby count refilled (a new start)


# --- the arrivals and the names ----------------------------------------------------------------


def test_step_stream_steps_up_and_back():
    rows = [(0.0, 100, 5), (1.0, 3000, 50)]
    a = step_stream(rows, 5.0, 40.0, 100.0, 100.0, 100.0, seed=3)
    before = sum(1 for r in a if r.arrival < 100)
    during = sum(1 for r in a if 100 <= r.arrival < 200)
    assert before == pytest.approx(500, rel=0.15) and during == pytest.approx(4000, rel=0.1)
    assert [r.id for r in a] == list(range(1, len(a) + 1)) and a == step_stream(rows, 5.0, 40.0, 100.0, 100.0, 100.0, seed=3)


def test_names_and_credit_come_from_the_input(tmp_path):
    other = tmp_path / "held-out.csv"
    other.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,100,10\n")
    assert trace_label(other) == "trace held-out.csv" and "held-out.csv" in trace_credit(other)
    assert "Azure" in trace_label(tmp_path / AZURE_CODE) and "Splitwise" in trace_credit(tmp_path / AZURE_CODE)


def test_flags_parse_the_start_times_and_policy_rows():
    a = parse_args(["--cold-start", "1500", "--start-cache", "nodes", "--runs", "ramp", "--sweep", "keda,dynamo",
                    "--kubeforge-row", "lead:tolerance=0.2,scale_up_max_step=3"])
    assert a.starts.cold == 1500 and a.starts.cache == "nodes" and a.run_list == ["step"]
    assert a.sweep_keys == ["keda", "dynamo"] and a.rows == [("lead", {"tolerance": 0.2, "scale_up_max_step": 3})]
    assert parse_overrides(["panic_threshold=2"]) == {"panic_threshold": 2.0}
    with pytest.raises(SystemExit):
        parse_overrides(["no_such_field=1"])
    with pytest.raises(SystemExit):
        parse_rows(["missing-fields"])


# --- the oracle ---------------------------------------------------------------------------------


def test_allocate_bridges_a_gap_shorter_than_a_start_and_stops_across_a_longer_one():
    # misses at 1 and 2 replicas per interval: intervals 0 and 3 need 2, the others 1
    short = [[5, 0], [0, 0], [0, 0], [5, 0]]
    counts, misses = allocate(short, 1, 60.0, 300.0, 1e6)
    assert counts == [2, 2, 2, 2] and misses == 0  # a 2-minute gap costs less than a 5-minute start
    counts, _ = allocate(short, 1, 60.0, 30.0, 1e6)
    assert counts == [2, 1, 1, 2]  # with a 30 s start, stopping is cheaper
    counts, misses = allocate(short, 1, 60.0, 30.0, 0.0)
    assert counts == [1, 1, 1, 1] and misses == 10  # misses free: the fewest replicas


def test_schedule_asks_one_start_ahead_and_merges_what_it_cannot_release():
    st = StartTimes(cold=120.0)
    assert sorted(schedule([1, 3, 1, 1, 3], 60.0, st)) == [(0.0, 300.0), (0.0, 300.0), (0.0, 300.0)]
    st = StartTimes(cold=30.0)
    assert sorted(schedule([1, 3, 1, 1, 3], 60.0, st)) == [
        (0.0, 300.0), (30.0, 120.0), (30.0, 120.0), (210.0, 300.0), (210.0, 300.0)]
    sc = Scripted(schedule([1, 3, 1, 1, 3], 60.0, st))
    assert [sc.tick(t, 0, None) for t in (0.0, 30.0, 119.5, 120.0, 210.0)] == [1, 3, 3, 1, 3]


def _burst_stream() -> list[Request]:
    """Quiet (1 request/s) with a burst of 30 requests/s in minutes 10 and 11."""
    out, t = [], 0.0
    while t < 1200:
        rate = 30.0 if 600 <= t < 720 else 1.0
        t += 1.0 / rate
        out.append(Request(t, 0.2, 40, 500, len(out) + 1))
    return out


def test_the_oracle_meets_the_slo_for_less_than_any_static_count():
    arr, st = _burst_stream(), StartTimes(cold=120.0)
    curves = MissCurves(arr, 1200.0, MODEL, 2.0, 1, 8)
    need = [curves.need(i) for i in range(curves.n_intervals)]
    assert max(need[:10]) < need[10] and need[10] == max(need)  # the burst needs the most
    o = oracle(arr, 1200.0, MODEL, 2.0, 1, 8, st, curves=curves)
    assert o.result.attainment(2.0) >= 0.99 and o.planned_misses <= o.budget
    peak = replay(Plan({}), arr, 1200.0, max(need), True, MODEL, st)  # the peak's count held throughout
    assert o.result.replica_seconds < peak.replica_seconds
    assert at(o.result, 470.0)[2] < at(o.result, 481.0)[2] == max(o.counts)  # asked one start (120 s) before the burst


# --- the sweep and the Dynamo model -------------------------------------------------------------


def _fake(attained_at: float, rep_s: float, knob: str) -> Result:
    ok = round(attained_at * 1000)
    return Result("fake", ttfts=[1.0] * ok + [9.0] * (1000 - ok), requests=1000, replica_seconds=rep_s, knob=knob)


def test_sweep_finds_the_cheapest_knob_value_that_reaches_the_goal():
    fam = Family("fake", "capacity", (1, 2, 3, 4, 5), 1, lambda v, b: SimpleNamespace(v=v, floor=b.min_replicas))
    table = {1: 0.95, 2: 0.97, 3: 0.985, 4: 0.992, 5: 0.999}
    runner = lambda sc, floor: _fake(table[sc.v], 100.0 * sc.v, f"v{sc.v}")  # noqa: E731
    s = sweep(fam, Bounds(1, 8), runner, 0.99, 2.0)
    assert s.best.knob == "v4" and s.default.knob == "v2" and len(s.points) <= 4
    never = sweep(fam, Bounds(1, 8), lambda sc, floor: _fake(0.9 + 0.02 * sc.floor, 100.0 * sc.floor, "x"),
                  0.99, 2.0, floor_hint=6)
    assert never.best_key is not None and never.best_key[1] == 5  # 0.9 + 0.02 x 5 = 1.0 >= 0.99; floor 4 gives 0.98


def _view(pods, pending=0):
    scrape = SimpleNamespace(pods=pods)
    return SimpleNamespace(prom=SimpleNamespace(latest=lambda: scrape), model=MODEL, pending=lambda: pending)


def test_dynamo_adds_one_worker_when_any_engine_is_over_and_waits_for_it():
    d = DynamoLoad(Bounds(1, 8))
    over = {"a": (0.7, 3, 10, 16000), "b": (0.2, 0, 2, 0)}  # a: 0.7 + 16000/32000 = 1.2 > 1.0
    assert d.tick(0.0, 2, _view(over)) == 3
    assert d.tick(2.0, 3, _view(over)) is None  # every 5 s
    assert d.tick(5.0, 3, _view(over, pending=1)) is None  # a worker is starting: observe only
    idle = {"a": (0.3, 0, 2, 0), "b": (0.5, 0, 2, 0)}
    assert d.tick(10.0, 3, _view(idle)) == 2  # every engine below 0.6
    assert d.tick(15.0, 1, _view({"a": (0.1, 0, 1, 0)})) is None  # never below minReplicas
    assert d.gateway is None and not d.drain


def test_dynamo_scales_where_its_router_lets_requests_queue():
    """The broken model never left 1 replica; the one from Dynamo's code does."""
    arr = [Request(1.0 + 0.02 * i, 0.3, 200, 2000, i + 1) for i in range(3000)]  # 50 requests/s for 60 s
    r = replay(DynamoLoad(Bounds(1, 8)), arr, 900.0, 1, False, MODEL, StartTimes(cold=60.0))
    assert r.max_replicas >= 3


def test_live_targets_stay_na_until_a_live_part_measures_them():
    from e2e.bench.autoscaling.compare import LiveFigures, issue28_targets

    def live(figures):  # no kubeforge row: only the two live targets
        return [ok for _, ok, _ in issue28_targets([], None, None, 2.0, 0.99, figures)]

    assert live(None) == [None, None]
    assert live(LiveFigures((0.995, 90.0, 0), (0.97, 100.0, 7), 40.0, 30.0)) == [True, True]
    assert live(LiveFigures((0.995, 120.0, 0), (0.97, 100.0, 7))) == [False, None]


# --- kubeforge's predictive and standby rows -----------------------------------------------------


def test_kubeforge_rows_are_written_as_a_user_writes_the_spec():
    from e2e.bench.autoscaling import SLO, kubeforge_policy

    p, _ = kubeforge_policy(Bounds(1, 8), SLO(), spec={"standby": {"replicas": 1},
                                                        "autoscaling": {"predictive": {"mode": "Trend"}}})
    assert p.slo is not None and p.standby_replicas == 1
    assert p.predictive.mode == "Trend" and p.predictive.trend_window_seconds > 0  # the API's default window


def test_the_emulated_prometheus_answers_the_admission_rate_range_query():
    from kubeforge.sim.modelserver import Service

    from e2e.bench.autoscaling.prom import Prom

    svc, prom = Service(MODEL, 0.0), Prom()
    svc.set_replicas(["a"], ["a"], 0.0)
    arr = [Request(0.5 + i, 0.1, 0, 100, i + 1) for i in range(300)]  # 1 request/s
    for k in range(1, 61):
        svc.advance(5.0 * k, [r for r in arr if 5.0 * (k - 1) < r.arrival <= 5.0 * k])
        prom.scrape(5.0 * k, svc, ["a"])
    rates = prom.admission_rates(120.0, 300.0, 15.0)
    assert len(rates) == 13 and all(v == pytest.approx(1.0, abs=0.1) for _, v in rates)


def test_rate_series_stamps_yesterday_before_time_zero():
    from e2e.bench.autoscaling.arrivals import rate_series

    arr = [Request(float(i), 0.1, 0, 10, i + 1) for i in range(600)]  # 1 request/s for 10 minutes
    s = rate_series(arr, 600.0, -86400.0)
    assert s[0][0] == pytest.approx(15.0 - 86400.0) and all(t < 0 for t, _ in s)
    assert [v for t, v in s if t >= 60.0 - 86400.0] == pytest.approx([1.0] * len([t for t, _ in s if t >= 60.0 - 86400.0]))


def test_a_predictive_row_forecasts_from_the_services_own_history():
    from e2e.bench.autoscaling import SLO
    from e2e.bench.autoscaling.scalers import KubeforgeSLO

    arr = [Request(1.0 + 0.2 * i, 0.2, 20, 500, i + 1) for i in range(3000)]  # 5 requests/s for 600 s
    sc = KubeforgeSLO(Bounds(1, 8), SLO(), spec={"autoscaling": {"predictive": {"mode": "Seasonal"}}})
    replay(sc, arr, 620.0, 2, True, MODEL, StartTimes(cold=120.0))
    assert sc.last.forecast is not None and sc.last.forecast.lead_seconds == 120.0  # the run's start is the lead
    assert sc.last.forecast.method == "Trend"  # no yesterday given: the trend


def test_the_seasonal_row_runs_only_where_the_run_has_a_yesterday():
    from e2e.bench.autoscaling import SLO
    from e2e.bench.autoscaling.sweep import families

    keys = [f.key for f in families(Bounds(1, 8), SLO())]
    assert keys[:3] == ["kubeforge-slo", "kubeforge-trend", "kubeforge-standby"]
    with_past = [f.key for f in families(Bounds(1, 8), SLO(), past=((-86400.0 + 15, 1.0),))]
    assert with_past[:4] == ["kubeforge-slo", "kubeforge-trend", "kubeforge-seasonal", "kubeforge-standby"]
    assert all(f.kubeforge for f in families(Bounds(1, 8), SLO())[:3])  # judged by the targets
    assert "kubeforge-trend" not in [f.key for f in families(Bounds(1, 8), SLO(), rows=())]


def test_the_standby_row_keeps_one_replica_asleep_and_pays_for_it():
    from e2e.bench.autoscaling import SLO
    from e2e.bench.autoscaling.scalers import KubeforgeSLO

    arr = [Request(1.0 + 0.5 * i, 0.2, 20, 500, i + 1) for i in range(600)]  # 2 requests/s for 300 s
    sc = KubeforgeSLO(Bounds(1, 8), SLO(), spec={"standby": {"replicas": 1}})
    r = replay(sc, arr, 320.0, 2, True, MODEL, StartTimes(cold=120.0))
    assert sc.last.standby == 1
    assert at(r, 300.0)[4] == 1  # one asleep once its start is over, out of routing
    assert at(r, 300.0)[1] == at(r, 300.0)[2] + 1  # and paid for beside the replicas asked for


def test_a_seasonal_row_forecasts_from_yesterday_when_it_has_one():
    from e2e.bench.autoscaling import SLO
    from e2e.bench.autoscaling.arrivals import rate_series
    from e2e.bench.autoscaling.scalers import KubeforgeSLO

    arr = [Request(1.0 + 0.2 * i, 0.2, 20, 500, i + 1) for i in range(3000)]  # 5 requests/s for 600 s
    past = rate_series(arr, 86400.0, -86400.0, step=60.0)  # yesterday: the same 600 s, then nothing
    sc = KubeforgeSLO(Bounds(1, 8), SLO(), spec={"autoscaling": {"predictive": {"mode": "Seasonal"}}}, past=past)
    replay(sc, arr, 620.0, 2, True, MODEL, StartTimes(cold=120.0))
    assert sc.last.forecast is not None and sc.last.forecast.method == "Seasonal1d"
