"""The NVL72 bench's replay: one admission round of kubeforge's pure core
(:func:`kubeforge.admission.plan_admission`, with the runtime's :class:`AdmissionMemo`) per
event (an arrival, a run's end, a victim's stop, a gang's IMEX daemons up), and the figures.
"""

from __future__ import annotations

import heapq

from kubeforge.admission import AdmissionMemo, AdmissionRules, JobView, Snapshot, plan_admission
from kubeforge.objects import CLIQUE_LABEL, Node

from e2e.bench.nvl72.model import KEY, Gang, pool_record, record
from e2e.bench.lib.replay import T0

__all__ = ["Replay", "simulate", "stranded"]


def stranded(fleet, gangs_waiting, held) -> int:
    """Free GPUs on nodes no waiting gang can use: a one-node gang can use any node with 4 free GPUs;
    a ``Required`` multi-node gang only wholly free nodes of a clique that has as many as it needs;
    a larger (``Preferred``) gang any wholly free node once the pool has as many as it needs."""
    if not gangs_waiting:
        return 0
    free = {n: 4 - held.get(n, 0) for n in fleet if held.get(n, 0) < 4}
    whole = [n for n, f in free.items() if f == 4]
    by_clique: dict[str, list[str]] = {}
    for n in whole:
        by_clique.setdefault(n.split("-")[0], []).append(n)
    usable: set[str] = set()
    for g in gangs_waiting:
        if g.nodes == 1:
            usable.update(whole)
        elif g.nodes <= 16:
            usable.update(n for ns in by_clique.values() if len(ns) >= g.nodes for n in ns)
        elif len(whole) >= g.nodes:
            usable.update(whole)
    return sum(f for n, f in free.items() if n not in usable)


class Replay:
    """The state one replay threads through its rounds (see :func:`simulate`)."""

    def __init__(self, gangs: list[Gang], racks: int, ckpt: float, grace: float, imex: float,
                 rules: AdmissionRules | None, min_runtime: int | None = 0) -> None:
        self.fleet = {f"r{r}-{i:02d}": Node(f"r{r}-{i:02d}", {CLIQUE_LABEL: f"rack{r}"}, allocatable={KEY: 4},
                                            capacity={KEY: 4})
                      for r in range(racks) for i in range(18)}
        self.capacity = 4 * len(self.fleet)
        self.pool = pool_record(min_runtime)
        self.gangs, self.ckpt, self.grace, self.imex, self.rules = gangs, ckpt, grace, imex, rules
        self.by_key = {("ml", g.name): g for g in gangs}
        self.memo = AdmissionMemo()
        self.nominations: dict = {}
        self.victims_of: dict = {}
        self.events = [g.arrival for g in gangs]
        heapq.heapify(self.events)
        self.series: list[tuple[float, int]] = []
        self.busy_series: list[float] = []
        self.queue_series: list[int] = []
        self.one_clique = self.multi = self.rack_victims = self.rounds = 0
        self.pending = list(gangs)  # by arrival
        self.live: list[Gang] = []

    def advance(self, now: float) -> None:
        """Arrivals, runs that ended, victims that stopped, gangs whose IMEX daemons are up."""
        while self.events and self.events[0] <= now + 1e-6:
            heapq.heappop(self.events)
        while self.pending and self.pending[0].arrival <= now + 1e-6:
            self.live.append(self.pending.pop(0))
        for g in self.live:
            if g.started is not None and g.saved + (now - g.started) >= g.work - 1e-6:
                g.finished, g.started, g.placement = now, None, ()
            if g.stopping_until is not None and now >= g.stopping_until - 1e-6:
                g.stopping_until, g.placement = None, ()
            if g.running_at is not None and now >= g.running_at - 1e-6 and g.first_running is None:
                g.first_running = now
        self.live = [g for g in self.live if g.finished is None]
        for k in [k for k, vs in self.victims_of.items() if all(self.by_key[v].stopping_until is None for v in vs)]:
            self.victims_of.pop(k)
            if self.by_key[k].placement == () and k in self.nominations and not self.nominations[k][1]:
                self.nominations.pop(k)  # scattered: nothing nominated; look again
        busy = sum(g.nodes * 4 for g in self.live if g.placement) / self.capacity
        for g in self.live:
            if g.rack and g.busy_at_arrival is None:
                g.busy_at_arrival = busy

    def round(self, now: float):
        """One :func:`plan_admission` on what exists now; returns the plan."""
        views = {}
        for g in self.live:
            rec = record(g, now, self.ckpt)
            views[rec.key] = JobView(rec, rec.status)
        snap = Snapshot(pools={"nvl72": self.pool}, nodes=self.fleet, jobs=views, storage_classes=frozenset(),
                        nominations={k: v for k, v in self.nominations.items() if k in views},
                        preempting=frozenset(("ml", g.name) for g in self.live if g.stopping_until is not None))
        self.rounds += 1
        return plan_admission(snap, now, self.memo, rules=self.rules)

    def admit(self, plan, now: float) -> None:
        """The plan's admissions start (their IMEX daemons take ``imex`` s)."""
        for a in plan.admit:
            g = self.by_key[a.key]
            g.placement, g.started, g.running_at = a.placement.nodes, now, now + self.imex
            heapq.heappush(self.events, now + self.imex)
            heapq.heappush(self.events, now + g.work - g.saved)
            self.nominations.pop(a.key, None)
            if g.nodes > 1:
                self.multi += 1
                self.one_clique += len({n.split("-")[0] for n in a.placement.nodes}) == 1 or g.nodes > 18

    def preempt(self, plan, now: float) -> None:
        """The plan's victims stop ``grace`` s from now, losing the work since their last checkpoint."""
        for p in plan.preempt:
            self.nominations[p.key] = (p.pool, dict(p.gpus_by_node))
            self.victims_of[p.key] = [v.key for v in p.victims]
            self.rack_victims += len(p.victims) if self.by_key[p.key].rack else 0
            for v in p.victims:
                g = self.by_key[v.key]
                ran = now - (g.started or now)
                kept = (ran // self.ckpt) * self.ckpt
                g.lost.append((ran - kept) / 3600 * g.nodes * 4)
                if self.by_key[p.key].rack:
                    g.lost_to_racks += g.lost[-1]
                g.saved += kept
                g.started, g.running_at = None, None
                g.stopping_until = now + self.grace
                g.preemptions += 1
            heapq.heappush(self.events, now + self.grace)

    def sample(self, plan, now: float) -> None:
        """Stranded GPUs, how busy the fleet is and the queue after the round."""
        held = dict(plan.ledgers[KEY].per_node)
        waiting = [self.by_key[w.key] for w in plan.wait]
        self.series.append((now - T0, stranded(self.fleet, waiting, held)))
        self.busy_series.append(sum(held.values()) / self.capacity)
        self.queue_series.append(len(waiting))

    def figures(self, now: float) -> dict:
        """What the bench prints, from the replay up to ``now``."""
        gangs, series = self.gangs, self.series
        rack_times = [(g.first_running - g.arrival) if g.first_running else None
                      for g in gangs if g.rack and g.arrival < now]
        lost = [h for g in gangs for h in g.lost]
        dur = [b[0] - a[0] for a, b in zip(series, series[1:])] + [0.0]
        total = max(1e-9, sum(dur))

        def mean(xs):
            return sum(x * d for x, d in zip(xs, dur)) / total

        return {"multi": self.multi, "one": self.one_clique, "preemptions": len(lost),
                "rack_victims": self.rack_victims, "lost": sum(lost),
                "lost_racks": sum(g.lost_to_racks for g in gangs),
                "series": series, "stranded_mean": mean([s[1] for s in series]),
                "stranded_max": max((s[1] for s in series), default=0), "busy": mean(self.busy_series),
                "queue": mean(self.queue_series), "rack": rack_times, "rounds": self.rounds,
                "rack_busy": [g.busy_at_arrival for g in gangs if g.rack and g.busy_at_arrival is not None],
                "finished": sum(1 for g in gangs if g.finished)}


def simulate(gangs: list[Gang], racks: int, ckpt: float, grace: float, imex: float, horizon: float,
             rules: AdmissionRules | None = None, min_runtime: int | None = 0) -> dict:
    """Replay ``gangs`` through :func:`plan_admission` under ``rules`` (None: kubeforge's own),
    one round per event (an arrival, a run's end, a victim's stop, a gang's IMEX daemons up),
    until ``horizon`` seconds, in a pool whose ``minRuntimeSeconds`` is ``min_runtime`` (None:
    the API's default). Returns the figures."""
    r = Replay(gangs, racks, ckpt, grace, imex, rules, min_runtime)
    now = T0
    while r.events and now < T0 + horizon:
        now = heapq.heappop(r.events)
        r.advance(now)
        plan = r.round(now)
        r.admit(plan, now)
        r.preempt(plan, now)
        r.sample(plan, now)
    return r.figures(now)
