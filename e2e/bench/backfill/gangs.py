"""The backfill bench's gang log: what happened to each large gang under one strategy, round by
round, through the real admission core (:func:`e2e.bench.backfill.replay.simulate`'s ``observe``).

For each large gang (and the small jobs named by ``--follow``) it prints a line whenever its state
changes: its wait reason, the domain and nodes of its reservation and the reservation's expected
start, how many jobs ahead of it in the queue (older) still wait, and who was admitted onto its
reserved nodes (older jobs, or newer ones backfilling); then when it started, where, and how that
compares with the first and the last expected start. On rounds where a waiting gang has no
reservation it names who holds the pool's reservations and, per block, the nodes fully free and
those holding a job whose end is unknown (no ETA yet, no ``maxRunSeconds``). When a large gang is
first seen waiting it prints its *drain bound*: how long until 8 nodes of one block are free if
nothing more were admitted, from the running jobs' true ends (what no policy without preemption
can beat from that state).

Run: ``python -m e2e.bench.backfill.gangs [--strategy Backfill] [bench flags]``.
"""

from __future__ import annotations

import argparse
import json
import sys

from kubeforge.admission import AdmissionPlan, QueueingStrategy, expected_end
from kubeforge.objects import parse_time

from e2e.bench.backfill.cli import parse_args
from e2e.bench.backfill.replay import simulate
from e2e.bench.backfill.workload import BLOCK, fleet, load_jobs
from e2e.bench.lib.replay import T0


class GangLog:
    """Collects the large gangs' states per round (the ``observe`` callback) and prints changes."""

    def __init__(self, nodes: int, grace: float = 300.0, out=sys.stdout) -> None:
        self.block = {n: node.labels[BLOCK] for n, node in fleet(nodes).items()}
        self.grace, self.out = grace, out
        self.state: dict[str, tuple] = {}
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.hops: dict[str, int] = {}
        self.follow: set[str] = set()
        self.work: dict[str, float] = {}  # true run seconds by job name (for the drain bound)
        self.bound: dict[str, float] = {}

    def __call__(self, now: float, plan: AdmissionPlan, views: dict) -> None:
        mins = (now - T0) / 60
        res = {r.key[1]: r for r in plan.reservations}
        waits = {w.key[1]: w for w in plan.wait}
        for a in plan.admit:
            name = a.key[1]
            if self._followed(name):
                doms = sorted({self.block[n] for n in a.placement.nodes})
                exp = self.first.get(name)
                self._p(mins, name, f"STARTED on {doms} ({self.hops.get(name, 0)} moves); "
                        f"first expected {self._m(exp)}, last expected {self._m(self.last.get(name))}")
        for p in plan.preempt:  # preemption for a reservation (preemptAfterSeconds)
            lost = sum(v.lost_gpu_seconds for v in p.victims) / 3600
            self._p(mins, p.key[1], f"PREEMPTS {', '.join(v.key[1] for v in p.victims)} on "
                    f"{sorted({self.block[n] for n in p.gpus_by_node})} ({lost:.1f} GPU-h at risk, as the operator "
                    f"counts it)")
        for name, w in waits.items():
            if not self._followed(name):
                continue
            self._ahead(mins, name, plan, views)
            if name not in self.bound and self.work and name.startswith("L"):
                k = sum(1 for x in waits if x.startswith("L") and x <= name)  # large gangs ahead, and itself
                self.bound[name] = self._drain(now, views, k, plan)
                self._p(mins, name, f"arrives; drain bound {self.bound[name] / 60:.0f} min (nothing more admitted, true "
                        f"ends: until the {k}th disjoint 8 free nodes of one block, {k - 1} large gangs ahead)")
            r = res.get(name)
            if r is not None:
                dom = sorted({self.block[n] for n in r.placement.gpus_by_node})
                st = ("reserved", tuple(dom), tuple(sorted(r.placement.gpus_by_node)), r.start)
                self.first.setdefault(name, r.start)
                self.last[name] = r.start
                prev = self.state.get(name)
                if prev and prev[0] == "reserved" and prev[2] != st[2]:
                    self.hops[name] = self.hops.get(name, 0) + 1
                if prev != st:
                    held = sum(r.held.values())
                    self._p(mins, name, f"reserved {dom} nodes {','.join(sorted(r.placement.gpus_by_node))} "
                            f"start {self._m(r.start)} (in {(r.start - now) / 60:.0f} min), holds {held} free GPUs, "
                            f"waits for {len(r.waits_for)} jobs" + (" [MOVED]" if prev and prev[0] == "reserved"
                                                                     and prev[2] != st[2] else ""))
                self.state[name] = st
            else:
                others = tuple(sorted(r.key[1] for r in plan.reservations))
                st = ("wait", w.reason, others)
                if self.state.get(name) != st:
                    self._p(mins, name, f"{w.reason}: no reservation (the pool's go to {list(others) or 'none'}); "
                            f"{self._why(now, views)}")
                self.state[name] = st

    def _followed(self, name: str) -> bool:
        return name.startswith("L") or name in self.follow

    def _ahead(self, mins: float, name: str, plan: AdmissionPlan, views: dict) -> None:
        """Jobs ahead of the gang in the queue (older) admitted this round onto its reserved nodes."""
        me = views[("ml", name)].record.created
        prev = self.state.get(name)
        mine = set(prev[2]) if prev and prev[0] == "reserved" else set()
        older_wait = sum(1 for w in plan.wait if views[w.key].record.created < me)
        hit = [(a.key[1], views[a.key].record.created < me) for a in plan.admit
               if mine & set(a.placement.nodes)]
        if hit or (older_wait and prev is None):
            self._p(mins, name, f"{older_wait} older jobs wait; admitted on its reserved nodes: "
                    f"{sum(1 for _, o in hit if o)} older, {sum(1 for _, o in hit if not o)} newer (backfill)")

    def _drain(self, now: float, views: dict, k: int, plan: AdmissionPlan) -> float:
        """Seconds until ``k`` disjoint sets of 8 nodes of one block are free if nothing more were
        admitted after this round (true ends): a lower bound on the wait of the ``k``-th large gang in the queue
        for any order without preemption (loose: the gangs ahead would hold their nodes)."""
        busy: dict[str, float] = {}
        for v in views.values():
            if v.placement is None:
                continue
            got = (v.status.get("placement") or {}).get("admittedAt")
            start = parse_time(got) if got else now
            for n in v.placement.nodes:
                busy[n] = max(busy.get(n, now), start + self.work[v.record.name])
        for a in plan.admit:  # what this round admits holds its nodes too
            for n in a.placement.nodes:
                busy[n] = max(busy.get(n, now), now + self.work[a.key[1]])
        groups = []
        for b in sorted(set(self.block.values())):
            ends = sorted(busy.get(n, now) for n, bb in self.block.items() if bb == b)
            groups += ends[7::8]
        return sorted(groups)[min(k, len(groups)) - 1] - now

    def _why(self, now: float, views: dict) -> str:
        """Per block: free nodes, nodes with an unknown-end job, and the 8th-soonest node-free time."""
        per: dict[str, dict[str, float | None]] = {}
        for v in views.values():
            pl = v.placement
            if pl is None:
                continue
            end = expected_end(v, now, self.grace)
            for n in pl.nodes:
                blk = per.setdefault(self.block[n], {})
                cur = blk.get(n, 0.0)
                blk[n] = None if (end is None or cur is None) else max(cur, end)
        out = []
        for b in sorted(set(self.block.values())):
            nodes = [n for n, bb in self.block.items() if bb == b]
            ends = per.get(b, {})
            free = sum(1 for n in nodes if n not in ends)
            unknown = sum(1 for n in nodes if n in ends and ends[n] is None)
            known = sorted(e for n, e in ends.items() if e is not None)
            out.append(f"{b}: {free} free, {unknown} unknown-end, {len(known)} known")
        return "; ".join(out)

    @staticmethod
    def _m(t: float | None) -> str:
        return "-" if t is None else f"{(t - T0) / 60:.0f}m"

    def _p(self, mins: float, name: str, text: str) -> None:
        print(f"{mins:6.0f}m {name} {text}", file=self.out)


def main(argv: list[str] | None = None) -> int:
    """Replay one strategy with the gang log on (the bench's flags, plus ``--strategy``)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--strategy", default=QueueingStrategy.BACKFILL.value)
    ap.add_argument("--follow", default="", help="small jobs to log too, comma-separated")
    known, rest = ap.parse_known_args(argv)
    a = parse_args(rest)
    jobs = load_jobs(a.trace, a.mix, a.seed)
    log = GangLog(a.nodes)
    log.follow = set(filter(None, known.follow.split(",")))
    log.work = {j.name: j.work for j in jobs}
    for j in jobs:
        if j.name in log.follow:
            print(f"{j.name}: {j.gpus} GPUs, arrives {(j.arrival - T0) / 60:.0f}m, runs {j.work / 60:.0f} min, "
                  f"reports every {j.report_every}, maxRunSeconds {j.limit}")
    r = simulate(jobs, a.nodes, QueueingStrategy(known.strategy), a.hours, a.drain_hours, a.step,
                 json.loads(a.reservations) if a.reservations else None, tag=f"g{a.seed}-", observe=log)
    big = sorted(r.large)
    print("large waits (min):", ", ".join(f"{n} {(r.waits[n] or 0) / 60:.0f}" for n in big))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
