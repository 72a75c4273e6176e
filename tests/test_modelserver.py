"""The model-server simulator: its pure latency model, routing, exposition and live HTTP part (no cluster)."""

from __future__ import annotations

import math
import threading
import time

import httpx
import pytest

from kubeforge.sim.modelserver import (
    AZURE_CODE_TRACE, ITL_BUCKETS, TTFT_BUCKETS, ModelServerSim, Request, Service, ServiceModel, Stats, compressed,
    itl_seconds, load_trace, make_request, percentile, prefill_seconds, rate_arrivals, routing_view,
    service_for_host, service_seconds, trace_arrivals,
)
from kubeforge.sim._exposition import render_services
from kubeforge.sim.modelserver import PodView, SliceView

#: No prefill cost, 0.1 s per token alone, ITL doubling with a second request in the batch.
FLAT = ServiceModel(slots=4, base_seconds=0.0, prefill_tokens_per_second=1e12, seconds_per_output_token=0.1,
                    itl_growth=1.0)


def svc(model: ServiceModel = FLAT, replicas=("a",), t: float = 0.0) -> Service:
    s = Service(model, t)
    s.set_replicas(replicas, replicas, t)
    return s


def by_id(s: Service) -> dict[int, object]:
    return {d.request.id: d for d in s.done}


# --- the latency model -----------------------------------------------------------------------


def test_itl_rises_linearly_with_the_batch_and_prefill_with_the_prompt():
    m = ServiceModel(seconds_per_output_token=0.04, itl_growth=0.25, base_seconds=0.1, prefill_tokens_per_second=1000)
    assert [itl_seconds(m, b) for b in (0, 1, 2, 5)] == pytest.approx([0.04, 0.04, 0.05, 0.08])
    assert prefill_seconds(m, 2000) == pytest.approx(2.1)
    assert service_seconds(m, 2000, 11) == pytest.approx(2.1 + 10 * 0.04)
    r = make_request(m, 5.0, 2000, 11, rid=7)
    assert (r.arrival, r.prefill, r.tokens, r.context, r.id) == (5.0, pytest.approx(2.1), 10, 2000, 7)


def test_decode_shares_the_step_exactly_on_the_token_clock():
    s = svc()
    s.advance(10, [Request(0, 0, 10, 0, 1), Request(0.5, 0, 10, 0, 2)])
    d = by_id(s)
    # alone 0.5 s (5 tokens), together at 0.2 s/token until A's last 5 tokens at 1.5, then B alone
    assert d[1].finish == pytest.approx(1.5) and d[2].finish == pytest.approx(2.0)
    assert d[1].itl == pytest.approx(0.15) and d[2].itl == pytest.approx(0.15)
    assert d[1].ttft == 0 and d[2].ttft == 0


def test_ttft_is_queue_wait_plus_prefill_and_slots_bound_the_batch():
    m = ServiceModel(slots=1, base_seconds=1.0, prefill_tokens_per_second=1e12, seconds_per_output_token=0.1)
    s = svc(m)
    s.advance(30, [Request(0, 1.0, 10, 0, 1), Request(0, 1.0, 10, 0, 2), Request(0.5, 1.0, 0, 0, 3)])
    d = by_id(s)
    assert (d[1].queue_wait, d[1].ttft, d[1].finish) == (0, 1.0, pytest.approx(2.0))
    assert (d[2].queue_wait, d[2].ttft) == (pytest.approx(2.0), pytest.approx(3.0))  # waited for the one slot
    assert (d[3].queue_wait, d[3].ttft, d[3].itl) == (pytest.approx(3.5), pytest.approx(4.5), None)


def test_kv_cache_capacity_admits_only_what_fits_but_always_one():
    m = ServiceModel(slots=8, base_seconds=0.0, prefill_tokens_per_second=1e12, seconds_per_output_token=0.1,
                     kv_cache_tokens=1000)
    s = svc(m)
    s.advance(0.01, [Request(0, 0, 100, 500, 1), Request(0, 0, 100, 500, 2), Request(0, 0, 10, 5000, 3)])
    rep = s.replicas["a"]
    assert (rep.running, len(rep.waiting)) == (1, 2)  # 600 reserved; the next 600 does not fit
    assert rep.kv_usage(m) == pytest.approx(0.6)
    s.advance(100)
    assert {d.request.id for d in s.done} == {1, 2, 3}  # the oversized one ran alone in the end
    assert rep.kv_used == 0


def test_router_joins_the_shortest_queue_and_holds_at_zero():
    s = Service(FLAT)
    s.advance(1, [Request(0.5, 0, 100, 0, i) for i in range(3)])
    assert (len(s.held), s.waiting) == (3, 3)  # no replica: held at the service
    s.set_replicas(["a", "b"], ["a", "b"], 2.0)
    assert not s.held and sorted(r.running for r in s.replicas.values()) == [1, 2]
    s.advance(2.5, [Request(2.5, 0, 100, 0, 9)])
    assert s.replicas["b"].running == 2  # the shorter queue took it
    s.advance(100)
    assert by_id(s)[0].queue_wait == pytest.approx(1.5)  # the hold counts in its wait and TTFT


def test_gateway_holds_while_every_replica_is_saturated_then_binds_late():
    m = ServiceModel(slots=1, base_seconds=0.0, prefill_tokens_per_second=1e12, seconds_per_output_token=0.1)
    s = Service(m, gateway=(1, 1.01))  # queue depth 1; KV never (slots-only model: usage = running / slots)
    s.set_replicas(["a", "b"], ["a", "b"], 0.0)
    s.advance(0.01, [Request(0, 0, 10, 0, i) for i in range(5)])  # 1 s each
    assert [len(r.waiting) for r in s.replicas.values()] == [1, 1] and len(s.held) == 1
    s.advance(1.05)  # both finish their first at 1.0; the held one goes where room is first
    assert not s.held
    s.advance(10)
    d = by_id(s)
    assert d[4].ttft == pytest.approx(2.0, abs=0.11)  # held at the gateway, then bound to a replica
    assert s.aborted == 0


def test_draining_replica_finishes_its_requests_and_gets_no_new_ones():
    s = svc(replicas=("a", "b"))
    s.advance(0.1, [Request(0, 0, 20, 0, 1)])
    assert s.replicas["a"].running == 1
    assert s.set_replicas(["a", "b"], ["b"], 0.2) == 0  # "a" leaves routing, still exists
    s.advance(0.3, [Request(0.3, 0, 5, 0, 2), Request(0.3, 0, 5, 0, 3)])
    assert s.replicas["a"].running == 1 and s.replicas["b"].running == 2
    s.advance(100)
    assert {d.request.id for d in s.done if not d.aborted} == {1, 2, 3} and s.aborted == 0


def test_deleted_replica_aborts_what_it_holds():
    m = ServiceModel(slots=1, base_seconds=0.0, prefill_tokens_per_second=1e12, seconds_per_output_token=0.1)
    s = svc(m, replicas=("a",))
    s.advance(0.1, [Request(0, 0, 50, 0, 1), Request(0.05, 0, 50, 0, 2)])
    assert s.set_replicas([], [], 0.2) == 2
    assert s.aborted == 2 and all(d.aborted for d in s.done)
    assert s.stats.aborted == 2 and s.stats.success == 0


def test_stats_observe_vllm_buckets():
    s = svc()
    s.advance(10, [Request(0, 0.3, 10, 0, 1)])
    st = s.stats
    assert sum(st.ttft) == 1 and st.ttft[TTFT_BUCKETS.index(0.5)] == 1  # 0.3 s lands in le=0.5
    assert sum(st.itl) == 10 and st.itl[ITL_BUCKETS.index(0.1)] == 10  # one per decode token
    assert st.success == 1 and st.inference_sum == pytest.approx(1.3)
    assert s.replicas["a"].stats == st  # the replica counted the same


def test_compressed_replica_compresses_its_histogram_buckets_alike():
    # 6x compressed: a prefill of 0.2 s of trace time takes 0.0333 s; with vLLM's own bounds it
    # would land in le=0.3 (histogram_quantile's p99 0.297 s = 1.8 trace s); with the bounds
    # compressed alike it lands in le=0.05 (0.3 trace s), where the uncompressed one's 0.2 s lands
    m = compressed(ServiceModel(base_seconds=0.2, prefill_tokens_per_second=1000), 6)
    assert m.time_scale == pytest.approx(1 / 6)
    s = Service(m)
    s.set_replicas(["chat-0"], ["chat-0"], 0)
    s.advance(1, [make_request(m, 0.0, 0, 1, 1)])
    st = s.replicas["chat-0"].stats
    assert st.bounds("prefill")[:2] == (0.05, 0.0833333333333)
    assert st.prefill[0] == 1 and st.ttft[st.bounds("ttft").index(0.0416666666667)] == 1  # le=0.25/6
    text = render_services([("ns1", "chat", s)])
    assert 'vllm:request_prefill_time_seconds_bucket{namespace="ns1",service="chat",pod="chat-0",le="0.05"} 1' in text
    assert 'vllm:time_to_first_token_seconds_bucket{namespace="ns1",service="chat",pod="chat-0",le="0.416666666667"} 1' in text
    assert s.stats.scale == st.scale and ServiceModel().time_scale == 1.0 and Stats().bounds("ttft") == TTFT_BUCKETS


def test_exposition_labels_per_pod_and_counts_each_waiting_request_once():
    s = Service(ServiceModel(slots=0))
    s.advance(1, [Request(0.5, 1, 0, 0, i) for i in range(3)])  # held: no replica
    text = render_services([("ns1", "chat", s)])
    assert 'vllm:num_requests_waiting{namespace="ns1",service="chat"} 3' in text
    s.set_replicas(["chat-0"], ["chat-0"], 2)  # slots 0: they wait in the replica now
    text = render_services([("ns1", "chat", s)])
    assert 'vllm:num_requests_waiting{namespace="ns1",service="chat"} 0' in text
    assert 'vllm:num_requests_waiting{namespace="ns1",service="chat",pod="chat-0"} 3' in text
    assert 'vllm:num_requests_running{namespace="ns1",service="chat",pod="chat-0"} 0' in text
    assert 'vllm:time_to_first_token_seconds_bucket{namespace="ns1",service="chat",pod="chat-0",le="+Inf"} 0' in text
    assert "# TYPE vllm:inter_token_latency_seconds histogram" in text
    assert 'kubeforge_sim_aborted_requests_total{namespace="ns1",service="chat"} 0' in text


def test_routing_view_follows_the_slice_then_ready_pods():
    pods = [PodView("n", "chat-a", "chat", True), PodView("n", "chat-b", "chat", True),
            PodView("n", "chat-c", "chat", False), PodView("n", "chat-d", "chat", True, deleting=True),
            PodView("n", "other-a", "other", True)]
    keys = [("n", "chat"), ("n", "other")]
    # no slice: the Deployment-based operator; Ready, not deleting pods
    v = routing_view(keys, [], pods, {})
    assert v[("n", "chat")] == ({"chat-a", "chat-b"}, {"chat-a", "chat-b"})
    # the operator's slice: only its ready addresses route; "chat-b" left it (draining) but exists
    sl = SliceView("n", "kubeforge-chat", "replicas", (("chat-a", True), ("chat-c", False)))
    v = routing_view(keys, [sl], pods, {("n", "chat"): {"chat-a", "chat-b", "chat-d"}})
    assert v[("n", "chat")] == ({"chat-a", "chat-b"}, {"chat-a"})  # chat-d is being deleted: gone
    assert v[("n", "other")] == ({"other-a"}, {"other-a"})
    act = SliceView("n", "kubeforge-chat", "activator", ())
    assert routing_view(keys, [act], pods, {})[("n", "chat")] == (set(), set())


@pytest.mark.parametrize("host,header,key", [
    ("chat.ml.svc", None, ("ml", "chat")),
    ("chat.ml.svc.cluster.local:8000", None, ("ml", "chat")),
    ("127.0.0.1:1234", "ml/chat", ("ml", "chat")),
    ("127.0.0.1:1234", None, None),
    ("chat.ml", None, None),
    (None, "bad", None),
])
def test_service_for_host(host, header, key):
    assert service_for_host(host, header) == key


def test_rate_arrivals_even_spacing_and_carry():
    out, carry = rate_arrivals(2.0, 0.0, 1.25, 3.0)
    assert [r.arrival for r in out] == [0.5, 1.0] and carry == pytest.approx(0.5)
    out2, carry2 = rate_arrivals(2.0, 1.25, 2.0, 3.0, carry)
    assert [r.arrival for r in out2] == [1.5, 2.0] and carry2 == pytest.approx(0.0)
    assert rate_arrivals(0.0, 0, 10, 1.0) == ([], 0.0)


def test_trace_compression_scales_arrivals_and_the_model_together():
    m = ServiceModel(base_seconds=0.5, prefill_tokens_per_second=1000, seconds_per_output_token=0.1)
    out = trace_arrivals([(0.0, 2000, 10), (10.0, 1000, 1), (20.0, 0, 1)], m, compression=10, start=5, end=20, offset=100)
    assert [(r.arrival, round(r.prefill, 3), r.tokens) for r in out] == [(100.5, 0.15, 0)]
    assert itl_seconds(compressed(m, 10), 1) == pytest.approx(0.01)


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


# --- the live part ---------------------------------------------------------------------------


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


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
        wait_for(lambda: sim.snapshot("ns", "chat")["ready"] == 2)
        snap = sim.snapshot("ns", "chat")
        assert snap["ready"] == 2 and snap["waiting"] == 1 and snap["running"] == 4
        sim.clear("ns", "chat")
        assert sim.snapshot("ns", "chat")["waiting"] == 0


def test_sim_snapshot_pairs_each_ttft_with_its_arrival():
    now = [0.0]
    sim = ModelServerSim(ready_replicas=lambda ns, name: 1, clock=lambda: now[0], poll_seconds=0.05)
    sim.add_service("ns", "chat", ServiceModel(slots=1))
    sim.replay("ns", "chat", [Request(1.0, 0.5, 0, 0, 1), Request(1.2, 0.5, 0, 0, 2)])
    with sim:
        wait_for(lambda: sim.snapshot("ns", "chat")["ready"] == 1)
        now[0] = 5.0
        snap = sim.snapshot("ns", "chat")
    assert snap["arrivals"] == [1.0, 1.2] and snap["ttfts"] == pytest.approx([0.5, 0.8])  # one slot: the second waits


def test_sim_answers_http_requests_and_503_when_the_replica_goes():
    routes = {"existing": ["chat-0"], "routable": ["chat-0"]}
    fast = ServiceModel(slots=8, base_seconds=0.05, prefill_tokens_per_second=1e6, seconds_per_output_token=0.01)
    sim = ModelServerSim(endpoints=lambda ns, name: (routes["existing"], routes["routable"]),
                         poll_seconds=0.02, tick_seconds=0.01)
    sim.add_service("ml", "chat", fast)
    with sim:
        wait_for(lambda: sim.snapshot("ml", "chat")["ready"] == 1)
        r = httpx.post(f"{sim.url}/v1/completions", json={"prompt": "x" * 400, "max_tokens": 5},
                       headers={"Host": "chat.ml.svc.cluster.local"}, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["usage"] == {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}
        assert httpx.post(f"{sim.url}/v1/completions", json={}, headers={"X-Kubeforge-Service": "ml/nope"},
                          timeout=10).status_code == 404
        # a long request, then its replica's pod is deleted while it runs: 503, counted as aborted
        out = {}
        t = threading.Thread(target=lambda: out.update(r=httpx.post(
            f"{sim.url}/v1/completions", json={"max_tokens": 5000}, headers={"X-Kubeforge-Service": "ml/chat"},
            timeout=10)))
        t.start()
        wait_for(lambda: sim.snapshot("ml", "chat")["running"] == 1)
        routes["existing"], routes["routable"] = [], []
        t.join(10)
        assert out["r"].status_code == 503
        assert sim.aborted("ml", "chat") == 1
        assert 'kubeforge_sim_aborted_requests_total{namespace="ml",service="chat"} 1' in sim.metrics_text()
