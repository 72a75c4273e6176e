"""Equal attainment and issue 28's targets: every autoscaler's cheapest setting that reaches the
goal, against the oracle and the cheapest static count, and the targets met or not."""

from __future__ import annotations

from dataclasses import dataclass

from e2e.bench.autoscaling.causal import CausalResult
from e2e.bench.autoscaling.oracle import OracleResult
from e2e.bench.autoscaling.result import Result
from e2e.bench.autoscaling.sweep import Swept

__all__ = ["LiveFigures", "equal_table", "issue28_targets", "print_targets", "ratio"]

#: Issue 28's targets: GPU replica-minutes at the goal against the oracle, the cheapest static
#: count, every baseline.
ORACLE_RATIO, STATIC_RATIO, BASELINE_RATIO = 1.2, 0.7, 0.8


@dataclass(frozen=True)
class LiveFigures:
    """What the live comparisons measure, for the two live targets (the hook for the live parts:
    a live run fills what it measured; ``None`` fields stay n/a).

    Attributes:
        kubeforge: kubeforge's ``(attainment, GPU replica-minutes, aborted)`` on the live segment.
        keda: Real KEDA + HPA's, on the same segment.
        group_ready_p50: kubeforge's multi-node group create -> Ready p50, s.
        lws_ready_p50: Real LeaderWorkerSet's, s.
    """

    kubeforge: tuple[float, float, int] | None = None
    keda: tuple[float, float, int] | None = None
    group_ready_p50: float | None = None
    lws_ready_p50: float | None = None


def _live_targets(live: LiveFigures | None) -> list[tuple[str, bool | None, str]]:
    live = live or LiveFigures()
    what_k = "live: kubeforge >= real KEDA + HPA's attainment at <= its replica-minutes, 0 aborted"
    what_l = "multi-node group create -> Ready p50 <= 1.5x real LWS's"
    if live.kubeforge and live.keda:
        (ka, kr, kab), (ea, er, _) = live.kubeforge, live.keda
        k = (what_k, ka >= ea and kr <= er and kab == 0,
             f"{ka:.2%} at {kr:.0f} rep-min, {kab} aborted vs KEDA + HPA {ea:.2%} at {er:.0f}")
    else:
        k = (what_k, None, "not run by the simulated bench (the live comparison with a real KEDA is a separate part)")
    if live.group_ready_p50 and live.lws_ready_p50:
        x = live.group_ready_p50 / live.lws_ready_p50
        lws = (what_l, x <= 1.5, f"{live.group_ready_p50:.2f}s vs {live.lws_ready_p50:.2f}s ({x:.2f}x), from "
               "python -m e2e.bench.lws_live")
    else:
        lws = (what_l, None, "not run by the simulated bench (python -m e2e.bench.lws_live --json FILE runs it on "
               "the sim cluster with the real LeaderWorkerSet; --lws-live FILE brings its figures here)")
    return [k, lws]


def ratio(a: Result | None, b: Result | None) -> float | None:
    """``a``'s GPU replica-minutes over ``b``'s (None when either is missing)."""
    if a is None or b is None or not b.replica_seconds:
        return None
    return a.replica_seconds / b.replica_seconds


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def equal_table(swept: list[Swept], orc: OracleResult, static: tuple[int, Result] | None, ttft: float,
                goal: float, causal: CausalResult | None = None) -> None:
    """The equal-attainment table: per autoscaler, the setting that reaches ``goal`` and its cost;
    the oracle, the static count and the causal reference (when swept) first, then a line with
    the oracle target's replica-minutes against the causal reference's."""
    st = static[1] if static else None
    print(f"\nequal attainment: the cheapest setting found that reaches {goal:.0%} of requests within {ttft:g}s "
          f"(GPU replica-minutes; x: ratio)")
    head = f"{'autoscaler':44} {'setting that reaches ' + format(goal, '.0%'):44} {'TTFT<=' + format(ttft, 'g') + 's':>9} " \
           f"{'rep-min':>8} {'x oracle':>8} {'x static':>8} {'tried':>5}"
    print(head)
    print("-" * len(head))
    o = orc.result
    print(f"{'oracle (perfect foresight, same start)':44} {'schedule per minute, verified by replay':44} "
          f"{o.attainment(ttft):>9.2%} {o.replica_seconds / 60:>8.0f} {'1.00x':>8} {_x(ratio(o, st)):>8} {'':>5}")
    if st is not None:
        print(f"{'static (no autoscaler)':44} {f'{static[0]} replicas':44} {st.attainment(ttft):>9.2%} "
              f"{st.replica_seconds / 60:>8.0f} {_x(ratio(st, o)):>8} {'1.00x':>8} {'':>5}")
    c = causal.best if causal is not None else None
    if c is not None:
        print(f"{c.name:44} {c.knob:44} {c.attainment(ttft):>9.2%} {c.replica_seconds / 60:>8.0f} "
              f"{_x(ratio(c, o)):>8} {_x(ratio(c, st)):>8} {causal.tried:>5}")
    elif causal is not None:
        print(f"{'causal (past need, exact; nothing ahead)':44} {'never (no setting tried reaches it)':44} "
              f"{'n/a':>9} {'n/a':>8} {'n/a':>8} {'n/a':>8} {causal.tried:>5}")
    for s in swept:
        name = s.default.name
        if s.best is None:
            top = s.top()
            print(f"{name:44} {'never (best: ' + top.knob + ')':44} {top.attainment(ttft):>9.2%} "
                  f"{top.replica_seconds / 60:>8.0f} {'n/a':>8} {'n/a':>8} {len(s.points):>5}")
            continue
        r = s.best
        print(f"{name:44} {r.knob:44} {r.attainment(ttft):>9.2%} {r.replica_seconds / 60:>8.0f} "
              f"{_x(ratio(r, o)):>8} {_x(ratio(r, st)):>8} {len(s.points):>5}")
    if c is not None and o.replica_seconds:
        cap = ORACLE_RATIO * o.replica_seconds
        print(f"  causal reference: {c.replica_seconds / 60:.0f} rep-min ({_x(ratio(c, o))} the oracle); issue 28's "
              f"{ORACLE_RATIO}x the oracle is {cap / 60:.0f} rep-min, {cap / c.replica_seconds:.2f}x the causal "
              f"reference's (below 1.00x: no policy of its family, knowing the past exactly, reaches it)")


def _met(ok: bool | None) -> str:
    return "met" if ok else ("n/a" if ok is None else "NOT MET")


def issue28_targets(swept: list[Swept], orc: OracleResult, static: tuple[int, Result] | None, ttft: float,
                    goal: float, live: LiveFigures | None = None) -> list[tuple[str, bool | None, str]]:
    """Issue 28's targets for each kubeforge row, at equal attainment.

    Args:
        swept: Every family's sweep.
        orc: The oracle.
        static: The cheapest static count and its replay.
        ttft: The TTFT target, s.
        goal: The attainment compared at.
        live: What the live parts measured (None: n/a).

    Returns:
        ``(target, met (None: not applicable), the figures)`` per kubeforge row and target,
        then the two live targets.
    """
    out: list[tuple[str, bool | None, str]] = []
    st = static[1] if static else None
    baselines = [s for s in swept if not s.family.kubeforge and not s.default.name.startswith("kubeforge")]
    for s in (x for x in swept if x.family.kubeforge):
        name, r = s.default.name, s.best
        tag = f"{name}:"
        if r is None:
            top = s.top()
            why = f"no setting tried reaches {goal:.0%} (best {top.attainment(ttft):.2%} with {top.knob})"
            out.append((f"{tag} >= {goal:.0%} TTFT attainment at <= {ORACLE_RATIO}x the oracle", False, why))
            out.append((f"{tag} <= {STATIC_RATIO}x the cheapest static count that reaches {goal:.0%}", False, why))
            out.append((f"{tag} <= {BASELINE_RATIO}x every baseline at equal attainment", False, why))
            continue
        ro = ratio(r, orc.result)
        out.append((f"{tag} >= {goal:.0%} TTFT attainment at <= {ORACLE_RATIO}x the oracle", ro <= ORACLE_RATIO,
                    f"{r.attainment(ttft):.2%} at {r.replica_seconds / 60:.0f} rep-min ({r.knob}) = {ro:.2f}x the "
                    f"oracle's {orc.result.replica_seconds / 60:.0f}"))
        rs = ratio(r, st)
        out.append((f"{tag} <= {STATIC_RATIO}x the cheapest static count that reaches {goal:.0%}",
                    None if rs is None else rs <= STATIC_RATIO,
                    "no static count up to maxReplicas reaches it" if rs is None else
                    f"{r.replica_seconds / 60:.0f} vs static {static[0]} replicas' {st.replica_seconds / 60:.0f} = {rs:.2f}x"))
        parts, worst, comparable = [], None, 0
        for b in baselines:
            rb = ratio(r, b.best)
            if rb is None:
                parts.append(f"{b.default.name}: never reaches {goal:.0%}")
                continue
            comparable += 1
            worst = rb if worst is None else max(worst, rb)
            parts.append(f"{b.default.name} {rb:.2f}x")
        ok = None if comparable == 0 else worst <= BASELINE_RATIO
        out.append((f"{tag} <= {BASELINE_RATIO}x every baseline at equal attainment", ok, "; ".join(parts)))
    return out + _live_targets(live)


def print_targets(rows: list[tuple[str, bool | None, str]], title: str) -> None:
    """The targets as a table: met / NOT MET / n/a, the target, the figures."""
    print(f"\n{title}")
    for what, ok, detail in rows:
        print(f"  [{_met(ok):7}] {what}: {detail}")
