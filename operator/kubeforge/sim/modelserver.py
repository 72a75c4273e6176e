"""A model-server simulator: the request queue of one or more InferenceServices, as vLLM exports it.

What it simulates, per InferenceService (namespace, name):

* **arrivals**: from a trace (the Azure LLM inference trace, ``TIMESTAMP, ContextTokens,
  GeneratedTokens``; time-compressed by a factor: 1 s of the trace takes ``1/factor`` s here)
  or a programmable rate (requests per second, changeable at any time; ``inject(n)`` adds a
  burst at once, ``clear()`` empties the queue, ``set_rate(0)`` is silence);
* **service**: each *Ready* replica serves ``slots`` requests at a time (vLLM's
  ``max_num_seqs``); a request takes ``service_seconds(request)`` once started. Ready replicas
  are read from the cluster: pods labelled ``kubeforge.io/inference-service=<name>`` whose
  ``Ready`` condition is True (kwok marks them Running/Ready), listed every ~0.5 s with one
  label-selector list call;
* **metrics**: ``vllm:num_requests_waiting`` and ``vllm:num_requests_running`` gauges with the
  ``namespace`` and ``service`` labels a ServiceMonitor attaches, on ``GET /metrics``. The
  autoscaler's default query is ``sum(vllm:num_requests_waiting{namespace=..,service=..})``.

The way back from zero. Here the queue lives in the simulator, not in a pod, so with 0 ready
replicas it still exists and grows, and its series keeps being exported: the autoscaler sees
requests arrive and scales from zero. In production the same must hold: read the queue where it
survives the last pod (a gateway, router or load-balancer metric such as the Gateway API
inference extension's or an ingress' pending-requests gauge, or KEDA's HTTP add-on
interceptor queue). With pure vLLM metrics, which vanish with the last vLLM pod, a service that
scaled to zero never sees a request again and cannot come back.

Per-request queue wait (arrival to start of service) is recorded for the benchmark.

The queue model (:class:`QueueState`, :func:`advance`, :func:`trace_arrivals`,
:func:`rate_arrivals`) is pure: no clock, no I/O, unit-tested in ``tests/test_modelserver.py``.
:class:`ModelServerSim` wraps it with an HTTP server and a ticker thread.
"""

from __future__ import annotations

import csv
import heapq
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterable

__all__ = [
    "AZURE_CODE_TRACE", "Request", "QueueState", "ServiceModel", "advance", "trace_arrivals", "rate_arrivals",
    "load_trace", "service_seconds", "render_metrics", "ModelServerSim", "percentile",
]

log = logging.getLogger("kubeforge.sim.modelserver")
AZURE_CODE_TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces" / "azure-llm-inference-code-2023.csv"
SERVICE_LABEL = "kubeforge.io/inference-service"


# --- pure queue model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (simulated seconds) and how long it takes once started."""

    arrival: float
    service: float


@dataclass(frozen=True)
class ServiceModel:
    """How fast one replica serves.

    Attributes:
        slots: requests one replica runs at once (vLLM ``max_num_seqs``), >= 1.
        base_seconds: fixed cost per request (scheduling, first token).
        prefill_tokens_per_second: prompt tokens processed per second per request.
        seconds_per_output_token: time per generated token (TPOT).
    """

    slots: int = 4
    base_seconds: float = 0.5
    prefill_tokens_per_second: float = 2000.0
    seconds_per_output_token: float = 0.05


def service_seconds(model: ServiceModel, context_tokens: int, generated_tokens: int) -> float:
    """Seconds one request occupies a slot: base + prefill + decode."""
    return model.base_seconds + context_tokens / model.prefill_tokens_per_second + generated_tokens * model.seconds_per_output_token


@dataclass
class QueueState:
    """The queue of one service at ``time`` (mutable; :func:`advance` moves it forward).

    ``waiting`` is FIFO of requests not started; ``running`` a heap of (finish time, seq);
    ``waits`` the queue wait of every started request; ``completed`` a count.
    """

    time: float = 0.0
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    waits: list = field(default_factory=list)
    completed: int = 0
    _seq: int = 0

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)


def advance(q: QueueState, now: float, capacity: int, arrivals: Iterable[Request] = ()) -> QueueState:
    """Move ``q`` to ``now`` with ``capacity`` concurrent slots (ready replicas x slots).

    Exact event order inside the interval: each arrival joins the queue at its time, each
    completion frees a slot at its finish time, and the head of the queue starts as soon as a
    slot is free (its wait is start - arrival). ``capacity`` holds over the whole interval;
    when it is lower than the requests running (a replica went away), those drain and no new
    request starts until a slot is free. Arrivals after ``now`` are ignored (the caller keeps
    them). Returns ``q`` (mutated).
    """
    if now < q.time:
        return q
    arr = sorted((r for r in arrivals if r.arrival <= now), key=lambda r: r.arrival)
    i = 0
    t = q.time

    def admit(at: float) -> None:
        while q.waiting and len(q.running) < capacity:
            r = q.waiting.popleft()
            start = max(at, r.arrival)
            q.waits.append(start - r.arrival)
            q._seq += 1
            heapq.heappush(q.running, (start + r.service, q._seq))

    admit(t)
    while True:
        next_done = q.running[0][0] if q.running else math.inf
        next_arr = arr[i].arrival if i < len(arr) else math.inf
        t = min(next_done, next_arr)
        if t > now or t == math.inf:
            break
        if next_done <= next_arr:
            heapq.heappop(q.running)
            q.completed += 1
        else:
            q.waiting.append(arr[i])
            i += 1
        admit(t)
    q.time = now
    return q


def drop_waiting(q: QueueState) -> int:
    """Empty the waiting queue (clients gave up); returns how many were dropped."""
    n = len(q.waiting)
    q.waiting.clear()
    return n


def load_trace(path: Path = AZURE_CODE_TRACE) -> list[tuple[float, int, int]]:
    """The trace as (seconds since its first request, context tokens, generated tokens)."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            ts = r["TIMESTAMP"].strip()
            # 7 fractional digits in the file; datetime takes 6
            if "." in ts:
                head, frac = ts.split(".", 1)
                ts = f"{head}.{frac[:6]}"
            t = datetime.strptime(ts, "%Y-%m-%d %H:%M:%S.%f" if "." in ts else "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
            rows.append((t, int(r["ContextTokens"]), int(r["GeneratedTokens"])))
    rows.sort()
    t0 = rows[0][0] if rows else 0.0
    return [(t - t0, c, g) for t, c, g in rows]


def trace_arrivals(trace: list[tuple[float, int, int]], model: ServiceModel, compression: float = 1.0,
                   start: float = 0.0, offset: float = 0.0, end: float | None = None) -> list[Request]:
    """Requests from a trace, time-compressed by ``compression`` (trace seconds per simulated
    second): arrival ``offset + (t - start) / compression`` for ``start <= t < end``, and the
    service time divided by the same factor so the queue behaves as in the trace, only faster."""
    out = []
    for t, c, g in trace:
        if t < start or (end is not None and t >= end):
            continue
        out.append(Request(offset + (t - start) / compression, service_seconds(model, c, g) / compression))
    return out


def rate_arrivals(rate: float, t0: float, t1: float, service: float, carry: float = 0.0) -> tuple[list[Request], float]:
    """Evenly spaced arrivals at ``rate`` per second in ``(t0, t1]``; ``carry`` is the
    fractional request left from the previous interval. Returns (requests, new carry)."""
    if rate <= 0 or t1 <= t0:
        return [], 0.0 if rate <= 0 else carry
    total = carry + rate * (t1 - t0)
    n = int(total + 1e-9)
    out = [Request(t0 + (k + 1 - carry) / rate, service) for k in range(n)]
    return out, total - n


def percentile(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for an empty list."""
    if not xs:
        return math.nan
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(series: dict[tuple[str, str], tuple[int, int]]) -> str:
    """Prometheus text exposition for ``{(namespace, service): (waiting, running)}``."""
    lines = ["# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
             "# TYPE vllm:num_requests_waiting gauge"]
    for (ns, svc), (w, _) in sorted(series.items()):
        lines.append(f'vllm:num_requests_waiting{{namespace="{_esc(ns)}",service="{_esc(svc)}"}} {w}')
    lines += ["# HELP vllm:num_requests_running Number of requests currently running on GPU.",
              "# TYPE vllm:num_requests_running gauge"]
    for (ns, svc), (_, r) in sorted(series.items()):
        lines.append(f'vllm:num_requests_running{{namespace="{_esc(ns)}",service="{_esc(svc)}"}} {r}')
    return "\n".join(lines) + "\n"


# --- the live simulator ----------------------------------------------------------------------


@dataclass
class _Service:
    model: ServiceModel
    queue: QueueState
    rate: float = 0.0
    rate_service: float = 30.0
    carry: float = 0.0
    pending: list = field(default_factory=list)  # future trace arrivals, sorted
    ready: int = 0
    ready_history: list = field(default_factory=list)  # (time, ready) on change


class ModelServerSim:
    """The simulator process part: ticker thread + ``/metrics`` HTTP server (in-process threads).

    Args:
        ready_replicas: ``f(namespace, name) -> int`` override (tests without a cluster);
            when None, ``kubeconfig`` is used to list Ready pods every ``poll_seconds``.
        kubeconfig: path of the cluster's kubeconfig.
        port: HTTP port on 127.0.0.1 (a free one when 0).
        tick_seconds: how often the queue advances (and the metric changes).
    """

    def __init__(self, kubeconfig: str | None = None, port: int = 0, tick_seconds: float = 0.1,
                 poll_seconds: float = 0.5, ready_replicas: Callable[[str, str], int] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.kubeconfig = kubeconfig
        self.tick_seconds = tick_seconds
        self.poll_seconds = poll_seconds
        self._ready_fn = ready_replicas
        self.clock = clock
        self.services: dict[tuple[str, str], _Service] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        sim = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = sim.metrics_text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self._threads: list[threading.Thread] = []
        self._core = None

    @property
    def target(self) -> str:
        """``host:port`` for Prometheus' static_configs."""
        return f"127.0.0.1:{self.port}"

    # control (thread-safe)
    def add_service(self, namespace: str, name: str, model: ServiceModel | None = None, rate: float = 0.0,
                    request_seconds: float = 30.0) -> None:
        """Register a service: its series appear (at 0) on /metrics at once."""
        with self.lock:
            self.services[(namespace, name)] = _Service(model or ServiceModel(), QueueState(time=self.clock()),
                                                        rate=rate, rate_service=request_seconds)

    def remove_service(self, namespace: str, name: str) -> None:
        with self.lock:
            self.services.pop((namespace, name), None)

    def set_rate(self, namespace: str, name: str, rate: float, request_seconds: float | None = None) -> None:
        """Arrivals per second from now on (0: silence); each request takes ``request_seconds``."""
        with self.lock:
            s = self.services[(namespace, name)]
            self._advance(s, self.clock())
            s.rate = rate
            if request_seconds is not None:
                s.rate_service = request_seconds

    def inject(self, namespace: str, name: str, n: int, request_seconds: float | None = None) -> None:
        """A burst: ``n`` requests arrive now."""
        with self.lock:
            s = self.services[(namespace, name)]
            now = self.clock()
            self._advance(s, now)
            svc = s.rate_service if request_seconds is None else request_seconds
            advance(s.queue, now, s.ready * s.model.slots, [Request(now, svc)] * n)

    def clear(self, namespace: str, name: str) -> None:
        """Empty the waiting queue and stop arrivals (silence)."""
        with self.lock:
            s = self.services[(namespace, name)]
            self._advance(s, self.clock())
            s.rate = 0.0
            s.pending.clear()
            drop_waiting(s.queue)

    def replay(self, namespace: str, name: str, requests: list[Request]) -> None:
        """Schedule trace arrivals (their ``arrival`` in this simulator's clock)."""
        with self.lock:
            s = self.services[(namespace, name)]
            s.pending = sorted(s.pending + list(requests), key=lambda r: r.arrival)

    def snapshot(self, namespace: str, name: str) -> dict:
        with self.lock:
            s = self.services[(namespace, name)]
            self._advance(s, self.clock())
            return {"waiting": s.queue.num_waiting, "running": s.queue.num_running, "ready": s.ready,
                    "waits": list(s.queue.waits), "completed": s.queue.completed, "pending": len(s.pending),
                    "ready_history": list(s.ready_history)}

    def metrics_text(self) -> str:
        with self.lock:
            now = self.clock()
            for s in self.services.values():
                self._advance(s, now)
            return render_metrics({k: (s.queue.num_waiting, s.queue.num_running) for k, s in self.services.items()})

    # internals
    def _advance(self, s: _Service, now: float) -> None:
        arr, s.carry = rate_arrivals(s.rate, s.queue.time, now, s.rate_service, s.carry)
        k = 0
        while k < len(s.pending) and s.pending[k].arrival <= now:
            k += 1
        if k:
            arr = arr + s.pending[:k]
            del s.pending[:k]
        advance(s.queue, now, s.ready * s.model.slots, arr)

    def _ready_counts(self) -> dict[tuple[str, str], int]:
        if self._ready_fn is not None:
            return {k: int(self._ready_fn(*k)) for k in list(self.services)}
        if self._core is None:
            from kubernetes import client, config

            self._core = client.CoreV1Api(config.new_client_from_config(config_file=self.kubeconfig))
        pods = self._core.list_pod_for_all_namespaces(label_selector=SERVICE_LABEL, _request_timeout=5).items
        counts: dict[tuple[str, str], int] = {}
        for p in pods:
            if p.metadata.deletion_timestamp:
                continue
            ready = any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
            if ready:
                k = (p.metadata.namespace, (p.metadata.labels or {}).get(SERVICE_LABEL, ""))
                counts[k] = counts.get(k, 0) + 1
        return counts

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                counts = self._ready_counts()
                with self.lock:
                    now = self.clock()
                    for k, s in self.services.items():
                        n = counts.get(k, 0)
                        if n != s.ready:
                            self._advance(s, now)  # old capacity up to now
                            s.ready = n
                            s.ready_history.append((now, n))
                            advance(s.queue, now, n * s.model.slots)  # start queued work at once
            except Exception as e:  # noqa: BLE001 - keep serving metrics through API hiccups
                log.warning("listing pods failed: %s", e)
            self._stop.wait(self.poll_seconds)

    def _tick_loop(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                now = self.clock()
                for s in self.services.values():
                    self._advance(s, now)
            self._stop.wait(self.tick_seconds)

    def start(self) -> "ModelServerSim":
        for fn in (self.httpd.serve_forever, self._poll_loop, self._tick_loop):
            t = threading.Thread(target=fn, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        for t in self._threads:
            t.join(5)

    def __enter__(self) -> "ModelServerSim":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m kubeforge.sim.modelserver --kubeconfig K --namespace NS --name N [--rate R |
    --trace [--compression F]]``: serve /metrics for one service until interrupted."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rate", type=float, default=0.0, help="arrivals per second (programmable rate)")
    ap.add_argument("--trace", action="store_true", help=f"replay {AZURE_CODE_TRACE.name}")
    ap.add_argument("--compression", type=float, default=10.0, help="trace seconds per real second")
    a = ap.parse_args(argv)
    sim = ModelServerSim(kubeconfig=a.kubeconfig, port=a.port)
    model = ServiceModel()
    sim.add_service(a.namespace, a.name, model, rate=a.rate)
    if a.trace:
        sim.replay(a.namespace, a.name, trace_arrivals(load_trace(), model, a.compression, offset=sim.clock()))
    sim.start()
    print(f"serving http://{sim.target}/metrics", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
