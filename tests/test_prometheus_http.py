"""kubeforge.runtime.prometheus_http (the requests behind the operator's PrometheusSource) against a
tiny in-process Prometheus stand-in, and against Debian's Prometheus (system test)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from kubeforge.autoscaling import Signals
from kubeforge.autoscaling.prometheus import DEFAULT_QUERIES, QueryResult, parse_query_response, render_query
from kubeforge.runtime.prometheus_http import query_scalar, query_scalar_sync, read_signals


def vector(*values, ts=1_700_000_000.5):
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"namespace": "ml"}, "value": [ts, v]} for v in values],
        },
    }


# query text -> (status, body, delay seconds)
CANNED: dict[str, tuple[int, object, float]] = {
    "one": (200, vector("7"), 0),
    "float": (200, vector("2.5"), 0),
    "empty": (200, vector(), 0),
    "nan": (200, vector("NaN"), 0),
    "inf": (200, vector("+Inf"), 0),
    "two": (200, vector("1", "2"), 0),
    "scalar": (200, {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}}, 0),
    "matrix": (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, 0),
    "bad": (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 4"}, 0),
    "down": (503, "Service Unavailable", 0),
    "html": (200, "<html>not prometheus</html>", 0),
    "slow": (200, vector("1"), 1.5),
}


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_GET(self):  # noqa: N802 (http.server API)
        url = urlparse(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        _Handler.seen.append({"path": url.path, **params})
        if url.path.rstrip("/").endswith("/api/v1/query") is False:
            status, body, delay = 404, "404 page not found", 0
        else:
            query = params.get("query", "")
            if "kubeforge_signal" in query:
                status, body, delay = 200, {"status": "success", "data": {"resultType": "vector", "result": [
                    {"metric": {"kubeforge_signal": k}, "value": [1_700_000_000.0, v]}
                    for k, v in {"waiting": "3", "held": "2", "ttft": "0.8"}.items()]}}, 0
            else:
                status, body, delay = CANNED.get(query, (200, vector("0"), 0))
        if delay:
            time.sleep(delay)
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def prom():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def refused_url():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}"


def aquery(base_url: str, promql: str, timeout: float = 2.0) -> QueryResult:
    async def go():
        async with httpx.AsyncClient() as client:
            return await query_scalar(client, base_url, promql, timeout=timeout)

    return asyncio.run(go())


def squery(base_url: str, promql: str, timeout: float = 2.0) -> QueryResult:
    with httpx.Client() as client:
        return query_scalar_sync(client, base_url, promql, timeout=timeout)


EXPECT = [
    ("one", 7.0, None),
    ("float", 2.5, None),
    ("scalar", 3.0, None),
    ("empty", None, "empty result"),
    ("nan", None, "value is nan"),
    ("inf", None, "value is inf"),
    ("two", None, "2 series; wrap it in sum"),
    ("matrix", None, "unsupported result type 'matrix'"),
    ("bad", None, "Prometheus error bad_data (HTTP 400)"),  # Prometheus' errorType, never its text
    ("down", None, "HTTP 503"),
    ("html", None, "not a Prometheus query result"),
]


@pytest.mark.parametrize("query,value,error", EXPECT, ids=[e[0] for e in EXPECT])
@pytest.mark.parametrize("call", [aquery, squery], ids=["async", "sync"])
def test_canned_answers(prom, call, query, value, error):
    r = call(prom, query)
    assert r.value == value
    if error is None:
        assert r.error is None and r.ok
        assert r.time is not None
    else:
        assert r.error is not None and error in r.error and not r.ok


@pytest.mark.parametrize("call", [aquery, squery], ids=["async", "sync"])
def test_connection_refused_is_an_error_not_an_exception(call, refused_url):
    r = call(refused_url, "one")
    assert r.value is None and r.error.startswith("connection failed")


@pytest.mark.parametrize("call", [aquery, squery], ids=["async", "sync"])
def test_timeout_is_an_error_not_an_exception(prom, call):
    started = time.monotonic()
    r = call(prom, "slow", timeout=0.3)
    assert r.value is None and r.error == "timeout after 0.3s"
    assert time.monotonic() - started < 1.4


def test_request_shape_and_base_url_prefix(prom):
    _Handler.seen.clear()
    r = squery(prom + "/prometheus/", "one")
    assert r.value == 7.0
    req = _Handler.seen[-1]
    assert req["path"] == "/prometheus/api/v1/query" and req["query"] == "one" and req["timeout"] == "2000ms"


def test_wrong_path_gives_http_error(prom):
    r = parse_query_response(404, "404 page not found")
    assert r.error == "HTTP 404"


def test_invalid_url_is_an_error():
    assert squery("not a url", "one").error
    assert aquery("ftp://x", "one").error


def aread(base_url: str, service: str = "chat", **kw) -> Signals:
    async def go():
        async with httpx.AsyncClient() as client:
            return await read_signals(client, base_url, "ml", service, **kw)

    return asyncio.run(go())


def test_read_signals_one_query_and_the_queue(prom):
    _Handler.seen.clear()
    s = aread(prom, percentile=95, window_seconds=30)
    assert len(_Handler.seen) == 1 and "kubeforge_signal" in _Handler.seen[0]["query"]
    assert (s.waiting, s.held, s.queue, s.ttft) == (3.0, 2.0, 5.0, 0.8)  # queue = waiting + held
    _Handler.seen.clear()
    s2 = aread(prom, queue_query="one")
    assert len(_Handler.seen) == 2 and s2.queue == 7.0  # the named/custom metric, apart


def test_read_signals_failures_are_per_signal_errors(prom, refused_url):
    s = aread(refused_url)
    assert s.queue is None and s.error("waiting") == "connection failed" and s.error("queue") == "connection failed"
    s2 = aread(prom, queue_query="empty")
    assert s2.queue is None and s2.error("queue") == "empty result" and s2.waiting == 3.0


@pytest.mark.system
def test_queries_against_a_real_prometheus_and_the_simulator():
    """The PromQL itself (label_replace/or, rates, histogram_quantile, the activator's series)
    answered by Debian's Prometheus scraping the model-server simulator and an activator stand-in."""
    from kubeforge.sim.modelserver import ModelServerSim, ServiceModel, make_request
    from kubeforge.sim.prometheus import Prometheus, find_prometheus

    if find_prometheus() is None:
        pytest.skip("no prometheus binary (make system-deps installs Debian's)")

    class Activator(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = b'kubeforge_activator_queue_length{namespace="ml",service="idle"} 4\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    act = ThreadingHTTPServer(("127.0.0.1", 0), Activator)
    threading.Thread(target=act.serve_forever, daemon=True).start()
    m = ServiceModel(slots=4, base_seconds=0.2, prefill_tokens_per_second=20000, seconds_per_output_token=0.02,
                     itl_growth=0.1, kv_cache_tokens=20000)
    routes = {"chat": (["chat-0", "chat-1"], ["chat-0", "chat-1"]), "idle": ([], [])}
    sim = ModelServerSim(endpoints=lambda ns, n: routes[n], poll_seconds=0.1, tick_seconds=0.05).start()
    try:
        sim.add_service("ml", "chat", m)
        sim.add_service("ml", "idle", m)
        t0 = sim.clock()
        sim.replay("ml", "chat", [make_request(m, t0 + i * 0.05, 2000, 30) for i in range(2000)])
        with Prometheus([sim.target, f"127.0.0.1:{act.server_address[1]}"]) as prom:
            deadline = time.monotonic() + 60
            while True:
                s = aread(prom.url, percentile=90, window_seconds=10)
                if s.ttft is not None and s.itl is not None and s.saturated_running is not None or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert s.replicas == 2 and s.running == 8 and s.saturated_running == 4, s  # 2 replicas x 4 slots, queueing
            assert s.waiting > 0 and s.queue == s.waiting and s.error("held") == "no series"
            assert 0 < s.kv_cache_usage <= 1 and s.admission_rate > 0 and s.service_seconds > 0.2
            assert s.admission_rate_recent > 0 and 0 < s.running_mean <= 8
            assert s.ttft > 0.2 and 0.02 <= s.itl < 0.1 and s.prefill > 0
            idle = aread(prom.url, "idle")
            assert (idle.held, idle.queue, idle.running) == (4.0, 4.0, None)  # at zero: the activator's queue
            with httpx.Client() as c:
                q = query_scalar_sync(c, prom.url, render_query(DEFAULT_QUERIES["VLLMWaiting"], "ml", "idle"))
                assert q.value == 4.0
                q = query_scalar_sync(c, prom.url, render_query(DEFAULT_QUERIES["VLLMWaiting"], "ml", "chat"))
                assert q.value is not None and q.value > 0
                none = query_scalar_sync(c, prom.url, render_query(DEFAULT_QUERIES["VLLMWaiting"], "ml", "nosuch"))
                assert none.error == "empty result"  # neither series: hold, never read as 0
    finally:
        sim.stop()
        act.shutdown()
