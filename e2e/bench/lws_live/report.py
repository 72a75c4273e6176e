"""The bench's printed figures: create -> Ready per system, the ratio against issue 28's target,
where each system's time goes, the machine's load."""

from __future__ import annotations

from e2e.bench.lib.tables import Columns
from e2e.bench.lws_live.summary import PHASES, TARGET, Figures, SystemFigures

__all__ = ["report"]

_LABELS = {"admitted": "create -> admitted (status.groups[].admittedAt)", "created": "create -> all pods created",
           "bound": "create -> all pods bound", "ready": "create -> all pods Ready"}


def _s(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.2f}"


def report(f: Figures, restarts: dict[str, int]) -> None:
    """Print ``f``: per system p50 / p95 of create -> Ready and of each phase, the ratio, the load."""
    systems: dict[str, SystemFigures] = {"kubeforge": f.kubeforge, "LWS v0.7.0": f.lws}
    print(f"\nmulti-node group create -> every pod Ready, s ({f.replicas} groups x {f.size} pods x {f.gpus} GPUs a "
          f"round, {f.rounds} rounds a system; p50 / p95 over groups, nearest rank):")
    t = Columns(systems, 58, 16)
    t.header()
    t.row("groups measured (timed out)", [f"{s.groups} ({s.timed_out})" for s in systems.values()])
    for ph in PHASES:
        cells = [f"{_s(s.phases[ph][0])} / {_s(s.phases[ph][1])}" if ph in s.phases else "n/a"
                 for s in systems.values()]
        t.row(_LABELS[ph] + ", p50 / p95", cells)
    for name, s in systems.items():
        if s.samples:
            print(f"  {name} every group, s: " + " ".join(f"{x:.2f}" for x in s.samples))
    if f.ratio is None:
        print(f"\ntarget (issue 28): kubeforge's p50 <= {TARGET}x real LWS's: n/a (one system has no figure)")
    else:
        print(f"\ntarget (issue 28): kubeforge's p50 <= {TARGET}x real LWS's: {f.kubeforge.p50:.2f}s vs "
              f"{f.lws.p50:.2f}s = {f.ratio:.2f}x: {'met' if f.met else 'NOT MET'}")
    print(f"machine load average (1 min): {f.load[0]:.1f} at the start, {f.load[1]:.1f} at the end ({f.when})")
    if restarts:
        print("watch restarts (an event missed while a watch was down is lost): "
              + ", ".join(f"{k} {v}" for k, v in sorted(restarts.items())))
