"""What the training bench prints at the end: the results table (one column per phase), each
phase's end and watch lag, what the operator said, the start breakdown and profile, each phase's
cost, the Kueue + JobSet phase's own figures, and the timelines."""

from __future__ import annotations

from e2e.bench.lib.metrics import WATCH_COUNTERS
from e2e.bench.lib.stats import pct
from e2e.bench.lib.tables import Columns
from e2e.bench.training import claims_report
from e2e.bench.training.components import report_profile
from e2e.bench.training.context import Run
from e2e.bench.training.cost import print_cost
from e2e.bench.training.phase import ADMITS, Phase

__all__ = ["print_timeline", "report"]


def report(run: Run) -> None:
    """Print the results table, the cost of each phase and the timelines."""
    results, costs, extra, args = run.results, run.costs, run.extra, run.args
    print("\nRESULTS (times in seconds, measured client-side from the create call to the watch event that "
          "shows the job's last pod with spec.nodeName; for Admitted, to the TrainingJob watch event whose "
          "status has condition Admitted=True)")
    names = list(results)
    if not names:
        print("  no phase completed")
        return
    _table(run, names)
    for n in names:
        _phase_end(n, *results[n])
    if "kubeforge" in results:
        _operator_notes(extra)
        line = watch_line(extra.get("apiserver_watches"))
        if line:
            print(line)
        base = results.get("baseline")
        claims_report.checkpoint_target(args.checkpoint_mode, results["kubeforge"][1], base[1] if base else None, extra,
                                        (extra.get("components") or {}).get("kube-controller-manager"))
        claims_report.report(args.claims, extra.get("start"), extra.get("components"), extra.get("restart"),
                             (base[1]["p50"], base[1]["p95"]) if base else None, extra.get("components_baseline"))
        report_profile(extra.get("py_spy"), extra.get("operator_times"))
        _scale_target(run)
    for n in names:
        if n in costs:
            print_cost(n, costs[n], results[n][1], "operator" if n == "kubeforge" else "bench",
                       per_admitted=args.admission_only and n == "kubeforge")
    if extra.get("kueue") and "kueue" in results:
        from e2e.bench.training import kueue

        kueue.print_report(extra["kueue"], results["kueue"][1], results["kueue"][0])
    for n in names:
        print_timeline(results[n][0], args.timeline_rows)


def _table(run: Run, names: list[str]) -> None:
    """One row per figure, one column per phase."""
    results, capacity = run.results, run.capacity
    req_gpus = sum(j.total for j in run.jobs)
    t = Columns(names, 44, 22)
    t.header()

    def row(label: str, fn) -> None:
        t.row(label, [fn(results[n][0], results[n][1]) for n in names])

    row("jobs submitted / errors", lambda p, s: f"{len(p.submitted)}/{len(p.submit_errors)}")
    row("submission took", lambda p, s: f"{s['submit_s']:.1f}")
    row("phase ended after", lambda p, s: f"{p.end - p.t0:.0f}")
    row("jobs placed (all pods bound)", lambda p, s: f"{s['placed']}/{len(p.jobs)}")
    row("GPUs of placed jobs", lambda p, s: f"{s['placed_gpus']}/{req_gpus}")
    row("create -> all pods bound p50", lambda p, s: f"{s['p50']:.2f}")
    row("create -> all pods bound p95", lambda p, s: f"{s['p95']:.2f}")
    row("create -> all pods bound max", lambda p, s: f"{s['max']:.2f}")
    if any(n in results for n in ADMITS):
        row("jobs Admitted (TrainingJob/Workload watch)", lambda p, s: f"{s['adm_n']}/{len(p.jobs)}" if p.name in ADMITS else "-")
        for q in ("p50", "p95", "max"):
            row(f"create -> Admitted {q}", lambda p, s, q=q: f"{s['adm_' + q]:.2f}" if p.name in ADMITS else "-")
    row("jobs placed per second", lambda p, s: f"{s['rate']:.1f}")
    row("  (placed jobs / first create..last bind s)", lambda p, s: f"{s['span']:.1f}")
    row("multi-pod jobs placed", lambda p, s: f"{s['multi']}")
    row("  of them on more than one node", lambda p, s: f"{s['multi_node']}")
    row("  inside one NVLink domain", lambda p, s: f"{s['in_clique']} ({100 * s['in_clique'] / max(1, s['multi']):.0f}%)")
    row("  inside one IB block", lambda p, s: f"{s['in_block']} ({100 * s['in_block'] / max(1, s['multi']):.0f}%)")
    row("GPUs bound at end (allocation)", lambda p, s: f"{s['alloc_end']} ({100 * s['alloc_end'] / capacity:.0f}%)")
    row("partial gangs at end (GPUs held)", lambda p, s: f"{s['partial_end']} ({s['partial_gpus_end']})")
    row("partial gangs, max in one sample", lambda p, s: f"{s['partial_max']}")
    row("jobs ever seen partial", lambda p, s: f"{s['partial_ever']}")
    sizes = sorted({j.gpus for j in run.jobs})
    for g in sizes:
        row(f"placed jobs of {g} GPU/replica", lambda p, s, g=g: f"{s['by_size'][g][0]}/{s['by_size'][g][1]}")


def _phase_end(n: str, p: Phase, s: dict) -> None:
    """Why a phase ended, its watch restarts and lag, its first submit errors."""
    wr = ", ".join(f"{k}: {v}" for k, v in p.watch_restarts.items()) or "0"
    print(f"  {n} ended: {p.end_reason}; watch restarts: {wr}")
    lags = [("binds", [x for x in p.bind_lag if x == x]), ("admissions", [x for x in p.admit_lag if x == x])]
    print(f"    {n}: this bench's watch lag (receive time - the API server's lastTransitionTime, which is "
          f"truncated to 1 s): " + "; ".join(f"{k} p50 {pct(v, 50):.1f}s p95 {pct(v, 95):.1f}s max "
                                             f"{max(v, default=float('nan')):.1f}s" for k, v in lags if v))
    for e in p.submit_errors[:3]:
        print(f"    submit error: {e}")


def _operator_notes(extra: dict) -> None:
    """What the operator said in the kubeforge phase: readiness, placements, conditions, where the
    time went, its log."""
    print(f"  kubeforge: operator ready (pool status) {extra.get('operator_ready_s', float('nan')):.1f}s after start; "
          f"jobs with status.placement: {extra.get('admitted')}; pods created {extra.get('pods_created')}, "
          f"still gated {extra.get('gated_pods')}, ungated but unbound {extra.get('pending_ungated')}; "
          f"PVCs (created, bound): {extra.get('pvcs')}; operator CPU during the phase "
          f"{extra.get('operator_cpu_s', float('nan')):.1f}s")
    if extra.get("pool_not_ready"):
        print(f"  kubeforge: {extra['pool_not_ready']}")
    print(f"  kubeforge: Admitted conditions at end: {extra.get('reasons')}")
    a, b = extra.get("create_to_admitted") or [], extra.get("admitted_to_pods") or []
    print(f"  kubeforge: where the time goes (API server timestamps, 1 s resolution): TrainingJob created -> "
          f"Admitted p50 {pct(a, 50):.0f}s p95 {pct(a, 95):.0f}s max {max(a, default=float('nan')):.0f}s; "
          f"Admitted -> first pod created p50 {pct(b, 50):.0f}s p95 {pct(b, 95):.0f}s max {max(b, default=float('nan')):.0f}s")
    print(f"  kubeforge: operator log (this run): {extra.get('log_lines')} lines, {extra.get('log_errors')} "
          f"error/traceback lines, {extra.get('log_warnings')} warnings; operator still running at the end of "
          f"the phase: {'yes' if extra.get('operator_alive') else 'NO'}; placements lost (PlacementLost: "
          f"kube-scheduler would not bind a pod where its gang was placed, e.g. GPUs given twice) "
          f"{extra.get('placements_lost', '-')}")
    for ln in extra.get("log_samples") or []:
        print(f"    | {ln[:220]}")


def watch_line(delta: dict | None) -> str | None:
    """The API server's watch caches over the kubeforge phase (``delta``: the growth of
    :data:`~e2e.bench.lib.metrics.WATCH_COUNTERS` by (counter, resource)): the watchers it closed
    for falling behind and the events it dispatched, for pods and TrainingJobs. A closed watcher's
    client watches again, so its events come late by the reconnect; None without a reading."""
    if delta is None:
        return None

    def by(metric: str, res: str) -> int:
        return int(delta.get((metric, res), 0))

    closed, sent = WATCH_COUNTERS
    return ("  kube-apiserver's watch caches during the phase: watchers closed for falling behind "
            f"(apiserver_terminated_watchers_total) pods {by(closed, 'pods')}, trainingjobs "
            f"{by(closed, 'trainingjobs')}; events dispatched pods {by(sent, 'pods')}, trainingjobs "
            f"{by(sent, 'trainingjobs')}")


SCALE_TARGET = (5000, 2000, 5.0)
"""Issue 31's target at scale: ``(nodes, gangs, seconds)``, create -> Admitted p95 at most that
many seconds for a burst of that many gangs on a fleet of that many nodes."""


def _scale_target(run: Run) -> None:
    """Issue 31's Admitted target, printed when the run is at least its size: the bench's watch
    (client-side, its lag included) and the API server's own timestamps (every gang's creation
    and its ``Admitted`` condition's transition, 1 s resolution)."""
    nodes, gangs, limit = SCALE_TARGET
    fleet = len(run.node_clique) or run.capacity // 8
    summary = run.results["kubeforge"][1]
    if fleet < nodes or len(run.jobs) < gangs or not summary.get("adm_n"):
        return
    audit = run.extra.get("create_to_admitted") or []
    p95 = pct(audit, 95)
    print(f"  target (issue 31): create -> Admitted p95 <= {limit:g}s for {len(run.jobs)} gangs on {fleet} nodes: "
          f"by the API server's timestamps {p95:.0f}s (n={len(audit)}, 1 s resolution): "
          f"{'met' if p95 <= limit else 'NOT met'}; by this bench's watch {summary['adm_p95']:.2f}s "
          f"(its lag included): {'met' if summary['adm_p95'] <= limit else 'NOT met'}")


def print_timeline(ph: Phase, rows: int) -> None:
    """The phase's samples, thinned to ``rows`` rows."""
    print(f"\n  {ph.name}: GPU allocation over time (sampled every ~{ph.samples[1][0] - ph.samples[0][0] if len(ph.samples) > 1 else 0:.0f}s)")
    adm = ph.name in ADMITS
    print(f"  {'t(s)':>6} {'GPUs bound':>11} {'alloc %':>8} {'pods bound':>11} {'jobs placed':>12} {'partial gangs':>14} "
          f"{'GPUs in partial':>16}" + (f" {'jobs admitted':>14}" if adm else ""))
    s = ph.samples
    pick = s if len(s) <= rows else [s[round(i * (len(s) - 1) / (rows - 1))] for i in range(rows)]
    for t, g, pods, jobs, partial, pg, na in pick:
        print(f"  {t:6.0f} {g:11d} {100 * g / ph.capacity:7.1f}% {pods:11d} {jobs:12d} {partial:14d} {pg:16d}"
              + (f" {na:14d}" if adm else ""))
