"""One run of the benchmark: every autoscaler on the same arrivals, against the oracle and the
cheapest static count, at its default setting and at equal attainment; the targets; the figure.

A run starts warm: every row (the static one aside) starts with the replicas the first start
time's arrivals need (the most ``need_i`` over it, :class:`~e2e.bench.autoscaling.oracle.MissCurves`),
since nothing asked for at time 0 could be Ready sooner.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kubeforge.sim.modelserver import Request

from e2e.bench.autoscaling.arrivals import MODEL
from e2e.bench.autoscaling.causal import CausalResult, causal_reference
from e2e.bench.autoscaling.compare import LiveFigures, equal_table, issue28_targets, print_targets
from e2e.bench.autoscaling.figure import plot
from e2e.bench.autoscaling.oracle import MissCurves, OracleResult, oracle
from e2e.bench.autoscaling.replay import Result, replay
from e2e.bench.autoscaling.report import static_reference, table, targets
from e2e.bench.autoscaling.scalers import SLO, Bounds
from e2e.bench.autoscaling.starts import StartTimes
from e2e.bench.autoscaling.sweep import KUBEFORGE_ROWS, Swept, families, sweep

__all__ = ["RunOptions", "RunOutcome", "run", "warm_replicas"]


@dataclass
class RunOptions:
    """What every run of one command shares.

    Attributes:
        slo: The SLO (attainment is judged at ``slo.ttft``).
        starts: The start times.
        goal: The attainment every comparison is made at.
        overrides: ``--policy`` fields of kubeforge's SLO row.
        extra: ``--kubeforge-row`` rows: ``(name, policy fields)``.
        sweep: Family keys to sweep (None: all; empty: none, default settings only).
        floors: Try a ``minReplicas`` floor when a knob alone does not reach the goal.
        reference: Compute the cheapest static count.
        results_dir: Where the PNGs go (None: no figure).
        jobs: Processes the families are swept in (forked; 1: in this process).
        rows: kubeforge's built-in rows beside its plain SLO row (predictive, standby).
        live: What live benches measured, for the live targets (``--lws-live``; None: n/a).
        causal: Sweep the causal reference (:mod:`~e2e.bench.autoscaling.causal`; ``--no-causal``).
    """

    slo: SLO = field(default_factory=SLO)
    starts: StartTimes = field(default_factory=StartTimes)
    goal: float = 0.99
    overrides: dict | None = None
    extra: list = field(default_factory=list)
    sweep: list | None = None
    floors: bool = True
    reference: bool = True
    results_dir: Path | None = None
    jobs: int = 1
    rows: tuple = KUBEFORGE_ROWS
    live: LiveFigures | None = None
    causal: bool = True


@dataclass
class RunOutcome:
    """A run's figures: the sweeps (each family's default and best), the oracle, the static count,
    the causal reference."""

    swept: list[Swept]
    oracle: OracleResult
    static: tuple[int, Result] | None
    warm: int
    causal: CausalResult | None = None


def warm_replicas(curves: MissCurves, starts: StartTimes) -> int:
    """The replicas the first start time's arrivals need: the most ``need_i`` over it."""
    first = max(1, int(-(-starts.longest() // curves.interval)))
    return max(curves.need(i) for i in range(min(first, curves.n_intervals)))


def _static(arrivals: list[Request], end: float, b: Bounds, opts: RunOptions, curves: MissCurves) -> tuple[int, Result] | None:
    """The cheapest static count, its first guess from the miss curves (the fewest n whose
    summed curve fits the budget)."""
    budget = (1.0 - opts.goal) * len(arrivals)
    table_ = [curves.curve(i, 4) for i in range(curves.n_intervals)]  # memoized by the oracle
    guess = next((n for n in range(b.min_replicas, b.max_replicas + 1)
                  if sum(row[n - curves.lo] for row in table_) <= budget), b.max_replicas)
    return static_reference(arrivals, end, b, opts.slo.ttft, opts.goal, opts.starts, hint=guess)


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (the sweep's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


_JOB: tuple = ()
"""The run whose families :func:`_sweep_job` sweeps (set before forking, read by the workers)."""


def _sweep_job(k: int) -> tuple[dict, dict, tuple, tuple | None]:
    """Sweep family ``k`` of :data:`_JOB`; returns what pickles: ``(points, attained, default key, best key)``."""
    fams, b, arrivals, end, warm, opts, (floor_hint, floor_cost) = _JOB
    fam, ttft = fams[k], opts.slo.ttft

    def runner(sc, floor: int) -> Result:
        return replay(sc, arrivals, end, max(warm, floor), sc.drain, MODEL, opts.starts)

    key = (fam.default, b.min_replicas)
    if opts.sweep is not None and fam.key not in opts.sweep:
        r = runner(fam.make(fam.values[fam.default], b), b.min_replicas)
        att = r.attainment(ttft)
        return {key: r}, {key: att}, key, key if att >= opts.goal else None
    s = sweep(fam, b, runner, opts.goal, ttft, opts.floors, floor_hint, floor_cost)
    return s.points, s.attained, key, s.best_key


def run(name: str, title: str, arrivals: list[Request], end: float, b: Bounds, opts: RunOptions,
        past: tuple = ()) -> RunOutcome:
    """One run (see the module); prints its tables and targets, draws its figure.

    Args:
        name: The run's name (``trace``, ``step``, ``day``): the figure's file.
        title: Its title, printed.
        arrivals: Its requests, sorted.
        end: Its end, s.
        b: Its bounds.
        opts: What every run shares.
        past: The admission rate of the day before (``((t, requests/s), ...)``, ``t < 0``), for
            predictive rows' seasonal forecast; empty where the run has no yesterday.
    """
    print(f"\n== {name.upper()}: {title} ==")
    t0, w0, ttft = _cpu(), time.perf_counter(), opts.slo.ttft
    curves = MissCurves(arrivals, end, MODEL, ttft, b.min_replicas, b.max_replicas)
    warm = warm_replicas(curves, opts.starts)
    orc = oracle(arrivals, end, MODEL, ttft, b.min_replicas, b.max_replicas, opts.starts, opts.goal, curves=curves)
    print(f"warm start: {warm} replicas Ready at time 0 (what the first {opts.starts.longest():g}s of arrivals need); "
          f"oracle: {orc.result.replica_seconds / 60:.0f} GPU replica-minutes at {orc.result.attainment(ttft):.2%} "
          f"({orc.sims} interval simulations; every minute's need with free starts: {orc.floor_seconds / 60:.0f})"
          + (f"; {'; '.join(orc.notes)}" if orc.notes else ""))

    static = _static(arrivals, end, b, opts, curves) if opts.reference else None
    causal = None
    if opts.causal:
        causal = causal_reference(curves, lambda sc: replay(sc, arrivals, end, warm, True, MODEL, opts.starts),
                                  opts.goal, ttft, opts.starts.longest(), len(arrivals))
    global _JOB
    _JOB = (families(b, opts.slo, opts.overrides, opts.extra, past, opts.rows), b, arrivals, end, warm, opts,
            (static[0], static[1].replica_seconds) if static else (None, None))
    n = len(_JOB[0])
    if opts.jobs > 1 and n > 1:
        with ProcessPoolExecutor(min(opts.jobs, n), mp_context=multiprocessing.get_context("fork")) as pool:
            found = list(pool.map(_sweep_job, range(n)))
    else:
        found = [_sweep_job(k) for k in range(n)]
    swept = [Swept(fam, points[key], points, attained, points.get(best) if best else None, best)
             for fam, (points, attained, key, best) in zip(_JOB[0], found)]
    defaults = [s.default for s in swept]
    table(defaults + ([static[1]] if static else []), ttft, orc.result)
    equal_table(swept, orc, static, ttft, opts.goal, causal)
    print_targets(issue28_targets(swept, orc, static, ttft, opts.goal, opts.live),
                  f"issue 28's targets ({opts.starts.describe()}), at equal attainment:")
    if any(r.name.startswith("KEDA") for r in defaults):
        print_targets(targets(defaults, ttft, static), "issue 14's targets for kubeforge SLO at its default setting:")
    if opts.results_dir is not None:
        png = plot(opts.results_dir / f"bench-autoscaling-{name}.png", f"{name}: {title}", swept, orc, ttft)
        print(f"figure: {png}" if png else "figure: skipped (matplotlib not installed: pip install -e '.[bench]')")
    print(f"(run: {_cpu() - t0:.0f}s of CPU, workers included; {time.perf_counter() - w0:.0f}s of wall time on this machine)")
    return RunOutcome(swept, orc, static, warm, causal)
