"""The emulated Prometheus of the autoscaling benchmark: scrapes of the simulated service, and
what each autoscaler's query returns from them (``rate``, ``irate``, ``histogram_quantile``,
``max_over_time``), as PromQL computes it."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from kubeforge.autoscaling import Signals
from kubeforge.sim.modelserver import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, Service

__all__ = ["Prom", "Scrape", "histogram_quantile"]


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
    pods: dict  # name -> (kv usage, waiting, running, prompt tokens waiting)


class Prom:
    """An emulated Prometheus: scrapes kept for ``keep`` seconds, queried like PromQL would."""

    def __init__(self, keep: float = 900.0):
        self.scrapes: deque[Scrape] = deque()
        self.keep = keep
        self.admitted: list[tuple[float, int]] = []  # (t, requests admitted so far), every scrape, kept
        self._admitted_t: list[float] = []  # their times (bisected)

    def scrape(self, t: float, svc: Service, reporting: list[str]) -> None:
        """Scrape ``svc`` at ``t``: the service's counters and, per pod in ``reporting``, its gauges."""
        st, model = svc.stats, svc.model
        pods = {}
        for name in reporting:
            rep = svc.replicas.get(name)
            if rep is not None:
                pods[name] = (rep.kv_usage(model), len(rep.waiting), rep.running,
                              sum(r.context for r in rep.waiting))
        sat = [p[2] for p in pods.values() if p[1] > 0]
        self.scrapes.append(Scrape(
            t, sum(st.ttft), st.success, st.inference_sum, sum(st.inference), list(st.ttft), list(st.itl),
            list(st.prefill), svc.waiting, len(svc.held), svc.running, len(pods),
            sum(p[0] for p in pods.values()) / len(pods) if pods else None, max(sat) if sat else None, pods))
        self.admitted.append((t, self.scrapes[-1].admitted))
        self._admitted_t.append(t)
        while self.scrapes and self.scrapes[0].t < t - self.keep:
            self.scrapes.popleft()

    def latest(self) -> Scrape | None:
        """The newest scrape (None before the first)."""
        return self.scrapes[-1] if self.scrapes else None

    def _at(self, t: float) -> Scrape | None:
        """The last scrape at or before ``t`` (else the first one); scans back from the newest."""
        if not self.scrapes:
            return None
        for s in reversed(self.scrapes):
            if s.t <= t:
                return s
        return self.scrapes[0]

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
        inside = []
        for x in reversed(self.scrapes):
            if x.t <= now - window:
                break
            inside.append(x.running)
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

    def admission_rates(self, start: float, end: float, step: float, window: float = 60.0) -> tuple[tuple[float, float], ...]:
        """A range query of ``sum(rate(vllm:time_to_first_token_seconds_count[1m]))`` from
        ``start`` to ``end`` every ``step`` s (the admission rate predictive scale-up reads),
        from every scrape kept since the start; points before the first scrape are left out."""
        adm, times = self.admitted, self._admitted_t
        if not adm:
            return ()
        out = []
        t = start
        while t <= end + 1e-9:
            i = bisect.bisect_right(times, t) - 1
            j = bisect.bisect_right(times, t - window) - 1
            if i >= 0 and j >= 0 and times[i] > times[j]:
                out.append((t, (adm[i][1] - adm[j][1]) / (times[i] - times[j])))
            t += step
        return tuple(out)

    def pod_peaks(self, now: float, window: float) -> dict[str, tuple[float, int]]:
        """Per pod of the latest scrape: ``max_over_time`` of KV usage and of waiting over ``window``."""
        cur = self.latest()
        if cur is None:
            return {}
        out = {name: (p[0], p[1]) for name, p in cur.pods.items()}
        for s in self.scrapes:
            if s.t <= now - window:
                continue
            for name, p in s.pods.items():
                kv, w = p[0], p[1]
                if name in out:
                    k0, w0 = out[name]
                    out[name] = (max(k0, kv), max(w0, w))
        return out
