"""Autoscaling benchmark: kubeforge's SLO autoscaler against KEDA + HPA, llm-d's and Dynamo's, on the same arrivals.

Runs (``--runs``, all by default), each replayed through every autoscaler in simulated time
(``_bench_replay``: the model-server simulator's replicas, a 30 s start, an emulated
Prometheus scraped every 5 s, drain or delete on scale-down):

* ``trace``: the Azure LLM inference trace (code, 57 min, 8,819 requests) at trace speed,
  plus 10 quiet minutes, replicas 1..16;
* ``ramp``: a cold ramp: 1 replica meets a steady Poisson stream (``--ramp-rate``, request
  sizes drawn from the trace) that needs 16+ replicas, replicas 1..32;
* ``day``: a day-long stream built from the trace (tiled, shifted, thinned by a diurnal
  curve, ``_bench_arrivals.day_arrivals``), replicas 1..16.

The autoscalers (``_bench_scalers``): kubeforge in SLO mode (``slo:
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
Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024.

Run: ``.venv/bin/python e2e/bench_autoscaling.py`` (``--help`` for the rest). It measures and
prints; it asserts no wall-clock time.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubeforge.autoscaling import AutoscalingPolicy  # noqa: E402
from kubeforge.sim.modelserver import Request, load_trace, percentile  # noqa: E402

from _bench_arrivals import (  # noqa: E402,F401
    DAY_S, MODEL, NIGHT_FRACTION, PEAK_HOUR, cold_ramp, day_arrivals, diurnal_fraction, superpose, trace_requests,
)
from _bench_live import live  # noqa: E402
from _bench_replay import DRAIN_S, SCRAPE_S, STARTUP_S, Result, replay  # noqa: E402
from _bench_scalers import (  # noqa: E402
    SLO, Bounds, DynamoLoad, KedaHpa, KubeforgeQueue, KubeforgeSLO, LlmdSaturation, kubeforge_policy,
)

#: The Azure code trace, found relative to the repository (``../shared`` from its root).
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "azure-llm-inference-code-2023.csv"
DEFAULT_RESULTS = ROOT / "e2e" / "results"
RUNS = ("trace", "ramp", "day")

__all__ = ["DEFAULT_TRACE", "RUNS", "Bounds", "SLO", "kubeforge_policy", "main", "run", "scalers", "targets"]


def scalers(b: Bounds, slo: SLO, overrides: dict | None = None) -> list:
    """Every autoscaler of a run, kubeforge SLO first (the one the targets are for)."""
    return [KubeforgeSLO(b, slo, overrides), KubeforgeQueue(b), KedaHpa(b), LlmdSaturation(b, hpa=True),
            LlmdSaturation(b, hpa=False), DynamoLoad(b)]


def fmt(x: float, unit: str = "s") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}{unit}"


def table(results: list[Result], ttft: float) -> None:
    """One row per autoscaler."""
    head = (f"{'autoscaler':44} {'TTFT<=' + format(ttft, 'g') + 's':>9} {'minutes':>8} {'GPU rep-min':>11} "
            f"{'reversals':>9} {'wait p50':>8} {'wait p95':>8} {'aborted':>7} {'max':>4}")
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{r.name:44} {r.attainment(ttft):>9.2%} {r.minutes_attained(ttft):>8.1%} "
              f"{r.replica_seconds / 60:>11.0f} {r.reversals:>9} {fmt(percentile(r.waits, 50)):>8} "
              f"{fmt(percentile(r.waits, 95)):>8} {r.aborted:>7} {r.max_replicas:>4}")


def static_reference(arrivals: list[Request], end: float, b: Bounds, ttft: float, goal: float = 0.99) -> tuple[int, Result] | None:
    """The fewest replicas that, held from the start with no autoscaler, reach ``goal``
    attainment (bisection over 1..max_replicas); ``None`` when even the maximum does not."""

    class Static:
        drain, name = True, "static"

        def tick(self, now, current, view):
            return None

    def attain(n: int) -> Result:
        r = replay(Static(), arrivals, end, n, True, MODEL)
        r.name = f"static {n} replicas (reference, no autoscaler)"
        return r

    hi = attain(b.max_replicas)
    if hi.attainment(ttft) < goal:
        return None
    lo_n, hi_n, best = 0, b.max_replicas, hi
    while hi_n - lo_n > 1:
        mid = (lo_n + hi_n) // 2
        r = attain(mid)
        if r.attainment(ttft) >= goal:
            hi_n, best = mid, r
        else:
            lo_n = mid
    return hi_n, best


def targets(results: list[Result], ttft: float, static: tuple[int, Result] | None = None) -> list[tuple[str, bool | None, str]]:
    """Issue 14's targets for kubeforge SLO (``results[0]``) against the baselines of the same run.

    Returns:
        ``(target, met (None: not applicable), the figures and why)`` per target.
    """
    kf, base = results[0], [r for r in results[1:] if not r.name.startswith("kubeforge")]
    keda = next(r for r in results if r.name.startswith("KEDA"))
    att = kf.attainment(ttft)
    out: list[tuple[str, bool | None, str]] = []
    why = ""
    if att < 0.99:
        share = kf.starting_share(ttft)
        why = (f"; {share:.0%} of the misses arrived while replicas it had asked for were still starting "
               f"({STARTUP_S:.0f}s to Ready): load above anything of the last minutes (a burst, a cold start) "
               f"meets the replicas that are there")
        if static is not None:
            n, r = static
            why += (f"; holding {n} replicas from the start (no autoscaler) reaches "
                    f"{r.attainment(ttft):.2%} at {r.replica_seconds / 60:.0f} GPU replica-minutes "
                    f"({r.replica_seconds / max(kf.replica_seconds, 1e-9):.2f}x kubeforge's)")
    out.append(("SLO attainment >= 99% of requests", att >= 0.99, f"{att:.2%}{why}"))
    reaching = [r for r in base if r.attainment(ttft) >= att]
    if reaching:
        cheap = min(reaching, key=lambda r: r.replica_seconds)
        ratio = kf.replica_seconds / cheap.replica_seconds
        out.append(("GPU replica-minutes <= 0.8x the cheapest baseline at the same attainment", ratio <= 0.8,
                    f"{kf.replica_seconds / 60:.0f} vs {cheap.name} {cheap.replica_seconds / 60:.0f} ({ratio:.2f}x)"))
    else:
        best = max(base, key=lambda r: r.attainment(ttft))
        out.append(("GPU replica-minutes <= 0.8x the cheapest baseline at the same attainment", None,
                    f"no baseline reaches {att:.2%} (the best, {best.name}, {best.attainment(ttft):.2%} at "
                    f"{best.replica_seconds / 60:.0f} GPU replica-minutes against kubeforge's "
                    f"{kf.replica_seconds / 60:.0f}): nothing to compare at equal attainment"))
    w_kf, w_k = percentile(kf.waits, 95), percentile(keda.waits, 95)
    out.append(("queue wait p95 <= 0.5x KEDA+HPA's", w_kf <= 0.5 * w_k,
                f"{fmt(w_kf)} vs {fmt(w_k)} ({w_kf / w_k if w_k else math.nan:.2f}x)"))
    out.append(("reversals <= 0.8x KEDA+HPA's", kf.reversals <= 0.8 * keda.reversals,
                f"{kf.reversals} vs {keda.reversals} ({kf.reversals / keda.reversals if keda.reversals else math.nan:.2f}x)"
                + ("" if kf.reversals <= 0.8 * keda.reversals else
                   ": the scale-down window (300 s) cannot hold through every lull of this run")))
    out.append(("0 requests aborted on scale-down", kf.aborted == 0,
                f"{kf.aborted} (drained: the least-loaded replica leaves routing, finishes, or is cut after "
                f"{DRAIN_S:.0f}s)"))
    return out


def _buckets(r: Result, width: float) -> tuple[list[float], list[float], list[float]]:
    """Per ``width`` seconds: the mean replicas existing and the p90 TTFT of the requests that
    arrived in it (aborted ones count as infinite): ``(starts, replicas, p90)``."""
    reps: dict[int, list[int]] = {}
    for t, n, *_ in r.timeline:
        reps.setdefault(int(t // width), []).append(n)
    lat: dict[int, list[float]] = {}
    for a, x in zip(r.arrivals, r.ttfts):
        lat.setdefault(int(a // width), []).append(x)
    for m in r._aborted_minutes:
        lat.setdefault(int(m * 60 // width), []).append(math.inf)
    keys = sorted(reps)
    p90 = []
    for k in keys:
        xs = sorted(lat.get(k, []))
        p90.append(min(xs[max(0, math.ceil(0.9 * len(xs)) - 1)], 1e4) if xs else math.nan)
    return [k * width for k in keys], [sum(reps[k]) / len(reps[k]) for k in keys], p90


def plot(path: Path, title: str, results: list[Result], ttft: float) -> str | None:
    """Replicas and p90 TTFT over time, one line per autoscaler (kubeforge SLO on top); per
    minute, or per 10 minutes for runs longer than 4 h. Returns the path, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    long_run = bool(results[0].timeline) and results[0].timeline[-1][0] > 4 * 3600
    width, scale, unit = (600.0, 3600.0, "h") if long_run else (60.0, 60.0, "min")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, dpi=80)
    for i, r in reversed(list(enumerate(results))):
        xs, reps, p90 = _buckets(r, width)
        kw = {"linewidth": 2.0 if i == 0 else 0.9, "color": f"C{i}", "zorder": 10 - i}
        ax1.step([x / scale for x in xs], reps, where="post", label=r.name, **kw)
        ax2.plot([x / scale for x in xs], p90, marker=".", markersize=3, **kw)
    ax2.axhline(ttft, color="black", linestyle="--", linewidth=0.8, label=f"target {ttft:g}s")
    per = "10 min" if long_run else "minute"
    ax1.set_ylabel(f"replicas (mean per {per})")
    ax2.set_ylabel(f"p90 TTFT per {per} (s)")
    ax2.set_yscale("log")
    ax2.set_xlabel(f"time ({unit})")
    ax1.set_title(title, fontsize=9)
    handles, labels = ax1.get_legend_handles_labels()
    ax1.legend(handles[::-1], labels[::-1], fontsize=7, loc="upper right")
    ax2.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return str(path)


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
    print(f"targets for kubeforge SLO (issue 14), against the baselines of this run:")
    for what, ok, detail in targets(results, slo.ttft, static):
        mark = "met" if ok else ("n/a" if ok is None else "NOT MET")
        print(f"  [{mark:7}] {what}: {detail}")
    if results_dir is not None:
        png = plot(results_dir / f"bench-autoscaling-{name}.png", f"{name}: {title}", results, slo.ttft)
        print(f"figure: {png}" if png else "figure: skipped (matplotlib not installed: pip install -e '.[bench]')")
    print(f"(replay CPU {time.process_time() - t0:.0f}s)")
    return results


def describe(b: Bounds, slo: SLO, overrides: dict | None) -> str:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                    help="Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens); default: "
                         "../shared/data/traces/azure-llm-inference-code-2023.csv from the repository root")
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
    runs = [r.strip() for r in a.runs.split(",") if r.strip()]
    if any(r not in RUNS for r in runs):
        ap.error(f"--runs: choose among {', '.join(RUNS)}")
    if not a.trace.is_file():
        ap.error(f"--trace {a.trace}: no such file")
    if not 50 <= a.percentile <= 99 or not a.ttft > 0:
        ap.error("need --ttft > 0 and 50 <= --percentile <= 99")
    overrides = parse_overrides(a.policy) or None
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
