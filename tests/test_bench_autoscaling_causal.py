"""The autoscaling bench's causal reference (issue 28): the cheapest policy that knows every past
minute's need exactly and nothing ahead. Pure: no cluster, simulated time only."""

from __future__ import annotations

import pytest

from e2e.bench.autoscaling import MODEL, StartTimes, oracle, replay
from e2e.bench.autoscaling.causal import CausalNeed, asked_counts, causal_reference, plan
from e2e.bench.autoscaling.oracle import MissCurves
from test_bench_autoscaling import _burst_stream


def test_asks_are_the_most_need_of_the_minutes_that_are_over_plus_headroom():
    need = [1, 1, 3, 1, 1, 1]
    assert asked_counts(need, 2, 0, 1, 8) == [1, 1, 1, 3, 3, 1]  # minute 2's 3 is asked for at minutes 3 and 4
    assert asked_counts(need, 2, 1, 1, 3) == [1, 2, 2, 3, 3, 2]  # headroom, within maxReplicas
    assert asked_counts(need, 6, -1, 1, 8) == [1, 1, 1, 2, 2, 2]  # negative headroom, at least minReplicas
    assert asked_counts(need, 2, 0, 1, 8, floor=2) == [2, 2, 2, 3, 3, 2]  # a floor under it
    with pytest.raises(ValueError):
        asked_counts(need, 0, 0, 1, 8)


def test_asks_never_depend_on_a_minute_that_is_not_over():
    need = [2, 2, 3, 2, 2, 2, 2, 2, 2, 2]
    burst = need[:6] + [9, 9, 2, 2]  # the same past, a burst from minute 6
    for w in (1, 3, 5):
        assert asked_counts(need, w, 1, 1, 16)[:7] == asked_counts(burst, w, 1, 1, 16)[:7]
        assert asked_counts(burst, w, 1, 1, 16)[7] == 10  # seen once minute 6 is over


def test_plan_serves_a_minute_with_what_was_asked_one_start_before_and_kept():
    curves = [[4, 0, 0], [4, 0, 0], [4, 1, 0], [4, 2, 0]]  # misses at 1, 2, 3 replicas
    asked = [1, 3, 3, 2]
    misses, paid = plan(curves, asked, 1, 2, 60.0)
    # minute 2: least ask over minutes 0..2 is 1 (4 misses); minute 3: over 1..3 it is 2 (2 misses)
    assert misses == 6 and paid == pytest.approx(60.0 * 9)
    dip = [3, 3, 1, 3]  # a dip at minute 2: the replica given back takes a start to come back
    assert plan(curves, dip, 1, 0, 60.0)[0] == 4  # free starts: only minute 2 short
    assert plan(curves, dip, 1, 1, 60.0)[0] == 4 + 4  # a one-minute start: minute 3 still at 1


def test_the_scaler_asks_at_minute_boundaries_and_keeps_the_warm_start_first():
    sc = CausalNeed([1, 2, 4], 5, 1, 2)
    assert sc.tick(30.0, 3, None) is None  # minute 0: the warm start
    assert sc.tick(60.0, 3, None) == 2 and sc.tick(61.0, 2, None) is None
    assert sc.tick(150.0, 2, None) == 4 and sc.tick(999.0, 4, None) is None  # past the end: the last ask
    assert sc.knob == "max need of the last 5 min +1, >= 2"


def test_knowing_only_the_past_costs_more_than_the_oracle_for_a_burst_within_one_start():
    arr, st = _burst_stream(), StartTimes(cold=120.0)
    curves = MissCurves(arr, 1200.0, MODEL, 2.0, 1, 8)
    o = oracle(arr, 1200.0, MODEL, 2.0, 1, 8, st, curves=curves)
    c = causal_reference(curves, lambda sc: replay(sc, arr, 1200.0, 1, True, MODEL, st), 0.99, 2.0,
                         st.longest(), len(arr), windows=(2, 5))
    assert c.best is not None and c.best.attainment(2.0) >= 0.99 and c.tried >= 2
    w, h, f = c.setting
    ready_before = min(asked_counts([curves.need(i) for i in range(curves.n_intervals)], w, h, 1, 8, f)[8:11])
    assert ready_before >= 3  # the burst is unseen: only capacity held through the quiet minutes covers it
    assert c.best.replica_seconds > 1.2 * o.result.replica_seconds
