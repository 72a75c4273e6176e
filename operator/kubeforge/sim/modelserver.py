"""A model-server simulator: InferenceService replicas as vLLM serves and exports them, on the local cluster.

What it simulates, per InferenceService (namespace, name), with the pure model of
``_latency`` and ``_replicas`` (replicas with a waiting queue and a running batch, TTFT =
queue wait + prefill, ITL rising with the batch, KV-cache reservations; their docstrings give
the model):

* **replicas** are the pods the Service would route to. When the operator's EndpointSlice
  ``kubeforge-<name>`` exists (the serving runtime of issue 13: label
  ``kubeforge.io/endpoints: replicas``), its addresses (``targetRef`` pod names, address not
  ``ready: false``) are the routable replicas, and none while it says
  ``kubeforge.io/endpoints: activator``; without that slice (the Deployment-based operator),
  the Ready pods labelled ``kubeforge.io/inference-service=<name>``. Listed every
  ``poll_seconds`` (two label-selector list calls for the whole cluster). A replica taken
  out of routing (draining) finishes what it holds; a replica whose pod is deleted (gone, or
  ``deletionTimestamp`` set) **aborts** its waiting and running requests
  (:meth:`ModelServerSim.aborted`, the ``kubeforge_sim_aborted_requests_total`` series);
* **arrivals**: a trace (the Azure LLM inference trace, time-compressed by a factor),
  a programmable rate, bursts (:meth:`ModelServerSim.inject`), or real HTTP requests:
  ``POST`` on any path, for the service named by the ``Host`` header
  (``<name>.<namespace>.svc[...]``) or ``X-Kubeforge-Service: <namespace>/<name>``; the
  JSON body's ``max_tokens`` and prompt length (``prompt`` text at 4 characters a token, a
  token list, or chat ``messages``) size it; the answer comes when it completes: 200 with a
  small completion body, 503 when its replica disappeared, 404 for an unknown service;
* **metrics** on ``GET /metrics``: per replica (labels ``namespace``, ``service``, ``pod``)
  ``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``,
  ``vllm:request_success_total`` and the histograms ``vllm:time_to_first_token_seconds``,
  ``vllm:inter_token_latency_seconds``, ``vllm:request_prefill_time_seconds``,
  ``vllm:request_inference_time_seconds`` (vLLM's buckets); per service (no ``pod``) the
  requests held while no replica is routable (as ``vllm:num_requests_waiting``, so that the
  queue of a service at zero replicas stays visible and ``sum`` counts each request once)
  and the aborted-requests counter;
* **sleep mode** (warm standby, issue 28): vLLM's ``POST /sleep?level=1``, ``POST /wake_up`` and
  ``GET /is_sleeping`` for each replica at ``/engines/<namespace>/<pod>/...`` (the operator's
  ``--engine-control-url``), answered after a modelled time (:class:`~kubeforge.sim._sleep.WakeModel`:
  3 s for 64 GiB by default, after llm-d's measured 2.67 s for 61.68 GiB).

The pure model (:func:`make_request` in ``_latency``; :class:`Service`, :class:`Replica` in ``_replicas``;
:func:`routing_view`, :func:`trace_arrivals`, :func:`rate_arrivals` in ``_serving``) has no
clock and no I/O and is unit-tested in ``tests/test_modelserver.py``; :class:`ModelServerSim`
wraps it with an HTTP server (its handler in ``_modelserver_http``) and two threads.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any, Callable, Iterable

from ._exposition import ABORTED_METRIC, render_services
from ._latency import (
    ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, Done, Request, ServiceModel, Stats, itl_seconds, make_request,
    prefill_seconds, service_seconds,
)
from ._modelserver_http import handler
from ._sleep import EngineSleep, WakeModel
from ._replicas import Replica, Service
from ._serving import (
    AZURE_CODE_TRACE, Key, PodView, SliceView, compressed, load_trace, percentile, rate_arrivals, routing_view,
    service_for_host, trace_arrivals,
)

__all__ = [
    "WakeModel",
    "ABORTED_METRIC", "AZURE_CODE_TRACE", "ITL_BUCKETS", "REQUEST_LATENCY_BUCKETS", "TTFT_BUCKETS", "Done",
    "ModelServerSim", "PodView", "Replica", "Request", "Service", "ServiceModel", "SliceView", "Stats", "compressed",
    "itl_seconds",
    "load_trace", "make_request", "percentile", "prefill_seconds", "rate_arrivals", "routing_view",
    "service_for_host", "service_seconds", "trace_arrivals",
]

log = logging.getLogger("kubeforge.sim.modelserver")
SERVICE_LABEL = "kubeforge.io/inference-service"
ENDPOINTS_LABEL = "kubeforge.io/endpoints"


# --- the live simulator ----------------------------------------------------------------------


@dataclass
class _Svc:
    service: Service
    rate: float = 0.0
    rate_service: float = 30.0
    carry: float = 0.0
    pending: list = field(default_factory=list)  # future trace arrivals, sorted
    waits: list = field(default_factory=list)
    ttfts: list = field(default_factory=list)
    arrivals: list = field(default_factory=list)  # the arrival of each of ``ttfts``' requests
    completed: int = 0
    ready_history: list = field(default_factory=list)


class ModelServerSim:
    """The simulator process part: ticker, cluster poller and HTTP server (in-process threads).

    Args:
        kubeconfig: Path of the cluster's kubeconfig (read when no override is given).
        port: HTTP port on 127.0.0.1 (a free one when 0).
        tick_seconds: How often the services advance (and HTTP requests complete), s.
        poll_seconds: How often the cluster is listed, s.
        ready_replicas: Test override ``f(namespace, name) -> n``: ``n`` routable replicas
            named ``<name>-0..n-1`` (no cluster).
        endpoints: Test override ``f(namespace, name) -> (existing, routable)`` pod names.
        clock: Monotonic seconds.
        request_timeout: Longest an HTTP request waits for its completion, s (then 504).
        wake: How long engines take to sleep and wake (:class:`~kubeforge.sim._sleep.WakeModel`,
            default 3 s for 64 GiB); served at ``/engines/<namespace>/<pod>/...`` (the operator's
            ``--engine-control-url``).
    """

    def __init__(self, kubeconfig: str | None = None, port: int = 0, tick_seconds: float = 0.1,
                 poll_seconds: float = 0.5, ready_replicas: Callable[[str, str], int] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 endpoints: Callable[[str, str], tuple[Iterable[str], Iterable[str]]] | None = None,
                 request_timeout: float = 600.0, wake: WakeModel | None = None):
        self.kubeconfig = kubeconfig
        self.engines = EngineSleep(wake or WakeModel())
        self.tick_seconds, self.poll_seconds, self.request_timeout = tick_seconds, poll_seconds, request_timeout
        self._ready_fn, self._endpoints_fn = ready_replicas, endpoints
        self.clock = clock
        self.services: dict[Key, _Svc] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._waiters: dict[int, list] = {}  # request id -> [event, Done | None]
        self._next_id = 1
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._threads: list[threading.Thread] = []
        self._api = None

    @property
    def target(self) -> str:
        """``host:port`` for Prometheus' static_configs."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """Base URL for HTTP requests (``Host`` or ``X-Kubeforge-Service`` names the service)."""
        return f"http://{self.target}"

    # control (thread-safe)
    def add_service(self, namespace: str, name: str, model: ServiceModel | None = None, rate: float = 0.0,
                    request_seconds: float = 30.0) -> None:
        """Register a service: its series appear on /metrics at once (the held queue at 0)."""
        with self.lock:
            self.services[(namespace, name)] = _Svc(Service(model or ServiceModel(), self.clock()),
                                                    rate=rate, rate_service=request_seconds)

    def remove_service(self, namespace: str, name: str) -> None:
        with self.lock:
            self.services.pop((namespace, name), None)

    def set_rate(self, namespace: str, name: str, rate: float, request_seconds: float | None = None) -> None:
        """Arrivals per second from now on (0: silence); each request runs ``request_seconds``."""
        with self.lock:
            s = self.services[(namespace, name)]
            self._advance(s, self.clock())
            s.rate = rate
            if request_seconds is not None:
                s.rate_service = request_seconds

    def inject(self, namespace: str, name: str, n: int, request_seconds: float | None = None) -> None:
        """A burst: ``n`` requests arrive now, each running ``request_seconds`` (default: the rate's)."""
        with self.lock:
            s = self.services[(namespace, name)]
            now = self.clock()
            self._advance(s, now)
            svc = s.rate_service if request_seconds is None else request_seconds
            s.service.advance(now, [Request(now, svc, 0, 0, 0)] * n)

    def clear(self, namespace: str, name: str) -> None:
        """Stop arrivals and empty the waiting queues (clients gave up); running ones finish."""
        with self.lock:
            s = self.services[(namespace, name)]
            self._advance(s, self.clock())
            s.rate = 0.0
            s.pending.clear()
            s.service.held.clear()
            for rep in s.service.replicas.values():
                rep.waiting.clear()

    def replay(self, namespace: str, name: str, requests: list[Request]) -> None:
        """Schedule requests (their ``arrival`` in this simulator's clock)."""
        with self.lock:
            s = self.services[(namespace, name)]
            s.pending = sorted(s.pending + list(requests), key=lambda r: r.arrival)

    def aborted(self, namespace: str, name: str) -> int:
        """Requests of the service aborted because their replica's pod went away while holding them."""
        with self.lock:
            return self.services[(namespace, name)].service.aborted

    def snapshot(self, namespace: str, name: str) -> dict[str, Any]:
        """The service now: ``waiting`` (all), ``running``, ``ready`` (routable replicas),
        ``replicas`` (existing), ``waits``, ``ttfts`` and ``arrivals`` (per completed request, in
        the same order; ``arrivals`` in this simulator's clock), ``completed``,
        ``aborted``, ``pending`` (scheduled arrivals), ``ready_history`` ([(time, ready)])."""
        with self.lock:
            s = self.services[(namespace, name)]
            self._advance(s, self.clock())
            svc = s.service
            return {"waiting": svc.waiting, "running": svc.running, "ready": len(svc.routable()),
                    "replicas": len(svc.replicas), "waits": list(s.waits), "ttfts": list(s.ttfts),
                    "arrivals": list(s.arrivals),
                    "completed": s.completed, "aborted": svc.aborted, "pending": len(s.pending),
                    "ready_history": list(s.ready_history)}

    def metrics_text(self) -> str:
        with self.lock:
            now = self.clock()
            for s in self.services.values():
                self._advance(s, now)
            return render_services((ns, name, s.service) for (ns, name), s in self.services.items())

    def submit(self, key: Key, context_tokens: int, generated_tokens: int) -> tuple[int, threading.Event] | None:
        """Enqueue one HTTP request now; returns (id, event set on completion), None if unknown."""
        with self.lock:
            s = self.services.get(key)
            if s is None:
                return None
            rid, self._next_id = self._next_id, self._next_id + 1
            ev = threading.Event()
            self._waiters[rid] = [ev, None]
            now = self.clock()
            self._advance(s, now)
            s.service.advance(now, [make_request(s.service.model, now, context_tokens, generated_tokens, rid)])
            self._collect(s)
            return rid, ev

    def engine_call(self, what: str, namespace: str, pod: str) -> float | bool:
        """vLLM's sleep mode for one simulated replica (:class:`~kubeforge.sim._sleep.EngineSleep`):
        ``what`` ``"sleep"`` or ``"wake"`` returns the seconds its answer takes, ``"is_sleeping"``
        the state."""
        with self.lock:
            now = self.clock()
            if what == "is_sleeping":
                return self.engines.is_sleeping(namespace, pod, now)
            return (self.engines.sleep if what == "sleep" else self.engines.wake)(namespace, pod, now)

    def result(self, rid: int) -> Done | None:
        with self.lock:
            w = self._waiters.pop(rid, None)
            return None if w is None else w[1]

    # internals (lock held)
    def _advance(self, s: _Svc, now: float) -> None:
        arr, s.carry = rate_arrivals(s.rate, s.service.time, now, s.rate_service, s.carry)
        k = 0
        while k < len(s.pending) and s.pending[k].arrival <= now:
            k += 1
        if k:
            arr = sorted(arr + s.pending[:k], key=lambda r: r.arrival)
            del s.pending[:k]
        s.service.advance(now, arr)
        self._collect(s)

    def _collect(self, s: _Svc) -> None:
        for d in s.service.done:
            if not d.aborted:
                s.completed += 1
                s.waits.append(d.queue_wait)
                s.ttfts.append(d.ttft)
                s.arrivals.append(d.request.arrival)
            w = self._waiters.get(d.request.id) if d.request.id else None
            if w is not None:
                w[1] = d
                w[0].set()
        s.service.done.clear()

    def _views(self) -> dict[Key, tuple[set[str], set[str]]]:
        keys = list(self.services)
        if self._endpoints_fn is not None:
            return {k: tuple(set(x) for x in self._endpoints_fn(*k)) for k in keys}  # type: ignore[misc]
        if self._ready_fn is not None:
            out = {}
            for ns, name in keys:
                names = {f"{name}-{i}" for i in range(int(self._ready_fn(ns, name)))}
                out[(ns, name)] = (names, names)
            return out
        if self._api is None:
            from kubernetes import client, config

            api = config.new_client_from_config(config_file=self.kubeconfig)
            self._api = (client.CoreV1Api(api), client.DiscoveryV1Api(api))
        core, disc = self._api
        pods = [PodView(p.metadata.namespace, p.metadata.name, (p.metadata.labels or {}).get(SERVICE_LABEL, ""),
                        any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or [])),
                        p.metadata.deletion_timestamp is not None)
                for p in core.list_pod_for_all_namespaces(label_selector=SERVICE_LABEL, _request_timeout=5).items]
        slices = []
        for sl in disc.list_endpoint_slice_for_all_namespaces(label_selector=SERVICE_LABEL, _request_timeout=5).items:
            addrs = tuple((e.target_ref.name, not (e.conditions and e.conditions.ready is False))
                          for e in (sl.endpoints or []) if e.target_ref is not None and e.target_ref.kind == "Pod")
            slices.append(SliceView(sl.metadata.namespace, sl.metadata.name,
                                    (sl.metadata.labels or {}).get(ENDPOINTS_LABEL), addrs))
        with self.lock:
            known = {k: set(s.service.replicas) for k, s in self.services.items()}
        return routing_view(keys, slices, pods, known)

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                views = self._views()
                with self.lock:
                    now = self.clock()
                    for k, s in self.services.items():
                        if k not in views:
                            continue
                        existing, routable = views[k]
                        before = len(s.service.routable())
                        self._advance(s, now)
                        s.service.set_replicas(existing, routable, now)
                        self._collect(s)
                        if len(s.service.routable()) != before or not s.ready_history:
                            s.ready_history.append((now, len(s.service.routable())))
            except Exception as e:  # noqa: BLE001 - keep serving metrics through API hiccups
                log.warning("listing pods and endpoint slices failed: %s", e)
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
        with self.lock:
            for w in self._waiters.values():
                w[0].set()
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
    --trace [--compression F]]``: serve /metrics and requests for one service until interrupted."""
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
    sim.add_service(a.namespace, a.name, compressed(model, a.compression) if a.trace else model, rate=a.rate)
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
