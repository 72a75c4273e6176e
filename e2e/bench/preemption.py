"""Preemption bench: GPU-hours lost per preemption, kubeforge's victim choice vs Kueue's.

A discrete-event replay in simulated time through kubeforge's own pure admission core
(``kubeforge.admission.plan_admission`` with GPU quotas and preemption), on a simulated pool
split between two teams, with gangs, durations and priorities from the Alibaba GPU trace.
Every running gang checkpoints every ``--checkpoint-minutes`` from its start; a preempted gang
loses the work since its last checkpoint (its SIGTERM checkpoint is not counted, the worst
case) and resumes from that checkpoint when it is admitted again.

The policy is told only what the live operator would know (issue 27): each job's last
checkpoint as of its last progress report, at its own reporting interval, and nothing for the
jobs that never report (they fall back on the time since placement); the mix is
:class:`e2e.bench.lib.reports.ReportMix` (``--reports``: 30 % silent, the rest every 1, 2, 5 or
10 min). Two shapes (``--shapes``): 8 nodes / 400 jobs and 16 nodes / 600 jobs, over seeds 1-7
(``--seeds``; one seed's figures swing by half), the targets judged on the sums.

Cases on the same arrivals (``--cases``; everything else identical):

- **kubeforge** (live reports): gangs within their team's nominal quota are admitted first
  (Kueue's queue order); victims are the fewest, those that lose the least work first (age of
  the last reported checkpoint x GPUs), then the lowest priority, then the newest; the pool's
  ``spec.preemption`` at the API's defaults (``--preemption`` overrides);
- **oracle**: the same, told every checkpoint the moment it is written (what this replay
  assumed before issue 27; no cluster knows that);
- **priority**: the same victims, the queue in priority order only (kubeforge's order before);
- **kueue**: Kueue-like victims: the fewest, the lowest priority first, then the most recently
  started (Kueue's ordering of preemption candidates), whatever they lose, in a pool with
  neither ``minRuntimeSeconds`` nor ``withinQuotaWhileBorrowing: Never`` (Kueue has neither).

The other cases' rules reach the core through its documented seam,
:class:`kubeforge.admission.AdmissionRules` (:mod:`e2e.bench.lib.replay`).

Printed: preemptions, GPU-hours lost in all and per preemption (mean, p95, max), the largest
loss of one victim in units of its checkpoint interval x its GPUs, jobs finished, GPU
utilization, the p95 wait of priority >= 10 jobs; per shape the target (GPU-hours lost <= 0.5x
the Kueue-like case with no more preemptions). It measures; it asserts nothing.

Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0;
Weng et al., "Beware of Fragmentation", USENIX ATC 2023 (the copy shipped with kubeforge;
``--trace`` takes another).

Run: ``.venv/bin/python -m e2e.bench.preemption`` (``make bench-preemption``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubeforge.admission import AdmissionRules, JobView, Snapshot, plan_admission
from kubeforge.api import GPUPoolSpec, TrainingJobSpec
from kubeforge.objects import Node, record_from_k8s

from e2e.bench.lib.replay import KUEUE_VICTIMS, PRIORITY, PRIORITY_FIRST, T0, iso
from e2e.bench.lib.reports import ReportMix, known_checkpoint
from e2e.bench.lib.traces import ALIBABA_CREDIT, ALIBABA_PODS, add_trace_arg, check_trace, gpu_tasks

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
KUEUE_POOL = {"minRuntimeSeconds": 0, "withinQuotaWhileBorrowing": "LowerPriority"}
"""Kueue has neither setting: no protection of young runs (KEP-9876 asks for it), and
``withinClusterQueue`` applies while the ClusterQueue borrows."""
CASES: dict[str, tuple[str, AdmissionRules | None, bool, dict]] = {
    # flag -> (row label, rules, oracle facts, the pool's spec.preemption for this case over --preemption)
    "kubeforge": ("kubeforge (live reports)", None, False, {}),
    "oracle": ("kubeforge, every checkpoint known at once", None, True, {}),
    "priority": ("kubeforge, queue by priority only", PRIORITY_FIRST, False, {}),
    "kueue": ("Kueue-like victims (lowest priority, newest)", KUEUE_VICTIMS, False, KUEUE_POOL),
}
DEFAULT_CASES = "kubeforge,kueue"
SHAPES = {"default": (8, 400), "overloaded": (16, 600)}
"""``--shapes`` names: (8-GPU nodes, jobs). The overloaded shape offers about twice the GPU-hours
the fleet can run over the same hours (issue 27: about 4 preemptions per job without protection)."""


@dataclass
class Job:
    """One gang of the replay and what happened to it (times in simulated unix seconds)."""

    name: str
    team: str
    priority: int
    replicas: int
    gpus: int
    arrival: float
    work: float  # seconds of running needed
    saved: float = 0.0  # work saved at the last checkpoint
    started: float | None = None  # start of the current run
    placement: tuple[str, ...] = ()
    finished: float | None = None
    preemptions: int = 0
    lost_gpu_hours: list[float] = field(default_factory=list)
    report_every: float | None = None  # seconds between its progress reports; None: it never reports
    first_start: float | None = None

    @property
    def total(self) -> int:
        """GPUs of the whole gang."""
        return self.replicas * self.gpus


def load_jobs(trace: Path, n: int, seed: int, arrival_hours: float, max_hours: float,
              mix: ReportMix = ReportMix()) -> list[Job]:
    """Gangs of 1..4 consecutive same-num_gpu GPU tasks (as e2e.bench.training forms them),
    arriving in the trace's order evenly spread over ``arrival_hours``, running for
    the trace's lifetime (capped at ``max_hours``), priority from the QoS class, teams busy in
    turns."""
    rows = gpu_tasks(trace)
    rng = random.Random(seed)
    jobs: list[Job] = []
    i = 0
    while i < len(rows) and len(jobs) < n:
        g = int(rows[i]["num_gpu"])
        want, k = rng.randint(1, 4), 1
        while k < want and i + k < len(rows) and int(rows[i + k]["num_gpu"]) == g:
            k += 1
        r = rows[i]
        life = max(600.0, min(max_hours * 3600, float(r["deletion_time"]) - float(r["creation_time"])))
        jobs.append(Job(f"j{len(jobs):04d}", "", PRIORITY.get(r["qos"], 0), k, g, float(r["creation_time"]), life))
        i += k
    # The trace's creation times are far from uniform (the first task at 0, the next days
    # later), so arrivals keep the trace's order but are spread evenly over ``arrival_hours``
    # with a seeded jitter of up to one gap: a steady stream that keeps the pool contended.
    jobs.sort(key=lambda j: j.arrival)
    gap = arrival_hours * 3600 / max(1, len(jobs))
    # Teams take turns being busy (research submits 80 % of the first half's jobs, product 80 %
    # of the second half's): one team borrows the other's idle quota, then the other reclaims
    # it, which is when quota preemption happens on a shared cluster.
    for rank, j in enumerate(jobs):
        j.arrival = T0 + (rank + rng.random()) * gap
        first_half = rank < len(jobs) / 2
        j.team = "research" if (rng.random() < 0.8) == first_half else "product"
    for j, every in zip(jobs, mix.draw(len(jobs), seed)):
        j.report_every = every
    return jobs


def make_pool(nominal: int, generation: int, preemption: dict | None = None):
    """The GPUPool ``h100`` record: two teams (``research``, ``product``) of ``nominal`` GPUs each;
    ``preemption``: its ``spec.preemption`` (None: the API's defaults)."""
    # the uid names everything in the spec: the operator's parse cache is keyed by uid and generation
    body = {"metadata": {"name": "h100", "uid": f"pool-{generation}-{nominal}-{sorted((preemption or {}).items())}",
                         "generation": 1},
            "spec": {"quotas": [{"name": "research", "namespaces": ["research"], "nominalGPUs": nominal},
                                {"name": "product", "namespaces": ["product"], "nominalGPUs": nominal}],
                     **({"preemption": preemption} if preemption else {})}}
    rec = record_from_k8s(GPUPoolSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec


def job_record(job: Job, now: float, ckpt: float, uid: str, oracle: bool = False):
    """The gang's TrainingJob record as the operator's cache would hold it at ``now``: its
    placement and the last checkpoint of its current run (one every ``ckpt`` seconds of it) that
    its reports told (:func:`~e2e.bench.lib.reports.known_checkpoint`: none for a job that does
    not report); ``oracle``: every checkpoint known the moment it is written, as no cluster knows."""
    status: dict = {"phase": "Pending", "attempt": job.preemptions}
    if job.placement:
        status = {"phase": "Running", "attempt": job.preemptions,
                  "placement": {"pool": "h100", "nodes": list(job.placement), "admittedAt": iso(job.started or now)}}
        start = job.started if job.started is not None else now
        last = (known_checkpoint(start, now, ckpt, ckpt) if oracle
                else known_checkpoint(start, now, ckpt, job.report_every))
        if last is not None:
            status["lastCheckpoint"] = {"step": 1, "path": "/c", "time": iso(last)}
    body = {"metadata": {"name": job.name, "namespace": job.team, "uid": uid, "generation": 1,
                         "creationTimestamp": iso(job.arrival)},
            "spec": {"pools": ["h100"], "replicas": job.replicas, "gpusPerReplica": job.gpus, "priority": job.priority,
                     "topology": {"mode": "Preferred", "level": "nvlink"},
                     "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}},
            "status": status}
    rec = record_from_k8s(TrainingJobSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec


def simulate(jobs: list[Job], nodes: int, ckpt: float, step: float, horizon: float, tag: str = "",
             rules: AdmissionRules | None = None, oracle: bool = False, preemption: dict | None = None) -> dict:
    """One replay of ``jobs`` under ``rules`` (None: kubeforge's own), the policy told what the
    jobs reported (``oracle``: every checkpoint at once), in a pool with ``preemption`` as its
    ``spec.preemption`` (None: the API's defaults); ``tag`` goes into every uid, so replays of
    other job lists (another seed) never meet this one's specs in the operator's parse cache,
    which is keyed by uid and generation."""
    fleet = {f"n{i:02d}": Node(f"n{i:02d}", {CLIQUE: f"c{i // 4}"}, allocatable={GPU: 8}, capacity={GPU: 8})
             for i in range(nodes)}
    pool = make_pool(nodes * 8 // 2, 0, preemption)
    by_key = {(j.team, j.name): j for j in jobs}
    nominations: dict = {}
    now, busy_gpu_seconds = T0, 0.0
    uids: dict = {}
    while now < T0 + horizon:
        for j in jobs:  # checkpoints and completions
            if j.started is not None and j.saved + (now - j.started) >= j.work:
                j.finished, j.started, j.placement = now, None, ()
        live = [j for j in jobs if j.arrival <= now and j.finished is None]
        views = {}
        for j in live:
            uid = uids.setdefault((j.name, j.preemptions, bool(j.placement)), f"{tag}{j.name}-{len(uids)}")
            rec = job_record(j, now, ckpt, uid, oracle)
            views[rec.key] = JobView(rec, rec.status)
        snap = Snapshot(pools={"h100": pool}, nodes=fleet, jobs=views, storage_classes=frozenset(),
                        nominations={k: v for k, v in nominations.items() if k in views})
        plan = plan_admission(snap, now, rules=rules)
        for a in plan.admit:
            j = by_key[a.key]
            j.placement, j.started = a.placement.nodes, now
            j.first_start = now if j.first_start is None else j.first_start
            nominations.pop(a.key, None)
        for p in plan.preempt:
            nominations[p.key] = (p.pool, dict(p.gpus_by_node))
            for v in p.victims:
                j = by_key[v.key]
                ran = now - (j.started or now)
                kept = (ran // ckpt) * ckpt
                j.lost_gpu_hours.append((ran - kept) / 3600 * j.total)
                j.saved += kept
                j.started, j.placement = None, ()
                j.preemptions += 1
        busy_gpu_seconds += step * sum(j.total for j in jobs if j.placement)
        now += step
    lost = [h for j in jobs for h in j.lost_gpu_hours]
    worst = max((h / (ckpt / 3600 * j.total) for j in jobs for h in j.lost_gpu_hours), default=0.0)
    lost_sorted = sorted(lost)
    return {
        "preemptions": len(lost),
        "lost": sum(lost),
        "mean": sum(lost) / len(lost) if lost else 0.0,
        "p95": lost_sorted[int(0.95 * (len(lost_sorted) - 1))] if lost else 0.0,
        "max": max(lost, default=0.0),
        "worst_intervals": worst,
        "finished": sum(1 for j in jobs if j.finished is not None),
        "util": busy_gpu_seconds / (horizon * nodes * 8),
        "wait_hp": _p95([(j.first_start - j.arrival) / 60 for j in jobs if j.first_start is not None and j.priority >= 10]),
    }


def _p95(values: list[float]) -> float:
    s = sorted(values)
    return s[int(0.95 * (len(s) - 1))] if s else float("nan")


def fresh(jobs: list[Job]) -> list[Job]:
    """The jobs as they arrive, before any replay touched them."""
    return [Job(j.name, j.team, j.priority, j.replicas, j.gpus, j.arrival, j.work, report_every=j.report_every)
            for j in jobs]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); the defaults are the figures' run."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.preemption", description=__doc__.splitlines()[0])
    add_trace_arg(ap, ALIBABA_PODS, "Alibaba openb pod trace")
    ap.add_argument("--shapes", default="default,overloaded",
                    help=f"comma-separated, each (nodes, jobs): {SHAPES}; --nodes or --jobs make one custom shape instead")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--nodes", type=int, default=None, help="8-GPU nodes, NVLink domains of 4")
    ap.add_argument("--cases", default=DEFAULT_CASES, help=f"comma-separated of {', '.join(CASES)}")
    ap.add_argument("--checkpoint-minutes", type=float, default=30.0)
    ap.add_argument("--reports", default="0.3:1,2,5,10",
                    help="who reports and how often: the share that never reports, then the minutes between reports "
                         "of the others, one drawn per job (e2e/bench/lib/reports.py)")
    ap.add_argument("--preemption", default="", help='the pool\'s spec.preemption as JSON, e.g. \'{"minRuntimeSeconds": 0}\' '
                                                     "(default: the API's defaults)")
    ap.add_argument("--arrival-hours", type=float, default=6.0, help="the jobs' arrivals are spread over this many hours")
    ap.add_argument("--max-hours", type=float, default=12.0, help="cap on a job's running time")
    ap.add_argument("--hours", type=float, default=10.0, help="simulated time")
    ap.add_argument("--step", type=float, default=60.0, help="seconds per simulation step")
    ap.add_argument("--seed", type=int, default=7, help="one seed (with --seeds '')")
    ap.add_argument("--seeds", default="1-7",
                    help="several seeds, e.g. 1-7 or 1,3,5: every case on each seed's jobs, a row per seed and the sums, "
                         "which the targets are judged on (one seed's figures swing by half on a change as small as a "
                         "tie-break); '' runs --seed alone")
    a = ap.parse_args(argv)
    check_trace(ap, a.trace)
    if a.nodes is not None or a.jobs is not None:
        a.shape_list = [("custom", a.nodes or SHAPES["default"][0], a.jobs or SHAPES["default"][1])]
    else:
        a.shape_list = [(name, *SHAPES[name]) for name in a.shapes.split(",") if name]
    a.case_list = [c for c in a.cases.split(",") if c]
    for c in a.case_list:
        if c not in CASES:
            ap.error(f"--cases: unknown case {c!r} (one of {', '.join(CASES)})")
    a.mix = ReportMix.parse(a.reports)
    a.pool_preemption = json.loads(a.preemption) if a.preemption else None
    return a


Row = tuple[str, int, str, dict]
"""(shape, seed, case flag, figures)."""


def run_cases(a: argparse.Namespace, seeds: list[int]) -> list[Row]:
    """Every case of ``a.case_list`` on each shape and seed's jobs."""
    ckpt = a.checkpoint_minutes * 60
    rows = []
    for shape, nodes, n in a.shape_list:
        for seed in seeds:
            jobs = load_jobs(a.trace, n, seed, a.arrival_hours, a.max_hours, a.mix)
            if seed == seeds[0]:
                print(f"\nshape {shape}: {len(jobs)} gangs from {a.trace.name} (arriving over {a.arrival_hours:g} h, runs "
                      f"capped at {a.max_hours:g} h), {nodes} x 8 GPUs, two teams with {nodes * 4} nominal GPUs each, "
                      f"checkpoint every {a.checkpoint_minutes:g} min, {a.hours:g} h simulated in {a.step:g} s steps"
                      + (f"; seeds {a.seeds}" if len(seeds) > 1 else "") + f"; {a.mix.describe()}; pool preemption "
                      + (json.dumps(a.pool_preemption) if a.pool_preemption else "at the API's defaults")
                      + f" (the Kueue-like case: {json.dumps(KUEUE_POOL)})")
            for case in a.case_list:
                _, rules, oracle, pool = CASES[case]
                started = time.process_time()
                r = simulate(fresh(jobs), nodes, ckpt, a.step, a.hours * 3600, tag=f"{shape}-s{seed}-", rules=rules,
                             oracle=oracle, preemption={**(a.pool_preemption or {}), **pool} or None)
                r["cpu"] = time.process_time() - started
                rows.append((shape, seed, case, r))
                print(_row(CASES[case][0] if len(seeds) == 1 else f"seed {seed}: {CASES[case][0]}", r, 58), flush=True)
    return rows


def _row(label: str, r: dict, w: int) -> str:
    return (f"{label:<{w}} {r['preemptions']:>8} {r['lost']:>11.1f} {r['mean']:>21.2f} {r['p95']:>7.2f} {r['max']:>7.2f} "
            f"{r['worst_intervals']:>18.2f} {r['finished']:>9} {r['util']:>6.1%} {r['wait_hp']:>12.0f} {r['cpu']:>6.1f}")


def print_rows(rows: list[Row], seeds: list[int], a: argparse.Namespace) -> None:
    """Per shape: one row per case (and seed), the sums over seeds, the targets; what the columns mean."""
    w = 58
    for shape, _, _ in a.shape_list:
        mine = [r for r in rows if r[0] == shape]
        print(f"\nshape {shape}")
        print(f"{'case':<{w}} {'preempt':>8} {'GPU-h lost':>11} {'per preemption: mean':>21} {'p95':>7} {'max':>7} "
              f"{'worst (intervals)':>18} {'finished':>9} {'util':>6} {'p>=10 wait95':>12} {'CPU s':>6}")
        sums: dict[str, list[dict]] = {}
        for _, seed, case, r in mine:
            print(_row(CASES[case][0] if len(seeds) == 1 else f"seed {seed}: {CASES[case][0]}", r, w))
            sums.setdefault(case, []).append(r)
        if len(seeds) > 1:
            for case, rs in sums.items():
                print(f"{'all seeds: ' + CASES[case][0]:<{w}} {sum(r['preemptions'] for r in rs):>8} "
                      f"{sum(r['lost'] for r in rs):>11.1f}   (sums over {len(seeds)} seeds; finished "
                      f"{sum(r['finished'] for r in rs)})")
        if "kubeforge" in sums and "kueue" in sums:
            k_lost, q_lost = (sum(r["lost"] for r in sums[c]) for c in ("kubeforge", "kueue"))
            k_n, q_n = (sum(r["preemptions"] for r in sums[c]) for c in ("kubeforge", "kueue"))
            ok = k_lost <= 0.5 * q_lost and k_n <= q_n
            print(f"target: GPU-hours lost <= 0.5 x Kueue-like with preemptions <= its count: {k_lost:.1f} vs "
                  f"{q_lost:.1f} ({k_lost / q_lost if q_lost else float('nan'):.2f}x), {k_n} vs {q_n} preemptions "
                  f"-> {'met' if ok else 'NOT met'}")
    print("GPU-hours lost: work since each victim's last checkpoint x its GPUs (its SIGTERM checkpoint not counted);"
          " worst (intervals): the largest loss of one victim / (checkpoint interval x its GPUs), target <= 1;"
          " p>=10 wait95: minutes from arrival to first start of the jobs of priority 10 and more, p95 (what protecting"
          " young runs costs the jobs that preempt).")
    print(ALIBABA_CREDIT)


def main(argv: list[str] | None = None) -> int:
    """Run every case; returns the exit code (0)."""
    a = parse_args(argv)
    seeds = _seeds(a.seeds) or [a.seed]
    print_rows(run_cases(a, seeds), seeds, a)
    return 0


def _seeds(text: str) -> list[int]:
    """``"1-7"`` or ``"1,3,5"`` (or both, comma-separated) as a list of seeds; ``""`` gives []."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


if __name__ == "__main__":
    sys.exit(main())
