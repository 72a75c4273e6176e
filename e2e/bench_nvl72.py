#!/usr/bin/env python3
"""NVL72 bench (issue 15): multi-node NVLink gangs on 8 NVL72 racks, kubeforge's clique placement
and whole-domain preemption against a Kueue-like scattered victim choice, in the same run.

A discrete-event replay in simulated time through kubeforge's own pure admission core
(``kubeforge.admission.plan_admission``: the ledger, whole-node clique placement with spares,
checkpoint-aware preemption), as ``e2e/bench_preemption.py`` does; a live run of 144 kwok nodes and
hundreds of gangs is too heavy for this 2-core shared machine. Fleet: 8 racks x 18 nodes x 4 GPUs
(576 GPUs), a DRA pool with the ``nvlink`` level on ``nvidia.com/gpu.clique``. Gangs: job sizes from
the Alibaba GPU trace scaled to 1..32 nodes of 4 GPUs (num_gpu x 1, 2 or 4 nodes), ``Required``
nvlink up to 16 nodes, ``Preferred`` above (split evenly over racks), priority from the QoS class;
every 90 minutes a rack-sized (16-node) gang of top priority arrives. Every gang checkpoints every
``--checkpoint-minutes``; a victim stops ``--grace`` seconds after it is chosen (its checkpoint
grace period) and loses the work since its last checkpoint; a gang runs ``--imex-seconds`` after
admission (its ComputeDomain's IMEX daemons).

Cases (same arrivals): **kubeforge** (victims of one clique at the least work lost) and
**Kueue-like scattered** (victims by Kueue's order, lowest priority then newest, anywhere, until
the pool has enough free GPUs, topology-blind; it preempts again once they are gone if the gang
still does not fit, as kueue#10815 describes).

Printed per case: multi-node gangs placed in one clique, GPUs stranded (free GPUs on nodes no
waiting gang can use) mean / max, preemptions, GPU-hours lost, rack-sized gangs' time from arrival
to Running. PNG: stranded GPUs over time (``e2e/results/nvl72-stranded.png``). It measures; it
asserts nothing.

Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0;
Weng et al., "Beware of Fragmentation", USENIX ATC 2023.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import random
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from kubeforge.admission import JobView, Snapshot, nvlink_request, plan_admission  # noqa: E402
from kubeforge.admission import _quota, _round  # noqa: E402
from kubeforge.api import GPUPoolSpec, TrainingJobSpec  # noqa: E402
from kubeforge.objects import CLIQUE_LABEL, Node, dra_key, record_from_k8s  # noqa: E402
from kubeforge.placement import Placement  # noqa: E402

TRACE = ROOT.parent / "shared" / "data" / "traces" / "alibaba-openb-pods-2023.csv"
DRIVER = "gpu.nvidia.com"
KEY = dra_key(DRIVER)
PRIORITY = {"Guaranteed": 20, "LS": 10, "Burstable": 5, "BE": 0}
RACK_PRIORITY = 1000
T0 = 1_800_000_000.0


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Gang:
    name: str
    priority: int
    nodes: int
    arrival: float
    work: float
    rack: bool = False
    saved: float = 0.0
    started: float | None = None
    placement: tuple[str, ...] = ()
    running_at: float | None = None
    stopping_until: float | None = None
    finished: float | None = None
    preemptions: int = 0
    lost: list[float] = field(default_factory=list)
    first_running: float | None = None


def load(trace: Path, n: int, seed: int, hours: float, max_hours: float, rack_every: float) -> list[Gang]:
    rows = [r for r in csv.DictReader(open(trace, newline="")) if int(r["num_gpu"]) > 0]
    rng = random.Random(seed)
    gangs = []
    for i, r in enumerate(rows[:n]):
        nodes = max(1, min(32, int(r["num_gpu"]) * rng.choice((1, 2, 4))))
        life = max(1200.0, min(max_hours * 3600, float(r["deletion_time"]) - float(r["creation_time"])))
        gangs.append(Gang(f"g{i:04d}", PRIORITY.get(r["qos"], 0), nodes, 0.0, life))
    gap = hours * 3600 / max(1, len(gangs))
    for k, g in enumerate(gangs):
        g.arrival = T0 + (k + rng.random()) * gap
    t = T0 + rack_every
    k = 0
    while t < T0 + hours * 3600:
        gangs.append(Gang(f"rack{k:02d}", RACK_PRIORITY, 16, t, 3600.0, rack=True))
        t += rack_every
        k += 1
    return sorted(gangs, key=lambda g: g.arrival)


def pool_record():
    body = {"metadata": {"name": "nvl72", "uid": "pool-1", "generation": 1},
            "spec": {"deviceAllocation": "DRA", "dra": {"driver": DRIVER},
                     "topologyLevels": [{"name": "nvlink", "nodeLabel": CLIQUE_LABEL}]}}
    rec = record_from_k8s(GPUPoolSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec


def record(g: Gang, now: float, ckpt: float):
    status: dict = {"phase": "Pending", "attempt": g.preemptions}
    if g.placement:
        status = {"phase": "Running", "attempt": g.preemptions,
                  "placement": {"pool": "nvl72", "nodes": list(g.placement), "admittedAt": iso(g.started or now)}}
        if g.started is not None and now - g.started >= ckpt:
            status["lastCheckpoint"] = {"time": iso(g.started + ((now - g.started) // ckpt) * ckpt)}
    topo = {"mode": "Required", "level": "nvlink"} if g.nodes <= 16 else {"mode": "Preferred", "level": "nvlink"}
    body = {"metadata": {"name": g.name, "namespace": "ml", "uid": f"{g.name}-{g.preemptions}", "generation": 1,
                         "creationTimestamp": iso(g.arrival)},
            "spec": {"pools": ["nvl72"], "replicas": g.nodes, "gpusPerReplica": 4, "priority": g.priority,
                     "topology": topo, "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}},
            "status": status}
    rec = record_from_k8s(TrainingJobSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec


@contextmanager
def scattered():
    """Kueue-like victims: lowest priority, then newest, anywhere in the pool, until enough GPUs
    are free in all (topology-blind); no placement is nominated."""
    def choose(preemptor, request, view, book, running, taken, in_flight, now):
        cands = _quota._eligible(preemptor, request.gpus, book, running, in_flight, now)
        cands.sort(key=lambda c: (c[0].record.spec.priority, _quota.run_time(c[0], now)))  # lowest priority, newest
        free = sum(n.gpus_free for n in view.nodes if n.usable) - sum(taken.values())
        chosen = []
        for v, reason in cands:
            if free >= request.gpus:
                break
            by_node = {n: 4 for n in v.placement.nodes}
            chosen.append(_quota.Victim(v.key, reason, _quota.lost_work(v, now, view.resource), by_node))
            free += sum(by_node.values())
        if not chosen or free < request.gpus:
            return None
        return chosen, Placement(None, None, (), {}, "scattered")
    real = _round.choose_victims
    _round.choose_victims = choose
    try:
        yield
    finally:
        _round.choose_victims = real


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


def simulate(gangs: list[Gang], racks: int, ckpt: float, grace: float, imex: float, horizon: float) -> dict:
    fleet = {f"r{r}-{i:02d}": Node(f"r{r}-{i:02d}", {CLIQUE_LABEL: f"rack{r}"}, allocatable={KEY: 4}, capacity={KEY: 4})
             for r in range(racks) for i in range(18)}
    pool = pool_record()
    by_key = {("ml", g.name): g for g in gangs}
    nominations: dict = {}
    victims_of: dict = {}
    events = [g.arrival for g in gangs]
    heapq.heapify(events)
    series = []
    one_clique = multi = 0
    now = T0
    while events and now < T0 + horizon:
        now = heapq.heappop(events)
        while events and events[0] <= now + 1e-6:
            heapq.heappop(events)
        for g in gangs:
            if g.started is not None and g.saved + (now - g.started) >= g.work - 1e-6:
                g.finished, g.started, g.placement = now, None, ()
            if g.stopping_until is not None and now >= g.stopping_until - 1e-6:
                g.stopping_until, g.placement = None, ()
            if g.running_at is not None and now >= g.running_at - 1e-6 and g.first_running is None:
                g.first_running = now
        for k in [k for k, vs in victims_of.items() if all(by_key[v].stopping_until is None for v in vs)]:
            victims_of.pop(k)
            if by_key[k].placement == () and k in nominations and not nominations[k][1]:
                nominations.pop(k)  # scattered: nothing nominated; look again
        live = [g for g in gangs if g.arrival <= now and g.finished is None]
        views = {}
        for g in live:
            rec = record(g, now, ckpt)
            views[rec.key] = JobView(rec, rec.status)
        snap = Snapshot(pools={"nvl72": pool}, nodes=fleet, jobs=views, storage_classes=frozenset(),
                        nominations={k: v for k, v in nominations.items() if k in views})
        plan = plan_admission(snap, now)
        for a in plan.admit:
            g = by_key[a.key]
            g.placement, g.started, g.running_at = a.placement.nodes, now, now + imex
            heapq.heappush(events, now + imex)
            heapq.heappush(events, now + g.work - g.saved)
            nominations.pop(a.key, None)
            if g.nodes > 1:
                multi += 1
                one_clique += len({n.split("-")[0] for n in a.placement.nodes}) == 1 or g.nodes > 18
        for p in plan.preempt:
            nominations[p.key] = (p.pool, dict(p.gpus_by_node))
            victims_of[p.key] = [v.key for v in p.victims]
            for v in p.victims:
                g = by_key[v.key]
                ran = now - (g.started or now)
                kept = (ran // ckpt) * ckpt
                g.lost.append((ran - kept) / 3600 * g.nodes * 4)
                g.saved += kept
                g.started, g.running_at = None, None
                g.stopping_until = now + grace
                g.preemptions += 1
            heapq.heappush(events, now + grace)
        held = dict(plan.ledgers[KEY].per_node)
        waiting = [by_key[w.key] for w in plan.wait]
        series.append((now - T0, stranded(fleet, waiting, held)))
    rack_times = [(g.first_running - g.arrival) if g.first_running else None for g in gangs if g.rack and g.arrival < now]
    lost = [h for g in gangs for h in g.lost]
    dur = [b[0] - a[0] for a, b in zip(series, series[1:])]
    mean = sum(s[1] * d for s, d in zip(series, dur)) / max(1e-9, sum(dur))
    return {"multi": multi, "one": one_clique, "preemptions": len(lost), "lost": sum(lost), "series": series,
            "stranded_mean": mean, "stranded_max": max((s[1] for s in series), default=0),
            "rack": rack_times, "finished": sum(1 for g in gangs if g.finished)}


def fresh(gangs):
    return [Gang(g.name, g.priority, g.nodes, g.arrival, g.work, g.rack) for g in gangs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--gangs", type=int, default=400)
    ap.add_argument("--racks", type=int, default=8)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--max-hours", type=float, default=6.0)
    ap.add_argument("--rack-every-minutes", type=float, default=90.0)
    ap.add_argument("--checkpoint-minutes", type=float, default=30.0)
    ap.add_argument("--grace", type=float, default=30.0, help="victims' checkpoint grace period, seconds")
    ap.add_argument("--imex-seconds", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--png", type=Path, default=ROOT / "e2e" / "results" / "nvl72-stranded.png")
    a = ap.parse_args()
    gangs = load(a.trace, a.gangs, a.seed, a.hours, a.max_hours, a.rack_every_minutes * 60)
    print(f"{len(gangs)} gangs ({sum(g.rack for g in gangs)} rack-sized, priority {RACK_PRIORITY}) on {a.racks} NVL72 racks "
          f"({a.racks * 18} nodes, {a.racks * 72} GPUs), {a.hours:g} h; checkpoint every {a.checkpoint_minutes:g} min, "
          f"grace {a.grace:g} s, IMEX {a.imex_seconds:g} s")
    rows = []
    for name, ctx in (("kubeforge (one clique, least work lost)", nullcontext()), ("Kueue-like scattered", scattered())):
        t = time.process_time()
        with ctx:
            r = simulate(fresh(gangs), a.racks, a.checkpoint_minutes * 60, a.grace, a.imex_seconds, a.hours * 3600)
        r["cpu"] = time.process_time() - t
        rows.append((name, r))
    print(f"{'case':<42} {'one clique':>11} {'stranded mean/max':>18} {'preempt':>8} {'GPU-h lost':>11} "
          f"{'rack gang to Running s: mean/max (never)':>42} {'finished':>9} {'CPU s':>6}")
    for name, r in rows:
        times = [x for x in r["rack"] if x is not None]
        never = sum(1 for x in r["rack"] if x is None)
        rt = f"{sum(times) / len(times):.0f}/{max(times):.0f} ({never})" if times else f"-/- ({never})"
        print(f"{name:<42} {r['one']:>5}/{r['multi']:<5} {r['stranded_mean']:>8.1f}/{r['stranded_max']:<9} "
              f"{r['preemptions']:>8} {r['lost']:>11.1f} {rt:>42} {r['finished']:>9} {r['cpu']:>6.1f}")
    kf, kq = rows[0][1], rows[1][1]
    times = [x for x in kf["rack"] if x is not None]
    print("targets: multi-node gangs in one clique (gangs of <= 18 nodes; larger ones split evenly): "
          f"{kf['one']}/{kf['multi']} -> {'met' if kf['one'] == kf['multi'] else 'NOT met'}; "
          f"rack gang Running within grace + 10 s = {a.grace + 10:g} s: max {max(times, default=float('nan')):.0f} s -> "
          f"{'met' if times and max(times) <= a.grace + 10 and len(times) == len(kf['rack']) else 'NOT met'}; "
          f"GPU-hours lost <= 0.5 x scattered: {kf['lost']:.1f} vs {kq['lost']:.1f} -> "
          f"{'met' if kf['lost'] <= 0.5 * kq['lost'] else 'NOT met'}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for name, r in rows:
            xs = [s[0] / 3600 for s in r["series"]]
            ax.step(xs, [s[1] for s in r["series"]], where="post", label=name)
        ax.set_xlabel("hours")
        ax.set_ylabel("GPUs stranded")
        ax.set_title(f"Free GPUs no waiting gang can use, {a.racks} NVL72 racks")
        ax.legend()
        a.png.parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
        print(f"PNG: {a.png}")
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no PNG")
    print('Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0; '
          'Weng et al., "Beware of Fragmentation", USENIX ATC 2023.')
    return 0


if __name__ == "__main__":
    sys.exit(main())
