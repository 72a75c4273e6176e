"""Backfill bench (issue 27): big gangs under a steady stream of small jobs, replayed through
kubeforge's pure admission core under three queueing strategies (and Backfill with preemption for
reservations), then live against Kueue.

The same arrivals (e2e/bench/backfill/workload.py: small jobs from the Alibaba trace at a load
near the fleet's size, 64-GPU gangs that need 8 whole nodes of one block every two hours; who reports
an ETA and who sets ``maxRunSeconds`` is drawn per job) go through
:func:`kubeforge.admission.plan_admission` with the pool's queueing strategy forced by
:class:`kubeforge.admission.AdmissionRules` ``queueing``:

- **BestEffortFIFO** (kubeforge without reservations, Kueue's default): a gang that does not fit
  waits, and the small jobs behind it take every GPU that frees up;
- **StrictFIFO** (Kueue's other strategy): nothing behind the first gang that waits is admitted;
- **Backfill** (kubeforge's default, ``spec.reservations``): the first waiting gangs get
  reservations from the running jobs' ETAs and time limits; later jobs use reserved GPUs only
  if they end before the reservation's start;
- **Backfill+preempt Nm** (one row per ``--preempt-after`` value, default 60 min): Backfill with
  the pool's opt-in ``spec.reservations.preemptAfterSeconds``: a reserved gang that waited that
  long preempts the smaller jobs on its reserved domain (they lose their run since their last
  checkpoint, every 30 min, and wait again); the cost columns count them and the GPU-hours lost.

Printed per strategy: large-gang wait p50 / p95, small-job wait p50 / p95 / mean (minutes),
GPU utilisation over the arrival window, jobs never started, preemptions and GPU-hours lost; then
the targets for Backfill and each preemption row: large-gang wait p95 <= 0.3x BestEffortFIFO's,
utilisation within 3 points of it, and no small job waiting longer than under StrictFIFO. The
table's last row is the bound (:mod:`e2e.bench.backfill.bound`, exact, not a replay): the
large-gang waits of an ideal policy with perfect foresight and free preemption, and whether 0.3x
of BestEffortFIFO's p95 is reachable at all in the mix. A PNG of busy GPUs and waiting large gangs over time goes
to e2e/results/. ``--live`` then runs a smaller version on the local sim cluster, kubeforge's
operator against the real Kueue (:mod:`e2e.bench.backfill.live`). It measures; it asserts nothing.

Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0.
Run: ``make bench-backfill`` (``python -m e2e.bench.backfill [--help]``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kubeforge.admission import QueueingStrategy

from e2e.bench.backfill.bound import Bound, Gang, gangs_first
from e2e.bench.backfill.replay import Result, simulate
from e2e.bench.backfill.workload import BLOCK, Job, Mix, fleet, load_jobs
from e2e.bench.lib.plots import NO_MATPLOTLIB, pyplot
from e2e.bench.lib.replay import T0
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.stats import pct
from e2e.bench.lib.traces import ALIBABA_CREDIT, ALIBABA_PODS, add_trace_arg, check_trace

STRATEGIES = (QueueingStrategy.BEST_EFFORT_FIFO, QueueingStrategy.STRICT_FIFO, QueueingStrategy.BACKFILL)
Row = QueueingStrategy | str
"""A row of the table: a strategy with the pool's ``--reservations``, or the label of a Backfill
row with ``preemptAfterSeconds`` (:func:`preempt_label`)."""


def preempt_label(minutes: float) -> str:
    """The row of reservation + backfill + preemption after ``minutes`` of waiting."""
    return f"Backfill+preempt {minutes:g}m"


def rows(a: argparse.Namespace) -> list[tuple[Row, QueueingStrategy, dict | None]]:
    """Every replay of the run: ``(row, strategy, the pool's spec.reservations)``: the three
    strategies with ``--reservations``, then Backfill with ``preemptAfterSeconds`` for each of
    ``--preempt-after``."""
    base = json.loads(a.reservations) if a.reservations else None
    out: list[tuple[Row, QueueingStrategy, dict | None]] = [(s, s, base) for s in STRATEGIES]
    for m in a.preempt_after:
        out.append((preempt_label(m), QueueingStrategy.BACKFILL, {**(base or {}), "preemptAfterSeconds": int(m * 60)}))
    return out


def _minutes(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); the defaults are the figures' run."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.backfill", description=__doc__.splitlines()[0])
    add_trace_arg(ap, ALIBABA_PODS, "Alibaba openb pod trace")
    d = Mix()
    ap.add_argument("--nodes", type=int, default=d.nodes, help="8-GPU nodes: NVLink cliques of 4, blocks of 16")
    ap.add_argument("--hours", type=float, default=d.hours, help="hours of arrivals (utilisation is measured over them)")
    ap.add_argument("--drain-hours", type=float, default=6.0, help="simulated hours after the last arrival")
    ap.add_argument("--small-load", type=float, default=d.small_load, help="small jobs' offered GPU load / the fleet's GPUs")
    ap.add_argument("--small-max-hours", type=float, default=d.small_max_hours)
    ap.add_argument("--large-nodes", type=int, default=d.large_nodes, help="nodes x 8 GPUs of a large gang (one block)")
    ap.add_argument("--large-every", type=float, default=d.large_every, help="minutes between large gangs")
    ap.add_argument("--report-share", type=float, default=d.report_share, help="share of jobs that report an ETA")
    ap.add_argument("--limit-share", type=float, default=d.limit_share, help="share of jobs that set maxRunSeconds")
    ap.add_argument("--reservations", default="", help='the pool\'s spec.reservations as JSON, e.g. \'{"maxReservations": 4}\'')
    ap.add_argument("--preempt-after", type=_minutes, default=_minutes("60"),
                    help="minutes, comma-separated: a row of Backfill with spec.reservations.preemptAfterSeconds "
                    "for each ('' for none)")
    ap.add_argument("--step", type=float, default=60.0, help="seconds between admission rounds")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--png", type=Path, default=ROOT / "e2e/results/backfill.png")
    ap.add_argument("--live", action="store_true", help="then run the small live comparison (kubeforge vs Kueue)")
    a = ap.parse_args(argv)
    check_trace(ap, a.trace)
    a.mix = Mix(a.nodes, a.hours, a.small_load, a.small_max_hours, a.large_nodes, a.large_every, a.report_share,
                a.limit_share)
    return a


def delayed(small: list[str], mine: Result, strict: Result, slack: float) -> list[str]:
    """Small jobs that waited longer (by more than ``slack`` seconds) than under StrictFIFO."""
    out = []
    for n in small:
        w, s = mine.waits.get(n), strict.waits.get(n)
        if s is not None and (w is None or w > s + slack):
            out.append(n)
    return out


def _name(row: Row) -> str:
    return row.value if isinstance(row, QueueingStrategy) else row


BOUND_ROW = "Bound: gangs first"
"""The table's last row: :func:`bound`, no replay."""


def bound(jobs: list[Job], nodes: int, need: int) -> Bound:
    """The large gangs' waits under an ideal policy with perfect foresight and free preemption
    (:mod:`e2e.bench.backfill.bound`): each gang of ``need`` nodes starts as soon as the other large
    gangs leave ``need`` nodes of one block of the ``nodes``-node fleet (:func:`fleet`'s blocks)."""
    per: dict[str, int] = {}
    for node in fleet(nodes).values():
        per[node.labels[BLOCK]] = per.get(node.labels[BLOCK], 0) + 1
    return gangs_first([Gang(j.name, j.arrival, j.work) for j in jobs if j.large], len(per), min(per.values()), need)


def _bound_lines(b: Bound, base: dict | None) -> None:
    """The bound's row: large-gang waits only (it replays nothing)."""
    print(f"{BOUND_ROW:<22} {b.p(50):>15.0f} {b.p(95):>7.0f} {'-':>15} {'-':>7} {'-':>7} {'-':>9} {'-':>14} {'-':>16} "
          f"{'-':>10} {'-':>11} {'-':>6}")


def _bound_verdict(b: Bound, base: dict | None) -> None:
    """Whether the bound leaves 0.3x of BestEffortFIFO's large-gang p95 reachable."""
    how = "" if b.exact else " (gangs in arrival order, not proven minimal)"
    if not base or not base["large_p95"]:
        return
    ok = b.p(95) <= 0.3 * base["large_p95"]
    print(f"bound: an ideal policy (perfect foresight, free preemption, large gangs first, waiting only for each "
          f"other){how}: large-gang wait p50 {b.p(50):.0f}, p95 {b.p(95):.0f} min; the bound is {b.p(95):.0f} min = "
          f"{b.p(95) / base['large_p95']:.2f}x BestEffortFIFO's {base['large_p95']:.0f}; 0.3x "
          f"({0.3 * base['large_p95']:.0f} min) is {'' if ok else 'NOT '}reachable in this mix"
          + (" (the gangs' own queueing does not forbid it)" if ok else " (the gangs queue behind each other)"))


def report(a: argparse.Namespace, results: dict[Row, Result], arrivals: dict[str, float],
           floor: Bound | None = None) -> None:
    """The table (with ``floor``, :func:`bound`, as its last row), then the bound's verdict, then the
    targets for Backfill and for each row with preemption."""
    horizon = T0 + (a.hours + a.drain_hours) * 3600
    figs = {s: r.figures(horizon, arrivals) for s, r in results.items()}
    print(f"{'strategy':<22} {'large wait p50':>15} {'p95':>7} {'small wait p50':>15} {'p95':>7} {'mean':>7} "
          f"{'GPU util':>9} {'never started':>14} {'rounds reserved':>16} {'preempted':>10} {'GPU-h lost':>11} "
          f"{'CPU s':>6}")
    for s, f in figs.items():
        r = results[s]
        print(f"{_name(s):<22} {f['large_p50']:>15.0f} {f['large_p95']:>7.0f} {f['small_p50']:>15.1f} "
              f"{f['small_p95']:>7.1f} {f['small_mean']:>7.1f} {f['util']:>9.1%} {f['never']:>14} "
              f"{r.reserved:>16} {r.preemptions:>10} {r.lost_gpu_h:>11.1f} {r.cpu:>6.1f}")
    base, strict = figs.get(QueueingStrategy.BEST_EFFORT_FIFO), results.get(QueueingStrategy.STRICT_FIFO)
    if floor is not None:
        _bound_lines(floor, base)
    print("(waits in minutes, from arrival to first start; a job never started counts until the end of the replay;"
          " GPU-h lost: each preempted job's run since its last checkpoint x its GPUs)")
    if floor is not None:
        _bound_verdict(floor, base)
    for s in [QueueingStrategy.BACKFILL] + [s for s in results if not isinstance(s, QueueingStrategy)]:
        if s in figs:
            _targets(a, _name(s), figs[s], results[s], base, strict, arrivals)


def _points(pts: float) -> str:
    """``pts`` percentage points of utilisation below BestEffortFIFO's, in words: "4.7 points
    lower", "4.7 points higher" (a negative ``pts``), or "the same"."""
    if round(pts, 1) == 0:
        return "the same"
    return f"{abs(pts):.1f} points {'lower' if pts > 0 else 'higher'}"


def _targets(a: argparse.Namespace, name: str, mine: dict, result: Result, base: dict | None,
             strict: Result | None, arrivals: dict[str, float]) -> None:
    """Issue 27's three targets for one row against BestEffortFIFO and StrictFIFO."""
    tag = "" if name == QueueingStrategy.BACKFILL.value else f" ({name})"
    if base:
        ok = mine["large_p95"] <= 0.3 * base["large_p95"]
        ratio = mine["large_p95"] / base["large_p95"] if base["large_p95"] else float("nan")
        print(f"target{tag}: large-gang wait p95 <= 0.3 x BestEffortFIFO's: {mine['large_p95']:.0f} vs "
              f"{base['large_p95']:.0f} min ({ratio:.2f}x) -> {'met' if ok else 'NOT met'}")
        pts = 100 * (base["util"] - mine["util"])
        print(f"target{tag}: GPU utilisation within 3 points of BestEffortFIFO's: {mine['util']:.1%} vs {base['util']:.1%} "
              f"({_points(pts)}) -> {'met' if pts <= 3 else 'NOT met'}")
    if strict:
        small = [n for n in arrivals if n not in result.large]
        late = delayed(small, result, strict, a.step)
        print(f"target{tag}: no small job waits longer under {name} than under StrictFIFO (one round of slack): "
              f"{len(late)} of {len(small)} do -> {'met' if not late else 'NOT met'}"
              + (f" (e.g. {', '.join(late[:5])})" if late else ""))


def plot(path: Path, results: dict[Row, Result], gpus: int) -> None:
    """Busy GPUs and large gangs waiting over time, one line per strategy."""
    plt = pyplot()
    if plt is None:
        print(f"no plot: {NO_MATPLOTLIB}")
        return
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for s, r in results.items():
        t = [x[0] for x in r.series]
        top.plot(t, [x[1] / gpus * 100 for x in r.series], label=_name(s), linewidth=0.8)
        bottom.plot(t, [x[2] for x in r.series], label=_name(s), linewidth=0.8)
    top.set_ylabel("GPUs busy, %")
    bottom.set_ylabel("large gangs waiting")
    bottom.set_xlabel("hours")
    top.legend(loc="lower right")
    top.set_title("Backfill bench: the same arrivals under each queueing strategy")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> int:
    """Replay every strategy, print the figures and targets, draw the plot; ``--live`` after."""
    a = parse_args(argv)
    jobs = load_jobs(a.trace, a.mix, a.seed)
    arrivals = {j.name: j.arrival for j in jobs}
    big = [j for j in jobs if j.large]
    print(f"{len(jobs) - len(big)} small jobs (Alibaba trace, offered load {a.small_load:g} of {a.nodes * 8} GPUs, "
          f"runs capped at {a.small_max_hours:g} h) and {len(big)} large gangs ({a.large_nodes} x 8 GPUs, Required in one "
          f"block, every {a.large_every:g} min) over {a.hours:g} h, then {a.drain_hours:g} h to drain; {a.report_share:.0%} "
          f"report an ETA, {a.limit_share:.0%} set maxRunSeconds; rounds every {a.step:g} s; seed {a.seed}"
          + (f"; pool reservations {a.reservations}" if a.reservations else ""))
    results: dict[Row, Result] = {}
    for row, strategy, reservations in rows(a):
        started = time.process_time()
        results[row] = simulate(jobs, a.nodes, strategy, a.hours, a.drain_hours, a.step, reservations,
                                tag=f"s{a.seed}-{_name(row)}-")
        results[row].cpu = time.process_time() - started
        if not isinstance(row, QueueingStrategy):
            done = [w for w in results[row].requeue_waits.values() if w is not None]
            print(f"{_name(row)}: {results[row].preemptions} preemptions, {results[row].lost_gpu_h:.1f} GPU-hours lost; "
                  f"victims restarted after {pct(done, 50) / 60 if done else 0:.0f} min (p50), "
                  f"{pct(done, 95) / 60 if done else 0:.0f} (p95), {len(results[row].requeue_waits) - len(done)} never")
    report(a, results, arrivals, bound(jobs, a.nodes, a.large_nodes))
    plot(a.png, results, a.nodes * 8)
    print(ALIBABA_CREDIT)
    if a.live:
        from e2e.bench.backfill.live import main as live_main
        return live_main([])
    return 0
