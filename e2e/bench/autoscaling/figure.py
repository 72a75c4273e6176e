"""The figure of one run: replicas against demand, one panel per autoscaler and one for the oracle.

Demand is what each interval's arrivals need (the oracle's ``need_i``: the fewest replicas at
which the interval misses no more requests than at ``maxReplicas``; its busiest minute's when
a point covers 10 minutes), drawn as a grey area;
each panel draws the replicas its autoscaler paid for (starting, serving, draining) at its
default setting, and, dashed, at the cheapest setting that reached the goal when that differs.
Per minute, or per 10 minutes for runs longer than 4 h.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from e2e.bench.autoscaling.oracle import OracleResult
from e2e.bench.autoscaling.result import Result
from e2e.bench.autoscaling.sweep import Swept
from e2e.bench.lib.plots import pyplot

__all__ = ["plot"]


def _replicas(r: Result, width: float) -> tuple[list[float], list[float]]:
    """Mean replicas existing per ``width`` s: ``(starts, means)``."""
    by: dict[int, list[int]] = {}
    for t, n, *_ in r.timeline:
        by.setdefault(int(t // width), []).append(n)
    keys = sorted(by)
    return [k * width for k in keys], [sum(by[k]) / len(by[k]) for k in keys]


def _demand(need: list[int], interval: float, width: float) -> tuple[list[float], list[float]]:
    """``need`` (per ``interval``) as the most per ``width`` s: what its busiest minute needs."""
    per = max(1, int(round(width / interval)))
    xs, ys = [], []
    for k in range(0, len(need), per):
        xs.append(k * interval)
        ys.append(max(need[k:k + per]))
    return xs, ys


def plot(path: Path, title: str, swept: list[Swept], orc: OracleResult, ttft: float, interval: float = 60.0) -> str | None:
    """Draw the run's figure to ``path``; returns the path, or None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    end = orc.result.timeline[-1][0] if orc.result.timeline else 0.0
    long_run = end > 4 * 3600
    width, scale, unit = (600.0, 3600.0, "h") if long_run else (interval, 60.0, "min")
    rows: list[tuple[Result, Result | None]] = [(orc.result, None)]
    rows += [(s.default, s.best if s.best is not None and s.best is not s.default else None) for s in swept]
    fig, axes = plt.subplots(len(rows), 1, figsize=(9, 1.25 * len(rows) + 0.9), sharex=True, sharey=True, dpi=80)
    dx, dy = _demand(orc.need, interval, width)
    top = max(dy + [1])
    for i, (ax, (r, best)) in enumerate(zip(axes, rows)):
        ax.fill_between([x / scale for x in dx], dy, step="post", color="0.8", linewidth=0,
                        label="demand (replicas the busiest minute needs)" if long_run else "demand (replicas needed)")
        xs, ys = _replicas(r, width)
        ax.step([x / scale for x in xs], ys, where="post", color=f"C{i}", linewidth=1.2,
                label=f"{'schedule' if r is orc.result else r.knob}: {r.attainment(ttft):.1%}, "
                      f"{r.replica_seconds / 60:.0f} rep-min")
        top = max(top, max(ys + [0]))
        if best is not None:
            bx, by = _replicas(best, width)
            ax.step([x / scale for x in bx], by, where="post", color=f"C{i}", linestyle="--", linewidth=0.9,
                    label=f"{best.knob}: {best.attainment(ttft):.1%}, {best.replica_seconds / 60:.0f} rep-min")
            top = max(top, max(by + [0]))
        ax.set_title(r.name if r is not orc.result else "oracle (perfect foresight, same start)", fontsize=8, loc="left")
        ax.legend(fontsize=6, loc="upper right")
        ax.tick_params(labelsize=7)
    axes[0].set_ylim(0, top * 1.15 + 0.5)
    axes[-1].set_xlabel(f"time ({unit}); replicas: mean per {'10 min' if long_run else 'minute'}", fontsize=8)
    fig.suptitle(textwrap.fill(title, 110), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return str(path)
