"""Live preemption: GPU-hours lost when high-priority gangs arrive on a full cluster, kubeforge
against Kueue's real preemption, on the same 16-node sim fleet and the same scenario.

Two teams (``research``, ``product``) share 128 GPUs (16 nodes x 8, 4 NVLink domains of 4
nodes), 64 nominal each, borrowing unlimited. Every gang is 2 pods x 8 GPUs, Required inside
one NVLink domain. Eight gangs run first (research borrows 32 of product's GPUs), each
checkpointing on its own interval; then three priority-100 gangs arrive: two of product's
(within its nominal quota: they reclaim borrowed GPUs, ``reclaimQuota: Any`` /
``reclaimWithinCohort: Any``) and one of research's (at its nominal quota: it preempts a
lower-priority gang of its own team, ``withinQuota`` / ``withinClusterQueue: LowerPriority``).

Time is compressed: one live second stands for ``--minutes-per-second`` minutes of training
(default 1), so checkpoint intervals of 10-60 s are 10-60 minutes. A victim loses the work
since its last checkpoint when it is seen preempted (its SIGTERM checkpoint not counted, the
worst case): GPU-hours lost = checkpoint age x its GPUs.

Printed per system: each arrival's victims (priority, checkpoint age, GPU-hours lost), the
time to admit the preemptor (create -> Admitted, create -> all pods bound, client-side
polls every 0.5 s), the totals; then what kubeforge's pure admission core predicts for the
same running set, with its own order and with the preemption bench's "Kueue-like" order
(lowest priority, then newest), beside the real choices. It measures; it asserts nothing.

Run: ``make bench-preemption-live`` (builds the peers first; ``--systems kubeforge`` runs
without them), or ``.venv/bin/python -m e2e.bench.preemption_live [--help]``. Modules: the
scenario and its report (here), the two systems (:mod:`~e2e.bench.preemption_live.systems`),
the pure core's prediction (:mod:`~e2e.bench.preemption_live.predict`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from kubeforge.api import PoolPreemption

from e2e.bench.lib.cluster import apply_crds, apply_fleet, open_api
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.timing import logger, poll
from e2e.bench.preemption_live.predict import predict
from e2e.bench.preemption_live.systems import Gang, KubeforgeSystem, KueueSystem
from e2e.peers import BUILD_HINT, peers_bin

RUNNING = [  # created in this order (so the last is the newest); interval and age in live seconds
    Gang("r1", "research", 0, interval=60, age=50), Gang("r2", "research", 0, interval=30, age=5),
    Gang("r3", "research", 0, interval=45, age=40), Gang("r4", "research", 10, interval=20, age=15),
    Gang("r5", "research", 10, interval=10, age=2), Gang("r6", "research", 0, interval=30, age=25),
    Gang("p1", "product", 0, interval=60, age=30), Gang("p2", "product", 0, interval=30, age=8),
]
ARRIVALS = [Gang("a1", "product", 100, arrival=0), Gang("a2", "product", 100, arrival=40),
            Gang("a3", "research", 100, arrival=80)]


say = logger("preempt")


def wait(pred, timeout: float, what: str, interval: float = 0.5):
    """Poll ``pred`` until truthy (returned) or ``timeout`` s; None then (and a line)."""
    return poll(pred, timeout, what, interval, log=say)


def run(system, args, nodes: dict) -> dict:
    """Run the scenario on ``system``; returns arrivals (times, victims) and predictions."""
    scale = args.minutes_per_second / 60.0  # hours of training per live second
    system.setup()
    if hasattr(system, "priority_classes"):
        system.priority_classes({g.priority for g in RUNNING + ARRIVALS})
    for g in RUNNING:  # one at a time, so that admission order (Kueue's "newest") is creation order
        system.submit(g)
        if not wait(lambda g=g: system.state().get(g.name, None) and system.state()[g.name].admitted, 90,
                    f"{system.name}: {g.name} admitted"):
            raise SystemExit(f"{system.name}: running gang {g.name} was not admitted; see its logs")
        time.sleep(1.2)  # distinct admission seconds
    wait(lambda: all(len(s.nodes) == 2 for k, s in system.state().items() if k in {g.name for g in RUNNING}), 120,
         f"{system.name}: running gangs bound")
    t_ref = time.time() + max(g.age for g in RUNNING) + 2
    origin = {g.name: t_ref - g.age for g in RUNNING}  # each gang's first checkpoint
    step = {g.name: 0 for g in RUNNING}
    everyone = {x.name: x for x in RUNNING + ARRIVALS}

    def last_ckpt(g: Gang, t: float) -> float:
        return origin[g.name] + ((t - origin[g.name]) // g.interval) * g.interval

    def start_or_ckpt(name: str, s, t: float) -> float:
        """A gang's last checkpoint (an arrival has none: its start)."""
        g = everyone[name]
        return last_ckpt(g, t) if g.interval else (s.admitted_at or t)

    out = {"arrivals": []}
    prev = system.state()
    pending = list(ARRIVALS)
    current = None
    next_at = t_ref
    settle_until = None
    while True:  # bounded: every arrival has its timeout, then a settle window
        now = time.time()
        for g in RUNNING:  # checkpoints that fell due
            due = last_ckpt(g, now)
            k = int(round((due - origin[g.name]) / g.interval)) + 1
            if now >= origin[g.name] and k > step[g.name]:
                step[g.name] = k
                system.checkpoint(g, 100 * k, due)
        if current is None and pending and now >= next_at:
            g = pending.pop(0)
            running = {k: s for k, s in prev.items() if s.admitted}
            ckpts = {k: start_or_ckpt(k, s, now) for k, s in running.items()}
            pred = predict(system, nodes, running, everyone, ckpts, g, now, system.preemption)
            ages = {k: (now - ckpts[k], now - s.checkpoint_at if s.checkpoint_at else None) for k, s in running.items()}
            system.submit(g)
            current = {"gang": g, "t": now, "admitted": None, "bound": None, "victims": [], "predicted": pred,
                       "ages": ages}
            out["arrivals"].append(current)
            say(f"{system.name}: {g.name} ({g.team}, priority {g.priority}) submitted")
        time.sleep(0.5)
        st = system.state()
        now = time.time()
        for k, s in st.items():  # the systems' own preemption counters: a quick re-admission still counts
            before = prev[k].preemptions if k in prev else 0
            if s.preemptions > before and out["arrivals"]:
                g = everyone[k]
                age = now - start_or_ckpt(k, prev.get(k, s), now)
                for _ in range(s.preemptions - before):
                    out["arrivals"][-1]["victims"].append({"name": k, "priority": g.priority, "age_s": age,
                                                           "gpu_h": age * scale * g.total, "by": s.preempted_by,
                                                           "why": s.preempted[:160]})
        if current is not None:
            s = st.get(current["gang"].name)
            if s and s.admitted and current["admitted"] is None:
                current["admitted"] = now - current["t"]
            if s and len(s.nodes) == current["gang"].replicas and current["bound"] is None:
                current["bound"] = now - current["t"]
            if current["bound"] is not None or now - current["t"] > args.timeout:
                next_at = max(t_ref + pending[0].arrival, now + 2) if pending else now
                current = None
                if not pending:
                    settle_until = now + args.settle
        prev = st
        if settle_until is not None and now >= settle_until:
            break
    return out


def report(name: str, res: dict, scale: float) -> None:
    """One system's arrivals: time to admit and bind, victims and what they lost, the pure core's
    prediction beside the real choice."""
    print(f"\n{name}:")
    print(f"  {'arrival':<8} {'team':<9} {'-> Admitted s':>13} {'-> bound s':>10}  victims (priority, checkpoint age "
          f"in minutes of training, GPU-hours lost)")
    total_h = total_n = 0
    for a in res["arrivals"]:
        g = a["gang"]
        vs = "; ".join(f"{v['name']} (p{v['priority']}, {v['age_s'] * scale * 60:.0f} min, {v['gpu_h']:.1f} GPU-h"
                       + (f", by {v['by']}" if v["by"] and v["by"] != g.name else "") + ")"
                       for v in a["victims"]) or "none"
        fmt = (lambda x: f"{x:.1f}" if x is not None else "timeout")
        print(f"  {g.name:<8} {g.team:<9} {fmt(a['admitted']):>13} {fmt(a['bound']):>10}  {vs}")
        total_n += len(a["victims"])
        total_h += sum(v["gpu_h"] for v in a["victims"])
    adm = [a["admitted"] for a in res["arrivals"] if a["admitted"] is not None]
    print(f"  => {total_n} preemptions, {total_h:.1f} GPU-hours lost; time to admit the preemptor mean "
          f"{sum(adm) / len(adm) if adm else float('nan'):.1f}s (max {max(adm, default=float('nan')):.1f}s)")
    for a in res["arrivals"]:
        p = a["predicted"]
        real = sorted(v["name"] for v in a["victims"])
        print(f"  at {a['gang'].name}: pure core (model: {p['gangs']} running gangs, {p['gpus']} GPUs held) with "
              f"kubeforge's order -> {p['kubeforge']}, with e2e.bench.preemption's Kueue-like order -> "
              f"{p['kueue-like']}; real {name}: {real}")
        print("    checkpoint ages at the arrival, minutes (the scenario's" + (" / the operator's status" if name == "kubeforge"
                                                                               else "") + "): " + ", ".join(
            f"{k} {x * scale * 60:.0f}" + (f"/{y * scale * 60:.0f}" if y is not None else "")
            for k, (x, y) in sorted(a["ages"].items())))
    for v in (v for a in res["arrivals"] for v in a["victims"]):
        if v["why"]:
            print(f"    {v['name']}: {v['why']}")
    print("  (a victim 'by' another gang than the arrival was preempted by an earlier victim that came back: a cascade)")


def scaled_preemption(minutes_per_second: float) -> dict:
    """The pool's ``spec.preemption`` for the compressed scenario: the API's defaults, with
    ``minRuntimeSeconds`` in live seconds (one live second is ``minutes_per_second`` minutes)."""
    d = PoolPreemption()
    return {"minRuntimeSeconds": int(round(d.min_runtime_seconds / 60 / minutes_per_second))}


def main(argv: list[str] | None = None) -> int:
    """Run the scenario on each system, then print both; returns 0."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.preemption_live", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-preempt"))
    ap.add_argument("--fleet", default=str(ROOT / "e2e/fleets/preempt-16.yaml"))
    ap.add_argument("--systems", default="kubeforge,kueue", help="comma-separated: kubeforge, kueue")
    ap.add_argument("--minutes-per-second", type=float, default=1.0, help="minutes of training per live second")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for a preemptor's pods")
    ap.add_argument("--settle", type=float, default=5, help="seconds after the last arrival to catch late victims")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = ap.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if "kueue" in systems and peers_bin() is None:
        say(f"skipping Kueue: {BUILD_HINT}")
        systems.remove("kueue")
    from kubeforge.sim.cluster import Cluster
    from kubeforge.sim.fleet import load_fleet

    fleet = load_fleet(args.fleet)
    print(f"live preemption: {fleet.node_count} nodes x 8 GPUs ({args.fleet}), teams research / product with 64 "
          f"nominal GPUs each; 1 live second = {args.minutes_per_second:g} min of training; systems: "
          f"{', '.join(systems)}; machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print("running: " + ", ".join(f"{g.name}/{g.team}/p{g.priority} every {g.interval:.0f} min (last {g.age:.0f} min "
                                  f"ago)" for g in RUNNING))
    print("arrivals (priority 100): " + ", ".join(f"{g.name}/{g.team} at +{g.arrival:.0f} min" for g in ARRIVALS))
    c = Cluster(args.cluster)
    results = {}
    try:
        c.up(None, log=say)
        api = open_api(c, 8)
        nodes = apply_fleet(c, api, fleet)
        apply_crds(c, ROOT / "crds")
        for s in systems:
            system = (KubeforgeSystem if s == "kubeforge" else KueueSystem)(c, f"pre-{s}", fleet.name, 64,
                                                                             scaled_preemption(args.minutes_per_second))
            t = time.monotonic()
            try:
                results[s] = run(system, args, nodes)
            finally:
                try:
                    system.teardown()
                except Exception as e:  # noqa: BLE001 - the figures are already taken; say it and go on
                    say(f"{s}: teardown failed ({type(e).__name__}: {str(e)[:200]})")
            say(f"{s}: scenario done in {time.monotonic() - t:.0f}s")
    finally:
        if not args.keep:
            c.down(log=say)
    for s, res in results.items():
        report(s, res, args.minutes_per_second / 60.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
