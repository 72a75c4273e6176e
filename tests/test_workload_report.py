"""kubeforge.workload, the worker-side reporter: standard library only, never raises, throttles,
retries a follower's 503, and speaks HTTPS with the operator's CA (a stub server on loopback)."""

from __future__ import annotations

import ast
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kubeforge import workload
from kubeforge.runtime.status_tls import make_cert

MODULE = Path(workload.__file__)


class Stub(BaseHTTPRequestHandler):
    """Answers with the codes queued in ``server.codes`` (200 when empty); records every request.
    HTTP/1.1: connections are kept open, as aiohttp keeps them."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(body),
                                 "port": self.client_address[1]})
        code = self.server.codes.pop(0) if self.server.codes else 200
        out = json.dumps({"kind": "Status", "code": code, "message": f"answer {code}"}).encode()
        self.send_response(code)
        if code in (429, 503):
            self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub(tmp_path):
    sc = make_cert(["127.0.0.1", "localhost"], time.time())
    (tmp_path / "tls.pem").write_text(sc.cert + sc.key)
    (tmp_path / "ca.crt").write_text(sc.ca)
    (tmp_path / "token").write_text("tok-1\n")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    srv.seen, srv.codes = [], []
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls.pem")
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    env = {workload.URL_ENV: f"https://127.0.0.1:{srv.server_port}/apis/kubeforge.io/v1alpha1/namespaces/a/trainingjobs/j/status",
           workload.TOKEN_ENV: str(tmp_path / "token"), workload.CA_ENV: str(tmp_path / "ca.crt"), "RANK": "0"}
    yield srv, env, tmp_path
    srv.shutdown()


class Clock:
    def __init__(self):
        self.t = 0.0
        self.slept = []

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)


def test_the_module_imports_only_the_standard_library():
    tree = ast.parse(MODULE.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_payload_shapes():
    assert workload.payload(step=3, total_steps=10, metrics={"loss": 0.5, "bad": float("nan")}) == {
        "step": 3, "totalSteps": 10, "metrics": {"loss": 0.5}}
    ck = workload.payload(checkpoint=(20, "/ck/step-20"))["checkpoint"]
    assert ck["step"] == 20 and ck["path"] == "/ck/step-20" and ck["time"].endswith("Z")
    assert workload.payload(checkpoint={"step": 1, "path": "p", "time": "2027-01-01T00:00:00Z"})["checkpoint"]["time"] == \
        "2027-01-01T00:00:00Z"


def test_reports_over_https_with_the_token_and_throttles(stub):
    srv, env, _ = stub
    clock = Clock()
    r = workload.Reporter(env, clock=clock, sleep=clock.sleep)
    assert r.report(step=1, total_steps=10, metrics={"loss": 1.0}) is True
    assert r.report(step=2) is False  # within min_interval: skipped
    assert r.report(step=2, checkpoint=(2, "/ck/step-2"), force=True) is True
    clock.t = 10.0
    assert r.report(step=3) is True
    assert [s["body"].get("step") for s in srv.seen] == [1, 2, 3]
    assert srv.seen[0]["auth"] == "Bearer tok-1" and srv.seen[1]["body"]["checkpoint"]["step"] == 2


def test_a_followers_503_is_retried_and_a_422_is_not(stub, capsys):
    srv, env, _ = stub
    clock = Clock()
    r = workload.Reporter(env, clock=clock, sleep=clock.sleep)
    srv.codes = [503, 503]
    assert r.report(step=1) is True and clock.slept == [1.0, 1.0] and len(srv.seen) == 3
    srv.codes = [422, 422]
    assert r.report(step=2, force=True) is False and r.report(step=3, force=True) is False
    err = capsys.readouterr().err
    assert err.count("report refused (422): answer 422") == 1  # said once


def test_the_token_file_is_read_again_after_its_ttl(stub):
    srv, env, tmp = stub
    clock = Clock()
    r = workload.Reporter(env, clock=clock, sleep=clock.sleep)
    r.report(step=1)
    (tmp / "token").write_text("tok-2")
    clock.t = workload.TOKEN_TTL + 1
    r.report(step=2)
    assert [s["auth"] for s in srv.seen] == ["Bearer tok-1", "Bearer tok-2"]


@pytest.mark.parametrize("env", [{}, {workload.URL_ENV: "https://x"}, "rank 1"])
def test_disabled_outside_kubeforge_or_on_other_ranks(stub, env):
    if env == "rank 1":
        env = {**stub[1], "RANK": "1"}
    r = workload.Reporter(env)
    assert not r.enabled and r.report(step=1, force=True) is False and stub[0].seen == []


def test_an_unreachable_endpoint_never_raises(tmp_path, capsys):
    (tmp_path / "token").write_text("t")
    r = workload.Reporter({workload.URL_ENV: "https://127.0.0.1:9/x", workload.TOKEN_ENV: str(tmp_path / "token"),
                           workload.CA_ENV: str(tmp_path / "missing-ca.crt")}, timeout=1)
    assert r.report(step=1, force=True) is False and r.report(step=2, force=True) is False
    assert "training goes on" in capsys.readouterr().err


def test_one_connection_is_kept_from_report_to_report_and_dropped_after_a_503(stub):
    srv, env, _ = stub
    clock = Clock()
    r = workload.Reporter(env, clock=clock, sleep=clock.sleep)
    for step in range(3):
        assert r.report(step=step, force=True)
    ports = [s["port"] for s in srv.seen]
    assert len(set(ports)) == 1  # one TLS handshake for three reports
    srv.codes = [503]
    assert r.report(step=9, force=True)
    assert srv.seen[-1]["port"] != srv.seen[-2]["port"]  # the retry went out on a new connection
