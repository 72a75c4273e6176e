"""Figures of the serving placement benchmark: per-phase summary, the table, the targets of
issue 13 met or not with the reason, and the PNG."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from e2e.bench.lib.plots import pyplot
from e2e.bench.lib.stats import percentile as pct
from e2e.bench.serving.observe import PARTIAL_GRACE_S, Observer

__all__ = ["PhaseResult", "plot", "print_table", "summarize", "verdicts"]

RETIRE_STUCK_S = 30.0
"""A group being deleted that still has a bound pod this long after its first pod went is
reported (a partial group left behind)."""


@dataclass
class PhaseResult:
    """One phase's observer and what else the bench recorded about it."""

    name: str
    obs: Observer
    errors: list[str] = field(default_factory=list)
    step_call_s: list[float] = field(default_factory=list)  # how long each step's API calls took
    limited: dict = field(default_factory=dict)  # kubeforge: ScalingLimited episodes and samples
    restarts: dict = field(default_factory=dict)
    ended: str = ""
    duration: float = 0.0
    notes: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


def summarize(r: PhaseResult) -> dict:
    """The figures of one phase (see the README for each definition)."""
    o = r.obs
    end = o.end or (o.samples[-1]["t"] + o.t0 if o.samples else o.t0)
    multi = [g for g in o.groups.values() if g.size > 1 and g.bound_at is not None]
    one = [g for g in multi if len({o.node_clique.get(n) for n in g.nodes}) == 1]
    eps = [(g, e) for g in o.groups.values() for e in g.episodes]
    long_eps = [(g, e) for g, e in eps if e[1] > PARTIAL_GRACE_S]
    pending = [g for g in o.groups.values()
               if (g.bound_at or end) - g.first_seen > PARTIAL_GRACE_S
               and not (g.retiring is not None and g.retiring - g.first_seen <= PARTIAL_GRACE_S)]
    stuck = [g for g in o.groups.values() if g.retiring is not None and g.bound() and end - g.retiring > RETIRE_STUCK_S]
    dt = [b["t"] - a["t"] for a, b in zip(o.samples, o.samples[1:])]
    wait_gs = sum(d * a["waiting"]["serving"] for d, a in zip(dt, o.samples))
    wait_peak = max((s["waiting"]["serving"] for s in o.samples), default=0)
    short_gs = sum(d * a["short"] for d, a in zip(dt, o.samples))
    lat, tlat = o.ready_lat["serving"], o.ready_lat["training"]
    unserved = sum(len(q) for owner, q in o.pending.items())
    s = {
        "multi": len(multi), "in_one": len(one),
        "multi_serving": sum(1 for g in multi if g.kind == "serving"),
        "in_one_serving": sum(1 for g in one if g.kind == "serving"),
        "partial_gpu_s": sum(e[2] for _, e in eps), "partial_long_gpu_s": sum(e[2] for _, e in long_eps),
        "partial_eps": len(eps), "partial_long_groups": len({g.key for g, _ in long_eps}),
        "partial_max_s": max((e[1] for _, e in eps), default=0.0),
        "partial_peak_gpus": max((x["partial_gpus"] for x in o.samples), default=0),
        "partial_end": o.samples[-1]["partial"] if o.samples else 0,
        "pending_groups": len(pending), "pending_serving": sum(1 for g in pending if g.kind == "serving"),
        "wait_group_s": wait_gs, "wait_peak": wait_peak, "short_group_s": short_gs,
        "asked_group_s": sum(d * a["asked"]["serving"] for d, a in zip(dt, o.samples)),
        "limited_episodes": r.limited.get("episodes"),
        "p50": pct(lat, 50), "p95": pct(lat, 95), "max": max(lat, default=math.nan), "served": len(lat),
        "asks": o.asks["made"], "cancelled": o.asks["cancelled"], "unserved": unserved,
        "t_p50": pct(tlat, 50), "t_p95": pct(tlat, 95), "t_served": len(tlat),
        "gangs": sum(1 for k in o.gang_created), "down": o.asks["down"],
        "lost_deleted": o.lost["deleted"]["serving"], "lost_unready": o.lost["unready"]["serving"],
        "overcommit": len(o.overcommit), "stuck": [g.key for g in stuck],
        "groups_seen": len(o.groups),
    }
    adm = r.limited.get("admitted") or {}
    parts: dict[str, list[float]] = {"ask -> admitted": [], "admitted -> pods created": [], "pods created -> Ready": []}
    for g in o.groups.values():
        if g.ask_at is None or g.created_ts is None or g.ready_at is None:
            continue
        # the group's own admission: the latest admittedAt of its name up to its pods' creation
        a = max((x for x in adm.get(g.key.split("#")[0], ()) if x <= g.created_ts + 1), default=None)
        if a is None:
            continue
        parts["ask -> admitted"].append(a - (g.ask_at + o.wall))
        parts["admitted -> pods created"].append(g.created_ts - a)
        parts["pods created -> Ready"].append(g.ready_at + o.wall - g.created_ts)
    s["breakdown"] = parts if any(parts.values()) else None
    r.summary = s
    return s


def _f(x: float, nd: int = 2) -> str:
    """``x`` with ``nd`` decimals; ``-`` for None or NaN."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def print_table(results: list[PhaseResult]) -> None:
    """The per-phase table, one column per phase."""
    w = 24
    print(f"\n  {'':58}" + "".join(f"{r.name:>{w}}" for r in results))

    def row(label: str, fn) -> None:
        print(f"  {label:58}" + "".join(f"{fn(r.summary, r):>{w}}" for r in results))

    row("multi-pod groups fully bound (serving + gangs)", lambda s, r: f"{s['multi']}")
    row("  inside one NVLink domain", lambda s, r: f"{s['in_one']} ({100 * s['in_one'] / max(1, s['multi']):.0f}%)")
    row("  serving 2-node groups inside one domain", lambda s, r: f"{s['in_one_serving']}/{s['multi_serving']}")
    row("GPU-s held by partial groups (all episodes)", lambda s, r: _f(s["partial_gpu_s"], 1))
    row(f"  of which in episodes > {PARTIAL_GRACE_S:.0f} s", lambda s, r: _f(s["partial_long_gpu_s"], 1))
    row(f"groups partial > {PARTIAL_GRACE_S:.0f} s (episodes in all)", lambda s, r: f"{s['partial_long_groups']} ({s['partial_eps']})")
    row("  longest partial episode, s", lambda s, r: _f(s["partial_max_s"], 1))
    row("  peak GPUs held by partial groups / partial at end", lambda s, r: f"{s['partial_peak_gpus']} / {s['partial_end']}")
    row(f"groups with pods not all bound > {PARTIAL_GRACE_S:.0f} s (left Pending)", lambda s, r: f"{s['pending_groups']} ({s['pending_serving']} serving)")
    row("ScalingLimited InsufficientCapacity episodes", lambda s, r: "-" if s["limited_episodes"] is None else f"{s['limited_episodes']}")
    row("serving group-s asked but not placed / peak groups", lambda s, r: f"{s['wait_group_s']:.0f} / {s['wait_peak']}")
    row("serving group-s asked but not Ready (% of asked)",
        lambda s, r: f"{s['short_group_s']:.0f} ({100 * s['short_group_s'] / max(1e-9, s['asked_group_s']):.1f}%)")
    row("replica asks made / served (Ready) / cancelled / open", lambda s, r: f"{s['asks']}/{s['served']}/{s['cancelled']}/{s['unserved']}")
    row("ask -> serving group Ready p50, s", lambda s, r: _f(s["p50"]))
    row("ask -> serving group Ready p95, s", lambda s, r: _f(s["p95"]))
    row("ask -> serving group Ready max, s", lambda s, r: _f(s["max"]))
    row("replicas scaled down / Ready groups deleted / went unready",
        lambda s, r: f"{s['down']}/{s['lost_deleted']}/{s['lost_unready']}")
    row("training gangs created / Ready", lambda s, r: f"{s['gangs']}/{s['t_served']}")
    row("create -> gang Ready p50 / p95, s", lambda s, r: f"{_f(s['t_p50'])} / {_f(s['t_p95'])}")
    row("node over-commit samples (GPUs > allocatable)", lambda s, r: f"{s['overcommit']}")
    row(f"groups deleted but holding a bound pod > {RETIRE_STUCK_S:.0f} s", lambda s, r: f"{len(s['stuck'])}")
    row("bench API calls per step p50 / max, s", lambda s, r: f"{_f(pct(r.step_call_s, 50))} / {_f(max(r.step_call_s, default=math.nan))}")
    row("API errors (bench) / watch restarts", lambda s, r: f"{len(r.errors)} / {sum(r.restarts.values())}")
    for r in results:
        print(f"  {r.name}: ended: {r.ended} ({r.duration:.0f} s)")
        for e in r.errors[:3]:
            print(f"    error: {e}")
        if r.summary["stuck"]:
            print(f"    groups deleted but still holding: {r.summary['stuck'][:6]}")
        for msg in (r.limited.get("messages") or [])[:2]:
            print(f"    ScalingLimited: {msg[:230]}")
        if r.summary.get("breakdown"):
            print(f"    {r.name}: where an ask's time goes (served groups; admittedAt and creationTimestamp are the API "
                  "server's, truncated to 1 s): " + "; ".join(
                      f"{k} p50 {_f(pct(v, 50), 1)} s p95 {_f(pct(v, 95), 1)} s" for k, v in r.summary["breakdown"].items()))


def verdicts(kf: dict | None, base: dict | None) -> list[tuple[str, bool | None, str]]:
    """Issue 13's targets: (target, met (None: not measured), why)."""
    out: list[tuple[str, bool | None, str]] = []
    if kf is None:
        return [("every target", None, "no kubeforge phase in this run")]
    frac = kf["in_one"] / kf["multi"] if kf["multi"] else math.nan
    out.append(("100 % of groups in one NVLink domain", kf["multi"] > 0 and kf["in_one"] == kf["multi"],
                f"{kf['in_one']} of {kf['multi']} multi-pod groups ({100 * frac:.0f}%)"
                + (f"; baseline {base['in_one']} of {base['multi']}" if base else "")))
    tot, long_ = kf["partial_gpu_s"], kf["partial_long_gpu_s"]
    out.append(("0 GPU-seconds held by partial groups", long_ == 0 and kf["partial_end"] == 0,
                f"{long_:.1f} GPU-s in groups left partial > {PARTIAL_GRACE_S:.0f} s ({kf['partial_long_groups']} groups); "
                f"{tot:.1f} GPU-s in all, the rest between kube-scheduler's binds of one group's pods "
                f"(longest {kf['partial_max_s']:.1f} s)" + (f"; baseline {base['partial_gpu_s']:.0f} GPU-s, "
                                                            f"{base['partial_long_groups']} groups left partial" if base else "")))
    if base is None or math.isnan(base["p50"]) or math.isnan(kf["p50"]):
        out.append(("group Ready p50 within 1.5x of the baseline's", None, "no baseline phase (or no group Ready) in this run"))
    else:
        ratio = kf["p50"] / base["p50"] if base["p50"] > 0 else math.inf
        out.append(("group Ready p50 within 1.5x of the baseline's", ratio <= 1.5,
                    f"kubeforge {kf['p50']:.2f} s vs baseline {base['p50']:.2f} s = {ratio:.2f}x; the baseline's p50 is "
                    f"over the {base['served']} of {base['asks']} asks it served (kubeforge {kf['served']} of {kf['asks']})"))
    return out


def plot(results: list[PhaseResult], path: Path, title: str) -> str | None:
    """Draw asked vs Ready (serving groups, training gangs) and GPU-seconds held by partial
    groups over time, one line per phase; returns the path, or why not."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(3, 1, figsize=(9, 8.5), sharex=True)
    colors = {"kubeforge": "tab:blue", "baseline": "tab:orange"}
    for i, r in enumerate(results):
        s = r.obs.samples
        if not s:
            continue
        t = [x["t"] for x in s]
        c = colors.get(r.name, f"C{i + 2}")
        if i == 0:
            ax[0].step(t, [x["asked"]["serving"] for x in s], where="post", color="black", lw=1.2, label="replicas asked")
            ax[1].step(t, [x["asked"]["training"] for x in s], where="post", color="black", lw=1.2, label="gangs asked")
        ax[0].plot(t, [x["ready"]["serving"] for x in s], color=c, label=f"{r.name}: groups Ready")
        ax[1].plot(t, [x["ready"]["training"] for x in s], color=c, label=f"{r.name}: gangs Ready")
        cum, acc = [], 0.0
        for a, b in zip([s[0]] + s, s):
            acc += a["partial_gpus"] * (b["t"] - a["t"])
            cum.append(acc)
        ax[2].plot(t, cum, color=c, label=f"{r.name}: cumulative GPU-s")
        ax[2].plot(t, [x["partial_gpus"] for x in s], color=c, lw=0.7, ls=":", label=f"{r.name}: GPUs held now")
    ax[0].set_ylabel("serving replica groups")
    ax[1].set_ylabel("training gangs")
    ax[2].set_ylabel("held by partial groups")
    ax[2].set_xlabel("seconds since the phase started (same step schedule in every phase)")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return str(path)
