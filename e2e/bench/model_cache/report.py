"""The model-cache bench's figures: one summary per policy, the table, issue 29's targets beside
them, the plot and the JSON. Measures and prints; asserts nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from e2e.bench.lib.plots import NO_MATPLOTLIB, pyplot
from e2e.bench.lib.stats import percentile
from e2e.bench.lib.tables import Columns

__all__ = ["hourly", "plot", "print_quality", "print_table", "print_targets", "summarize", "write_json"]

QUALITY = ("replica_ticks_short", "serving_gpu_h", "training_started")
"""The figures that say whether two policies served the same demand (equal quality)."""

FIRST_HOUR = 3600.0
TB = 1e12


def hourly(starts, hours: float) -> list[float | None]:
    """The cached share of the starts in each hour of the day (None: no start that hour)."""
    out: list[float | None] = []
    for h in range(int(hours + 0.999)):
        inside = [s for s in starts if h * 3600 <= s.t < (h + 1) * 3600]
        out.append(sum(s.cached for s in inside) / len(inside) if inside else None)
    return out


def hourly_p95(starts, hours: float) -> list[float | None]:
    """The p95 start time (s) of the starts in each hour of the day (None: no start that hour)."""
    out: list[float | None] = []
    for h in range(int(hours + 0.999)):
        inside = [s.seconds for s in starts if h * 3600 <= s.t < (h + 1) * 3600]
        out.append(percentile(inside, 95) if inside else None)
    return out


def summarize(run: dict, hours: float) -> dict:
    """The figures of one policy's run (:func:`e2e.bench.model_cache.replay.run_policy`)."""
    starts = run["starts"]
    later = [s for s in starts if s.t >= FIRST_HOUR]
    secs = [s.seconds for s in starts]
    caches = run["caches"]
    oracle = run["policy"] == "oracle"
    waits = run["train_waits"]
    return {
        "policy": run["policy"],
        "starts": len(starts),
        "starts_after_first_hour": len(later),
        "cached": sum(s.cached for s in starts) / len(starts) if starts else float("nan"),
        "cached_after_first_hour": sum(s.cached for s in later) / len(later) if later else float("nan"),
        "p50_s": percentile(secs, 50),
        "p95_s": percentile(secs, 95),
        "p95_after_first_hour_s": percentile([s.seconds for s in later], 95),
        "bytes": 0 if oracle else caches.bytes,
        "prewarm_bytes": caches.prewarm_bytes,
        "max_downloads_node_model": max(caches.downloads.values(), default=0),
        "refetches_after_eviction": sum(caches.refetches.values()),
        "evictions": len(caches.evicted),
        "disk_full": caches.disk_full,
        "warmed": caches.warmed,
        "unschedulable_because_of_cache": run["because_of_cache"],
        "replica_ticks_short": run["short"],
        "serving_gpu_h": run["serving_gpu_h"],
        "training_started": len(waits),
        "training_wait_mean_min": sum(waits) / len(waits) / 60 if waits else 0.0,
        "training_queued_at_end": run["train_queued_at_end"],
        "hourly_cached": hourly(starts, hours),
        "hourly_p95_s": hourly_p95(starts, hours),
    }


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f} %"


def print_table(rows: Sequence[dict]) -> None:
    """One column per policy."""
    t = Columns([r["policy"] for r in rows], 44, 24)
    t.header()
    lines = [
        ("replica starts (after the first hour)", lambda r: f"{r['starts']} ({r['starts_after_first_hour']})"),
        ("starts cached, all day", lambda r: _pct(r["cached"])),
        ("starts cached, after the first hour", lambda r: _pct(r["cached_after_first_hour"])),
        ("start p50 / p95 (s)", lambda r: f"{r['p50_s']:.0f} / {r['p95_s']:.0f}"),
        ("start p95 after the first hour (s)", lambda r: f"{r['p95_after_first_hour_s']:.0f}"),
        ("downloaded in the day (TB)", lambda r: f"{r['bytes'] / TB:.2f}"),
        ("fetched before the day (TB)", lambda r: f"{r['prewarm_bytes'] / TB:.2f}"),
        ("copies fetched ahead (forecast warm)", lambda r: str(r["warmed"])),
        ("max downloads of one model on one node", lambda r: str(r["max_downloads_node_model"])),
        ("  of which after an LRU eviction (all)", lambda r: str(r["refetches_after_eviction"])),
        ("copies evicted (node x model)", lambda r: str(r["evictions"])),
        ("pods unschedulable because of the cache", lambda r: str(r["unschedulable_because_of_cache"])),
        ("replica x ticks short (no room in the pool)", lambda r: str(r["replica_ticks_short"])),
        ("serving GPU-hours", lambda r: f"{r['serving_gpu_h']:.0f}"),
        ("training gangs started / mean wait (min)",
         lambda r: f"{r['training_started']} / {r['training_wait_mean_min']:.1f}"),
        ("training gangs still queued at the end", lambda r: str(r["training_queued_at_end"])),
    ]
    for label, cell in lines:
        t.row(label, [cell(r) for r in rows])


def print_quality(rows: Sequence[dict]) -> None:
    """Whether every policy served what the first one did (shortfall, serving GPU-hours, training
    gangs started): placements differ by design, the quality may not."""
    first = rows[0]
    same = [r["policy"] for r in rows if all(abs(r[q] - first[q]) < 1e-6 for q in QUALITY)]
    other = [r["policy"] for r in rows if r["policy"] not in same]
    print(f"\nplacements differ by design (kubeforge prefers cached nodes, KServe's scheduler spreads); equal quality "
          f"(same shortfall, serving GPU-hours, training gangs started) as {first['policy']}: {', '.join(same)}"
          + (f"; not: {', '.join(other)}" if other else ""))


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_targets(rows: Sequence[dict]) -> None:
    """Issue 29's targets against kubeforge's figures (and the baseline's p95)."""
    by = {r["policy"]: r for r in rows}
    kf, base = by.get("kubeforge"), by.get("kserve-localmodelcache")
    if kf is None:
        return
    print("\nissue 29's targets (kubeforge):")
    c = kf["cached_after_first_hour"]
    print(f"  >= 90 % of starts cached after the first hour: {_pct(c)}  {_mark(c >= 0.9)}")
    if base is not None:
        ratio = kf["p95_s"] / base["p95_s"]
        print(f"  start p95 <= 0.2x the cache-blind baseline's: {kf['p95_s']:.0f} s / {base['p95_s']:.0f} s = "
              f"{ratio:.2f}x  {_mark(ratio <= 0.2)}")
        if "oracle" in by:
            bound = by["oracle"]["p95_s"] / base["p95_s"]
            print(f"    (the bound, every start cached: {by['oracle']['p95_s']:.0f} s = {bound:.2f}x; imports and "
                  "engine init are paid cached or cold)")
    m = kf["max_downloads_node_model"]
    print(f"  each model downloaded at most once per node: max {m} "
          f"({kf['refetches_after_eviction']} fetched again after an LRU eviction)  {_mark(m <= 1)}")
    u = kf["unschedulable_because_of_cache"]
    print(f"  0 pods unschedulable because of the cache: {u}  {_mark(u == 0)}")


def plot(rows: Sequence[dict], path: Path, title: str) -> str:
    """Cached share and p95 start time per hour, per policy, into ``path``; one line saying so."""
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    fig, (a, b) = plt.subplots(2, 1, figsize=(11, 8), sharex=True)
    for row in rows:
        hours = [h + 0.5 for h, v in enumerate(row["hourly_cached"]) if v is not None]
        a.plot(hours, [100 * v for v in row["hourly_cached"] if v is not None], marker="o", ms=3,
               label=row["policy"])
        hours = [h + 0.5 for h, v in enumerate(row["hourly_p95_s"]) if v is not None]
        b.plot(hours, [v / 60 for v in row["hourly_p95_s"] if v is not None], marker="o", ms=3,
               label=row["policy"])
    a.axhline(90, color="grey", ls=":", lw=1)
    a.set_ylabel("starts cached in the hour (%)")
    a.set_ylim(-2, 102)
    a.legend(fontsize=8)
    a.set_title(title, fontsize=9)
    b.set_yscale("log")
    b.set_ylabel("p95 start to serving-ready in the hour (min)")
    b.set_xlabel("hour of the day")
    b.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"


def write_json(rows: Sequence[dict], meta: dict, path: Path) -> str:
    """Every figure and the run's parameters into ``path``; one line saying so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run": meta, "policies": list(rows)}, indent=1) + "\n")
    return f"figures: {path}"
