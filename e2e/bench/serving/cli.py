"""Serving placement bench (issue 13): multi-node InferenceService groups beside training gangs,
kubeforge against the same groups as plain pods with LeaderWorkerSet-style pod affinity left to
kube-scheduler, on a 64-node simulated fleet.

One run, one local cluster (``--cluster``, kwok nodes from ``--fleet``), phases in turn on a
clean fleet (``--phases``, default ``baseline,kubeforge``; drivers in
``e2e/bench/serving/phases.py``). Every phase replays the same steps ``--step-seconds`` apart:

- services: single-node ones (``--single``: GPUs per replica of each) and ``--large`` tensor 8
  x pipeline 2 ones (2 pods of 8 GPUs per replica, ``Required`` in one NVLink domain); each
  one's replica count per step follows the Azure trace's arrival rate
  (``e2e/bench/serving/workload.py``: ``ceil(demand x rate x S / C)``, time-compressed
  ``--window / --step-seconds`` times);
- training gangs of 2-4 x 8 GPUs (``Required`` nvlink) created and deleted at their steps.

Figures (README-serving-bench.md for their definitions): fraction of multi-pod groups inside
one NVLink domain; GPU-seconds held by bound pods of partial groups and the groups partial for
more than 5 s; scale-ups refused (kubeforge: ``ScalingLimited`` / ``InsufficientCapacity``
episodes; both: groups asked but not placed, groups left Pending); ask -> group Ready p50/p95;
issue 13's targets met or not with the reason; a PNG under ``e2e/results/``. Nothing here
asserts a time: it prints figures measured against the baseline of the same run.

Trace: Azure LLM inference trace 2023 (code), Azure ``AzurePublicDataset``, CC BY 4.0; Patel et
al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024 (the copy
shipped with kubeforge; ``--trace`` takes another).

Run: ``make bench-serving`` or ``.venv/bin/python -m e2e.bench.serving [--help]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from kubeforge.sim.fleet import load_fleet

from e2e.bench.lib.args import choice_list
from e2e.bench.lib.cluster import (
    CLIQUE, GPU, Cluster, apply_crds, apply_fleet, delete_namespace, down, fleet_capacity, open_api, stop_operator,
)
from e2e.bench.lib.source import ROOT, crds_dir, describe_source
from e2e.bench.lib.timing import say
from e2e.bench.lib.traces import AZURE_CODE, AZURE_CREDIT, add_trace_arg, check_trace
from e2e.bench.serving.phases import DRIVERS, Env, describe_baseline
from e2e.bench.serving.report import PhaseResult, plot, print_table, verdicts
from e2e.bench.serving.run import run_phase
from e2e.bench.serving.workload import Workload, make_gangs, make_services, replicas_per_step, service_time_and_slots

DEFAULT_CLUSTER = os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-serving-bench")


def _range(text: str) -> tuple[int, int]:
    """``LO-HI`` (or ``N``) as ``(LO, HI)`` for argparse."""
    a, _, b = text.partition("-")
    lo, hi = int(a), int(b or a)
    if lo < 1 or hi < lo:
        raise argparse.ArgumentTypeError(f"{text!r}: want LO-HI with 1 <= LO <= HI")
    return lo, hi


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); ``phase_list`` is added, checked."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.serving", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=DEFAULT_CLUSTER, help="local cluster name (default kubeforge-serving-bench "
                    "or $KUBEFORGE_BENCH_CLUSTER)")
    ap.add_argument("--fleet", default=str(ROOT / "e2e/fleets/bench-64.yaml"))
    add_trace_arg(ap, AZURE_CODE, "Azure LLM inference trace")
    ap.add_argument("--phases", default="baseline,kubeforge", help=f"comma-separated, in order, of {sorted(DRIVERS)}")
    ap.add_argument("--steps", type=int, default=15, help="trace windows replayed")
    ap.add_argument("--step-seconds", type=float, default=10.0, help="wall seconds between steps")
    ap.add_argument("--window", type=float, default=120.0, help="trace seconds per step")
    ap.add_argument("--trace-start", type=float, default=0.0, help="trace second of the first window")
    ap.add_argument("--single", default="1,2,4", help="GPUs per replica of each single-node service")
    ap.add_argument("--single-max", type=int, default=8, help="most replicas of a single-node service")
    ap.add_argument("--single-demand", type=float, default=8.0, help="x the trace's rate, single-node services")
    ap.add_argument("--large", type=int, default=4, help="tensor 8 x pipeline 2 services")
    ap.add_argument("--large-max", type=int, default=6, help="most replicas of a tensor 8 x pipeline 2 service")
    ap.add_argument("--large-demand", type=float, default=12.0, help="x the trace's rate, 2-node services")
    ap.add_argument("--gangs-initial", type=int, default=6, help="training gangs at the first step")
    ap.add_argument("--gang-arrival", type=float, default=0.8, help="chance of a new gang at each later step")
    ap.add_argument("--gang-nodes", type=_range, default=(2, 4), help="nodes (x 8 GPUs) per gang, LO-HI")
    ap.add_argument("--gang-lifetime", type=_range, default=(3, 6), help="steps a gang lives, LO-HI")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--baseline-exclusive", action="store_true",
                    help="baseline groups also get LWS exclusive-topology's podAntiAffinity (one group per domain)")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after the last step for asks to be served")
    ap.add_argument("--sample-interval", type=float, default=1.0)
    ap.add_argument("--api-workers", type=int, default=8, help="threads issuing one step's API calls")
    ap.add_argument("--png", default=str(ROOT / "e2e/results/bench-serving-placement.png"), help="'' for none")
    ap.add_argument("--operator-src", default=os.environ.get("KUBEFORGE_OPERATOR_SRC"),
                    help="drive the kubeforge code (operator, CRDs) of this source tree instead of the working tree "
                         "(the bench starts again with it on PYTHONPATH), e.g. an export with a fix applied")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    args = ap.parse_args(argv)
    args.phase_list = choice_list(ap, "--phases", args.phases, sorted(DRIVERS))
    if args.steps < 1 or args.step_seconds <= 0 or args.window <= 0:
        ap.error("--steps, --step-seconds and --window must be positive")
    check_trace(ap, args.trace)
    return args


def build_workload(args) -> Workload:
    """The services' replica counts and the gangs, from the trace and the flags."""
    from kubeforge.sim.modelserver import load_trace

    rows = load_trace(args.trace)
    times = [t for t, _, _ in rows]
    s, c = service_time_and_slots(rows)
    svcs = make_services([int(x) for x in args.single.split(",") if x.strip()], args.single_max, args.single_demand,
                         args.large, args.large_max, args.large_demand, times[-1])
    reps = {v.name: replicas_per_step(times, v, args.steps, args.window, args.trace_start, s, c) for v in svcs}
    gangs = make_gangs(args.seed, args.steps, args.gangs_initial, args.gang_arrival, args.gang_nodes, args.gang_lifetime)
    return Workload(svcs, reps, gangs, args.steps, s, c)


def header(args, wl: Workload, fleet, capacity: int) -> None:
    """What the run is: the trace, the fleet, every service's replicas per step, the gangs."""
    print("=" * 100)
    print("kubeforge serving placement bench (issue 13): replica groups + training gangs, kubeforge vs kube-scheduler "
          "with LWS-style pod affinity")
    print(AZURE_CREDIT)
    print(f"trace {args.trace}: windows of {args.window:.0f} trace-s from {args.trace_start:.0f} s, one every "
          f"{args.step_seconds:.0f} s ({args.window / args.step_seconds:.0f}x compressed), {args.steps} steps; "
          f"replicas = clamp(ceil(demand x rate x S / C), 1, max) with S = {wl.service_s:.2f} s per request, "
          f"C = {wl.slots:.1f} requests per replica")
    print(f"fleet {fleet.name}: {fleet.node_count} nodes, {capacity} GPUs, NVLink domains ({CLIQUE}) from the fleet file")
    for s in wl.services:
        shape = f"tensor 8 x pipeline {s.pods} ({s.pods} pods x 8 GPUs)" if s.multi else f"{s.gpus_per_pod} GPU(s), 1 pod"
        print(f"  service {s.name:<8} {shape:<38} demand x{s.demand:g}, offset {s.offset_s:5.0f} s: "
              + " ".join(str(x) for x in wl.replicas[s.name]))
    print(f"  training gangs (seed {args.seed}, {args.gangs_initial} at step 0, p={args.gang_arrival} per later step, "
          f"{args.gang_nodes[0]}-{args.gang_nodes[1]} nodes x 8 GPUs, {args.gang_lifetime[0]}-{args.gang_lifetime[1]} "
          f"steps): " + ", ".join(f"{g.name}@{g.arrive}-{'end' if g.leave is None else g.leave}" for g in wl.gangs))
    print("  GPUs asked per step: " + " ".join(f"{wl.asked_gpus(k)}" for k in range(wl.steps))
          + f" (of {capacity})")
    print(f"phases: {', '.join(args.phase_list)}; baseline: {describe_baseline(args.baseline_exclusive)}; cluster "
          f"{args.cluster}; machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"kubeforge code: {describe_source()}")
    print("=" * 100, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run every phase on one cluster; returns the exit code (1 when a phase stopped early)."""
    args = parse_args(argv)
    t_start = time.monotonic()
    fleet = load_fleet(args.fleet)
    capacity, _ = fleet_capacity(fleet)
    wl = build_workload(args)
    header(args, wl, fleet, capacity)
    c = Cluster(args.cluster)
    results: list[PhaseResult] = []
    error = None
    try:
        run_phases(c, args, wl, fleet, capacity, results)
    except Exception as e:  # noqa: BLE001 - print what was measured, then the error
        error = f"{type(e).__name__}: {e}"
        say(f"stopped: {error}")
    finally:
        try:
            stop_operator(c)
        finally:
            down(c, args.keep)
    report(results, args, error)
    print(f"\ntotal run {time.monotonic() - t_start:.0f}s, load average (1/5/15 min) at the end "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}; {AZURE_CREDIT}")
    return 1 if error else 0


def run_phases(c: Cluster, args, wl: Workload, fleet, capacity: int, results: list[PhaseResult]) -> None:
    """The cluster up with the fleet and the CRDs, then each phase in turn on a clean fleet
    (the last phase's namespace deleted, bounded); ``results`` gets each phase as it ends."""
    c.up(None, log=say)
    api = open_api(c, 32)
    nodes = apply_fleet(c, api, fleet)
    node_clique = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, "") for n in nodes}
    node_gpus = {n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU, 0)) for n in nodes}
    apply_crds(c, crds_dir())
    env = Env(c, api, fleet.name, capacity, say)
    for i, name in enumerate(args.phase_list):
        say(f"{name}: replaying {args.steps} steps")
        r = run_phase(env, name, wl, args, node_clique, node_gpus)
        results.append(r)
        say(f"{name}: {r.ended}; {r.summary['served']} of {r.summary['asks']} asks served")
        if i < len(args.phase_list) - 1:
            t = time.monotonic()
            ok = delete_namespace(c, f"bench-{name}", 180)
            say(f"bench-{name} deleted in {time.monotonic() - t:.0f}s" if ok else f"bench-{name} still terminating")


def report(results: list[PhaseResult], args, error: str | None) -> None:
    """The table, the operator's notes, issue 13's targets and the PNG."""
    print("\nRESULTS (times from this side of the API server: the bench's ask -> the pod watch event that shows "
          "every pod of the group bound and Ready)")
    if not results:
        print("  no phase completed" + (f" ({error})" if error else ""))
        return
    print_table(results)
    by = {r.name: r.summary for r in results}
    for r in results:
        n = r.notes
        if r.name == "kubeforge":
            print(f"  kubeforge: operator ready {n.get('operator_ready_s', float('nan')):.1f}s after start; CPU "
                  f"{n.get('operator_cpu_s', float('nan')):.1f}s during the phase; log: {n.get('log_lines')} lines, "
                  f"{n.get('log_errors')} error/traceback lines, {n.get('log_warnings')} warnings; still running at "
                  f"the end: {'yes' if n.get('operator_alive') else 'NO'}")
            for ln in n.get("log_samples") or []:
                print(f"    | {ln[:220]}")
    print("\nTARGETS (issue 13)")
    for target, met, why in verdicts(by.get("kubeforge"), by.get("baseline")):
        print(f"  {target:<48} {'met' if met else 'not measured' if met is None else 'NOT met'}: {why}")
    if args.png:
        p = plot(results, Path(args.png), f"serving placement bench: {args.steps} steps x {args.step_seconds:.0f} s, "
                 f"{', '.join(r.name for r in results)}")
        print(f"\nPNG: {p}" if p else "\nPNG: not drawn (matplotlib missing: pip install -e '.[bench]')")
    if error:
        print(f"\nstopped early: {error}")


if __name__ == "__main__":
    sys.exit(main())
