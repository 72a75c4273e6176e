"""The scale bench's memory figure, in a process of its own so that nothing else it did counts:
``python -m e2e.bench.scale.memory --nodes N --jobs J [--tracemalloc]`` builds what the
operator holds for ``J`` TrainingJobs (their parsed records and admission views, the fleet,
the pool), runs a cold admission round (every gang tried once, its memo kept), writes its
admissions into the jobs' views, and prints one JSON line.

Two runs make the figure: one without tracemalloc for the process's RSS (``VmRSS`` and its
peak ``VmHWM`` from ``/proc/self/status``; tracemalloc's own tables would inflate them), one
with it for the Python heap (held after the round, and the peak during it). The raw
TrainingJob dicts an informer would also keep are not held here; the RSS of the live operator
is the memory bench's (``make bench-memory``).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc

from kubeforge.admission import AdmissionMemo

from e2e.bench.lib.replay import T0
from e2e.bench.lib.traces import ALIBABA_PODS, default_trace
from e2e.bench.scale.rounds import timed_round
from e2e.bench.scale.workload import fleet, gangs, job_views, pool, snapshot

__all__ = ["main", "proc_status_kib"]


def proc_status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in KiB; 0 where there is
    no such file (not Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """Measure and print one JSON line: ``nodes``, ``jobs``, ``tracemalloc``, ``rss_start_mib``,
    ``rss_mib`` (after the round), ``rss_peak_mib``, and with ``--tracemalloc``
    ``heap_held_mib`` / ``heap_peak_mib``, plus the round's CPU seconds (under tracemalloc: slower)."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.scale.memory", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tracemalloc", action="store_true")
    args = ap.parse_args(argv)
    trace = default_trace(ALIBABA_PODS)
    batch = gangs(trace, args.jobs, args.seed)
    gc.collect()
    out: dict = {"nodes": args.nodes, "jobs": args.jobs, "tracemalloc": args.tracemalloc,
                 "rss_start_mib": proc_status_kib("VmRSS") / 1024}
    if args.tracemalloc:
        tracemalloc.start()
    views = job_views(batch)
    fleet_nodes, pool_rec = fleet(args.nodes), pool()
    memo = AdmissionMemo()
    plan, cold = timed_round(snapshot(fleet_nodes, pool_rec, views), T0, memo)
    placed = {a.key: a.placement.nodes for a in plan.admit}
    by_key = {(g.namespace, g.name): g for g in batch}
    views.update(job_views([by_key[k] for k in placed], placed))  # the admissions written
    out["cold_cpu_s"], out["admitted"] = cold.cpu_s, cold.admitted
    gc.collect()
    if args.tracemalloc:
        held, peak = tracemalloc.get_traced_memory()
        out["heap_held_mib"], out["heap_peak_mib"] = held / 2**20, peak / 2**20
    out["rss_mib"] = proc_status_kib("VmRSS") / 1024
    out["rss_peak_mib"] = proc_status_kib("VmHWM") / 1024
    print(json.dumps(out))
    # Keep what was measured alive until the figures are taken.
    del views, memo, plan
    return 0


if __name__ == "__main__":
    sys.exit(main())
