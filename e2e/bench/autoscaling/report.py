"""The autoscaling benchmark's figures: the table of every row at its default setting, the
cheapest static count, and issue 14's targets for kubeforge SLO (queue wait, reversals, aborts)."""

from __future__ import annotations

import math

from kubeforge.sim.modelserver import Request, percentile

from e2e.bench.autoscaling.arrivals import MODEL
from e2e.bench.autoscaling.replay import DRAIN_S, Result, replay
from e2e.bench.autoscaling.scalers import Bounds
from e2e.bench.autoscaling.starts import StartTimes

__all__ = ["fmt", "static_reference", "table", "targets"]


def fmt(x: float, unit: str = "s") -> str:
    """``x`` with one decimal and ``unit``; ``n/a`` for None or NaN."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}{unit}"


def table(results: list[Result], ttft: float, oracle: Result | None = None) -> None:
    """One row per autoscaler at its default setting (then the oracle), with its cost against the oracle's."""
    head = (f"{'autoscaler':44} {'TTFT<=' + format(ttft, 'g') + 's':>9} {'minutes':>8} {'GPU rep-min':>11} "
            f"{'x oracle':>8} {'reversals':>9} {'wait p95':>8} {'aborted':>7} {'max':>4} {'starts':>6}")
    print(head)
    print("-" * len(head))
    for r in results + ([oracle] if oracle is not None else []):
        x = f"{r.replica_seconds / oracle.replica_seconds:.2f}x" if oracle is not None and oracle.replica_seconds else "n/a"
        print(f"{r.name:44} {r.attainment(ttft):>9.2%} {r.minutes_attained(ttft):>8.1%} "
              f"{r.replica_seconds / 60:>11.0f} {x:>8} {r.reversals:>9} {fmt(percentile(r.waits, 95)):>8} "
              f"{r.aborted:>7} {r.max_replicas:>4} {sum(r.starts.values()):>6}")
    for r in results:
        if r.diagnostics:
            print(f"  {r.name}: " + ", ".join(f"{k} {v:.3g}" for k, v in r.diagnostics.items())
                  + " (the requests one replica runs at once, as its queue model took it)")


def static_reference(arrivals: list[Request], end: float, b: Bounds, ttft: float, goal: float = 0.99,
                     starts: StartTimes | None = None, hint: int | None = None) -> tuple[int, Result] | None:
    """The fewest replicas that, held from the start with no autoscaler, reach ``goal``
    attainment (bisection over 1..max_replicas, or a walk from ``hint``); ``None`` when even
    the maximum does not."""

    class Static:
        drain, name = True, "static"

        def tick(self, now, current, view):
            return None

    def attain(n: int) -> Result:
        r = replay(Static(), arrivals, end, n, True, MODEL, starts)
        r.name, r.knob = f"static {n} replicas (no autoscaler)", f"{n} replicas"
        return r

    if hint is not None and 1 <= hint <= b.max_replicas:
        return _walk(attain, hint, b.max_replicas, ttft, goal)
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


def _walk(attain, n: int, top: int, ttft: float, goal: float) -> tuple[int, Result] | None:
    """From a guess ``n``: up until ``goal`` is reached, then down while it still is."""
    r = attain(n)
    while r.attainment(ttft) < goal:
        if n >= top:
            return None
        n += 1
        r = attain(n)
    while n > 1:
        lower = attain(n - 1)
        if lower.attainment(ttft) < goal:
            break
        n, r = n - 1, lower
    return n, r


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
               f"(a start takes minutes): load above anything of the last minutes (a burst, a cold start) "
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
