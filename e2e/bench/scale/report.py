"""What the scale bench prints and draws: one row per size (each round's CPU, what it decided,
the cold round's CPU per placed job against issue 16's 20 ms target), the growth between sizes
as an exponent (1: linear), the memory at the largest queue against 1 GiB, and a PNG of the
rounds' CPU against nodes and against queued gangs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from e2e.bench.lib.plots import NO_MATPLOTLIB, pyplot
from e2e.bench.lib.tables import Columns
from e2e.bench.scale.rounds import ROUNDS

__all__ = ["CPU_TARGET_MS", "NO_MATPLOTLIB", "RSS_TARGET_MIB", "exponent", "per_placed_ms", "plot", "print_growth", "print_memory",
           "print_rows"]

CPU_TARGET_MS = 20.0
"""Issue 16's target: at most 20 ms of the operator's CPU per placed job (all of it; the pure
round is one part)."""
RSS_TARGET_MIB = 1024.0
"""Issue 31's target: at most 1 GiB RSS at 50,000 jobs."""
ISSUE16_MS = "42-47"
"""The operator's whole CPU per placed job that issue 16's profile measured (1,024 nodes, live)."""


def per_placed_ms(row: dict, rnd: str = "cold") -> float:
    """CPU milliseconds of round ``rnd`` per gang it admitted (nan when it admitted none)."""
    r = row[rnd]
    return 1000 * r["cpu_s"] / r["admitted"] if r["admitted"] else float("nan")


def exponent(x0: float, y0: float, x1: float, y1: float) -> float:
    """The growth exponent between two sizes, ``log(y1/y0) / log(x1/x0)``: 1 is linear, 2
    quadratic (nan when a value is not positive or the sizes are equal)."""
    if min(x0, y0, x1, y1) <= 0 or x0 == x1:
        return float("nan")
    return math.log(y1 / y0) / math.log(x1 / x0)


def print_rows(rows: Sequence[dict], baseline: dict | None) -> None:
    """The table: one column per size, the baseline size's column first when measured."""
    cols = Columns([f"{r['nodes']}n x {r['jobs']}j" for r in rows], 46, 16)
    cols.header()
    cols.row("GPUs / GPUs the queue asks for", [f"{r['gpus']}/{r['gpus_asked']}" for r in rows])
    cols.row("parse the jobs' specs, CPU s (once per job)", [f"{r['parse_cpu_s']:.2f}" for r in rows])
    if any(r.get("late") for r in rows):
        cols.row("late gangs (--preemptible), of the queued", [str(r.get("late", 0)) for r in rows])
    for rnd in ROUNDS:
        cols.row(f"{rnd} round CPU s (wall s)", [f"{r[rnd]['cpu_s']:.3f} ({r[rnd]['wall_s']:.2f})" for r in rows])
        cols.row(f"  admitted / waiting / preempting",
                 [f"{r[rnd]['admitted']}/{r[rnd]['waiting']}/{r[rnd]['preempting']}" for r in rows])
        if any(r.get("late") for r in rows):
            cols.row("  running gangs they preempt (victims)", [str(r[rnd].get("victims", 0)) for r in rows])
    cols.row("cold round CPU ms per placed job", [f"{per_placed_ms(r):.2f}" for r in rows])
    cols.row(f"  vs target <= {CPU_TARGET_MS:g} ms (whole operator)",
             ["met" if per_placed_ms(r) <= CPU_TARGET_MS else "NOT met" for r in rows])
    if baseline is not None:
        b = baseline["cold"]["cpu_s"]
        cols.row(f"cold round CPU / baseline's ({baseline['nodes']}n x {baseline['jobs']}j)",
                 [f"{r['cold']['cpu_s'] / b:.1f}x" if b > 0 else "-" for r in rows])


def print_growth(rows: Sequence[dict], along: str, fixed: str) -> None:
    """Exponents of each round's CPU between consecutive sizes of the rows that vary ``along``
    (``nodes`` or ``jobs``) with ``fixed`` held."""
    rows = sorted(rows, key=lambda r: r[along])
    if len(rows) < 2:
        return
    print(f"  growth with {along} ({fixed} {rows[0][fixed]}): exponent of CPU between sizes (1 = linear)")
    for a, b in zip(rows, rows[1:]):
        parts = [f"{rnd} {exponent(a[along], a[rnd]['cpu_s'], b[along], b[rnd]['cpu_s']):.2f}" for rnd in ROUNDS]
        per = exponent(a[along], per_placed_ms(a), b[along], per_placed_ms(b))
        print(f"    {a[along]:>6} -> {b[along]:<6} {', '.join(parts)}; cold CPU per placed job {per:.2f}")


def print_memory(mem: dict | None, heap: dict | None) -> None:
    """The memory figure (:mod:`e2e.bench.scale.memory`'s two runs) against 1 GiB."""
    if not mem and not heap:
        print("  memory: not measured (--memory-jobs 0)")
        return
    if mem:
        ok = "met" if mem["rss_peak_mib"] <= RSS_TARGET_MIB else "NOT met"
        print(f"  memory at {mem['jobs']} jobs, {mem['nodes']} nodes (own process, after a cold round): RSS "
              f"{mem['rss_start_mib']:.0f} MiB at start (interpreter, kubeforge, the trace) -> {mem['rss_mib']:.0f} MiB "
              f"after, peak {mem['rss_peak_mib']:.0f} MiB; target <= {RSS_TARGET_MIB:.0f} MiB: {ok}")
    if heap:
        print(f"  Python heap (tracemalloc, another run): held after the round {heap['heap_held_mib']:.0f} MiB "
              f"({1024 * 1024 * heap['heap_held_mib'] / max(1, heap['jobs']):.0f} bytes a job), peak during it "
              f"{heap['heap_peak_mib']:.0f} MiB")


def plot(rows: Sequence[dict], out: Path) -> str:
    """Two panels, log-log: each round's CPU against nodes (rows of the most common job count)
    and against queued gangs (rows of the most common node count), with a linear guide. Returns
    the line to print (the file, or why none)."""
    plt = pyplot()
    if plt is None:
        return f"  plot: {NO_MATPLOTLIB}"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, along, fixed in ((axes[0], "nodes", "jobs"), (axes[1], "jobs", "nodes")):
        common = max({r[fixed] for r in rows}, key=lambda v: sum(1 for r in rows if r[fixed] == v))
        sel = sorted((r for r in rows if r[fixed] == common), key=lambda r: r[along])
        xs = [r[along] for r in sel]
        for rnd, marker in zip(ROUNDS, "osvd"):
            ys = [max(r[rnd]["cpu_s"], 1e-4) for r in sel]
            ax.plot(xs, ys, marker=marker, label=f"{rnd} round")
        if len(sel) >= 2:
            y0 = max(sel[0]["cold"]["cpu_s"], 1e-4)
            ax.plot(xs, [y0 * x / xs[0] for x in xs], "k:", label="linear from the first")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())  # the sizes' own ticks only
        ax.set_xticks(xs, [f"{x:,}" for x in xs])
        ax.set_xlabel(f"{along} ({fixed} = {common})")
        ax.set_ylabel("CPU seconds per round")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("kubeforge admission round (pure core): CPU against fleet and queue size")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return f"  plot: {out}"
