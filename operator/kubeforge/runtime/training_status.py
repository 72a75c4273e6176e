"""The one writer of a TrainingJob's status (:func:`write_status`), and what it keeps in the
operator's memory about each write: the status overlay, the assumed placement's fate, the hand-offs
the write settles. Split from :mod:`kubeforge.runtime.training`, which calls it first in every
reconcile that changes anything."""

from __future__ import annotations

import logging
from typing import Any

from kubeforge.lifecycle import TrainingPlan
from kubeforge.objects import TrainingJobRecord, current_attempt
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.state import Runtime

log = logging.getLogger("kubeforge.training")
KIND = "TrainingJob"


async def write_status(rt: Runtime, job: TrainingJobRecord, plan: TrainingPlan, now: float) -> bool:
    """Write the plan's status (with ``observedGeneration``, only onto the version decided
    from); False when the job changed meanwhile (409: decide again on the newer version). A write
    whose answer is lost is read back (:func:`_read_back`): when the job on record shows it, the
    write counts as answered and the reconcile goes on to the plan's deletes and creates (among
    them a released placement's pods by name, which only this plan knows: the next one, decided
    from the released status, does not); otherwise the error is raised for the work queue."""
    key = job.key
    cache = rt.cache
    if plan.status is None:
        if plan.forget_assumed:
            cache.assumptions.forget(key)
        return True
    patch = dict(plan.status)
    patch["observedGeneration"] = job.generation
    with cache.assumptions.status_write(key):  # the assumed placement must not expire while it is being written
        try:
            written = await rt.client.patch_status(KIND, key[0], key[1], patch, resource_version=job.resource_version)
        except ApiError as e:
            if e.code == 409:
                return False
            if not e.transient:  # 422 from a status the schema refuses: a bug of ours, say it once per key
                log.error("trainingjob %s/%s: status write refused: %s", key[0], key[1], e)
                cache.assumptions.forget(key)
                cache.admission_clock.forget(key)
                return False
            if patch.get("placement"):
                cache.assumptions.renew(key)  # no answer: the placement may be on record already
            written = await _read_back(rt, job, patch)
            if written is None:
                if plan.release and plan.delete_pods:  # the names only this plan knows: kept for the retry
                    cache.handoffs.release_unsettled(key, job.resource_version, current_attempt(job.status),
                                                     plan.delete_pods)
                raise
    if written is None:  # the job was deleted meanwhile: nothing to create for it
        cache.assumptions.forget(key)
        return False
    cache.remember(key, written)
    shown = cache.job(key)
    cache.echo.wrote(key, written, shown.resource_version if shown is not None else None)
    if plan.forget_assumed:
        cache.assumptions.confirm(key)
    if patch.get("placement"):
        cache.admission_clock.written(key)
    if plan.wrote_wait:
        cache.handoffs.wait_written(key, now)
    if "attempt" in patch or "placement" in patch:
        cache.handoffs.clear_create_error(key)
    if "attempt" in patch:
        cache.handoffs.stop_done(key)  # the stop is on record
    return True


async def _read_back(rt: Runtime, job: TrainingJobRecord, patch: dict[str, Any]) -> dict[str, Any] | None:
    """After a status write of ``job`` that got no answer: read the job once and keep what the API
    server holds in the status overlay (it keeps only a newer version than it has), so a placement
    the write did put on record holds its GPUs however long the watch lags; the renewed assumption
    alone would expire after ASSUME_TTL and the placement then look free to the next round. Kept
    only for the generation the write was decided from (a newer spec waits for the watch, so no
    status decided from the old one is written onto it); nothing when the read fails too.

    Returns the job read when its status holds every field of ``patch`` as written (the write
    was applied: only this process writes the status), else None."""
    try:
        got = await rt.client.get(KIND, job.namespace, job.name)
    except ApiError:
        return None
    if got is None or (got.get("metadata") or {}).get("generation") != job.generation:
        return None
    rt.cache.remember(job.key, got)
    status = got.get("status") or {}
    return got if all(status.get(k) == v for k, v in patch.items()) else None
