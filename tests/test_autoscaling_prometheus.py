"""kubeforge.autoscaling.prometheus against a tiny in-process Prometheus stand-in."""

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

from kubeforge.autoscaling.prometheus import (
    DEFAULT_QUERIES,
    QueryResult,
    parse_query_response,
    query_scalar,
    query_scalar_sync,
    render_query,
    resolve_query,
)


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
            status, body, delay = CANNED.get(params.get("query", ""), (200, vector("0"), 0))
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


@pytest.mark.parametrize("url, allowed, ok", [
    ("http://prom.monitoring:9090", (), True),
    ("http://prom.monitoring:9090", ("http://prom.monitoring:9090",), True),
    ("http://prom.monitoring:9090/prometheus", ("http://prom.monitoring:9090",), True),
    ("http://prom.monitoring:90901", ("http://prom.monitoring:9090",), False),
    ("http://kubernetes.default.svc/api", ("http://prom.monitoring:9090",), False),
    ("http://169.254.169.254/latest/meta-data", ("http://prom.monitoring:9090",), False),
])
def test_url_allow_list(url, allowed, ok):
    from kubeforge.autoscaling.prometheus import url_allowed
    assert url_allowed(url, allowed) is ok


def test_invalid_url_is_an_error():
    assert squery("not a url", "one").error
    assert aquery("ftp://x", "one").error


def test_render_query_fills_only_the_placeholders():
    q = render_query(DEFAULT_QUERIES["VLLMWaiting"], "ml", "llama")
    assert q == 'sum(vllm:num_requests_waiting{namespace="ml",service="llama"})'
    assert render_query('sum(x{a="{service}"}) by (pod)', "n", 'we"ird') == 'sum(x{a="we\\"ird"}) by (pod)'


def test_resolve_query_names_default_and_custom():
    assert resolve_query(None, "ml", "llama") == render_query(DEFAULT_QUERIES["VLLMWaiting"], "ml", "llama")
    assert "sglang:num_queue_reqs" in resolve_query("SGLangQueue", "ml", "s")
    assert resolve_query("sum(my_queue)", "ml", "s") == "sum(my_queue)"


def test_parse_never_raises_on_junk():
    for status, body in [(200, ""), (200, "[]"), (200, '{"status":"success"}'),
                         (200, '{"status":"success","data":{"resultType":"vector","result":[1]}}'),
                         (200, '{"status":"success","data":{"resultType":"vector","result":[{"value":["x","y"]}]}}'),
                         (500, "")]:
        r = parse_query_response(status, body)
        assert r.value is None and r.error
