"""The benchmark's replay: one autoscaler, one arrival stream, the simulator's replicas, an emulated Prometheus.

Simulated time in ``DT`` steps; every arrival and every replica event is exact
(:class:`kubeforge.sim.modelserver.Service`, advanced only when something reads it: a scrape, a
replica becoming Ready, a drain, a scale). Around it, what the cluster does:

* **replica lifecycle**: a replica asked for is Ready after a start drawn from the run's
  :class:`~e2e.bench.autoscaling.starts.StartTimes` (cold, or cached on a node that ran the
  model before), the same for every row; it is paid for from the moment it is asked for;
* **standby** (the seam for kubeforge's ``spec.standby``): a scaler whose ``tick`` returns
  ``(replicas, standby)`` keeps that many extra replicas started and sleeping, out of routing
  and paid for; a scale-up wakes one first (Ready ``wake`` s later), and the standby count is
  refilled with new starts;
* **scale-down**: ``drain=True`` (kubeforge, issue 14): replicas not yet Ready go first, then
  the least-loaded Ready replica leaves routing, finishes its requests and is deleted, or is
  cut after ``DRAIN_S`` (what it still holds is aborted); a scale-up takes draining replicas
  back before starting new ones. ``drain=False`` (the baselines, as a Deployment's
  ReplicaSet scales down): not-Ready pods first, then the most recently Ready, deleted at
  once, aborting what they hold;
* **router**: the scaler's ``gateway`` (default :data:`GATEWAY`, the Gateway API Inference
  Extension's flow control: requests wait at the gateway while every replica is saturated);
  ``None`` sends every request to the least-loaded replica at once (Dynamo's frontend);
* **Prometheus**: a scrape every ``SCRAPE_S`` (:class:`~e2e.bench.autoscaling.prom.Prom`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeforge.sim.modelserver import Request, Service, ServiceModel

from e2e.bench.autoscaling.prom import Prom, histogram_quantile
from e2e.bench.autoscaling.result import Result
from e2e.bench.autoscaling.starts import StartTimes

__all__ = ["DRAIN_S", "DT", "GATEWAY", "SCRAPE_S", "Prom", "Result", "histogram_quantile", "replay"]

SCRAPE_S = 5.0
DT = 0.5
DRAIN_S = 120.0
TIMELINE_S = 10.0
#: The router in front of the replicas holds requests while every replica is saturated (queue
#: depth 5 or KV cache 0.8: the Gateway API Inference Extension's saturation detector defaults).
GATEWAY = (5, 0.8)


@dataclass
class Pod:
    """One replica pod: when it was asked for, when it is (or was) Ready, whether it drains or sleeps."""

    name: str
    created: float
    ready_at: float
    draining_since: float | None = None
    standby: bool = False


def replay(scaler, arrivals: list[Request], end: float, start_replicas: int, drain: bool,
           model: ServiceModel, starts: StartTimes | None = None) -> Result:
    """Replay ``arrivals`` with ``scaler`` deciding the replicas.

    Args:
        scaler: ``name``, optional ``gateway`` (see the module) and ``tick(now, current, view)
            -> int | (int, int) | None``: the replicas asked for, optionally with a standby
            count (``view`` is this replay: ``view.prom``, ``view.ready()``, ``view.pending()``,
            ``view.model``, ``view.starts``).
        arrivals: Requests sorted by arrival, s.
        end: Where the replay stops, s.
        start_replicas: Replicas Ready at time 0 (a warm start).
        drain: Drain before scale-down (kubeforge) or delete at once (the baselines).
        model: The replica model.
        starts: The start times (default :class:`StartTimes`: 300 s, every start cold).

    Returns:
        The :class:`Result`.
    """
    view = _Replay(scaler, model, start_replicas, drain, starts or StartTimes())
    return view.run(arrivals, end)


class _Replay:
    def __init__(self, scaler, model: ServiceModel, start: int, drain: bool, starts: StartTimes):
        self.scaler, self.model, self.drain, self.starts = scaler, model, drain, starts
        self.svc = Service(model, 0.0, gateway=getattr(scaler, "gateway", GATEWAY))
        self.prom = Prom()
        self.pods: dict[str, Pod] = {}
        self.seq, self.t, self.asked, self.standby = 0, 0.0, start, 0
        self.rng = starts.rng()
        self.r = Result(scaler.name, knob=getattr(scaler, "knob", ""))
        self.high_water = start
        for _ in range(start):
            self._new_pod(0.0, ready_now=True)
        self._sync(0.0)

    def _new_pod(self, t: float, ready_now: bool = False, standby: bool = False) -> None:
        self.seq += 1
        name = f"r{self.seq:04d}"
        delay = 0.0
        if not ready_now:
            cached = self.starts.cached_for(len(self.pods), self.high_water)
            delay = self.starts.draw(cached, self.rng)
            kind = "cached" if cached else "cold"
            self.r.starts[kind] = self.r.starts.get(kind, 0) + 1
        self.pods[name] = Pod(name, t, t + delay, standby=standby)
        self.high_water = max(self.high_water, len(self.pods))

    def ready(self) -> int:
        """Replicas that serve: Ready, routed, not draining, not asleep."""
        return sum(1 for p in self.pods.values()
                   if p.draining_since is None and not p.standby and p.ready_at <= self.t)

    def pending(self) -> int:
        """Replicas asked for and still starting (standby ones not counted)."""
        return sum(1 for p in self.pods.values() if not p.standby and p.ready_at > self.t)

    def reporting(self) -> list[str]:
        """Replicas whose engine exports metrics: Ready and awake (draining ones included)."""
        return [n for n, p in self.pods.items() if not p.standby and p.ready_at <= self.t]

    def _sync(self, t: float) -> None:
        engines = [n for n, p in self.pods.items() if not p.standby]
        routable = [n for n, p in self.pods.items() if p.draining_since is None and not p.standby and p.ready_at <= t]
        self.r.aborted += self.svc.set_replicas(engines, routable, t)

    def _wake(self, t: float, need: int) -> int:
        """Wake up to ``need`` standby replicas (sleeping ones first); returns how many."""
        sleeping = sorted((p for p in self.pods.values() if p.standby), key=lambda p: (p.ready_at > t, p.ready_at))
        for p in sleeping[:need]:
            p.standby = False
            p.ready_at = max(p.ready_at, t + self.starts.wake)
            self.r.starts["wake"] = self.r.starts.get("wake", 0) + 1
        return min(need, len(sleeping))

    def _scale_up(self, t: float, need: int) -> None:
        draining = sorted((p for p in self.pods.values() if p.draining_since is not None),
                          key=lambda p: -p.draining_since)
        for p in draining[:need]:
            p.draining_since = None
            need -= 1
        need -= self._wake(t, need)
        for _ in range(need):
            self._new_pod(t)

    def _scale_down(self, t: float, active: list[Pod], n: int) -> None:
        if self.drain:
            starting = sorted((p for p in active if p.ready_at > t), key=lambda p: -p.created)
            for p in starting[:n]:
                del self.pods[p.name]
            n -= len(starting[:n])
            serving = sorted((p for p in active if p.ready_at <= t),
                             key=lambda p: (self.svc.replicas[p.name].outstanding, p.name))
            for p in serving[:n]:
                p.draining_since = t
        else:  # ReplicaSet order: not Ready first, then the most recently Ready
            for p in sorted(active, key=lambda p: (p.ready_at <= t, -p.ready_at, -p.created))[:n]:
                del self.pods[p.name]

    def _fill_standby(self, t: float) -> None:
        sleeping = [p for p in self.pods.values() if p.standby]
        for _ in range(self.standby - len(sleeping)):
            self._new_pod(t, standby=True)
        extra = sorted(sleeping, key=lambda p: -p.ready_at)[:max(0, len(sleeping) - self.standby)]
        for p in extra:
            del self.pods[p.name]

    def _scale(self, t: float, want: int) -> None:
        active = [p for p in self.pods.values() if p.draining_since is None and not p.standby]
        if want > len(active):
            self._scale_up(t, want - len(active))
        elif want < len(active):
            self._scale_down(t, active, len(active) - want)
        self._fill_standby(t)
        self._sync(t)

    def _collect(self) -> None:
        if not self.svc.done:
            return
        r = self.r
        for d in self.svc.done:
            if d.aborted:
                r._aborted_minutes.append(int(d.request.arrival // 60))
                continue
            r.ttfts.append(d.ttft)
            r.arrivals.append(d.request.arrival)
            r.waits.append(d.queue_wait)
        self.svc.done.clear()

    def run(self, arrivals: list[Request], end: float) -> Result:
        r, svc, pods = self.r, self.svc, self.pods
        n, i, step = len(arrivals), 0, 0
        next_scrape, next_line, self._last_dir = 0.0, 0.0, None

        def feed(t: float) -> None:  # the service to t, with every arrival up to t
            nonlocal i
            j = i
            while j < n and arrivals[j].arrival <= t:
                j += 1
            svc.advance(t, arrivals[i:j])
            r.requests += j - i
            i = j

        while True:
            step += 1
            t = self.t = step * DT
            if t > end:
                break
            changed = any(t - DT < p.ready_at <= t for p in pods.values())
            draining = [p for p in pods.values() if p.draining_since is not None]
            if changed or draining or t >= next_scrape:
                feed(t)
            for p in draining:
                if svc.replicas[p.name].outstanding == 0 or t - p.draining_since >= DRAIN_S:
                    del pods[p.name]
                    changed = True
            if changed:
                self._sync(t)
            if t >= next_scrape:
                next_scrape = t + SCRAPE_S
                self.prom.scrape(t, svc, self.reporting())
            self._decide(t, feed)
            self._collect()
            r.replica_seconds += len(pods) * DT
            r.max_replicas = max(r.max_replicas, len(pods))
            if t >= next_line:
                next_line = t + TIMELINE_S
                standby = sum(1 for p in pods.values() if p.standby)
                r.timeline.append((t, len(pods), self.asked, self.ready(), standby))
        feed(end)
        self._collect()
        diagnostics = getattr(self.scaler, "diagnostics", None)
        r.diagnostics = diagnostics() if diagnostics else {}
        return r

    def _decide(self, t: float, feed) -> None:
        """Ask the scaler (it reads the scrapes and the pods, never the service); a change of
        replicas or standby is applied to the service as of ``t`` (``feed`` brings it there)."""
        out = self.scaler.tick(t, self.asked, self)
        if out is None:
            return
        want, standby = out if isinstance(out, tuple) else (out, self.standby)
        if (want, standby) == (self.asked, self.standby):
            return
        feed(t)
        r = self.r
        if want != self.asked:
            d = "Up" if want > self.asked else "Down"
            if self._last_dir and d != self._last_dir:
                r.reversals += 1
            self._last_dir = d
            r.patches += 1
        self.asked, self.standby = want, standby
        self._scale(t, want)
