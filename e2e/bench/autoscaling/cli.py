"""Autoscaling benchmark: kubeforge against KEDA + HPA, llm-d and Dynamo, an oracle and the cheapest static count.

Runs (``--runs``; ``trace,day`` by default), each replayed through every autoscaler in
simulated time (:mod:`~e2e.bench.autoscaling.replay`: the model-server simulator's replicas,
a start time the user chooses, an emulated Prometheus scraped every 5 s, drain or delete on
scale-down), every row starting warm (the replicas the first start time's arrivals need):

* ``trace``: the trace (``--trace``; by default the Azure LLM inference trace, code, 57 min,
  8,819 requests) at trace speed, plus 10 quiet minutes;
* ``step``: a Poisson stream (the trace's request sizes) at ``--step-base`` requests/s that
  steps to ``--step-rate`` for ``--step-seconds``;
* ``day``: a day built from the trace (tiled, shifted, thinned by a diurnal curve,
  :func:`~e2e.bench.autoscaling.arrivals.day_arrivals`).

Per run: the oracle (:mod:`~e2e.bench.autoscaling.oracle`: the fewest GPU replica-minutes that
meet the SLO with perfect foresight and the same start), the cheapest static count, every
autoscaler at its default setting (:mod:`~e2e.bench.autoscaling.report`), then at equal
attainment (:mod:`~e2e.bench.autoscaling.sweep`, :mod:`~e2e.bench.autoscaling.compare`: the
cheapest setting of its main knob, or a ``minReplicas`` floor, that reaches ``--goal``), issue
28's targets, and a PNG of replicas against demand (:mod:`~e2e.bench.autoscaling.figure`).
A live part (``--no-live`` skips it) runs the real operator.

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
from kubeforge.sim.modelserver import load_trace

from e2e.bench.autoscaling.arrivals import (
    DAY_S, MODEL, NIGHT_FRACTION, PEAK_HOUR, day_arrivals, rate_series, step_stream, trace_requests,
)
from e2e.bench.autoscaling.compare import LiveFigures
from e2e.bench.autoscaling.live import live
from e2e.bench.autoscaling.replay import DRAIN_S, GATEWAY, SCRAPE_S
from e2e.bench.autoscaling.runs import RunOptions, run
from e2e.bench.autoscaling.scalers import (
    SLO, Bounds, DynamoLoad, KedaHpa, KubeforgeQueue, KubeforgeSLO, LlmdSaturation, kubeforge_policy,
)
from e2e.bench.autoscaling.starts import CACHE_MODES, CACHED_START_S, COLD_START_S, WAKE_S, StartTimes
from e2e.bench.autoscaling.sweep import KUBEFORGE_ROWS
from e2e.bench.keda_live.summary import load_figures as load_keda_figures
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.traces import AZURE_CODE, default_trace, trace_credit, trace_label
from e2e.bench.lws_live.summary import load_figures

#: The Azure code trace, the copy shipped with kubeforge (``$KUBEFORGE_TRACES`` names another folder).
DEFAULT_TRACE = default_trace(AZURE_CODE)
DEFAULT_RESULTS = ROOT / "e2e" / "results"
RUNS = ("trace", "step", "day")
DEFAULT_RUNS = ("trace", "day")

__all__ = ["DEFAULT_RUNS", "DEFAULT_TRACE", "RUNS", "main", "parse_args", "run", "scalers"]


def scalers(b: Bounds, slo: SLO, overrides: dict | None = None) -> list:
    """Every autoscaler of a run at its default setting, kubeforge SLO first."""
    return [KubeforgeSLO(b, slo, overrides), KubeforgeQueue(b), KedaHpa(b), LlmdSaturation(b, hpa=True),
            LlmdSaturation(b, hpa=False), DynamoLoad(b)]


def describe(b: Bounds, slo: SLO, overrides: dict | None, starts: StartTimes, goal: float) -> str:
    """The replica model, the start times, the SLO and kubeforge's policy, as printed before the runs."""
    p, interval = kubeforge_policy(b, slo, overrides)
    m = MODEL
    return (f"replica (assumed): KV cache {m.kv_cache_tokens} tokens, max {m.slots} running, prefill "
            f"{m.base_seconds:g}s + prompt/{m.prefill_tokens_per_second:g} tok/s, ITL {m.seconds_per_output_token:g}s "
            f"x (1 + {m.itl_growth:g} (running - 1)); Prometheus scrape {SCRAPE_S:.0f}s; gateway holds requests "
            f"while every replica is saturated (queue {GATEWAY[0]} / KV {GATEWAY[1]}; Dynamo's router does not)\n"
            f"{starts.describe()}\n"
            f"SLO: TTFT <= {slo.ttft:g}s for {goal:.0%} of requests (kubeforge: slo.percentile {slo.percentile}, "
            f"window {slo.window}s, polling {interval:g}s, tolerance {p.tolerance:g}, scale-down window "
            f"{p.scale_down_stabilization_seconds:g}s -{p.scale_down_max_step}/{p.scale_down_period_seconds:g}s, "
            f"drain {DRAIN_S:.0f}s); queue-depth target {b.target:g} waiting/replica")


def _value(kind, text: str):
    """``text`` as a policy field of annotated type ``kind`` (int, float, bool or str)."""
    kind = str(kind)
    if "bool" in kind:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if kind.startswith("int") or kind == str(int):
        return int(text)
    if "float" in kind or kind == str(float):
        return float(text)
    return text


def parse_overrides(items: list[str]) -> dict:
    """``["tolerance=0.2", ...]`` -> ``{"tolerance": 0.2}``, checked against the policy's fields
    (whatever ``AutoscalingPolicy`` has: a field added later works without a bench change)."""
    names = {f.name: f.type for f in fields(AutoscalingPolicy) if f.name != "slo"}
    out: dict = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in names or not value:
            raise SystemExit(f"--policy {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(names)}")
        try:
            out[key] = _value(names[key], value)
        except ValueError as e:
            raise SystemExit(f"--policy {item!r}: {e}") from None
    return out


def parse_rows(items: list[str]) -> list[tuple[str, dict]]:
    """``["NAME:FIELD=VALUE,FIELD=VALUE", ...]`` -> ``[(name, policy fields), ...]``."""
    out = []
    for item in items:
        name, _, spec = item.partition(":")
        if not name or not spec:
            raise SystemExit(f"--kubeforge-row {item!r}: expected NAME:FIELD=VALUE[,FIELD=VALUE...]")
        out.append((name, parse_overrides(spec.split(","))))
    return out


def _flags(ap: argparse.ArgumentParser) -> None:
    """The flags (``--help``)."""
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                    help="LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens); default: the Azure code "
                         f"trace shipped in kubeforge/data/traces/{AZURE_CODE}")
    ap.add_argument("--runs", default=",".join(DEFAULT_RUNS), help=f"comma-separated runs among {', '.join(RUNS)}")
    ap.add_argument("--ttft", type=float, default=SLO.ttft, help="TTFT target, s (the SLO and the attainment)")
    ap.add_argument("--percentile", type=int, default=SLO.percentile, help="kubeforge's slo.percentile")
    ap.add_argument("--goal", type=float, default=0.99, help="attainment every comparison is made at (0..1)")
    ap.add_argument("--cold-start", type=float, default=COLD_START_S, help="seconds from asked-for to Ready, cold")
    ap.add_argument("--cached-start", type=float, default=CACHED_START_S, help="the same on a node that ran the model")
    ap.add_argument("--wake", type=float, default=WAKE_S, help="seconds for a standby replica to wake")
    ap.add_argument("--start-cache", choices=CACHE_MODES, default="none", help="whether nodes keep the model cached")
    ap.add_argument("--start-jitter", type=float, default=0.0, help="each start drawn in s(1 +- jitter)")
    ap.add_argument("--max-replicas", type=int, default=Bounds.max_replicas, help="maxReplicas of every run")
    ap.add_argument("--target", type=float, default=Bounds.target, help="queue-depth target (kubeforge queue, KEDA)")
    ap.add_argument("--step-base", type=float, default=5.0, help="requests/s of the step run before and after the step")
    ap.add_argument("--step-rate", "--ramp-rate", type=float, default=40.0, help="requests/s during the step")
    ap.add_argument("--step-seconds", "--ramp-seconds", type=float, default=600.0, help="length of the step, s")
    ap.add_argument("--seed", type=int, default=1, help="seed of the day, the step and the start draws")
    ap.add_argument("--night-fraction", type=float, default=NIGHT_FRACTION, help="night trough as a fraction of the peak")
    ap.add_argument("--peak-hour", type=float, default=PEAK_HOUR, help="hour of the peak rate (trough 12 h away)")
    ap.add_argument("--policy", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a kubeforge AutoscalingPolicy field after the API defaults (repeatable)")
    ap.add_argument("--kubeforge-row", action="append", default=[], metavar="NAME:FIELD=VALUE,...",
                    help="add a kubeforge SLO row with these policy fields (repeatable; the seam for new policies)")
    ap.add_argument("--sweep", default="all",
                    help="families swept to equal attainment: all, none, or keys (kubeforge-slo, kubeforge-trend, "
                         "kubeforge-seasonal, kubeforge-standby, kubeforge-peak, kubeforge-queue, keda, llmd-hpa, "
                         "llmd, dynamo, kubeforge:NAME)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="processes the autoscalers are swept in (forked; default: 2 where there are 2 cores)")
    ap.add_argument("--no-kubeforge-rows", action="store_true",
                    help="leave out kubeforge's predictive, standby and peak-hold rows (only its plain SLO and "
                         "queue rows)")
    ap.add_argument("--no-floors", action="store_true", help="sweep the main knob only, never a minReplicas floor")
    ap.add_argument("--no-reference", action="store_true", help="skip the cheapest static count")
    ap.add_argument("--no-causal", action="store_true",
                    help="skip the causal reference (past need known exactly, nothing ahead; swept over memory "
                         "and headroom)")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="where the PNGs go")
    ap.add_argument("--no-live", action="store_true", help="skip the live run (no cluster, no Prometheus)")
    ap.add_argument("--lws-live", type=Path, default=None, metavar="JSON",
                    help="the figures of python -m e2e.bench.lws_live --json JSON, for the multi-node group target")
    ap.add_argument("--keda-live", type=Path, default=None, metavar="JSON",
                    help="the figures of python -m e2e.bench.keda_live --json JSON, for the live KEDA + HPA target")
    ap.add_argument("--cluster", default=os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-bench"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); ``run_list``, ``overrides``, ``rows``, ``starts`` are added, checked."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.autoscaling", description=__doc__.splitlines()[0])
    _flags(ap)
    a = ap.parse_args(argv)
    a.run_list = ["step" if r.strip() == "ramp" else r.strip() for r in a.runs.split(",") if r.strip()]
    if any(r not in RUNS for r in a.run_list):
        ap.error(f"--runs: choose among {', '.join(RUNS)}")
    if not a.trace.is_file():
        ap.error(f"--trace {a.trace}: no such file")
    if not 50 <= a.percentile <= 99 or not a.ttft > 0 or not 0 < a.goal < 1:
        ap.error("need --ttft > 0, 50 <= --percentile <= 99 and 0 < --goal < 1")
    try:
        a.starts = StartTimes(a.cold_start, a.cached_start, a.wake, a.start_cache, a.start_jitter, a.seed)
    except ValueError as e:
        ap.error(str(e))
    a.overrides = parse_overrides(a.policy) or None
    a.rows = parse_rows(a.kubeforge_row)
    a.sweep_keys = None if a.sweep == "all" else [k for k in a.sweep.split(",") if k and k != "none"]
    a.live = None
    kf = lws = kf_live = keda_live = None
    if a.lws_live is not None:
        try:
            kf, lws = load_figures(a.lws_live)
        except (OSError, ValueError) as e:
            ap.error(f"--lws-live: {e}")
    if a.keda_live is not None:
        try:
            kf_live, keda_live = load_keda_figures(a.keda_live)
        except (OSError, ValueError) as e:
            ap.error(f"--keda-live: {e}")
    if a.lws_live is not None or a.keda_live is not None:
        a.live = LiveFigures(kubeforge=kf_live, keda=keda_live, group_ready_p50=kf, lws_ready_p50=lws)
    return a


def main(argv: list[str] | None = None) -> int:
    """Every run asked for in simulated time, then the live part; returns the exit code."""
    a = parse_args(argv)
    t0 = time.perf_counter()
    slo, label = SLO(a.ttft, a.percentile), trace_label(a.trace)
    rows = load_trace(a.trace)
    print(f"{trace_credit(a.trace)} File: {a.trace.name}")
    b = Bounds(1, a.max_replicas, a.target)
    print(describe(b, slo, a.overrides, a.starts, a.goal))
    print("Figures: simulated time, so the machine's load does not change them.")
    opts = RunOptions(slo, a.starts, a.goal, a.overrides, a.rows, a.sweep_keys, not a.no_floors, not a.no_reference,
                      a.results, max(1, a.jobs), () if a.no_kubeforge_rows else KUBEFORGE_ROWS, a.live,
                      not a.no_causal)
    if "trace" in a.run_list:
        run("trace", f"{label} at trace speed ({len(rows)} requests, {rows[-1][0] / 60:.0f} min + 10 quiet), "
            f"replicas 1..{b.max_replicas}", trace_requests(rows), rows[-1][0] + 600, b, opts)
    if "step" in a.run_list:
        step_at, tail = 900.0, 900.0
        arr = step_stream(rows, a.step_base, a.step_rate, step_at, a.step_seconds, tail, seed=a.seed)
        run("step", f"Poisson {a.step_base:g} -> {a.step_rate:g} requests/s for {a.step_seconds / 60:.0f} min at "
            f"minute {step_at / 60:.0f} (sizes from {label}), replicas 1..{b.max_replicas}", arr,
            step_at + a.step_seconds + tail, b, opts)
    if "day" in a.run_list:
        arr = day_arrivals(rows, MODEL, seed=a.seed, night_fraction=a.night_fraction, peak_hour=a.peak_hour)
        yesterday = day_arrivals(rows, MODEL, seed=a.seed + 1, night_fraction=a.night_fraction, peak_hour=a.peak_hour)
        run("day", f"a day from {label} ({len(arr)} requests; {a.night_fraction:.0%} of the peak rate at "
            f"{(a.peak_hour + 12) % 24:02.0f}:00, 100% at {a.peak_hour:02.0f}:00, seed {a.seed}; yesterday: seed "
            f"{a.seed + 1}), replicas 1..{b.max_replicas}", arr, DAY_S, b, opts, past=rate_series(yesterday, DAY_S, -DAY_S))
    print(f"\n(simulated runs: {time.perf_counter() - t0:.0f}s of wall time on this machine)")
    if a.no_live:
        return 0
    return live(a.cluster, a.trace)


if __name__ == "__main__":
    raise SystemExit(main())
