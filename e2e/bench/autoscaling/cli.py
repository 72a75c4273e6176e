"""Autoscaling benchmark: kubeforge's SLO autoscaler against KEDA + HPA, llm-d's and Dynamo's, on the same arrivals.

Runs (``--runs``, all by default), each replayed through every autoscaler in simulated time
(:mod:`~e2e.bench.autoscaling.replay`: the model-server simulator's replicas, a 30 s start, an emulated
Prometheus scraped every 5 s, drain or delete on scale-down):

* ``trace``: the Azure LLM inference trace (code, 57 min, 8,819 requests) at trace speed,
  plus 10 quiet minutes, replicas 1..16;
* ``ramp``: a cold ramp: 1 replica meets a steady Poisson stream (``--ramp-rate``, request
  sizes drawn from the trace) that needs 16+ replicas, replicas 1..32;
* ``day``: a day-long stream built from the trace (tiled, shifted, thinned by a diurnal
  curve, :func:`~e2e.bench.autoscaling.arrivals.day_arrivals`), replicas 1..16.

The autoscalers (:mod:`~e2e.bench.autoscaling.scalers`): kubeforge in SLO mode (``slo:
{timeToFirstTokenSeconds: --ttft, percentile: --percentile}``, every other field at its API
default, draining on scale-down); kubeforge in queue-depth mode (the API defaults before SLO
mode; draining); KEDA + HPA defaults; llm-d's workload-variant autoscaler, saturation
analyzer with its documented defaults, through an HPA with its chart's defaults and applied
directly; NVIDIA Dynamo's load-based planner with its documented defaults. The baselines
delete pods on scale-down, as a Deployment does. Each run prints, per autoscaler: SLO
attainment (requests whose TTFT is within ``--ttft``; aborted ones miss; and minutes whose p90
TTFT is within it), GPU replica-minutes (every replica that exists: starting, serving or
draining), reversals, queue wait p50/p95, requests aborted on scale-down; then issue 14's
targets for kubeforge SLO, met or not and why; then a PNG of replicas and p90 TTFT over time
(``--results``). A live part (``--no-live`` skips it) runs the real operator.

Trace: Azure LLM inference trace 2023 (code), Azure ``AzurePublicDataset``, CC BY 4.0;
Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024
(the copy shipped with kubeforge; ``--trace`` takes another).

Run: ``.venv/bin/python -m e2e.bench.autoscaling`` (``--help`` for the rest). It measures and
prints; it asserts no wall-clock time.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import fields
from pathlib import Path

from kubeforge.autoscaling import AutoscalingPolicy
from kubeforge.sim.modelserver import Request, load_trace

from e2e.bench.autoscaling.arrivals import DAY_S, MODEL, NIGHT_FRACTION, PEAK_HOUR, cold_ramp, day_arrivals, trace_requests
from e2e.bench.autoscaling.live import live
from e2e.bench.autoscaling.replay import DRAIN_S, SCRAPE_S, STARTUP_S, Result, replay
from e2e.bench.autoscaling.report import plot, static_reference, table, targets
from e2e.bench.autoscaling.scalers import (
    SLO, Bounds, DynamoLoad, KedaHpa, KubeforgeQueue, KubeforgeSLO, LlmdSaturation, kubeforge_policy,
)
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.traces import AZURE_CODE, default_trace

#: The Azure code trace, the copy shipped with kubeforge (``$KUBEFORGE_TRACES`` names another folder).
DEFAULT_TRACE = default_trace(AZURE_CODE)
DEFAULT_RESULTS = ROOT / "e2e" / "results"
RUNS = ("trace", "ramp", "day")

__all__ = ["DEFAULT_TRACE", "RUNS", "main", "run", "scalers"]


def scalers(b: Bounds, slo: SLO, overrides: dict | None = None) -> list:
    """Every autoscaler of a run, kubeforge SLO first (the one the targets are for)."""
    return [KubeforgeSLO(b, slo, overrides), KubeforgeQueue(b), KedaHpa(b), LlmdSaturation(b, hpa=True),
            LlmdSaturation(b, hpa=False), DynamoLoad(b)]


def run(name: str, title: str, arrivals: list[Request], end: float, b: Bounds, slo: SLO, overrides: dict | None,
        results_dir: Path | None, start_replicas: int = 1, reference: bool = True) -> list[Result]:
    """One run: every autoscaler on ``arrivals``, the table, the targets, the figure."""
    print(f"\n== {name.upper()}: {title} ==")
    t0 = time.process_time()
    results = []
    for sc in scalers(b, slo, overrides):
        results.append(replay(sc, arrivals, end, start_replicas, sc.drain, MODEL))
    table(results, slo.ttft)
    static = static_reference(arrivals, end, b, slo.ttft) if reference else None
    if static is not None:
        r = static[1]
        print(f"{r.name:44} {r.attainment(slo.ttft):>9.2%} {r.minutes_attained(slo.ttft):>8.1%} "
              f"{r.replica_seconds / 60:>11.0f}")
    print("targets for kubeforge SLO (issue 14), against the baselines of this run:")
    for what, ok, detail in targets(results, slo.ttft, static):
        mark = "met" if ok else ("n/a" if ok is None else "NOT MET")
        print(f"  [{mark:7}] {what}: {detail}")
    if results_dir is not None:
        png = plot(results_dir / f"bench-autoscaling-{name}.png", f"{name}: {title}", results, slo.ttft)
        print(f"figure: {png}" if png else "figure: skipped (matplotlib not installed: pip install -e '.[bench]')")
    print(f"(replay CPU {time.process_time() - t0:.0f}s)")
    return results


def describe(b: Bounds, slo: SLO, overrides: dict | None) -> str:
    """The replica model, the SLO and kubeforge's policy, as printed before the runs."""
    p, interval = kubeforge_policy(b, slo, overrides)
    m = MODEL
    return (f"replica (assumed): KV cache {m.kv_cache_tokens} tokens, max {m.slots} running, prefill "
            f"{m.base_seconds:g}s + prompt/{m.prefill_tokens_per_second:g} tok/s, ITL {m.seconds_per_output_token:g}s "
            f"x (1 + {m.itl_growth:g} (running - 1)); {STARTUP_S:.0f}s to Ready; Prometheus scrape {SCRAPE_S:.0f}s; "
            f"router holds requests while every replica is saturated (queue 5 / KV 0.8)\n"
            f"SLO: TTFT <= {slo.ttft:g}s for {slo.percentile}% of requests (kubeforge: slo.percentile "
            f"{slo.percentile}, window {slo.window}s, polling {interval:g}s, tolerance {p.tolerance:g}, "
            f"scale-down window {p.scale_down_stabilization_seconds:g}s -{p.scale_down_max_step}/"
            f"{p.scale_down_period_seconds:g}s, drain {DRAIN_S:.0f}s); queue-depth target {b.target:g} waiting/replica")


def parse_overrides(items: list[str]) -> dict:
    """``["tolerance=0.2", ...]`` -> ``{"tolerance": 0.2}``, checked against the policy fields."""
    names = {f.name: f.type for f in fields(AutoscalingPolicy) if f.name != "slo"}
    out: dict = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in names or not value:
            raise SystemExit(f"--policy {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(names)}")
        out[key] = int(value) if names[key] in ("int", int) else float(value)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); ``runs`` and ``overrides`` are added, checked."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.autoscaling", description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                    help="Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens); default: the "
                         f"copy shipped in kubeforge/data/traces/{AZURE_CODE}; a longer trace of the same columns works")
    ap.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated runs among {', '.join(RUNS)}")
    ap.add_argument("--ttft", type=float, default=SLO.ttft, help="TTFT target, s (the SLO and the attainment)")
    ap.add_argument("--percentile", type=int, default=SLO.percentile, help="kubeforge's slo.percentile")
    ap.add_argument("--max-replicas", type=int, default=Bounds.max_replicas, help="maxReplicas of the trace and day runs")
    ap.add_argument("--target", type=float, default=Bounds.target, help="queue-depth target (kubeforge queue, KEDA)")
    ap.add_argument("--ramp-rate", type=float, default=100.0, help="requests/s of the cold ramp's stream")
    ap.add_argument("--ramp-seconds", type=float, default=600.0, help="length of the cold ramp's stream, s")
    ap.add_argument("--ramp-max", type=int, default=32, help="maxReplicas of the cold ramp")
    ap.add_argument("--seed", type=int, default=1, help="seed of the day-long stream and the ramp")
    ap.add_argument("--night-fraction", type=float, default=NIGHT_FRACTION, help="night trough as a fraction of the peak")
    ap.add_argument("--peak-hour", type=float, default=PEAK_HOUR, help="hour of the peak rate (trough 12 h away)")
    ap.add_argument("--policy", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a kubeforge AutoscalingPolicy field after the API defaults (repeatable)")
    ap.add_argument("--no-reference", action="store_true", help="skip the static-replicas reference row")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="where the PNGs go")
    ap.add_argument("--no-live", action="store_true", help="skip the live run (no cluster, no Prometheus)")
    ap.add_argument("--cluster", default=os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-bench"))
    a = ap.parse_args(argv)
    a.run_list = [r.strip() for r in a.runs.split(",") if r.strip()]
    if any(r not in RUNS for r in a.run_list):
        ap.error(f"--runs: choose among {', '.join(RUNS)}")
    if not a.trace.is_file():
        ap.error(f"--trace {a.trace}: no such file")
    if not 50 <= a.percentile <= 99 or not a.ttft > 0:
        ap.error("need --ttft > 0 and 50 <= --percentile <= 99")
    a.overrides = parse_overrides(a.policy) or None
    return a


def main(argv: list[str] | None = None) -> int:
    """Every run asked for in simulated time, then the live part; returns the exit code."""
    a = parse_args(argv)
    runs, overrides = a.run_list, a.overrides
    slo = SLO(a.ttft, a.percentile)
    rows = load_trace(a.trace)
    print("Trace: Azure LLM inference trace 2023 (code), AzurePublicDataset, CC BY 4.0; "
          f"Patel et al., \"Splitwise\", ISCA 2024. File: {a.trace.name}")
    print(describe(Bounds(1, a.max_replicas, a.target), slo, overrides))
    print("Figures: simulated time, so the machine's load does not change them.")
    if "trace" in runs:
        b = Bounds(1, a.max_replicas, a.target)
        run("trace", f"the Azure code trace at trace speed ({len(rows)} requests, {rows[-1][0] / 60:.0f} min + 10 "
            f"quiet), replicas 1..{b.max_replicas}", trace_requests(rows), rows[-1][0] + 600, b, slo, overrides,
            a.results, reference=not a.no_reference)
    if "ramp" in runs:
        b = Bounds(1, a.ramp_max, a.target)
        arr = cold_ramp(rows, a.ramp_rate, a.ramp_seconds, seed=a.seed)
        run("ramp", f"cold ramp: 1 replica meets {a.ramp_rate:g} requests/s (Poisson, the trace's sizes) for "
            f"{a.ramp_seconds / 60:.0f} min + 10 quiet, replicas 1..{b.max_replicas}", arr, a.ramp_seconds + 600.0,
            b, slo, overrides, a.results, reference=False)
    if "day" in runs:
        b = Bounds(1, a.max_replicas, a.target)
        arr = day_arrivals(rows, MODEL, seed=a.seed, night_fraction=a.night_fraction, peak_hour=a.peak_hour)
        run("day", f"a day from the trace ({len(arr)} requests; {a.night_fraction:.0%} of the peak rate at "
            f"{(a.peak_hour + 12) % 24:02.0f}:00, 100% at {a.peak_hour:02.0f}:00, seed {a.seed}), replicas "
            f"1..{b.max_replicas}", arr, DAY_S, b, slo, overrides, a.results, reference=not a.no_reference)
    if a.no_live:
        return 0
    return live(a.cluster, a.trace)


if __name__ == "__main__":
    raise SystemExit(main())
