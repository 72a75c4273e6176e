"""The admission loop: snapshot -> :func:`kubeforge.admission.plan_admission` -> apply.

One loop for the whole operator; a round runs soon after anything that can change the answer
(a job waiting, GPUs freed, a node or pool changed, a replica behind the gate) and at least
every :data:`ROUND_INTERVAL` seconds while anything waits (:data:`IDLE_INTERVAL` when nothing
does). A burst of wake-ups within :data:`DEBOUNCE` seconds makes
one round. Applying a round is cheap: an admitted gang becomes an *assumed* placement in the
cache (it holds its GPUs in the next round's ledger at once) and its reconcile is queued,
which writes the placement to status and creates the pods; a waiting gang's reason goes to
its reconcile the same way. A serving replica group placed is assumed the same way and its
service's reconcile writes it and creates its pods. Admissions, victims and placed groups
take the work queues' urgent lane, ahead of the reconciles that watch events queue.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kubeforge import metrics
from kubeforge.admission import AdmissionPlan, AssumedGroup, plan_admission, preemption_message
from kubeforge.objects import PREEMPTING, PlacementRecord
from kubeforge.runtime.state import Runtime

log = logging.getLogger("kubeforge.admission")

ROUND_INTERVAL = 1.0
"""Seconds: while anything waits for GPUs, a round runs at least this often (a safety net for
wake-ups the watches cannot give, and the decisions that change with time alone: a pool
fallback's ``fallbackAfterSeconds``, a victim's ``minRuntimeSeconds``)."""
IDLE_INTERVAL = 10.0
"""Seconds: the safety net's period once the last round left nothing waiting (no gang, no
serving group, no preemption in flight) and decided nothing (shorter when a job's restart
back-off ends sooner). Every change that can give a round something to do wakes it at once (a job or replica that waits, GPUs freed, a node or pool
changed); an idle round at 1,024 nodes took 183 ms, and one a second was most of the operator's
CPU in the admission burst once every gang was placed."""
DEBOUNCE = 0.05
"""Seconds a round waits after the first wake-up for the rest of a burst."""


async def admission_loop(rt: Runtime) -> None:
    """Run admission rounds for the life of the process (while this process leads)."""
    await rt.ready.wait()
    errors = 0
    plan: AdmissionPlan | None = None
    while True:
        try:
            await asyncio.wait_for(rt.admission_wake.wait(), timeout=round_interval(plan, time.time()))
            await asyncio.sleep(DEBOUNCE)
        except asyncio.TimeoutError:
            pass
        await rt.leading.wait()
        rt.admission_wake.clear()
        started = time.perf_counter()
        try:
            plan = None
            plan = await admission_round(rt, time.time())
            errors = 0
        except asyncio.CancelledError:
            raise
        except Exception:
            errors += 1
            if errors == 1:
                log.exception("admission round failed; retrying")
            else:
                log.error("admission round failed again (%d in a row); retrying", errors)
            await asyncio.sleep(min(30.0, 0.5 * 2 ** errors))
        finally:
            took = time.perf_counter() - started
            metrics.ADMISSION_ROUND_SECONDS.observe(took)
        # Under a sustained burst, leave the event loop at least as long to the watches and
        # reconciles as the round itself took.
        await asyncio.sleep(min(1.0, took))


def round_interval(last: AdmissionPlan | None, now: float) -> float:
    """Seconds the loop waits for a wake-up before it runs a round anyway, after the round that
    decided ``last`` (None: no round yet, or it failed), at unix time ``now``:
    :data:`ROUND_INTERVAL`, or when that round admitted, preempted and placed nothing and left
    nothing waiting, :data:`IDLE_INTERVAL`, but no later than the end of a job's restart
    back-off (``last.backoff_ends``), which nothing else wakes a round for."""
    if last is None or last.admit or last.wait or last.preempt or last.groups or last.serving_waits:
        return ROUND_INTERVAL
    if last.backoff_ends is not None:
        return min(IDLE_INTERVAL, max(ROUND_INTERVAL, last.backoff_ends - now))
    return IDLE_INTERVAL


async def admission_round(rt: Runtime, now: float) -> AdmissionPlan:
    """One round: decide for the whole cluster, hand the decisions to the job reconciles,
    release the serving replicas that got a node."""
    cache = rt.cache
    snap = cache.snapshot()
    plan = plan_admission(snap, now, cache.admission_memo)
    cache.round_done(plan.views, plan.ledgers, snap, plan.ledgers_before)
    for a in plan.admit:
        pl = a.placement
        cache.assume(a.key, PlacementRecord(a.pool, pl.nodes, pl.level, pl.domain, pl.reason))
        rt.queue_job(a.key, urgent=True)
        metrics.ADMISSIONS.labels(pool=a.pool, result="admitted").inc()
    for p in plan.preempt:
        cache.handoffs.nominate(p.key, p.pool, p.gpus_by_node)
        by = cache.job(p.key)
        prio = by.spec.priority if by is not None and by.spec is not None else 0
        for v in p.victims:
            cache.handoffs.request_stop(v.key, v.reason, preemption_message(p.key, prio, v), v.lost_gpu_seconds)
            metrics.PREEMPTIONS.labels(reason=v.reason).inc()
            metrics.PREEMPTION_LOST_GPU_HOURS.inc(v.lost_gpu_seconds / 3600)
            rt.queue_job(v.key, urgent=True)
    # admitted, or no longer waiting for its victims: the GPUs are no longer promised to it
    cache.handoffs.keep_nominations(w.key for w in plan.wait if w.reason == PREEMPTING)
    for key in cache.handoffs.hand_waits({w.key: (w.reason, w.message) for w in plan.wait}):
        rt.queue_job(key)
    for g in plan.groups:
        pl = g.placement
        cache.assumptions.assume_group(g.key, AssumedGroup(
            g.index, PlacementRecord(g.pool, pl.nodes, pl.level, pl.domain, pl.reason), g.gpus_per_pod, g.cached))
        rt.queue_service(g.key, urgent=True)
        metrics.ADMISSIONS.labels(pool=g.pool, result="admitted").inc()
    for key in cache.handoffs.hand_serving_waits(plan.serving_waits):
        rt.queue_service(key)
    return plan
