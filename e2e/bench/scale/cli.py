"""``python -m e2e.bench.scale`` (``make bench-scale``): the flags, the sizes, the run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from e2e.bench.lib.source import ROOT
from e2e.bench.lib.timing import say
from e2e.bench.lib.traces import ALIBABA_CREDIT, ALIBABA_PODS, add_trace_arg, check_trace
from e2e.bench.scale import report
from e2e.bench.scale.rounds import LATE_AGE_S, LATE_PRIORITY, ROUNDS, measure

__all__ = ["DEFAULT_SIZES", "main", "parse_args", "parse_sizes"]

DEFAULT_SIZES = "1024x1000,256x1000,2048x1000,5000x1000,256x5000,256x10000,256x50000"
"""``NODESxJOBS``: the baseline first (1,024 nodes, the training burst's fleet, 1,000 gangs), then
nodes at 1,000 gangs and queued gangs at 256 nodes (at least 4 sizes each way)."""
PNG = ROOT / "e2e" / "results" / "bench-scale-rounds.png"


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``"1024x1000,5000x50000"`` -> ``[(1024, 1000), (5000, 50000)]``.

    Raises:
        ValueError: a size is not ``NODESxJOBS`` of positive integers.
    """
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        n, sep, j = part.lower().partition("x")
        if not sep or not n.isdigit() or not j.isdigit() or int(n) < 1 or int(j) < 1:
            raise ValueError(f"size {part!r} is not NODESxJOBS, e.g. 1024x1000")
        out.append((int(n), int(j)))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); the defaults are the figures' run."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.scale",
                                 description="Scale bench: one admission round's CPU against nodes and queued gangs, "
                                             "and memory at 50,000 jobs, through kubeforge's pure admission core.")
    add_trace_arg(ap, ALIBABA_PODS, "Alibaba openb pod trace")
    ap.add_argument("--sizes", default=DEFAULT_SIZES,
                    help="comma-separated NODESxJOBS (8-GPU nodes x queued gangs); the first is the baseline the "
                         f"others are compared with (default {DEFAULT_SIZES})")
    ap.add_argument("--seed", type=int, default=7, help="seed of the gang sizes")
    ap.add_argument("--preemptible", type=float, default=0.0, metavar="SHARE",
                    help="this share (0-1) of the gangs arrives after the cold round with a priority above every "
                         "running gang's, so the written and release rounds' tries reach victims (default 0: none)")
    ap.add_argument("--memory-jobs", type=int, default=50_000, help="jobs of the memory runs (0: skip them)")
    ap.add_argument("--memory-nodes", type=int, default=256, help="nodes of the memory runs")
    ap.add_argument("--png", type=Path, default=PNG, help="where the plot goes")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = ap.parse_args(argv)
    check_trace(ap, args.trace)
    try:
        args.size_list = parse_sizes(args.sizes)
    except ValueError as e:
        ap.error(str(e))
    if not args.size_list:
        ap.error("--sizes names no size")
    if not 0.0 <= args.preemptible < 1.0:
        ap.error("--preemptible is a share in [0, 1)")
    return args


def _memory(args: argparse.Namespace, tracemalloc: bool) -> dict | None:
    """One run of :mod:`e2e.bench.scale.memory` in a process of its own; None when skipped."""
    if args.memory_jobs <= 0:
        return None
    cmd = [sys.executable, "-m", "e2e.bench.scale.memory", "--nodes", str(args.memory_nodes),
           "--jobs", str(args.memory_jobs), "--seed", str(args.seed)] + (["--tracemalloc"] if tracemalloc else [])
    env = dict(os.environ, KUBEFORGE_TRACES=str(Path(args.trace).parent))
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        say(f"memory run failed ({done.returncode}): {done.stderr.strip()[-400:]}")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run every size and the memory runs, print the tables, draw the plot; returns 0."""
    args = parse_args(argv)
    t0 = time.monotonic()
    print(f"scale bench: kubeforge's pure admission core (plan_admission with the runtime's memo), no cluster; "
          f"8-GPU nodes, NVLink domains of 8 nodes, IB blocks of 16 domains; gangs of 1-4 pods from the Alibaba "
          f"trace (read again with the next seed when it runs out), Preferred nvlink, priority from QoS; "
          f"CPU = this process's CPU time in the round; sizes {args.sizes}")
    if args.preemptible:
        print(f"--preemptible {args.preemptible:g}: that share of the gangs arrives after the cold round with "
              f"priority {LATE_PRIORITY} (above every running gang's); the cold round's placements written as made "
              f"{LATE_AGE_S:.0f} s before (past minRuntimeSeconds); the pool's default preemption (no quotas, "
              "withinQuota LowerPriority)")
    rows = []
    for nodes, jobs in args.size_list:
        say(f"{nodes} nodes x {jobs} gangs ...")
        rows.append(measure(nodes, jobs, args.trace, args.seed, args.preemptible))
        r = rows[-1]
        say("  " + ", ".join(f"{k} {r[k]['cpu_s']:.2f}s CPU ({r[k]['admitted']} admitted)"
                             for k in ROUNDS))
    say("memory runs ...")
    mem, heap = _memory(args, False), _memory(args, True)
    base = rows[0]
    print(f"\nbaseline: {base['nodes']} nodes x {base['jobs']} gangs (the training burst's fleet size); for the "
          f"whole operator, issue 16 measured {report.ISSUE16_MS} ms CPU per placed job live at 1,024 nodes "
          "(HTTP, TLS, JSON, writes: not in this bench)\n")
    report.print_rows(rows, base)
    print()
    report.print_growth([r for r in rows if r["jobs"] == base["jobs"]], "nodes", "jobs")
    common_nodes = max({r["nodes"] for r in rows}, key=lambda v: sum(1 for r in rows if r["nodes"] == v))
    report.print_growth([r for r in rows if r["nodes"] == common_nodes], "jobs", "nodes")
    report.print_memory(mem, heap)
    print(report.plot(rows, args.png))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "memory": mem, "heap": heap}, indent=1))
    print(f"\ntotal {time.monotonic() - t0:.0f}s, load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"{ALIBABA_CREDIT}")
    return 0
