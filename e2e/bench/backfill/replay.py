"""The backfill bench's replay: kubeforge's pure admission core
(:func:`kubeforge.admission.plan_admission`, with the runtime's :class:`AdmissionMemo`) run every
``step`` seconds (jobs arrive, end and report between rounds, as the live loop sees them), under
one queueing strategy for the pool (:class:`kubeforge.admission.AdmissionRules` ``queueing``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kubeforge.admission import AdmissionMemo, AdmissionPlan, AdmissionRules, JobView, QueueingStrategy, Snapshot, plan_admission

from kubeforge.objects import PREEMPTING

from e2e.bench.backfill.workload import CHECKPOINT_EVERY, NS, POOL, Job, fleet, job_record, pool_record
from e2e.bench.lib.replay import T0
from e2e.bench.lib.stats import pct

__all__ = ["Result", "simulate"]


@dataclass
class Result:
    """What one replay measured.

    Attributes:
        waits: Per job name, arrival -> start in seconds (None: never started).
        large: The large gangs' names.
        util: GPU-seconds busy / GPU-seconds of the fleet over the arrival window.
        series: ``(hours since the start, busy GPUs, large gangs waiting)`` after each round.
        rounds: Admission rounds run.
        reserved: Rounds that ended with a reservation.
        cpu: CPU seconds the replay took (set by the caller).
        preemptions: Jobs stopped for a reservation (``preemptAfterSeconds``).
        lost_gpu_h: GPU-hours of work they lost (run since their last checkpoint x their GPUs; the
            checkpoint a SIGTERM may still write is not counted, the worst case).
        requeue_waits: Per preemption ``(victim, attempt it was stopped into)``, seconds from the
            stop to its next start (None: never restarted).
    """

    waits: dict[str, float | None] = field(default_factory=dict)
    large: set[str] = field(default_factory=set)
    util: float = 0.0
    series: list[tuple[float, int, int]] = field(default_factory=list)
    rounds: int = 0
    reserved: int = 0
    cpu: float = 0.0
    preemptions: int = 0
    lost_gpu_h: float = 0.0
    requeue_waits: dict[tuple[str, int], float | None] = field(default_factory=dict)

    def wait_list(self, large: bool, horizon: float, arrivals: dict[str, float]) -> list[float]:
        """Waits of the large (or small) jobs; one never started counts until ``horizon``."""
        return [w if w is not None else horizon - arrivals[n] for n, w in self.waits.items()
                if (n in self.large) == large]

    def figures(self, horizon: float, arrivals: dict[str, float]) -> dict[str, float]:
        """Large-gang wait p50/p95, small-job wait p50/p95/mean (minutes; first start), utilisation,
        never started, preemptions and GPU-hours lost."""
        big, small = self.wait_list(True, horizon, arrivals), self.wait_list(False, horizon, arrivals)
        return {"large_p50": pct(big, 50) / 60, "large_p95": pct(big, 95) / 60, "small_p50": pct(small, 50) / 60,
                "small_p95": pct(small, 95) / 60, "small_mean": sum(small) / len(small) / 60 if small else 0.0,
                "util": self.util, "never": sum(1 for w in self.waits.values() if w is None),
                "preemptions": self.preemptions, "lost_gpu_h": self.lost_gpu_h}


def simulate(jobs: list[Job], nodes: int, strategy: QueueingStrategy, hours: float, drain_hours: float,
             step: float = 60.0, reservations: dict | None = None, tag: str = "",
             observe: Callable[[float, AdmissionPlan, dict], None] | None = None,
             ckpt: float = CHECKPOINT_EVERY) -> Result:
    """Replay ``jobs`` (fresh copies are made) under ``strategy`` for ``hours`` of arrivals plus
    ``drain_hours``; ``reservations``: the pool's ``spec.reservations`` (None: the API's defaults);
    ``observe(now, plan, views)``: called after each round's plan, before its admissions apply (the
    gang log, :mod:`e2e.bench.backfill.gangs`).

    A preemption of the plan (the pool's ``preemptAfterSeconds``) stops its victims at once: each
    loses its run since its last checkpoint (one every ``ckpt`` seconds of the run) and waits again;
    the preemptor's nomination holds their GPUs for it, as the runtime's does."""
    jobs = [j.fresh() for j in jobs]
    nodes_ = fleet(nodes)
    pool = pool_record(reservations)
    rules = AdmissionRules(queueing=strategy)
    memo = AdmissionMemo()
    by_key = {("ml", j.name): j for j in jobs}
    end, window = T0 + (hours + drain_hours) * 3600, T0 + hours * 3600
    res = Result(large={j.name for j in jobs if j.large})
    busy_gpu_s, uids, views = 0.0, {}, {}
    arrivals, nxt = sorted(jobs, key=lambda j: j.arrival), 0
    running: list[Job] = []
    nominations: dict = {}

    def show(j: Job, now: float) -> None:  # the job as the operator's cache holds it now
        uid = uids.setdefault((j.name, j.attempt, bool(j.placement)), f"{tag}{strategy.value}-{j.name}-{len(uids)}")
        rec = job_record(j, now, uid, ckpt)
        views[rec.key] = JobView(rec, rec.status)

    now = T0
    while now <= end:
        for j in [j for j in running if j.started + j.left <= now]:  # type: ignore[operator]
            j.finished, j.placement = now, ()
            running.remove(j)
            views.pop((NS, j.name), None)
        while nxt < len(arrivals) and arrivals[nxt].arrival <= now:
            show(arrivals[nxt], now)
            nxt += 1
        for j in running:
            if j.report_every is not None:  # its reports move its progress
                show(j, now)
        plan = plan_admission(Snapshot(pools={POOL: pool}, nodes=nodes_, jobs=views,
                                       nominations={k: v for k, v in nominations.items() if k in views}),
                              now, memo, rules)
        if observe is not None:
            observe(now, plan, views)
        res.rounds += 1
        res.reserved += bool(plan.reservations)
        for a in plan.admit:
            j = by_key[a.key]
            j.placement, j.started = a.placement.nodes, now
            running.append(j)
            res.waits.setdefault(j.name, now - j.arrival)  # the first start
            if j.requeued is not None:
                res.requeue_waits[(j.name, j.attempt)] = now - j.requeued
            nominations.pop(a.key, None)
            show(j, now)
        waiting = {w.key for w in plan.wait if w.reason == PREEMPTING}  # the runtime's keep_nominations
        nominations = {k: v for k, v in nominations.items() if k in waiting}
        for p in plan.preempt:
            nominations[p.key] = (p.pool, dict(p.gpus_by_node))
            for v in p.victims:
                _stop(by_key[v.key], now, ckpt, res)
                running.remove(by_key[v.key])
                show(by_key[v.key], now)
        busy = sum(j.total for j in running)
        if now < window:
            busy_gpu_s += busy * min(step, window - now)
        res.series.append(((now - T0) / 3600, busy, sum(1 for v in views.values() if v.placement is None
                                                         and v.record.name.startswith("L"))))
        now += step
    for j in jobs:
        res.waits.setdefault(j.name, None)
    res.util = busy_gpu_s / (nodes * 8 * hours * 3600)
    return res


def _stop(j: Job, now: float, ckpt: float, res: Result) -> None:
    """Preempt ``j`` at ``now``: it keeps the work of its last checkpoint (one every ``ckpt`` seconds
    of its run), loses the rest (counted in ``res``) and waits again from ``now``."""
    ran = now - j.started  # type: ignore[operator]
    kept = (ran // ckpt) * ckpt
    j.lost.append((ran - kept) * j.total / 3600)
    res.preemptions += 1
    res.lost_gpu_h += j.lost[-1]
    j.saved, j.started, j.placement, j.requeued = j.saved + kept, None, (), now
    j.attempt += 1
    res.requeue_waits[(j.name, j.attempt)] = None
