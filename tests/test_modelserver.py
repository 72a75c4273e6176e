"""The model-server simulator's pure queue model and its /metrics (no cluster)."""

from __future__ import annotations

import math

import httpx
import pytest

from kubeforge.sim.modelserver import (
    AZURE_CODE_TRACE, ModelServerSim, QueueState, Request, ServiceModel, advance, load_trace, percentile,
    rate_arrivals, render_metrics, service_seconds, trace_arrivals,
)


def reqs(*arrivals: float, service: float = 10.0) -> list[Request]:
    return [Request(a, service) for a in arrivals]


@pytest.mark.parametrize(
    "capacity, arrivals, now, waiting, running, completed",
    [
        (0, (1, 2, 3), 5, 3, 0, 0),      # no replica: everything waits, the queue survives zero
        (2, (1, 2, 3), 5, 1, 2, 0),      # two slots busy, one waits
        (4, (1, 2, 3), 5, 0, 3, 0),      # room for all
        (1, (1, 2, 3), 31.5, 0, 0, 3),   # serial: done at 11, 21, 31
        (1, (1, 2, 3), 11, 1, 1, 1),     # completion at 11 starts the second at once
    ],
)
def test_advance_table(capacity, arrivals, now, waiting, running, completed):
    q = advance(QueueState(), now, capacity, reqs(*arrivals))
    assert (q.num_waiting, q.num_running, q.completed) == (waiting, running, completed)
    assert q.time == now


def test_waits_are_start_minus_arrival():
    q = advance(QueueState(), 40, 1, reqs(1, 2, 3))
    assert q.waits == [0, 9, 18]  # starts at 1, 11, 21


def test_queue_grows_at_zero_then_drains_when_capacity_comes():
    q = QueueState()
    advance(q, 10, 0, reqs(1, 2, 3, 4, service=1.0))
    assert q.num_waiting == 4 and q.waits == []
    advance(q, 10.5, 4)  # replicas became ready: queued work starts at the interval start
    assert q.num_waiting == 0 and q.num_running == 4
    assert q.waits == [9, 8, 7, 6]
    advance(q, 12, 4)
    assert q.completed == 4


def test_lower_capacity_drains_running_without_new_starts():
    q = advance(QueueState(), 1, 4, reqs(0, 0, 0, 0, 0.5, service=5.0))
    assert q.num_running == 4 and q.num_waiting == 1
    advance(q, 5.2, 1)  # scaled down to one slot: the 4 finish at 5, the waiting one starts
    assert q.completed == 4 and q.num_running == 1 and q.num_waiting == 0


def test_arrivals_after_now_are_ignored_and_time_never_goes_back():
    q = advance(QueueState(), 5, 1, reqs(1, 9))
    assert q.num_running == 1 and q.num_waiting == 0
    advance(q, 3, 1)
    assert q.time == 5


def test_rate_arrivals_even_spacing_and_carry():
    out, carry = rate_arrivals(2.0, 0.0, 1.25, 3.0)
    assert [r.arrival for r in out] == [0.5, 1.0] and carry == pytest.approx(0.5)
    out2, carry2 = rate_arrivals(2.0, 1.25, 2.0, 3.0, carry)
    assert [r.arrival for r in out2] == [1.5, 2.0] and carry2 == pytest.approx(0.0)
    assert rate_arrivals(0.0, 0, 10, 1.0) == ([], 0.0)


def test_service_seconds_and_trace_compression():
    m = ServiceModel(slots=2, base_seconds=0.5, prefill_tokens_per_second=1000, seconds_per_output_token=0.1)
    assert service_seconds(m, 2000, 10) == pytest.approx(3.5)
    trace = [(0.0, 2000, 10), (10.0, 1000, 0), (20.0, 0, 0)]
    out = trace_arrivals(trace, m, compression=10, start=5, end=20, offset=100)
    assert [(r.arrival, round(r.service, 3)) for r in out] == [(100.5, 0.15)]


def test_azure_trace_loads():
    if not AZURE_CODE_TRACE.exists():
        pytest.skip("trace not present")
    t = load_trace()
    assert len(t) > 8000 and t[0][0] == 0.0
    assert 3000 < t[-1][0] < 3600  # about 57 minutes
    assert all(a[0] <= b[0] for a, b in zip(t, t[1:]))


def test_percentile_nearest_rank():
    assert percentile([3, 1, 2, 4], 50) == 2 and percentile([3, 1, 2, 4], 95) == 4
    assert math.isnan(percentile([], 50))


def test_render_metrics_labels_like_a_service_monitor():
    text = render_metrics({("ns1", "chat"): (7, 3)})
    assert 'vllm:num_requests_waiting{namespace="ns1",service="chat"} 7' in text
    assert 'vllm:num_requests_running{namespace="ns1",service="chat"} 3' in text
    assert "# TYPE vllm:num_requests_waiting gauge" in text


def test_sim_serves_metrics_and_follows_ready_replicas():
    now = [0.0]
    ready = {"n": 0}
    sim = ModelServerSim(ready_replicas=lambda ns, name: ready["n"], clock=lambda: now[0], poll_seconds=0.05)
    sim.add_service("ns", "chat", ServiceModel(slots=2), request_seconds=100.0)
    sim.inject("ns", "chat", 5)
    with sim:
        text = httpx.get(f"http://{sim.target}/metrics", timeout=5).text
        assert 'vllm:num_requests_waiting{namespace="ns",service="chat"} 5' in text
        ready["n"] = 2
        import time

        deadline = time.monotonic() + 5
        while sim.snapshot("ns", "chat")["ready"] != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        snap = sim.snapshot("ns", "chat")
        assert snap["ready"] == 2 and snap["waiting"] == 1 and snap["running"] == 4
        sim.clear("ns", "chat")
        assert sim.snapshot("ns", "chat")["waiting"] == 0
