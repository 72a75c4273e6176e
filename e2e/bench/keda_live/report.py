"""The bench's printed figures: kubeforge against real KEDA + HPA on the same segment, and the
verdict against issue 28's live target."""

from __future__ import annotations

from e2e.bench.keda_live.summary import Figures, SystemFigures
from e2e.bench.lib.tables import Columns

__all__ = ["report"]


def _f(x: float | None, spec: str) -> str:
    return "n/a" if x is None or x != x else format(x, spec)


def report(f: Figures) -> None:
    """Print ``f``: one column per system, the scale timeline of each, the verdict, the load."""
    systems: dict[str, SystemFigures | None] = {"kubeforge": f.kubeforge, f"KEDA v{f.settings.get('keda_version')} + HPA": f.keda}
    seg = f.segment
    slo = (f.kubeforge or f.keda).ttft_slo if (f.kubeforge or f.keda) else float("nan")
    print(f"\nlive, trace minutes {seg['start_min']:g}-{seg['end_min']:g} time-compressed {seg['compression']:g}x "
          f"({seg['trace']}); figures in trace time:")
    t = Columns(systems, 44, 22)
    t.header()
    rows = [
        ("requests (completed)", lambda s: f"{s.requests} ({s.completed})"),
        (f"TTFT <= {slo:g}s attainment (all requests)", lambda s: _f(s.attainment * 100, ".2f") + "%"),
        ("GPU replica-minutes (pods that exist)", lambda s: _f(s.replica_minutes, ".1f")),
        ("replica-minutes asked for", lambda s: _f(s.asked_replica_minutes, ".1f")),
        ("aborted requests", lambda s: str(s.aborted)),
        ("TTFT p50 / p99, s", lambda s: f"{_f(s.ttft_p50, '.2f')} / {_f(s.ttft_p99, '.2f')}"),
        ("queue wait p95, s", lambda s: _f(s.wait_p95, ".2f")),
        ("max pods; changes asked (reversals)", lambda s: f"{s.max_replicas}; {s.changes} ({s.reversals})"),
        ("load average at start / end", lambda s: f"{_f(s.load[0], '.1f')} / {_f(s.load[1], '.1f')}"),
    ]
    for label, cell in rows:
        t.row(label, [cell(s) if s is not None else "not run" for s in systems.values()])
    for name, s in systems.items():
        if s is not None and s.timeline:
            steps = " ".join(f"{tt:g}s:{a}/{r}/{rd}" for tt, a, r, rd in s.timeline[:40])
            print(f"  {name} (t trace s: asked/pods/ready): {steps}{' ...' if len(s.timeline) > 40 else ''}")
    for name, s in systems.items():
        if s is None:
            continue
        rises = " ".join(f"{o['need']:g}s->{o['asked']:g}s ({o['before']}->{o['after']}, queue {o['queue']}, "
                         f"read {_f(o['seen'], 'g')})" for o in s.onsets[:8])
        print(f"  {name} rises (queue beyond what is asked for -> asks more, trace s): {rises or 'none'}")
        missed = " ".join(f"{b:g}s:{n - ok}/{n}" for b, n, ok in s.by_arrival if n - ok)
        if s.by_arrival:
            print(f"  {name} misses by arrival (trace s bin: missed/arrived): {missed or 'none'}")
        if s.polls:
            p = s.polls
            print(f"  {name} decisions: {p['decisions']:g} in {p['seconds']:g} s wall, one every "
                  f"{_f(p['mean_interval_s'], '.2f')} s, longest gap {p['longest_gap_s']:g} s")
    for k, v in f.settings.items():
        print(f"  {k}: {v}")
    what = "kubeforge >= real KEDA + HPA's attainment at <= its replica-minutes, 0 aborted"
    if f.met is None:
        print(f"\ntarget (issue 28, live): {what}: n/a (one system has no figures)")
    else:
        k, e = f.kubeforge, f.keda
        print(f"\ntarget (issue 28, live): {what}: {'met' if f.met else 'NOT MET'} (kubeforge {k.attainment:.2%} at "
              f"{k.replica_minutes:.1f} rep-min, {k.aborted} aborted; KEDA + HPA {e.attainment:.2%} at "
              f"{e.replica_minutes:.1f} rep-min, {e.aborted} aborted)")
    print(f"{f.machine} ({f.when})")
