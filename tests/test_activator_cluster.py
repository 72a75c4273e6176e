"""The activator against the real API server of the local sim: `kubeforge activator` runs as a
subprocess watching EndpointSlices applied by hand (as the operator will write them), with
--backend-override pointing at a stub HTTP server (kwok pods have fake IPs). Requests sent at
zero replicas are all answered once the slice flips to replicas; beyond the bound, 429; past
holdSeconds, 503."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_for
from kubeforge.demo import free_port

pytestmark = pytest.mark.cluster

ACTIVATOR_IP = "10.99.0.1"  # what the activator pods' addresses would be


class _Stub(BaseHTTPRequestHandler):
    seen: list[dict] = []
    lock = threading.Lock()

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        with self.lock:
            self.seen.append({"path": self.path, "host": self.headers.get("Host"), "body": body,
                              "marker": self.headers.get("X-Kubeforge-Activator")})
        out = json.dumps({"path": self.path, "body": body}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def activator(cluster):
    """(proxy URL, metrics URL, stub's seen list); the activator's log at <cluster dir>/activator.log."""
    _Stub.seen = []
    stub = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    port, mport = free_port(), free_port()
    log = open(cluster.dir / "activator.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubeforge", "activator", "--kubeconfig", cluster.kubeconfig,
         "--address", "127.0.0.1", "--port", str(port), "--metrics-address", "127.0.0.1", "--metrics-port", str(mport),
         "--retry-after", "2", "--own-address", ACTIVATOR_IP, "--identity", "activator-test",
         "--backend-override", f"http://127.0.0.1:{stub.server_address[1]}", "--shutdown-grace", "1"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=cluster.env(), start_new_session=True)
    metrics = f"http://127.0.0.1:{mport}"
    try:
        wait_for(lambda: _ok(f"{metrics}/readyz"), timeout=30, what="the activator's /readyz")
        yield f"http://127.0.0.1:{port}", metrics, _Stub.seen
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        stub.shutdown()
        log.close()
        tail = (cluster.dir / "activator.log").read_text(errors="replace").splitlines()[-20:]
        print("\n--- activator.log (tail) ---\n" + "\n".join(tail))


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def series(metrics: str, name: str, namespace: str, service: str, **labels: str) -> float | None:
    text = httpx.get(f"{metrics}/metrics", timeout=5).text
    want = {"namespace": namespace, "service": service, **labels}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and s.labels == want:
                return s.value
    return None


def endpoint_slice(cluster, namespace: str, service: str, mode: str, ips: list[str], port: int,
                   hold: int | None = None, limit: int | None = None) -> None:
    annotations = {}
    if hold is not None:
        annotations["kubeforge.io/activation-hold-seconds"] = str(hold)
    if limit is not None:
        annotations["kubeforge.io/activation-queue-limit"] = str(limit)
    obj = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": f"kubeforge-{service}", "namespace": namespace, "annotations": annotations,
                     # managed-by: a test value, so that no controller (ours included) adopts it
                     "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "test.kubeforge.io",
                                "kubeforge.io/inference-service": service, "kubeforge.io/endpoints": mode}},
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }
    # replace, not merge: the annotations of an activator slice must go when it says replicas
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager", "test", "-f", "-",
                    input=json.dumps(obj))


def send(url: str, host: str, body: str, timeout: float = 60) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions?b={body}", content=body, headers={"Host": host}, timeout=timeout)


def test_requests_at_zero_are_all_answered_after_the_flip(cluster, namespace, activator):
    url, metrics, seen = activator
    svc, n = "llama", 20
    host = f"{svc}.{namespace}.svc.cluster.local"
    endpoint_slice(cluster, namespace, svc, "activator", [ACTIVATOR_IP], 8012, hold=120, limit=100)
    wait_for(lambda: series(metrics, "kubeforge_activator_queue_length", namespace, svc) == 0, timeout=30,
             what="the activator to see the activator slice")
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(send, url, host, f"r{i}") for i in range(n)]
        wait_for(lambda: series(metrics, "kubeforge_activator_queue_length", namespace, svc) == n, timeout=30,
                 what=f"{n} requests held")
        assert not [s for s in seen if s["host"] == host]  # nothing forwarded while at zero
        endpoint_slice(cluster, namespace, svc, "replicas", ["10.244.3.7"], 8000)
        answers = [f.result(timeout=60) for f in futures]
    assert [a.status_code for a in answers] == [200] * n
    assert sorted(a.json()["body"] for a in answers) == sorted(f"r{i}" for i in range(n))
    mine = [s for s in seen if s["host"] == host]
    assert len(mine) == n and {s["marker"] for s in mine} == {"activator-test"}  # none lost, none twice
    assert series(metrics, "kubeforge_activator_requests_total", namespace, svc, outcome="forwarded") == n
    assert series(metrics, "kubeforge_activator_queue_length", namespace, svc) == 0
    # now at replicas: a new request goes through at once
    r = send(url, host, "late", timeout=10)
    assert r.status_code == 200 and r.json()["body"] == "late"


def test_beyond_the_bound_429_and_past_hold_503(cluster, namespace, activator):
    url, metrics, seen = activator
    svc = "mistral"
    host = f"{svc}.{namespace}.svc"
    endpoint_slice(cluster, namespace, svc, "activator", [ACTIVATOR_IP], 8012, hold=3, limit=3)
    wait_for(lambda: series(metrics, "kubeforge_activator_queue_length", namespace, svc) == 0, timeout=30,
             what="the activator to see the slice")
    with ThreadPoolExecutor(5) as pool:
        held = [pool.submit(send, url, host, f"h{i}") for i in range(3)]
        wait_for(lambda: series(metrics, "kubeforge_activator_queue_length", namespace, svc) == 3, timeout=30,
                 what="3 requests held")
        t0 = time.monotonic()
        over = [send(url, host, f"o{i}", timeout=10) for i in range(2)]
        for r in over:
            assert r.status_code == 429 and r.headers["Retry-After"] == "2"
            assert r.json()["reason"] == "QueueFull"
        timed_out = [f.result(timeout=30) for f in held]
    for r in timed_out:
        assert r.status_code == 503 and r.headers["Retry-After"] == "2" and r.json()["reason"] == "HoldTimeout"
    assert time.monotonic() - t0 < 3 + 5  # bounded by holdSeconds (+ tick and a loaded machine)
    assert not [s for s in seen if s["host"] == host]
    assert series(metrics, "kubeforge_activator_requests_total", namespace, svc, outcome="rejected") == 2
    assert series(metrics, "kubeforge_activator_requests_total", namespace, svc, outcome="timed_out") == 3
    # deleting the slice forgets the service: 404, its gauge gone
    cluster.kubectl("delete", "endpointslice", f"kubeforge-{svc}", "-n", namespace)
    wait_for(lambda: series(metrics, "kubeforge_activator_queue_length", namespace, svc) is None, timeout=30,
             what="the gauge to go")
    r = send(url, host, "gone", timeout=10)
    assert r.status_code == 404 and r.json()["reason"] == "UnknownService"
