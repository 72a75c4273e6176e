"""The demo's serving half: Debian's Prometheus, the model-server simulator and the kubeforge
activator on loopback (as ``tests/test_activation_cluster.py`` runs them), and a burst of
requests from the Azure LLM inference trace replayed against the chat service.

The burst: from trace second 2165 (minute 36 of the trace: after a quiet minute, 342 requests
in 50 s, 106 of them in 5 s, then a silent minute), replayed 5 times faster
(:data:`COMPRESSION`) against replicas 5 times faster (``compressed``), so the queue behaves as
at the trace's speed in a fifth of the time: the default 16 demo seconds are 80 trace seconds.
The first :data:`HTTP_REQUESTS` requests go as real HTTP requests, at their trace times, to the
activator (the Service's endpoint while the service has no replica), which holds them through
the cold start; the rest are replayed inside the simulator.

Trace: Azure LLM inference trace 2023 (code), ``AzurePublicDataset``, CC BY 4.0; Patel et al.,
"Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from kubeforge.sim.modelserver import ServiceModel, compressed, load_trace, percentile, trace_arrivals

__all__ = ["BURST_START", "COMPRESSION", "CREDIT", "MODEL", "BurstResult", "Stack", "burst_requests", "event_lines",
           "run_burst", "send_held"]

CREDIT = "Azure LLM inference trace 2023 (AzurePublicDataset, CC BY 4.0; Patel et al., Splitwise, ISCA 2024)"
BURST_START = 2165.0
"""Trace seconds where the replayed window starts: after a quiet minute, 5 s before a burst that
stands alone (the trace's others come in waves a minute long)."""
COMPRESSION = 5.0
"""Trace seconds per demo second."""
HTTP_REQUESTS = 8
"""Requests of the burst sent as real HTTP through the activator while the service is at zero."""
MODEL = ServiceModel(slots=64, base_seconds=0.05, prefill_tokens_per_second=8000.0,
                     seconds_per_output_token=0.05, itl_growth=0.05, kv_cache_tokens=32000)
"""One replica, as the autoscaling benchmark assumes it (``e2e.bench.autoscaling.MODEL``): prefill at
8,000 tokens/s, 50 ms per output token, a 32,000-token KV cache: about 6 requests/s of the trace."""


class Stack:
    """Prometheus, the simulator and the activator for ``cluster``; ``start()`` then ``stop()``.

    Args:
        cluster: The :class:`~kubeforge.sim.cluster.Cluster`.
        services: ``(namespace, name)`` of the InferenceServices the simulator serves.
        say: Progress lines.
    """

    def __init__(self, cluster: Any, services: list[tuple[str, str]], say: Callable[[str], None]):
        self.cluster, self.services, self.say = cluster, services, say
        self.sim: Any = None
        self.activator: Any = None
        self.prometheus: Any = None

    def start(self) -> "Stack":
        """Start the simulator, then Prometheus and the activator side by side (each waits until
        it answers: seconds of process start on a loaded machine)."""
        from kubeforge.sim.activation import LocalActivator
        from kubeforge.sim.modelserver import ModelServerSim
        from kubeforge.sim.prometheus import Prometheus

        self.sim = ModelServerSim(kubeconfig=self.cluster.kubeconfig, poll_seconds=0.25).start()
        for ns, name in self.services:
            self.sim.add_service(ns, name, compressed(MODEL, COMPRESSION))
        self.activator = LocalActivator(self.cluster, self.sim.url)
        self.prometheus = Prometheus([self.sim.target, self.activator.target])
        with ThreadPoolExecutor(max_workers=1) as side:
            act = side.submit(self.activator.start)
            self.prometheus.start()
            act.result()
        self.say(f"Prometheus {self.prometheus.url} (Debian's, scraping every 1s), model-server simulator "
                 f"{self.sim.url}, activator {self.activator.url} (log {self.activator.log_path})")
        return self

    def stop(self) -> None:
        for part, stop in ((self.prometheus, "close"), (self.activator, "stop"), (self.sim, "stop")):
            if part is not None:
                try:
                    getattr(part, stop)()
                except Exception:  # noqa: BLE001 - stopping the rest matters more
                    pass


@dataclass
class BurstResult:
    """What the burst did: requests sent, answered, aborted, the queue waits (at the trace's speed)."""

    requests: int = 0
    completed: int = 0
    aborted: int = 0
    waits: list[float] = field(default_factory=list)
    http_codes: list[int] = field(default_factory=list)
    http_seconds: float | None = None

    def wait_line(self) -> str:
        w = [x * COMPRESSION for x in self.waits]
        if not w:
            return "no request completed"
        return f"queue wait p50 {percentile(w, 50):.1f}s, p95 {percentile(w, 95):.1f}s at the trace's speed"


def burst_requests(seconds: float, offset: float, http: int = HTTP_REQUESTS) -> tuple[list[Any], list[tuple[float, int, int]]]:
    """The burst's requests: (replayed ones, arriving from ``offset`` in the simulator's clock;
    (demo seconds after the start, context tokens, generated tokens) of the first ``http``,
    sent over HTTP instead)."""
    trace = load_trace()
    end = BURST_START + seconds * COMPRESSION
    rows = [r for r in trace if BURST_START <= r[0] < end]
    sent = [((t - BURST_START) / COMPRESSION, c, g) for t, c, g in rows[:http]]
    return trace_arrivals(rows[http:], MODEL, COMPRESSION, start=BURST_START, offset=offset), sent


def send_held(pool: ThreadPoolExecutor, url: str, namespace: str, name: str,
              requests: list[tuple[float, int, int]], timeout: float = 90.0) -> Future:
    """POST one completion per (at, context, generated) to ``url`` for service ``name`` (by its
    ``Host``), each ``at`` seconds from now; the future gives (status codes, seconds from the
    first send to the last answer)."""
    t0 = time.monotonic()

    def one(req: tuple[float, int, int]) -> int:
        at, ctx, gen = req
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        try:
            r = httpx.post(f"{url}/v1/completions", headers={"Host": f"{name}.{namespace}.svc"}, timeout=timeout,
                           json={"model": name, "prompt": "x" * (4 * ctx), "max_tokens": max(1, gen)})
            return r.status_code
        except httpx.HTTPError:
            return 0

    def all_of() -> tuple[list[int], float]:
        with ThreadPoolExecutor(max_workers=max(1, len(requests))) as inner:
            codes = list(inner.map(one, requests))
        return codes, time.monotonic() - (t0 + min((r[0] for r in requests), default=0.0))

    return pool.submit(all_of)


def event_lines(t: float, events: list[dict[str, Any]], width: int = 150) -> list[str]:
    """One line per Event of ``events`` (new in one look), except that Events about single
    groups (``group N ...``) of one (type, reason) are one line: the first message, and how many
    there were (``x7``: seven groups admitted at once)."""
    by: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for i, ev in enumerate(events):
        per_group = (ev.get("message") or "").startswith("group ")
        by.setdefault((ev.get("type", "?"), ev.get("reason", "?"), -1 if per_group else i), []).append(ev)
    out = []
    for (type_, reason, _), evs in by.items():
        msg = " ".join((evs[0].get("message") or "").split())
        many = f" x{len(evs)}" if len(evs) > 1 else ""
        line = f"  {t:+6.1f}s  {type_} {reason}{many}: {msg}"
        out.append(line if len(line) <= width else line[: width - 3] + "...")
    return out


def run_burst(stack: Stack, kube: Any, timeline: Any, namespace: str, name: str, min_replicas: int,
              seconds: float, settle: float, emit: Callable[[str], None], row_every: float = 2.0,
              where: Callable[[], str] | None = None) -> BurstResult:
    """Replay the burst against service ``name`` and print it live: a row every ``row_every``
    seconds (the replicas its status asks for and has Ready, the queue in the simulator and as
    the operator last read it from Prometheus) and each new Event of the service as it appears.
    Returns once the burst is over and the service is back at ``min_replicas`` groups, with no
    other pod left, terminating ones included (or ``settle`` seconds after the burst, whichever
    comes first).

    Args:
        stack: The started :class:`Stack`.
        kube: A :class:`~kubeforge._demo.kube.Kube` for this thread.
        timeline: The :class:`~kubeforge._demo.timeline.Timeline` the sampler fills.
        seconds: Demo seconds of trace to replay (``seconds * COMPRESSION`` trace seconds).
        settle: Longest wait after the burst for the service to come back down, s.
        where: Says where the replicas run; called each time more replicas than ever are Ready.
    """
    sim, ns = stack.sim, namespace
    # the activator holds requests only at zero replicas: above, every request is replayed
    replay, http = burst_requests(seconds, offset=sim.clock() + 0.2, http=HTTP_REQUESTS if min_replicas == 0 else 0)
    res = BurstResult(requests=len(replay) + len(http))
    emit(f"Burst: {res.requests} requests, trace seconds {BURST_START:.0f}-{BURST_START + seconds * COMPRESSION:.0f} "
         f"replayed {COMPRESSION:g}x faster ({seconds:g}s)"
         + (f"; the first {len(http)} as HTTP requests to the activator" if http else ""))
    emit(f"  {'t':>7}  {'desired':>7} {'Ready':>5} {'waiting':>7} {'running':>7} {'Prometheus':>10}")
    seen = {e["metadata"]["uid"] for e in kube.events(ns, f"involvedObject.name={name}")}
    start = timeline.now()
    timeline.burst = (start, start + seconds)
    last_row, last_key, shown, last_where = -1e9, None, 0, ""
    with ThreadPoolExecutor(max_workers=1) as pool:
        held = send_held(pool, stack.activator.url, ns, name, http) if http else None
        sim.replay(ns, name, replay)
        while timeline.now() < start + seconds + settle:
            t = timeline.now() - start
            new = [ev for ev in kube.events(ns, f"involvedObject.name={name}") if ev["metadata"]["uid"] not in seen]
            seen.update(ev["metadata"]["uid"] for ev in new)
            for line in event_lines(t, new):
                emit(line)
            s = timeline.latest()
            snap = sim.snapshot(ns, name)
            key = (s.desired, s.ready) if s else None
            if s is not None and (t - last_row >= row_every or key != last_key):
                prom = "-" if s.metric is None else f"{s.metric:g}"
                emit(f"  {t:+6.1f}s  {s.desired if s.desired is not None else '-':>7} {s.ready:>5} "
                     f"{snap['waiting']:>7} {snap['running']:>7} {prom:>10}")
                last_row, last_key = t, key
            if where is not None and s is not None and s.desired and s.ready == s.desired > shown:
                shown = s.ready
                text = where()
                if text != last_where:
                    emit(f"  {t:+6.1f}s  {text}")
                    last_where = text
            quiet = snap["pending"] == 0 and snap["waiting"] == 0 and snap["running"] == 0
            if t > seconds and quiet and s is not None and s.desired == min_replicas and s.groups == min_replicas \
                    and (held is None or held.done()) \
                    and len(kube.pods(ns, f"kubeforge.io/inference-service={name}", terminating=True)) == min_replicas:
                break
            time.sleep(0.5)
        if held is not None:
            try:
                res.http_codes, res.http_seconds = held.result(timeout=30)
            except Exception:  # noqa: BLE001 - reported as no answer
                res.http_codes = []
    snap = sim.snapshot(ns, name)
    res.completed, res.aborted, res.waits = snap["completed"], snap["aborted"], snap["waits"]
    return res
