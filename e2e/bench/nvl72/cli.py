"""NVL72 bench (issue 15): multi-node NVLink gangs on 8 NVL72 racks, kubeforge's clique placement
and whole-domain preemption against a Kueue-like scattered victim choice, in the same run.

A discrete-event replay in simulated time through kubeforge's own pure admission core
(``kubeforge.admission.plan_admission`` with the runtime's ``AdmissionMemo``: the ledger, whole-node
clique placement with spares, checkpoint-aware preemption), as ``e2e.bench.preemption`` does; a
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
still does not fit, as kueue#10815 describes; :data:`e2e.bench.nvl72.model.SCATTERED`, given to the
core through :class:`kubeforge.admission.AdmissionRules`).

Printed per case: multi-node gangs placed in one clique, GPUs stranded (free GPUs on nodes no
waiting gang can use) mean / max, preemptions (by rack gangs), GPU-hours lost, rack-sized gangs'
time from arrival to Running, and the three targets met or not. PNG: stranded GPUs over time
(``e2e/results/nvl72-stranded.png``). It measures; it asserts nothing.

Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0;
Weng et al., "Beware of Fragmentation", USENIX ATC 2023 (the copy shipped with kubeforge;
``--trace`` takes another).

Run: ``.venv/bin/python -m e2e.bench.nvl72`` (``make bench-nvl72``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from e2e.bench.lib.plots import NO_MATPLOTLIB, pyplot
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.traces import ALIBABA_CREDIT, ALIBABA_PODS, add_trace_arg, check_trace
from e2e.bench.nvl72.model import RACK_PRIORITY, SCATTERED, Gang, load
from e2e.bench.nvl72.sim import simulate


def fresh(gangs: list[Gang]) -> list[Gang]:
    """The gangs as they arrive, before any replay touched them."""
    return [Gang(g.name, g.priority, g.nodes, g.arrival, g.work, g.rack) for g in gangs]


def verdict(ok: bool) -> str:
    """A target's verdict as printed."""
    return "met" if ok else "NOT met"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); the defaults are the figures' run."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.nvl72", description=__doc__.splitlines()[0])
    add_trace_arg(ap, ALIBABA_PODS, "Alibaba openb pod trace")
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
    ap.add_argument("--min-runtime", type=lambda v: None if v == "default" else int(v), default=0,
                    help="the pool's preemption.minRuntimeSeconds; 'default': the API's (1800 s). 0 by default "
                         "here: a rack gang must run within grace + 10 s, and any protection of young runs "
                         "can make it wait for it")
    ap.add_argument("--png", type=Path, default=ROOT / "e2e" / "results" / "nvl72-stranded.png")
    a = ap.parse_args(argv)
    check_trace(ap, a.trace)
    return a


def main(argv: list[str] | None = None) -> int:
    """Replay both cases, print the table and the targets, draw the PNG; returns 0."""
    a = parse_args(argv)
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
          f"grace {a.grace:g} s, IMEX {a.imex_seconds:g} s; the pool's minRuntimeSeconds "
          f"{'the API default' if a.min_runtime is None else a.min_runtime}")
    rows = []
    for name, rules in (("kubeforge (one clique, least work lost)", None), ("Kueue-like scattered", SCATTERED)):
        t = time.process_time()
        r = simulate(fresh(gangs), a.racks, a.checkpoint_minutes * 60, a.grace, a.imex_seconds, a.hours * 3600, rules,
                     a.min_runtime)
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
    print(ALIBABA_CREDIT)
    return 0


def draw(rows, a) -> None:
    """Stranded GPUs over time, one step line per case (PNG at ``a.png``)."""
    plt = pyplot()
    if plt is None:
        print(f"{NO_MATPLOTLIB}: no PNG")
        return
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
