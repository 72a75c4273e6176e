"""The autoscaling benchmark's figures: the table per run, the static reference, issue 14's
targets for kubeforge SLO, and the PNG of replicas and p90 TTFT over time."""

from __future__ import annotations

import math
from pathlib import Path

from kubeforge.sim.modelserver import Request, percentile

from e2e.bench.autoscaling.arrivals import MODEL
from e2e.bench.autoscaling.replay import DRAIN_S, STARTUP_S, Result, replay
from e2e.bench.autoscaling.scalers import Bounds
from e2e.bench.lib.plots import pyplot

__all__ = ["fmt", "plot", "static_reference", "table", "targets"]


def fmt(x: float, unit: str = "s") -> str:
    """``x`` with one decimal and ``unit``; ``n/a`` for None or NaN."""
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
    plt = pyplot()
    if plt is None:
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


