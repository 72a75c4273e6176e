"""The benchmark's replay: one autoscaler, one arrival stream, the simulator's replicas, an emulated Prometheus.

Simulated time in ``DT`` steps; inside a step every arrival and every replica event is exact
(:class:`kubeforge.sim.modelserver.Service`). Around it, what the cluster does:

* **replica lifecycle**: a replica asked for is Ready ``STARTUP_S`` later and then routable;
  the same for every autoscaler;
* **scale-down**: ``drain=True`` (kubeforge, issue 14): replicas not yet Ready go first, then
  the least-loaded Ready replica leaves routing, finishes its requests and is deleted, or is
  cut after ``DRAIN_S`` (what it still holds is aborted); a scale-up takes draining replicas
  back before starting new ones. ``drain=False`` (the baselines, as a Deployment's
  ReplicaSet scales down): not-Ready pods first, then the most recently Ready, deleted at
  once, aborting what they hold;
* **Prometheus**: a scrape every ``SCRAPE_S`` of what the replicas export (:class:`Prom`),
  from which each autoscaler reads what its documentation says it reads: rates and
  histogram quantiles over a window as ``rate()`` and ``histogram_quantile()`` compute them.

Figures per replay (:class:`Result`): per request TTFT (against the SLO target), queue wait
and whether it was aborted; replicas over time (every pod that exists: starting, serving or
draining, is paid for), scale direction reversals.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

from kubeforge.autoscaling import Signals
from kubeforge.sim.modelserver import (
    ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, Request, Service, ServiceModel,
)

__all__ = ["DRAIN_S", "DT", "SCRAPE_S", "STARTUP_S", "Prom", "Result", "histogram_quantile", "replay"]

STARTUP_S = 30.0
SCRAPE_S = 5.0
DT = 0.5
DRAIN_S = 120.0
TIMELINE_S = 10.0
#: The router in front of the replicas holds requests while every replica is saturated (queue
#: depth 5 or KV cache 0.8: the Gateway API Inference Extension's saturation detector defaults).
GATEWAY = (5, 0.8)


def histogram_quantile(q: float, bounds: tuple[float, ...], counts: list[float]) -> float | None:
    """Prometheus' ``histogram_quantile`` over per-bucket counts (the last is +Inf): linear
    interpolation inside the bucket holding rank ``q * total``; the highest finite bound when
    it falls in +Inf; ``None`` for no observations."""
    total = sum(counts)
    if total <= 0:
        return None
    rank, acc = q * total, 0.0
    for i, c in enumerate(counts[:-1]):
        if acc + c >= rank and c > 0:
            lo = bounds[i - 1] if i > 0 else 0.0
            return lo + (bounds[i] - lo) * (rank - acc) / c
        acc += c
    return bounds[-1]


@dataclass
class Scrape:
    """One scrape of the service: cumulative counters and the gauges, per service and per pod."""

    t: float
    admitted: int
    success: int
    inference_sum: float
    inference_count: int
    ttft: list
    itl: list
    prefill: list
    waiting: int
    held: int
    running: int
    replicas: int
    kv: float | None
    saturated: float | None
    pods: dict  # name -> (kv usage, waiting, running)


class Prom:
    """An emulated Prometheus: scrapes kept for ``keep`` seconds, queried like PromQL would."""

    def __init__(self, keep: float = 900.0):
        self.scrapes: deque[Scrape] = deque()
        self.keep = keep

    def scrape(self, t: float, svc: Service, reporting: list[str]) -> None:
        st, model = svc.stats, svc.model
        pods = {}
        for name in reporting:
            rep = svc.replicas.get(name)
            if rep is not None:
                pods[name] = (rep.kv_usage(model), len(rep.waiting), rep.running)
        sat = [r for _, w, r in pods.values() if w > 0]
        self.scrapes.append(Scrape(
            t, sum(st.ttft), st.success, st.inference_sum, sum(st.inference), list(st.ttft), list(st.itl),
            list(st.prefill), svc.waiting, len(svc.held), svc.running, len(pods),
            sum(k for k, _, _ in pods.values()) / len(pods) if pods else None, max(sat) if sat else None, pods))
        while self.scrapes and self.scrapes[0].t < t - self.keep:
            self.scrapes.popleft()

    def latest(self) -> Scrape | None:
        return self.scrapes[-1] if self.scrapes else None

    def _at(self, t: float) -> Scrape | None:
        """The last scrape at or before ``t`` (else the first one)."""
        if not self.scrapes:
            return None
        times = [s.t for s in self.scrapes]
        i = bisect.bisect_right(times, t) - 1
        return self.scrapes[max(0, i)]

    def signals(self, now: float, window: float, percentile: float) -> Signals:
        """What ``read_signals`` returns: gauges of the latest scrape, rates and quantiles over ``window``."""
        cur = self.latest()
        if cur is None:
            return Signals(percentile=percentile, window_seconds=window, errors=(("waiting", "no series"),))
        old = self._at(now - window)
        dt = cur.t - old.t if old is not None else 0.0
        q = percentile / 100.0
        vals: dict = {"waiting": float(cur.waiting - cur.held), "held": float(cur.held)}
        errors = []
        if cur.replicas:
            vals.update(running=float(cur.running), replicas=float(cur.replicas), kv_cache_usage=cur.kv,
                        saturated_running=cur.saturated)
        if len(self.scrapes) >= 2:
            prev = self.scrapes[-2]
            vals["admission_rate_recent"] = (cur.admitted - prev.admitted) / (cur.t - prev.t)
        inside = [x.running for x in self.scrapes if x.t > now - window]
        if inside:
            vals["running_mean"] = sum(inside) / len(inside)
        if dt > 0 and old is not None:
            vals["admission_rate"] = (cur.admitted - old.admitted) / dt
            n = cur.inference_count - old.inference_count
            if n > 0:
                vals["service_seconds"] = (cur.inference_sum - old.inference_sum) / n
            for name, bounds in (("ttft", TTFT_BUCKETS), ("itl", ITL_BUCKETS), ("prefill", REQUEST_LATENCY_BUCKETS)):
                a, b = getattr(cur, name), getattr(old, name)
                v = histogram_quantile(q, bounds, [x - y for x, y in zip(a, b)])
                if v is None:
                    errors.append((name, "no requests in the window"))
                else:
                    vals[name] = v
        return Signals(time=now, percentile=percentile, window_seconds=window, errors=tuple(errors), **vals)

    def pod_peaks(self, now: float, window: float) -> dict[str, tuple[float, int]]:
        """Per pod of the latest scrape: ``max_over_time`` of KV usage and of waiting over ``window``."""
        cur = self.latest()
        if cur is None:
            return {}
        out = {name: (kv, w) for name, (kv, w, _) in cur.pods.items()}
        for s in self.scrapes:
            if s.t <= now - window:
                continue
            for name, (kv, w, _) in s.pods.items():
                if name in out:
                    k0, w0 = out[name]
                    out[name] = (max(k0, kv), max(w0, w))
        return out


@dataclass
class Pod:
    name: str
    created: float
    ready_at: float
    draining_since: float | None = None


@dataclass
class Result:
    """Figures of one replay; times in simulated seconds."""

    name: str
    ttfts: list = field(default_factory=list)  # per finished request, s
    arrivals: list = field(default_factory=list)  # their arrival times
    waits: list = field(default_factory=list)
    aborted: int = 0
    requests: int = 0
    replica_seconds: float = 0.0
    reversals: int = 0
    patches: int = 0
    max_replicas: int = 0
    timeline: list = field(default_factory=list)  # (t, replicas existing, asked, ready)
    _aborted_minutes: list = field(default_factory=list)  # arrival minute of each aborted request

    def attainment(self, target: float) -> float:
        """Fraction of all requests (aborted ones fail) whose TTFT is within ``target``."""
        ok = sum(1 for x in self.ttfts if x <= target)
        return ok / self.requests if self.requests else math.nan

    def minute_p90(self) -> list[tuple[int, float]]:
        """(minute, p90 TTFT of the requests that arrived in it); aborted requests count as infinite."""
        by: dict[int, list[float]] = {}
        for a, x in zip(self.arrivals, self.ttfts):
            by.setdefault(int(a // 60), []).append(x)
        for m in self._aborted_minutes:
            by.setdefault(m, []).append(math.inf)
        out = []
        for m in sorted(by):
            xs = sorted(by[m])
            out.append((m, xs[max(0, math.ceil(0.9 * len(xs)) - 1)]))
        return out

    def starting_share(self, target: float) -> float:
        """Share of the requests that missed ``target`` which arrived while replicas the
        autoscaler had asked for were still starting (reaction-time misses)."""
        line = self.timeline
        times = [x[0] for x in line]
        missed = starting = 0
        for a, x in zip(self.arrivals, self.ttfts):
            if x <= target:
                continue
            missed += 1
            i = bisect.bisect_right(times, a) - 1
            if 0 <= i < len(line) and line[i][2] > line[i][3]:
                starting += 1
        return starting / missed if missed else math.nan

    def minutes_attained(self, target: float) -> float:
        mins = self.minute_p90()
        return sum(1 for _, v in mins if v <= target) / len(mins) if mins else math.nan


def replay(scaler, arrivals: list[Request], end: float, start_replicas: int, drain: bool,
           model: ServiceModel) -> Result:
    """Replay ``arrivals`` with ``scaler`` deciding the replicas.

    Args:
        scaler: ``name`` and ``tick(now, current, view) -> int | None`` (``view`` is this
            replay: ``view.prom``, ``view.ready()``, ``view.pending()``).
        arrivals: Requests sorted by arrival, s.
        end: Where the replay stops, s.
        start_replicas: Replicas Ready at time 0.
        drain: Drain before scale-down (kubeforge) or delete at once (the baselines).
        model: The replica model.

    Returns:
        The :class:`Result`.
    """
    view = _Replay(scaler, model, start_replicas, drain)
    return view.run(arrivals, end)


class _Replay:
    def __init__(self, scaler, model: ServiceModel, start: int, drain: bool):
        self.scaler, self.model, self.drain = scaler, model, drain
        self.svc = Service(model, 0.0, gateway=GATEWAY)
        self.prom = Prom()
        self.pods: dict[str, Pod] = {}
        self.seq = 0
        self.t = 0.0
        self.asked = start
        self.r = Result(scaler.name)
        for _ in range(start):
            self._new_pod(0.0, ready_now=True)
        self._sync(0.0)

    def _new_pod(self, t: float, ready_now: bool = False) -> None:
        self.seq += 1
        name = f"r{self.seq:04d}"
        self.pods[name] = Pod(name, t, t if ready_now else t + STARTUP_S)

    def ready(self) -> int:
        return sum(1 for p in self.pods.values() if p.draining_since is None and p.ready_at <= self.t)

    def pending(self) -> int:
        return sum(1 for p in self.pods.values() if p.ready_at > self.t)

    def reporting(self) -> list[str]:
        return [n for n, p in self.pods.items() if p.ready_at <= self.t]

    def _sync(self, t: float) -> None:
        routable = [n for n, p in self.pods.items() if p.draining_since is None and p.ready_at <= t]
        self.r.aborted += self.svc.set_replicas(list(self.pods), routable, t)

    def _scale(self, t: float, want: int) -> None:
        active = [p for p in self.pods.values() if p.draining_since is None]
        if want > len(active):
            need = want - len(active)
            draining = sorted((p for p in self.pods.values() if p.draining_since is not None),
                              key=lambda p: -p.draining_since)
            for p in draining[:need]:
                p.draining_since = None
                need -= 1
            for _ in range(need):
                self._new_pod(t)
        elif want < len(active):
            n = len(active) - want
            if self.drain:
                starting = sorted((p for p in active if p.ready_at > t), key=lambda p: -p.created)
                gone = starting[:n]
                for p in gone:
                    del self.pods[p.name]
                n -= len(gone)
                serving = sorted((p for p in active if p.ready_at <= t),
                                 key=lambda p: (self.svc.replicas[p.name].outstanding, p.name))
                for p in serving[:n]:
                    p.draining_since = t
            else:  # ReplicaSet order: not Ready first, then the most recently Ready
                order = sorted(active, key=lambda p: (p.ready_at <= t, -p.ready_at, -p.created))
                for p in order[:n]:
                    del self.pods[p.name]
        self._sync(t)

    def run(self, arrivals: list[Request], end: float) -> Result:
        r, svc = self.r, self.svc
        n, i, step = len(arrivals), 0, 0
        next_scrape, next_line, last_dir = 0.0, 0.0, None
        while True:
            step += 1
            t = self.t = step * DT
            if t > end:
                break
            j = i
            while j < n and arrivals[j].arrival <= t:
                j += 1
            svc.advance(t, arrivals[i:j])
            r.requests += j - i
            i = j
            changed = any(t - DT < p.ready_at <= t for p in self.pods.values())
            for p in list(self.pods.values()):
                if p.draining_since is not None and (svc.replicas[p.name].outstanding == 0
                                                     or t - p.draining_since >= DRAIN_S):
                    del self.pods[p.name]
                    changed = True
            if changed:
                self._sync(t)
            if t >= next_scrape:
                next_scrape = t + SCRAPE_S
                self.prom.scrape(t, svc, self.reporting())
            want = self.scaler.tick(t, self.asked, self)
            if want is not None and want != self.asked:
                d = "Up" if want > self.asked else "Down"
                if last_dir and d != last_dir:
                    r.reversals += 1
                last_dir = d
                r.patches += 1
                self.asked = want
                self._scale(t, want)
            for d in svc.done:
                if d.aborted:
                    r._aborted_minutes.append(int(d.request.arrival // 60))
                    continue
                r.ttfts.append(d.ttft)
                r.arrivals.append(d.request.arrival)
                r.waits.append(d.queue_wait)
            svc.done.clear()
            r.replica_seconds += len(self.pods) * DT
            r.max_replicas = max(r.max_replicas, len(self.pods))
            if t >= next_line:
                next_line = t + TIMELINE_S
                r.timeline.append((t, len(self.pods), self.asked, self.ready()))
        return r
