"""GPUPool status: every :data:`POOL_STATUS_INTERVAL` seconds, written only when it changes.

This loop is the one writer of a GPUPool's status. It also sets the pool and job gauges.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kubeforge import metrics
from kubeforge.admission import build_ledger, pool_resource, pool_status, pool_view, quota_book
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


async def pool_status_loop(rt: Runtime) -> None:
    """Refresh every pool's status (while this process leads); one line per failure streak."""
    await rt.ready.wait()
    last: dict[str, dict[str, Any]] = {}
    views: dict[str, PoolView] = {}
    refused: dict[str, str] = {}

    async def step() -> None:
        await rt.leading.wait()
        await refresh_pools(rt, last, time.time(), views, refused)

    await every(POOL_STATUS_INTERVAL, step, "pool status not written", log)


async def refresh_pools(rt: Runtime, last: dict[str, dict[str, Any]], now: float,
                        views: dict[str, PoolView] | None = None, refused: dict[str, str] | None = None) -> None:
    """Compute and write (when changed) every pool's status and the ModelCacheNode specs
    (:func:`~kubeforge.runtime.model_caches.write_node_caches`, ``refused`` its memory of
    refusals); update the gauges.

    ``last``: each pool's last status written (updated). ``views``: each pool's view from the
    last call (updated), reused while its spec is equal and its nodes are the same records
    (:func:`~kubeforge.admission.pool_view`): every 2 s at 1,024 nodes, building it afresh was
    8 % of the operator's CPU in an admission burst."""
    snap = rt.cache.snapshot()
    ledgers = {}
    fresh: dict[str, PoolView] = {}
    for name, pool in snap.pools.items():
        res = pool_resource(pool)
        if res not in ledgers:
            ledgers[res] = build_ledger(snap, res)
        fresh[name] = pool_view(pool, snap.nodes, ledgers[res].per_node,
                                views.get(name) if views is not None else None, snap.device_classes)
    if views is not None:
        views.update(fresh)
    models = await write_node_caches(rt, snap, fresh, refused if refused is not None else {})
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
    for gone in set(views or ()) - set(snap.pools):
        views.pop(gone, None)  # type: ignore[union-attr]
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
