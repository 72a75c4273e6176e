"""Memory bench: the operator's RSS as TrainingJobs and their pods grow to 5,000 / 20,000.

One local cluster (``--cluster``, kwok nodes from ``--fleet``, by default 320 nodes x 64 GPUs
= 20,480 GPUs), one GPUPool, one namespace with one checkpoint PVC that every job names in
``checkpoint.existingClaimName`` (so no job gets a PVC and PV of its own). Then:

1. the API server's RSS before the operator starts (for scale);
2. the operator starts; once its GPUPool status shows every GPU, its RSS is sampled for
   ``--idle-seconds`` with no TrainingJob at all: the baseline of an idle operator;
3. ``--jobs`` TrainingJobs of ``--replicas`` x ``--gpus-per-replica`` GPUs (topology
   ``{mode: None}``) are created in steps of ``--step`` jobs, each step as a burst from
   ``--submit-workers`` threads. After each step the bench waits until every pod so far is
   bound, or nothing progressed for ``--settle`` s, or ``--step-timeout`` s passed, and then
   prints the operator's RSS (now and the peak during the step), its CPU seconds, and the RSS
   of kube-apiserver and etcd.

Every wait is bounded; a step that times out still prints its row (with how many pods were
created and bound, so the row says what it measured). Nothing is asserted: it prints figures.

Run: ``.venv/bin/python -m e2e.bench.memory`` (``make bench-memory``);
a smoke run: ``--jobs 200 --step 100 --fleet e2e/fleets/bench-64.yaml``.
"""

from __future__ import annotations

import argparse
import os
import time

from kubeforge.sim.fleet import load_fleet

from e2e.bench.lib.cluster import Cluster, down, fleet_capacity
from e2e.bench.lib.source import ROOT, describe_source
from e2e.bench.memory.steps import CLAIM, MemoryRun, say

__all__ = ["DEFAULT_CLUSTER", "main", "parse_args"]

DEFAULT_CLUSTER = os.environ.get("KUBEFORGE_BENCH_MEMORY_CLUSTER", "kubeforge-bench-mem")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``), checked."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.memory", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=DEFAULT_CLUSTER,
                    help="local cluster name (default kubeforge-bench-mem or $KUBEFORGE_BENCH_MEMORY_CLUSTER)")
    ap.add_argument("--fleet", default=str(ROOT / "e2e/fleets/bench-mem-320.yaml"), help="fleet file")
    ap.add_argument("--jobs", type=int, default=5000, help="TrainingJobs in all (default 5000)")
    ap.add_argument("--step", type=int, default=1000, help="jobs per step; a row is printed after each")
    ap.add_argument("--replicas", type=int, default=4, help="pods per job (default 4)")
    ap.add_argument("--gpus-per-replica", type=int, default=1)
    ap.add_argument("--submit-workers", type=int, default=16, help="threads issuing the create calls")
    ap.add_argument("--step-timeout", type=float, default=600, help="seconds a step may wait, at most")
    ap.add_argument("--final-wait", type=float, default=600,
                    help="after the last step, wait at most this long more for every pod to bind (one more row)")
    ap.add_argument("--settle", type=float, default=120,
                    help="end a step when no pod was created or bound and no job admitted for this long")
    ap.add_argument("--idle-seconds", type=float, default=20, help="sampling of the idle operator")
    ap.add_argument("--operator-src", default=os.environ.get("KUBEFORGE_OPERATOR_SRC"),
                    help="drive the kubeforge code (operator, CRDs, sim) of this source tree instead of the working "
                         "tree, e.g. an export of a commit: git archive HEAD operator crds hack | tar -x -C DIR")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    args = ap.parse_args(argv)
    if min(args.jobs, args.step, args.replicas, args.gpus_per_replica, args.submit_workers) < 1:
        ap.error("--jobs, --step, --replicas, --gpus-per-replica and --submit-workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the memory bench; returns the process exit code (0 unless setup failed)."""
    args = parse_args(argv)
    t_start = time.monotonic()
    fleet = load_fleet(args.fleet)
    capacity, per_node = fleet_capacity(fleet)
    want_gpus = args.jobs * args.replicas * args.gpus_per_replica
    print("=" * 100)
    print("kubeforge memory bench: operator RSS as TrainingJobs and pods grow")
    print(f"fleet {fleet.name} ({args.fleet}): {fleet.node_count} nodes x {per_node} GPUs = {capacity} GPUs")
    print(f"jobs: {args.jobs} TrainingJobs of {args.replicas} x {args.gpus_per_replica} GPU "
          f"({args.jobs * args.replicas} pods, {want_gpus} GPUs, {100 * want_gpus / max(1, capacity):.0f}% of the fleet), "
          f"topology None, checkpoint.existingClaimName {CLAIM} (one PVC shared by every job: no per-job PVC/PV)")
    print(f"steps of {args.step} jobs, each a burst from {args.submit_workers} threads; a step ends when every pod so far "
          f"is bound, after {args.settle:.0f}s without progress, or at {args.step_timeout:.0f}s; then at most "
          f"{args.final_wait:.0f}s more for the last pods; "
          f"cluster {args.cluster}; machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"kubeforge code: {describe_source()}")
    print("=" * 100, flush=True)

    c = Cluster(args.cluster)
    run = MemoryRun(args, c)
    error = None
    try:
        run.setup(fleet, capacity)
        run.idle()
        run.steps()
    except Exception as e:  # noqa: BLE001 - print what was measured, then the error
        error = f"{type(e).__name__}: {str(e)[:400]}"
        say(f"stopped early: {error}")
    finally:
        run.finish()
        down(c, args.keep, say)
    report(run, fleet, error)
    print(f"\ntotal run {time.monotonic() - t_start:.0f}s, load average (1/5/15 min) at the end "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 1 if error else 0


def report(run: MemoryRun, fleet, error: str | None) -> None:
    """The rows, the operator's growth per job and per pod, restarts, the log, notes."""
    rows, notes, digest = run.rows, run.notes, run.digest
    print("\nRESULTS (RSS in MiB from /proc/<pid>/status VmRSS; 'peak' sampled every 0.5 s during the step; "
          "CPU = operator utime+stime since it started)")
    print(f"  kube-apiserver before the operator started: {run.api_before:.0f} MiB, etcd {run.etcd_before:.0f} MiB "
          f"({fleet.node_count} nodes, no job)")
    print(f"  {'after':<14} {'pods':>7} {'bound':>7} {'admitted':>9} {'step s':>7} {'operator':>9} {'op peak':>8} "
          f"{'op CPU s':>9} {'apiserver':>10} {'etcd':>7}  step ended")
    for r in rows:
        print(f"  {r.label:<14} {r.pods:>7} {r.bound:>7} {r.admitted:>9} {r.step_s:>7.0f} {r.op_rss:>9.0f} "
              f"{r.op_peak:>8.0f} {r.op_cpu:>9.1f} {r.api_rss:>10.0f} {r.etcd_rss:>7.0f}  {r.why}")
    if len(rows) >= 2:
        base, last = rows[0], rows[-1]
        grow = last.op_rss - base.op_rss
        per_job = 1024 * grow / last.jobs if last.jobs else float("nan")
        per_pod = 1024 * grow / last.pods if last.pods else float("nan")
        print(f"  operator: idle baseline {base.op_rss:.0f} MiB -> {last.op_rss:.0f} MiB with {last.jobs} jobs / "
              f"{last.pods} pods (+{grow:.0f} MiB: {per_job:.0f} KiB per job, {per_pod:.0f} KiB per pod created); "
              f"peak of any step {max(r.op_peak for r in rows):.0f} MiB, VmHWM {run.hwm:.0f} MiB")
    print(f"  watch restarts: {run.seen.restarts or 0}")
    if digest:
        print(f"  operator log (this run): {digest['log_lines']} lines, {digest['log_errors']} error/traceback lines, "
              f"{digest['log_warnings']} warnings")
        for ln in digest["log_samples"]:
            print(f"    | {ln[:220]}")
    for n in notes:
        print(f"  note: {n}")
    if error:
        print(f"  stopped early: {error}")
