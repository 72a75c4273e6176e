"""GPUPool status: every :data:`POOL_STATUS_INTERVAL` seconds, written only when it changes.

This loop is the one writer of a GPUPool's status. It also sets the pool and job gauges.

When an admission round ran since the loop's last pass, the pass takes what that round started
from (its snapshot, ledgers and pool views: the same a pass of its own would have made then)
instead of making its own: the status is then as old as that round's start, at most one interval
plus a pass, where a pass of its own is at most one interval old by the next. While gangs wait,
rounds run every second, and a pass costs 7-10 ms instead of 27-34 at 1,024 nodes
(``python -m e2e.bench.scale.pool_pass``, issue 31). With no round since the last pass (nothing
waits) it makes its own, as before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubeforge import metrics
from kubeforge.admission import Ledger, PoolView, Snapshot, build_ledger, pool_resource, pool_status, pool_view, quota_book
from kubeforge.objects import conditions_equal
from kubeforge.objects import JOB_PHASES, READY, TOPOLOGY_READY, WARNING
from kubeforge.runtime.model_caches import write_node_caches
from kubeforge.runtime.state import Runtime, every
from kubeforge.serving import pool_standby_gpus

log = logging.getLogger("kubeforge.pools")
POOL_STATUS_INTERVAL = 2.0
GPU_STATES = ("capacity", "allocatable", "allocated", "free", "unavailable")


def _models_status(st: dict[str, Any], models: tuple[list[dict[str, Any]], str | None] | None,
                   prev: dict[str, Any]) -> None:
    """Put ``status.models`` / ``modelsSummary`` into ``st`` when the pool has a model or had one
    (then emptied, the summary cleared), so a pool that never caches keeps its status as before."""
    rows, summary = models or ([], None)
    if rows or prev.get("models"):
        st["models"] = rows
    if summary or prev.get("modelsSummary"):
        st["modelsSummary"] = summary or ""


def same_status(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Status equality ignoring condition timestamps."""
    rest = lambda s: {k: v for k, v in s.items() if k != "conditions"}  # noqa: E731
    return rest(a) == rest(b) and conditions_equal(a.get("conditions"), b.get("conditions"))


@dataclass
class PoolPasses:
    """What one pass of the loop leaves to the next.

    Attributes:
        last: Each pool's last status written.
        views: Each pool's view, reused while its spec is equal and its nodes are the same
            records (:func:`~kubeforge.admission.pool_view`): every 2 s at 1,024 nodes, building
            it afresh was 8 % of the operator's CPU in an admission burst.
        refused: The ModelCacheNode specs refused for good
            (:func:`~kubeforge.runtime.model_caches.write_node_caches`).
        rounds: The admission rounds done at the last pass (``Cache.last_round``); None before
            the first pass, which makes its own snapshot.
    """

    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    views: dict[str, PoolView] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    rounds: int | None = None


async def pool_status_loop(rt: Runtime) -> None:
    """Refresh every pool's status (while this process leads); one line per failure streak."""
    await rt.ready.wait()
    passes = PoolPasses()

    async def step() -> None:
        await rt.leading.wait()
        await refresh_pools(rt, passes, time.time())

    await every(POOL_STATUS_INTERVAL, step, "pool status not written", log)


def _inputs(rt: Runtime, passes: PoolPasses) -> tuple[Snapshot, dict[str, Ledger], dict[str, PoolView]]:
    """The snapshot, ledgers (by GPU resource) and pool views to make the statuses from: what
    the last admission round started from when one ran since the last pass (the same a pass of
    its own would have made at that round's start; see the module docstring), else made now."""
    seen = rt.cache.last_round()
    rounds, passes.rounds = passes.rounds, seen.count
    snap = seen.snapshot
    if snap is not None and rounds is not None and seen.count != rounds:
        ledgers = {pool_resource(p): seen.ledgers.get(pool_resource(p)) for p in snap.pools.values()}
        views = {name: seen.views.get(name) for name in snap.pools}
        if all(x is not None for x in (*ledgers.values(), *views.values())):
            return snap, ledgers, views  # type: ignore[return-value]
    snap = rt.cache.snapshot()
    ledgers = {res: build_ledger(snap, res) for res in {pool_resource(p) for p in snap.pools.values()}}
    return snap, ledgers, {name: pool_view(pool, snap.nodes, ledgers[pool_resource(pool)].per_node,
                                           passes.views.get(name), snap.device_classes)
                           for name, pool in snap.pools.items()}


async def refresh_pools(rt: Runtime, passes: PoolPasses, now: float) -> None:
    """Compute and write (when changed) every pool's status and the ModelCacheNode specs
    (:func:`~kubeforge.runtime.model_caches.write_node_caches`); update the gauges.

    Args:
        rt: The runtime.
        passes: What the last pass left (updated); a new :class:`PoolPasses` makes a pass from
            a snapshot of its own.
        now: Unix seconds (condition times).
    """
    snap, ledgers, fresh = _inputs(rt, passes)
    last, views = passes.last, passes.views
    views.update(fresh)
    models = await write_node_caches(rt, snap, fresh, passes.refused)
    for name, pool in snap.pools.items():
        view, res = fresh[name], pool_resource(pool)
        st = pool_status(view, ledgers[res], now, quota_book(pool, view, ledgers[res]).usage())
        st["standbyGPUs"] = pool_standby_gpus(snap.services.values(), name)  # issue 28: what standby costs
        prev = last.get(name) or dict(pool.status or {})
        _models_status(st, models.get(name), prev)
        for state in GPU_STATES:
            metrics.POOL_GPUS.labels(pool=name, state=state).set(st["gpus"][state])
        for type_ in (READY, TOPOLOGY_READY):  # a Warning Event when one turns False for a new reason
            cond = next((c for c in st["conditions"] if c.get("type") == type_), None)
            was = next((c for c in prev.get("conditions") or [] if c.get("type") == type_), None)
            if cond and cond["status"] == "False" and (not was or (was.get("status"), was.get("reason")) != ("False", cond["reason"])):
                rt.event("GPUPool", pool, WARNING, cond["reason"], cond["message"], now)
        if not same_status(st, prev):
            # Until the write is answered, compare with what the index shows: a write that timed
            # out may still have been applied, and ``last`` would then hide a later change back.
            last.pop(name, None)
            rt.cache.remember(name, await rt.client.patch_status("GPUPool", None, name, st))
            last[name] = st
    for gone in set(views) - set(snap.pools):
        views.pop(gone, None)
    for gone in set(last) - set(snap.pools):
        last.pop(gone, None)
        for state in GPU_STATES:
            try:
                metrics.POOL_GPUS.remove(gone, state)
            except KeyError:
                pass
    phases = dict.fromkeys(JOB_PHASES, 0)
    for job in snap.jobs.values():
        phases[job.phase] = phases.get(job.phase, 0) + 1
    for ph, n in phases.items():
        metrics.JOBS_BY_PHASE.labels(phase=ph).set(n)
