"""kubeforge.autoscaling.prometheus, pure: the PromQL the autoscaler sends (templates, rendering, the
one signals query) and how the answers become data (parsing, the activator's held requests). The
requests themselves: tests/test_prometheus_http.py."""

from __future__ import annotations

import json

import pytest

from kubeforge.autoscaling.prometheus import (
    IN_FLIGHT_BY_POD,
    DEFAULT_QUERIES,
    HELD_QUERY,
    SIGNAL_EXPRESSIONS,
    QueryResult,
    parse_query_response,
    parse_signals_response,
    reads_held,
    render_query,
    resolve_query,
    signals_query,
    with_held,
)


@pytest.mark.parametrize("status, body", [
    (200, '{"status": "error", "errorType": "internal-secret-token-abc123", "error": "token abc123"}'),
    (500, "root:x:0:0:root:/root:/bin/bash"),
    (200, '{"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "secret-abc123"]}]}}'),
    (401, '{"access_token": "abc123"}'),
])
def test_no_response_content_ever_reaches_the_error(status, body):
    """prometheusURL is the user's: whatever answers there, its body never reaches status or
    Events (issue 8: no reading of internal endpoints through the operator)."""
    r = parse_query_response(status, body)
    assert r.value is None and r.error
    assert "abc123" not in r.error and "root:" not in r.error and "token" not in r.error, r.error


def test_render_query_fills_only_the_placeholders():
    q = render_query(DEFAULT_QUERIES["SGLangQueue"], "ml", "llama")
    assert q == 'sum(sglang:num_queue_reqs{namespace="ml",service="llama"})'
    # vLLM's waiting plus the activator's held requests (issue 14: a service at zero replicas
    # has no vLLM series left, so the queue it must come back for is the activator's)
    v = render_query(DEFAULT_QUERIES["VLLMWaiting"], "ml", "llama")
    assert 'sum(vllm:num_requests_waiting{namespace="ml",service="llama"})' in v
    assert 'sum(kubeforge_activator_queue_length{namespace="ml",service="llama"})' in v
    assert render_query('sum(x{a="{service}"}) by (pod)', "n", 'we"ird') == 'sum(x{a="we\\"ird"}) by (pod)'


def test_resolve_query_names_default_and_custom():
    assert resolve_query(None, "ml", "llama") == render_query(DEFAULT_QUERIES["VLLMWaiting"], "ml", "llama")
    assert "sglang:num_queue_reqs" in resolve_query("SGLangQueue", "ml", "s")
    assert resolve_query("sum(my_queue)", "ml", "s") == "sum(my_queue)"


_OK = QueryResult(3.0, 100.0, None)
_HELD2 = QueryResult(2.0, 101.0, None)
_EMPTY = QueryResult(None, None, "empty result", empty=True)
_DOWN = QueryResult(None, None, "connection failed")


@pytest.mark.parametrize("queue, held, value, error", [
    (_OK, _HELD2, 5.0, None),            # both: summed
    (_EMPTY, _HELD2, 2.0, None),         # the engine's series gone with its last pod: the held requests alone
    (_OK, _EMPTY, 3.0, None),            # no activator series: the queue alone
    (_EMPTY, _EMPTY, None, "empty result"),  # nothing at all: held as "no data"
    (_DOWN, _HELD2, None, "connection failed"),  # a failed queue query stays failed
    (_OK, _DOWN, 3.0, None),             # a failed held query leaves the queue as read
])
def test_the_activators_held_requests_are_added_to_any_queue(queue, held, value, error):
    """Issue 32.4: a Custom (or SGLang) queue at zero replicas has no series; the activator's held
    requests bring the service back."""
    got = with_held(queue, held)
    assert (got.value, got.error) == (value, error)


def test_a_query_that_reads_the_held_requests_itself_is_sent_alone():
    assert reads_held(DEFAULT_QUERIES["VLLMWaiting"])
    assert not any(reads_held(DEFAULT_QUERIES[k]) for k in ("SGLangQueue", "TritonPending", "TGIQueue"))
    assert reads_held("sum(my_queue) + sum(kubeforge_activator_queue_length{service='{name}'})")
    assert render_query(HELD_QUERY, "ns", "chat") == 'sum(kubeforge_activator_queue_length{namespace="ns",service="chat"})'


def test_parse_never_raises_on_junk():
    for status, body in [(200, ""), (200, "[]"), (200, '{"status":"success"}'),
                         (200, '{"status":"success","data":{"resultType":"vector","result":[1]}}'),
                         (200, '{"status":"success","data":{"resultType":"vector","result":[{"value":["x","y"]}]}}'),
                         (500, "")]:
        r = parse_query_response(status, body)
        assert r.value is None and r.error


# --- read_signals: one query for everything a decision needs -------------------------------


def signals_vector(**values):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"kubeforge_signal": k}, "value": [1_700_000_000.0, v]} for k, v in values.items()]}}


def test_signals_query_asks_for_every_signal_once_for_the_service():
    q = signals_query("ml", 'we"ird', percentile=99, window_seconds=30)
    for name in SIGNAL_EXPRESSIONS:
        assert f'"kubeforge_signal", "{name}", "", ""' in q
    assert q.count(" or label_replace(") == len(SIGNAL_EXPRESSIONS) - 1
    assert 'service="we\\"ird"' in q and "[30s]" in q and "histogram_quantile(0.99," in q
    for metric in ("vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                   "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                   "kubeforge_activator_queue_length", "vllm:time_to_first_token_seconds_count"):
        assert metric in q


def test_parse_signals_reads_each_series_and_names_what_is_missing():
    body = json.dumps(signals_vector(waiting="3", running="12", replicas="2", kv_cache_usage="0.5",
                                     admission_rate="4.5", service_seconds="2.5", ttft="NaN", itl="0.04",
                                     saturated_running="+Inf"))
    s = parse_signals_response(200, body, 90, 60)
    assert (s.waiting, s.running, s.replicas, s.admission_rate, s.service_seconds, s.itl) == (3, 12, 2, 4.5, 2.5, 0.04)
    assert s.time == 1_700_000_000.0 and s.queued == 3.0  # no activator series: 0 held
    assert s.ttft is None and s.error("ttft") == "no requests in the window"
    assert s.error("held") == "no series" and s.error("saturated_running") == "infinite"
    assert s.error("waiting") is None
    assert "held" in s.absent and not {"waiting", "ttft", "saturated_running"} & set(s.absent)  # typed: answered, no series


@pytest.mark.parametrize("status, body", [
    (200, '{"status": "error", "errorType": "internal-secret-token-abc123", "error": "token abc123"}'),
    (500, "root:x:0:0:root:/root:/bin/bash"),
    (401, '{"access_token": "abc123"}'),
    (200, '{"status": "success", "data": {"resultType": "matrix", "result": []}}'),
])
def test_parse_signals_never_copies_the_body(status, body):
    s = parse_signals_response(status, body)
    assert s.waiting is None and len(s.errors) == len(SIGNAL_EXPRESSIONS)
    for _, err in s.errors:
        assert "abc123" not in err and "root:" not in err and "token" not in err, err


@pytest.mark.parametrize("body", ["[]", "null", "3", '"x"', '{"status": "success", "data": []}',
                                  '{"status": "success", "data": {"result": [1, {"metric": {}}]}}'])
def test_a_by_pod_answer_that_is_no_prometheus_vector_reads_as_no_answer(body):
    """A 200 whose JSON is not an object raised AttributeError (found in issue 30's move)."""
    from kubeforge.autoscaling._promql import parse_by_pod
    got = parse_by_pod(200, body)
    assert got is None or got == {}


def test_the_drain_counts_the_requests_queued_in_a_pod_as_well_as_the_running_ones():
    """Deleting a pod aborts the requests waiting in its engine as well as the running ones (the
    model-server simulator counts both as aborted, as vLLM loses both): the drain's per-pod
    query selects both gauges, in one selector so a pod exporting only one still counts."""
    q = render_query(IN_FLIGHT_BY_POD, "team-a", "chat")
    assert q.startswith("sum by (pod) (")
    assert '__name__=~"vllm:num_requests_running|vllm:num_requests_waiting"' in q
    assert 'namespace="team-a"' in q and 'service="chat"' in q
