"""``python -m e2e.bench.scale.burst``: the admission rounds of a burst as the live operator runs
them, through kubeforge's pure admission core.

The live 5,000-node run (e2e/README-scale-bench.md, "Live at 5,000 nodes") submits 2,000 gangs
over about a minute, so each admission round sees a few dozen new gangs and the admissions of the
round before written into their status. This replays that shape: ``--jobs`` gangs of the scale
bench's workload arriving ``--per-round`` at a time on ``--nodes`` 8-GPU nodes, one round per
arrival batch with the last round's admissions written (their GPUs held through their
placements), and prints each way's CPU per round, in the same process:

- **carried**: the runtime's :class:`~kubeforge.admission.AdmissionMemo` as it is, the pool view
  and the placement index carried from round to round;
- **index per round**: the memo's placement index dropped before every round (as before the index
  was carried);
- **view and index per round**: the memo's pool views dropped too (what the live operator did
  while every node heartbeat replaced the node's record and reordered the node index, so no view
  was ever reused).

All three admit the same gangs to the same nodes (checked). It measures; it asserts nothing
about time.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Sequence

from kubeforge.admission import AdmissionMemo, plan_admission

from e2e.bench.lib.replay import T0
from e2e.bench.lib.traces import ALIBABA_PODS, default_trace
from e2e.bench.scale.workload import fleet, gangs, job_views, pool, snapshot

__all__ = ["WAYS", "burst_rounds", "main"]

WAYS = ("carried", "index per round", "view and index per round")


def burst_rounds(nodes: int, jobs: int, per_round: int, way: str, seed: int = 7) -> tuple[list[float], list]:
    """Replay the burst one way (one of :data:`WAYS`).

    Returns:
        ``(CPU seconds of each round, [(job key, nodes) of every admission in order])``.
    """
    batch = gangs(default_trace(ALIBABA_PODS), jobs, seed=seed)
    by_key = {(g.namespace, g.name): g for g in batch}
    fleet_nodes, pool_rec = fleet(nodes), pool()
    views: dict = {}
    memo = AdmissionMemo()
    cpu: list[float] = []
    admitted: list = []
    for start in range(0, jobs, per_round):
        views.update(job_views(batch[start:start + per_round]))
        if way != WAYS[0]:
            memo.indexes = {}
        if way == WAYS[2]:
            memo.views = {}
        c0 = time.process_time()
        plan = plan_admission(snapshot(fleet_nodes, pool_rec, views), T0 + start, memo)
        cpu.append(time.process_time() - c0)
        placed = {a.key: a.placement.nodes for a in plan.admit}
        admitted.extend(placed.items())
        views.update(job_views([by_key[k] for k in placed], placed))
    return cpu, admitted


def _row(way: str, cpu: Sequence[float], admitted: int) -> str:
    ordered = sorted(cpu)
    mean = sum(cpu) / len(cpu)
    return (f"  {way:<26} {len(cpu):>6} {admitted:>8} {mean * 1000:>9.1f} {ordered[len(ordered) // 2] * 1000:>8.1f} "
            f"{ordered[-1] * 1000:>8.1f} {sum(cpu):>8.2f}")


def main(argv: list[str] | None = None) -> int:
    """Run the three ways at one size and print their rounds' CPU."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.scale.burst", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000, help="8-GPU nodes (default 5000, the live run's fleet)")
    ap.add_argument("--jobs", type=int, default=2000, help="gangs of the burst (default 2000)")
    ap.add_argument("--per-round", type=int, default=50,
                    help="gangs arriving per round (default 50: the live run's 22-29 a second, rounds of 1-2 s)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"burst: {args.jobs} gangs, {args.per_round} a round, on {args.nodes} 8-GPU nodes (pure core, "
          f"the scale bench's workload, seed {args.seed}); CPU = this process's CPU time in each round")
    print(f"  {'way':<26} {'rounds':>6} {'admitted':>8} {'mean ms':>9} {'p50 ms':>8} {'max ms':>8} {'total s':>8}")
    first = None
    for way in WAYS:
        cpu, admitted = burst_rounds(args.nodes, args.jobs, args.per_round, way, args.seed)
        print(_row(way, cpu, len(admitted)), flush=True)
        if first is None:
            first = admitted
        elif admitted != first:
            print(f"  !! {way} admitted other gangs or nodes than {WAYS[0]}")
            return 1
    print(f"  same admissions, same nodes in all three ways; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
