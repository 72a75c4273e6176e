"""``python -m e2e.bench.model_cache`` (``make bench-model-cache``): the flags, the run, the
figures."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from kubeforge.sim.weights import DEFAULT_TIMES, GB

from e2e.bench.lib.args import choice_list
from e2e.bench.lib.source import ROOT
from e2e.bench.model_cache import report
from e2e.bench.model_cache.policies import POLICIES
from e2e.bench.model_cache.replay import CAPACITY, KSERVE_GROUP, make_day, run_policy
from e2e.bench.model_cache.workload import SERVICES

__all__ = ["main", "parse_args"]

PNG = ROOT / "e2e" / "results" / "bench-model-cache.png"
JSON = ROOT / "e2e" / "results" / "bench-model-cache.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); the defaults are the figures' run."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.model_cache",
                                 description="Model-cache bench: a day of replica starts placed by kubeforge with "
                                             "and without cache preference, KServe's LocalModelCache and the "
                                             "all-cached bound, through kubeforge's pure placement core.")
    ap.add_argument("--seed", type=int, default=1, help="seed of the day's demand and training gangs (default 1)")
    ap.add_argument("--nodes", type=int, default=64, help="8-GPU nodes in the fleet (default 64)")
    ap.add_argument("--hours", type=float, default=24.0, help="length of the day replayed (default 24)")
    ap.add_argument("--capacity-tb", type=float, default=CAPACITY / 1e12,
                    help=f"each node cache's capacity in TB (default {CAPACITY / 1e12:g})")
    ap.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated, of {', '.join(POLICIES)}")
    ap.add_argument("--png", type=Path, default=PNG, help="where the plot goes")
    ap.add_argument("--json", type=Path, default=JSON, help="where every figure goes")
    args = ap.parse_args(argv)
    args.policy_list = choice_list(ap, "--policies", args.policies, POLICIES)
    if args.nodes < 2 or args.hours <= 0 or args.capacity_tb <= 0:
        ap.error("--nodes >= 2, --hours > 0 and --capacity-tb > 0")
    return args


def _intro(args: argparse.Namespace) -> str:
    t = DEFAULT_TIMES
    models = ", ".join(f"{s.name} {s.size / GB:.0f} GB x{s.pods * s.gpus} GPU" for s in SERVICES)
    return (f"model-cache bench: {args.nodes} nodes x 8 GPUs (NVLink domains of 8), seed {args.seed}, "
            f"{args.hours:g} h of 5-min ticks (seeded diurnal demand per service, training gangs offering ~45 % of "
            f"the GPUs), node caches {args.capacity_tb:g} TB with LRU; KServe's node group = the first "
            f"{min(KSERVE_GROUP, args.nodes)} nodes.\nstart = {t.imports_s:.0f} s imports + "
            f"[download at {t.download_bps / GB:g} GB/s] + local read at {t.local_read_bps / GB:g} GB/s + "
            f"{t.engine_init_s:.0f} s engine init (kubeforge.sim.weights: llm-d, issue 29, NetEase/Fluid).\n"
            f"services: {models}\n")


def main(argv: list[str] | None = None) -> int:
    """Replay the day under each policy, print the table and the targets, draw the plot; returns 0."""
    args = parse_args(argv)
    t0 = time.monotonic()
    print(_intro(args))
    day = make_day(args.nodes, args.hours, args.seed)
    runs, rows = [], []
    for policy in args.policy_list:
        runs.append(run_policy(policy, day, capacity=int(args.capacity_tb * 1e12)))
        rows.append(report.summarize(runs[-1], args.hours))
    report.print_table(rows)
    report.print_quality(rows)
    report.print_targets(rows)
    meta = {"seed": args.seed, "nodes": args.nodes, "hours": args.hours, "capacity_tb": args.capacity_tb}
    print(report.plot(rows, args.png, f"model-cache bench, {args.nodes} nodes, seed {args.seed}"))
    print(report.write_json(rows, meta, args.json))
    print(f"\ntotal {time.monotonic() - t0:.0f}s, load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0
