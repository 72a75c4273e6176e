#!/usr/bin/env python3
"""NVL72 bench (issue 15): multi-node NVLink gangs on 8 NVL72 racks, kubeforge's clique placement
and whole-domain preemption against a Kueue-like scattered victim choice, in the same run.

A discrete-event replay in simulated time through kubeforge's own pure admission core
(``kubeforge.admission.plan_admission`` with the runtime's ``AdmissionMemo``: the ledger, whole-node
clique placement with spares, checkpoint-aware preemption), as ``e2e/bench_preemption.py`` does; a
live run of 144 kwok nodes and hundreds of gangs is too heavy for this 2-core shared machine.

Fleet: 8 racks x 18 nodes x 4 GPUs (576 GPUs), a DRA pool with the ``nvlink`` level on
``nvidia.com/gpu.clique``.

Load, sized so the fleet is busy and the queue never empties (real contention): background gangs
are drawn from the Alibaba trace in order. At the start the fleet is as a steady state finds it:
gangs asking for ``--load`` (default 1.1) x its GPUs are there, each with a uniform share of its
run left. Then a stream whose GPU-hours reach ``--load`` x the fleet's GPU-hours over ``--hours``
(default 6) arrives evenly (with jitter) over those hours. Size: the pod's ``num_gpu`` x 1, 2, 4 or 8 nodes of 4 GPUs, capped at 32 (``Required``
nvlink up to 16 nodes, ``Preferred`` above: split evenly over racks); run time: the pod's lifetime
clamped to 20 min .. ``--max-hours`` (4 h); priority from its QoS class (BE 0, Burstable 5, LS 10,
Guaranteed 20: an LS gang may preempt BE gangs, as in a shared cluster). From ``--rack-start-minutes``
(60, once the fleet has filled) a rack-sized gang (16 nodes, 1 h, priority 1000) arrives every
``--rack-every-minutes`` (45). Every gang checkpoints every ``--checkpoint-minutes`` (30); a victim
stops ``--grace`` seconds (30) after it is chosen (its checkpoint grace period) and loses the work
since its last checkpoint; a gang runs ``--imex-seconds`` (5) after admission (its ComputeDomain's
IMEX daemons). The run prints the offered load, the fleet's mean utilization and queue, and how
busy the fleet was when each rack gang arrived, so the contention is on record.

Cases (same arrivals): **kubeforge** (victims of one clique at the least work lost) and
**Kueue-like scattered** (victims by Kueue's order, lowest priority then newest, anywhere, until
the pool has enough free GPUs, topology-blind; it preempts again once they are gone if the gang
still does not fit, as kueue#10815 describes).

Printed per case: multi-node gangs placed in one clique, GPUs stranded (free GPUs on nodes no
waiting gang can use) mean / max, preemptions (by rack gangs), GPU-hours lost, rack-sized gangs'
time from arrival to Running, and the three targets met or not. PNG: stranded GPUs over time
(``e2e/results/nvl72-stranded.png``). It measures; it asserts nothing.

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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from kubeforge.admission import AdmissionMemo, JobView, Snapshot, plan_admission  # noqa: E402
from kubeforge.admission import _round, _victims  # noqa: E402
from kubeforge.api import GPUPoolSpec, TrainingJobSpec  # noqa: E402
from kubeforge.objects import CLIQUE_LABEL, Node, dra_key, record_from_k8s  # noqa: E402
from kubeforge.placement import Placement  # noqa: E402

from bench_preemption import PRIORITY, T0, TRACE, iso  # noqa: E402  (the same trace, priorities and clock)

DRIVER = "gpu.nvidia.com"
KEY = dra_key(DRIVER)
RACK_PRIORITY = 1000


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
    lost_to_racks: float = 0.0
    first_running: float | None = None
    busy_at_arrival: float | None = None
    cache: tuple = ()


def load(trace: Path, seed: int, racks: int, hours: float, load_factor: float, max_hours: float,
         rack_start: float, rack_every: float) -> tuple[list[Gang], float]:
    """Background gangs from the trace: at the start, gangs asking for ``load_factor`` x the fleet's
    GPUs with the rest of their runs; then a stream whose GPU-hours reach ``load_factor`` x the
    fleet's over ``hours``, arriving evenly (jittered); plus the rack-sized gangs (see the module
    docstring). Returns (gangs by arrival, the stream's offered GPU-hours)."""
    rows = [r for r in csv.DictReader(open(trace, newline="")) if int(r["num_gpu"]) > 0]
    rng = random.Random(seed)
    gangs: list[Gang] = []

    def draw() -> Gang:
        r = rows[len(gangs) % len(rows)]
        nodes = max(1, min(32, int(r["num_gpu"]) * rng.choice((1, 2, 4, 8))))
        life = max(1200.0, min(max_hours * 3600, float(r["deletion_time"]) - float(r["creation_time"])))
        return Gang(f"g{len(gangs):04d}", PRIORITY.get(r["qos"], 0), nodes, 0.0, life)

    # The fleet as a steady state finds it: gangs asking for load_factor x its GPUs are there at the
    # start, each with what is left of its run (uniform), so the rack gangs never meet an empty fleet.
    gpus = 0
    while gpus < load_factor * racks * 72:
        g = draw()
        g.work = max(600.0, g.work * rng.random())
        g.arrival = T0 + len(gangs)
        gangs.append(g)
        gpus += g.nodes * 4
    # Then a stream that offers load_factor x the fleet's GPU-hours over the window.
    stream: list[Gang] = []
    offered = 0.0
    while offered < load_factor * racks * 72 * hours:
        g = draw()
        gangs.append(g)
        stream.append(g)
        offered += g.nodes * 4 * g.work / 3600
    gap = hours * 3600 / len(stream)
    for k, g in enumerate(stream):
        g.arrival = T0 + (k + rng.random()) * gap
    t, k = T0 + rack_start, 0
    while t < T0 + hours * 3600:
        gangs.append(Gang(f"rack{k:02d}", RACK_PRIORITY, 16, t, 3600.0, rack=True))
        t += rack_every
        k += 1
    return sorted(gangs, key=lambda g: g.arrival), offered


def pool_record():
    body = {"metadata": {"name": "nvl72", "uid": "pool-1", "generation": 1},
            "spec": {"deviceAllocation": "DRA", "dra": {"driver": DRIVER},
                     "topologyLevels": [{"name": "nvlink", "nodeLabel": CLIQUE_LABEL}]}}
    rec = record_from_k8s(GPUPoolSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec


def record(g: Gang, now: float, ckpt: float):
    """The gang's TrainingJob record as the operator's cache would hold it now; built again only
    when its status changes (a placement, a preemption, a new checkpoint)."""
    ckpts = int((now - g.started) // ckpt) if g.placement and g.started is not None else -1
    key = (g.preemptions, g.placement, g.started, ckpts)
    if g.cache and g.cache[0] == key:
        return g.cache[1]
    status: dict = {"phase": "Pending", "attempt": g.preemptions}
    if g.placement:
        status = {"phase": "Running", "attempt": g.preemptions,
                  "placement": {"pool": "nvl72", "nodes": list(g.placement), "admittedAt": iso(g.started or now)}}
        if ckpts > 0:
            status["lastCheckpoint"] = {"time": iso(g.started + ckpts * ckpt)}
    topo = {"mode": "Required", "level": "nvlink"} if g.nodes <= 16 else {"mode": "Preferred", "level": "nvlink"}
    body = {"metadata": {"name": g.name, "namespace": "ml", "uid": f"{g.name}-{g.preemptions}", "generation": 1,
                         "creationTimestamp": iso(g.arrival)},
            "spec": {"pools": ["nvl72"], "replicas": g.nodes, "gpusPerReplica": 4, "priority": g.priority,
                     "topology": topo, "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}},
            "status": status}
    rec = record_from_k8s(TrainingJobSpec, body)
    assert rec.spec is not None, rec.spec_error
    g.cache = (key, rec)
    return rec


@contextmanager
def scattered():
    """Kueue-like victims: lowest priority, then newest, anywhere in the pool, until enough GPUs
    are free in all (topology-blind); no placement is nominated."""
    def choose(preemptor, request, view, book, running, taken, in_flight, now):
        cands = _victims._eligible(preemptor, request.gpus, book, running, in_flight, now)
        cands.sort(key=lambda c: (c[0].record.spec.priority, _victims.run_time(c[0], now)))  # lowest priority, newest
        free = sum(n.gpus_free for n in view.nodes if n.usable) - sum(taken.values())
        chosen = []
        for v, reason in cands:
            if free >= request.gpus:
                break
            by_node = {n: 4 for n in v.placement.nodes}
            chosen.append(_victims.Victim(v.key, reason, _victims.lost_work(v, now, view.resource), by_node))
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
    """Replay ``gangs`` through :func:`plan_admission` (one round per event: an arrival, a run's
    end, a victim's stop, a gang's IMEX daemons up) until ``horizon`` seconds. Returns the figures."""
    fleet = {f"r{r}-{i:02d}": Node(f"r{r}-{i:02d}", {CLIQUE_LABEL: f"rack{r}"}, allocatable={KEY: 4}, capacity={KEY: 4})
             for r in range(racks) for i in range(18)}
    capacity = 4 * len(fleet)
    pool = pool_record()
    by_key = {("ml", g.name): g for g in gangs}
    memo = AdmissionMemo()
    nominations: dict = {}
    victims_of: dict = {}
    events = [g.arrival for g in gangs]
    heapq.heapify(events)
    series, busy_series, queue_series = [], [], []
    one_clique = multi = rack_victims = rounds = 0
    pending = list(gangs)  # by arrival
    live: list[Gang] = []
    now = T0
    while events and now < T0 + horizon:
        now = heapq.heappop(events)
        while events and events[0] <= now + 1e-6:
            heapq.heappop(events)
        while pending and pending[0].arrival <= now + 1e-6:
            live.append(pending.pop(0))
        for g in live:
            if g.started is not None and g.saved + (now - g.started) >= g.work - 1e-6:
                g.finished, g.started, g.placement = now, None, ()
            if g.stopping_until is not None and now >= g.stopping_until - 1e-6:
                g.stopping_until, g.placement = None, ()
            if g.running_at is not None and now >= g.running_at - 1e-6 and g.first_running is None:
                g.first_running = now
        live = [g for g in live if g.finished is None]
        for k in [k for k, vs in victims_of.items() if all(by_key[v].stopping_until is None for v in vs)]:
            victims_of.pop(k)
            if by_key[k].placement == () and k in nominations and not nominations[k][1]:
                nominations.pop(k)  # scattered: nothing nominated; look again
        busy = sum(g.nodes * 4 for g in live if g.placement) / capacity
        for g in live:
            if g.rack and g.busy_at_arrival is None:
                g.busy_at_arrival = busy
        views = {}
        for g in live:
            rec = record(g, now, ckpt)
            views[rec.key] = JobView(rec, rec.status)
        snap = Snapshot(pools={"nvl72": pool}, nodes=fleet, jobs=views, storage_classes=frozenset(),
                        nominations={k: v for k, v in nominations.items() if k in views},
                        preempting=frozenset(("ml", g.name) for g in live if g.stopping_until is not None))
        plan = plan_admission(snap, now, memo)
        rounds += 1
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
            rack_victims += len(p.victims) if by_key[p.key].rack else 0
            for v in p.victims:
                g = by_key[v.key]
                ran = now - (g.started or now)
                kept = (ran // ckpt) * ckpt
                g.lost.append((ran - kept) / 3600 * g.nodes * 4)
                if by_key[p.key].rack:
                    g.lost_to_racks += g.lost[-1]
                g.saved += kept
                g.started, g.running_at = None, None
                g.stopping_until = now + grace
                g.preemptions += 1
            heapq.heappush(events, now + grace)
        held = dict(plan.ledgers[KEY].per_node)
        waiting = [by_key[w.key] for w in plan.wait]
        series.append((now - T0, stranded(fleet, waiting, held)))
        busy_series.append(sum(held.values()) / capacity)
        queue_series.append(len(waiting))
    rack_times = [(g.first_running - g.arrival) if g.first_running else None for g in gangs if g.rack and g.arrival < now]
    lost = [h for g in gangs for h in g.lost]
    dur = [b[0] - a[0] for a, b in zip(series, series[1:])] + [0.0]
    total = max(1e-9, sum(dur))

    def mean(xs):
        return sum(x * d for x, d in zip(xs, dur)) / total

    return {"multi": multi, "one": one_clique, "preemptions": len(lost), "rack_victims": rack_victims, "lost": sum(lost),
            "lost_racks": sum(g.lost_to_racks for g in gangs),
            "series": series, "stranded_mean": mean([s[1] for s in series]),
            "stranded_max": max((s[1] for s in series), default=0), "busy": mean(busy_series),
            "queue": mean(queue_series), "rack": rack_times, "rounds": rounds,
            "rack_busy": [g.busy_at_arrival for g in gangs if g.rack and g.busy_at_arrival is not None],
            "finished": sum(1 for g in gangs if g.finished)}


def fresh(gangs):
    return [Gang(g.name, g.priority, g.nodes, g.arrival, g.work, g.rack) for g in gangs]


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--racks", type=int, default=8)
    ap.add_argument("--hours", type=float, default=6.0, help="arrival window and simulated horizon")
    ap.add_argument("--load", type=float, default=1.1,
                    help="background GPU-hours offered / the fleet's GPU-hours over --hours")
    ap.add_argument("--max-hours", type=float, default=4.0, help="longest background run")
    ap.add_argument("--rack-start-minutes", type=float, default=60.0)
    ap.add_argument("--rack-every-minutes", type=float, default=45.0)
    ap.add_argument("--checkpoint-minutes", type=float, default=30.0)
    ap.add_argument("--grace", type=float, default=30.0, help="victims' checkpoint grace period, seconds")
    ap.add_argument("--imex-seconds", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--png", type=Path, default=ROOT / "e2e" / "results" / "nvl72-stranded.png")
    a = ap.parse_args()
    gangs, offered = load(a.trace, a.seed, a.racks, a.hours, a.load, a.max_hours, a.rack_start_minutes * 60,
                          a.rack_every_minutes * 60)
    background = [g for g in gangs if not g.rack]
    sizes = sorted(g.nodes for g in background)
    print(f"{len(background)} background gangs (1-32 nodes, median {sizes[len(sizes) // 2]}, "
          f"{sum(g.nodes > 1 for g in background)} multi-node, {sum(g.nodes > 16 for g in background)} larger than a rack; "
          f"offered {offered:.0f} GPU-h = {offered / (a.racks * 72 * a.hours):.2f}x the fleet over {a.hours:g} h) and "
          f"{sum(g.rack for g in gangs)} rack-sized gangs (16 nodes, priority {RACK_PRIORITY}, every "
          f"{a.rack_every_minutes:g} min from {a.rack_start_minutes:g} min) on {a.racks} NVL72 racks "
          f"({a.racks * 18} nodes, {a.racks * 72} GPUs); checkpoint every {a.checkpoint_minutes:g} min, "
          f"grace {a.grace:g} s, IMEX {a.imex_seconds:g} s")
    rows = []
    for name, ctx in (("kubeforge (one clique, least work lost)", nullcontext()), ("Kueue-like scattered", scattered())):
        t = time.process_time()
        with ctx:
            r = simulate(fresh(gangs), a.racks, a.checkpoint_minutes * 60, a.grace, a.imex_seconds, a.hours * 3600)
        r["cpu"] = time.process_time() - t
        rows.append((name, r))
    print(f"{'case':<40} {'one clique':>11} {'stranded':>14} {'busy':>5} {'queue':>6} {'preempt (by rack)':>18} "
          f"{'GPU-h lost (by rack)':>20} {'rack gang to Running s':>32} {'done':>5} {'rounds':>7} {'CPU s':>6}")
    print(f"{'':<40} {'':>11} {'mean/max':>14} {'mean':>5} {'mean':>6} {'':>18} {'':>20} {'mean/max (never)':>32}")
    for name, r in rows:
        times = [x for x in r["rack"] if x is not None]
        never = sum(1 for x in r["rack"] if x is None)
        rt = f"{sum(times) / len(times):.0f}/{max(times):.0f} ({never})" if times else f"-/- ({never})"
        print(f"{name:<40} {r['one']:>5}/{r['multi']:<5} {r['stranded_mean']:>7.1f}/{r['stranded_max']:<6} "
              f"{r['busy']:>5.0%} {r['queue']:>6.1f} {r['preemptions']:>10} ({r['rack_victims']:>4}) {r['lost']:>11.1f} ({r['lost_racks']:>5.1f}) "
              f"{rt:>32} {r['finished']:>5} {r['rounds']:>7} {r['cpu']:>6.1f}")
    kf, kq = rows[0][1], rows[1][1]
    busy = kf["rack_busy"]
    if busy:
        print(f"fleet busy when a rack gang arrived (kubeforge case): min {min(busy):.0%}, mean {sum(busy) / len(busy):.0%}")
    times = [x for x in kf["rack"] if x is not None]
    bound = a.grace + 10
    late = [round(x) for x in kf["rack"] if x is None or x > bound]
    print("targets:")
    print(f"  100 % of multi-node gangs in one clique (gangs of <= 16 nodes; larger ones split evenly): "
          f"{kf['one']}/{kf['multi']} -> {verdict(kf['one'] == kf['multi'])}")
    print(f"  rack-sized gang Running within grace + 10 s = {bound:g} s of arrival: "
          f"max {max(times, default=float('nan')):.0f} s over {len(kf['rack'])} gangs"
          f"{f', late or never: {late}' if late else ''} -> {verdict(bool(times) and not late)}")
    ratio = kf["lost"] / kq["lost"] if kq["lost"] else float("nan")
    print(f"  GPU-hours lost <= 0.5 x scattered: {kf['lost']:.1f} vs {kq['lost']:.1f} ({ratio:.2f}x) -> "
          f"{verdict(kf['lost'] <= 0.5 * kq['lost'])}")
    draw(rows, a)
    print('Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0; '
          'Weng et al., "Beware of Fragmentation", USENIX ATC 2023.')
    return 0


def draw(rows, a) -> None:
    """Stranded GPUs over time, one step line per case (PNG at ``a.png``)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no PNG")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for name, r in rows:
        ax.step([s[0] / 3600 for s in r["series"]], [s[1] for s in r["series"]], where="post", label=name, lw=0.9)
    ax.set_xlabel("hours")
    ax.set_ylabel("GPUs stranded")
    ax.set_title(f"Free GPUs no waiting gang can use, {a.racks} NVL72 racks ({a.racks * 72} GPUs)")
    ax.legend()
    a.png.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"PNG: {a.png}")


if __name__ == "__main__":
    sys.exit(main())
