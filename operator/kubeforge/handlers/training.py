"""TrainingJob: the admission loop (one decision per pool over the queue) and the reconcile.

Admission runs in one loop under one lock for the whole operator: per pool, it takes every
pending job that targets the pool, orders them (priority, then creation), and places them
with :func:`kubeforge.placement.admit` against the GPU ledger, so two jobs are never
promised the same GPUs. A decision is written to the job's ``status.placement`` before any
pod exists; the reconcile then creates the PVC, the Service and the gated pods, and lifts
the gates of the whole gang together.

The reconcile reads the job fresh from the API server (one GET, never a list), its pods
from the index, and applies :func:`kubeforge.lifecycle.plan_training`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kubernetes.client.rest import ApiException

from kubeforge import GROUP, VERSION, metrics
from kubeforge.api import spec_error
from kubeforge.builders.common import get_condition, parse_time, set_condition
from kubeforge.builders.training import build_pvc, build_service, build_worker_pod, pod_name
from kubeforge.handlers import kube
from kubeforge.handlers.inference import admit_serving_pods
from kubeforge.handlers.pools import ledger, pool_view
from kubeforge.handlers.state import STATE
from kubeforge.lifecycle import NodeView, current_pool, plan_training, pod_view, restart_attempt
from kubeforge.placement import GangRequest, NoFit, PendingGang, Placement, admit, node_affinity

log = logging.getLogger("kubeforge.training")
ADMISSION_INTERVAL = 1.0  # seconds: the loop also wakes on every relevant watch event
ADMISSION_MIN_GAP = 0.25  # seconds between two rounds, however many events woke it
PLURAL = "trainingjobs"
RESYNC_SECONDS = 15.0  # level-based safety net: every job is re-checked this often
_released: set[tuple[tuple[str, str], int]] = set()  # (job key, attempt) whose gates this process lifted


_spec_errors: dict[tuple[str, int], str | None] = {}


def _cached_spec_error(job: dict[str, Any]) -> str | None:
    """:func:`spec_error`, computed once per (uid, generation): the admission loop looks at
    every pending job every round, and the spec only changes with the generation."""
    md = job["metadata"]
    k = (md.get("uid", ""), int(md.get("generation") or 0))
    if k not in _spec_errors:
        if len(_spec_errors) > 100_000:  # bounded: forget everything, it is only a cache
            _spec_errors.clear()
        _spec_errors[k] = spec_error(job)
    return _spec_errors[k]


def _request(spec: dict[str, Any]) -> GangRequest:
    topo = spec.get("topology") or {}
    mode = topo.get("mode", "Preferred")
    return GangRequest(
        replicas=int(spec["replicas"]),
        gpus_per_replica=int(spec["gpusPerReplica"]),
        mode=mode,
        level=topo.get("level"),
    )


def _pending(job: dict[str, Any], status: dict[str, Any], now: float) -> bool:
    if job["metadata"].get("deletionTimestamp") or (job.get("spec") or {}).get("suspend"):
        return False
    if status.get("phase") in ("Succeeded", "Failed", "Suspended"):
        return False
    if status.get("placement"):
        return False
    nb = parse_time(status.get("restartNotBefore"))
    return not (nb and nb > now)


async def _write_status(job: dict[str, Any], status_patch: dict[str, Any]) -> None:
    """Write a status merge patch and remember the result for the admission loop."""
    key = (job["metadata"]["namespace"], job["metadata"]["name"])
    STATE.remember_status(key, await kube.patch_status(PLURAL, key[0], key[1], status_patch))


async def admission_round(now: float) -> None:
    """One pass over every pool's queue. Callers hold ``STATE.admission_lock``."""
    jobs = STATE.index("kf_jobs")
    by_pool: dict[str, list[tuple[tuple[str, str], dict, dict]]] = {}
    for key in list(jobs.keys()):
        job = STATE.one("kf_jobs", key)
        if job is None:
            continue
        status = STATE.effective_status(key, job)
        if not _pending(job, status, now):
            continue
        if _cached_spec_error(job):
            continue  # the reconcile reports it
        by_pool.setdefault(current_pool(job["spec"], status), []).append((key, job, status))
    ledgers: dict[str, dict[str, int]] = {}
    for pool_name, entries in sorted(by_pool.items()):
        probe = STATE.one("kf_pools", pool_name)
        if probe is None:
            for key, job, status in entries:
                await _no_fit(job, status, "PoolNotFound", f"GPUPool {pool_name!r} does not exist", now)
            continue
        res = (probe.get("spec") or {}).get("gpuResourceName") or "nvidia.com/gpu"
        if res not in ledgers:
            ledgers[res], _ = ledger(res)
        view = pool_view(pool_name, ledgers[res])
        assert view is not None
        queue = []
        bad = []
        for key, job, status in entries:
            try:
                req = _request(job["spec"])
            except ValueError as e:
                bad.append((job, status, str(e)))
                continue
            created = parse_time(job["metadata"].get("creationTimestamp")) or 0.0
            queue.append(PendingGang(f"{key[0]}/{key[1]}", req, int(job["spec"].get("priority", 0)), created))
        for job, status, msg in bad:
            await _no_fit(job, status, "InvalidSpec", msg, now)
        decisions = admit(queue, view.nodes, view.levels)
        index = {f"{k[0]}/{k[1]}": (job, st) for k, job, st in entries}
        writes = []
        for d in decisions:
            job, status = index[d.key]
            metrics.ADMISSIONS.labels(pool=pool_name, result="admitted" if d.admitted else "waiting").inc()
            if isinstance(d.result, Placement):
                pl = d.result
                for n, g in pl.gpus_by_node.items():
                    ledgers[res][n] = ledgers[res].get(n, 0) + g
                writes.append(_admit(job, status, pool_name, pl, now))
            else:
                nf: NoFit = d.result
                reason = "Unschedulable" if nf.permanent else "WaitingForCapacity"
                writes.append(_no_fit(job, status, reason, nf.reason, now))
        # The decisions are final (the ledger above already holds them); their status writes go
        # out together, and all land before the next round reads the overlay.
        await _bounded_gather(writes)
    # Serving replicas draw on the same ledger, after the gangs (which waited longer).
    await admit_serving_pods(ledgers, now)


WRITE_CONCURRENCY = 16  # status writes / pod creates in flight at once from one loop


async def _bounded_gather(coros: list) -> None:
    """Await every coroutine, at most WRITE_CONCURRENCY at a time; re-raise the first error
    after all have finished (so one failed write never leaves the others unawaited)."""
    sem = asyncio.Semaphore(WRITE_CONCURRENCY)

    async def one(c):
        async with sem:
            return await c

    results = await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


async def _admit(job: dict, status: dict, pool: str, pl: Placement, now: float) -> None:
    gen = job["metadata"].get("generation")
    conds = set_condition(status.get("conditions"), "Admitted", True, "Placed", pl.reason, now, gen)
    patch = {
        "placement": {"pool": pool, "level": pl.level, "domain": pl.domain, "nodes": list(pl.nodes), "reason": pl.reason},
        "conditions": conds,
        "observedGeneration": gen,
        "phase": status.get("phase") if status.get("phase") == "Restarting" else "Pending",
        "restarts": status.get("restarts") or {"failures": 0, "preemptions": 0},
    }
    await _write_status(job, patch)
    where = f"{pl.level} {pl.domain}" if pl.level else f"pool {pool}"
    kube.event_soon(job, "Normal", "Admitted", f"gang of {len(pl.nodes)} placed in {where}: {pl.reason}", now)
    STATE.jobs.add((job["metadata"]["namespace"], job["metadata"]["name"]))


NOFIT_REFRESH_SECONDS = 10.0  # a waiting job's message (how many GPUs short) is refreshed at most this often
_last_nofit_write: dict[tuple[str, str], float] = {}


async def _no_fit(job: dict, status: dict, reason: str, message: str, now: float) -> None:
    """Say why a job waits: a condition (message refreshed at most every NOFIT_REFRESH_SECONDS
    while the reason stays the same) and a Warning Event only when the reason changes."""
    key = (job["metadata"]["namespace"], job["metadata"]["name"])
    old = get_condition(status.get("conditions"), "Admitted")
    same_reason = bool(old and old.get("status") == "False" and old.get("reason") == reason)
    if same_reason and (old.get("message") == message or now - _last_nofit_write.get(key, 0.0) < NOFIT_REFRESH_SECONDS):
        return
    gen = job["metadata"].get("generation")
    conds = set_condition(status.get("conditions"), "Admitted", False, reason, message, now, gen)
    patch = {"conditions": conds, "observedGeneration": gen, "phase": status.get("phase") or "Pending"}
    await _write_status(job, patch)
    _last_nofit_write[key] = now
    if not same_reason:
        kube.event_soon(job, "Warning", reason, message, now)


async def admission_loop() -> None:
    """Run :func:`admission_round` on every wake-up and at least every ADMISSION_INTERVAL s."""
    await STATE.ready.wait()
    while True:
        try:
            await asyncio.wait_for(STATE.admission_wakeup.wait(), timeout=ADMISSION_INTERVAL)
        except asyncio.TimeoutError:
            pass
        STATE.admission_wakeup.clear()
        try:
            async with STATE.admission_lock:
                await admission_round(time.time())
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("admission round failed; retrying")
            await asyncio.sleep(1.0)
        # Batch the wake-ups of an event storm (hundreds of pods starting) into one round.
        await asyncio.sleep(ADMISSION_MIN_GAP)


# --- reconcile -----------------------------------------------------------------------------


def _node_views(names: set[str]) -> dict[str, NodeView]:
    out = {}
    for n in names:
        node = STATE.one("kf_nodes", n)
        if node is None:
            continue
        ready_c = next((c for c in node["status"]["conditions"] if c.get("type") == "Ready"), None)
        ready = bool(ready_c and ready_c.get("status") == "True")
        out[n] = NodeView(
            name=n, ready=ready,
            not_ready_since=None if ready else (parse_time(ready_c.get("lastTransitionTime")) if ready_c else None),
            taint_keys=tuple(t.get("key", "") for t in node["spec"].get("taints") or []),
        )
    return out


async def _get_job(ns: str, name: str) -> dict | None:
    try:
        return await kube._call(kube.custom().get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


async def reconcile_job(key: tuple[str, str]) -> float | None:
    """Bring one job one step closer to its desired state; returns seconds to requeue or None."""
    await STATE.ready.wait()
    ns, name = key
    job = await _get_job(ns, name)
    if job is None or job["metadata"].get("deletionTimestamp"):
        STATE.forget(key)
        _last_nofit_write.pop(key, None)
        _released.difference_update({k for k in _released if k[0] == key})
        STATE.wake_admission()
        return None
    now = time.time()
    status = job.get("status") or {}
    err = spec_error(job)
    if err:
        old = get_condition(status.get("conditions"), "Admitted")
        if not (old and old.get("reason") == "InvalidSpec" and old.get("message") == err):
            gen = job["metadata"].get("generation")
            conds = set_condition(status.get("conditions"), "Admitted", False, "InvalidSpec", err, now, gen)
            await _write_status(job, {"conditions": conds, "phase": "Pending", "observedGeneration": gen})
            kube.event_soon(job, "Warning", "InvalidSpec", err, now)
        return None
    pods_raw = STATE.many("kf_job_pods", key)
    pods = [pod_view(p) for p in pods_raw]
    placement = status.get("placement") or {}
    node_names = set(placement.get("nodes") or []) | {p.node for p in pods if p.node}
    pool = pool_view(placement.get("pool") or current_pool(job["spec"], status), {})
    plan = plan_training(job, pods, _node_views(node_names), now, price_per_gpu_hour=pool.price if pool else None)

    grace = plan.delete_grace_seconds
    await _bounded_gather([kube.delete("Pod", ns, n, grace) for n in plan.delete_pods])
    if plan.create_ranks and placement:
        first = [kube.create_if_absent("Service", ns, build_service(job))]
        if not (job["spec"].get("checkpoint") or {}).get("existingClaimName"):
            first.append(kube.create_if_absent("PersistentVolumeClaim", ns, build_pvc(job)))
        await _bounded_gather(first)  # the PVC exists before any pod that mounts it
        attempt = restart_attempt(status)
        nodes = list(placement["nodes"])
        levels = pool.levels if pool else []
        pl = Placement(placement.get("level"), placement.get("domain"), tuple(nodes), {}, placement.get("reason", ""))
        pods_to_create = [
            build_worker_pod(
                job, rank=rank, attempt=attempt, nodes=nodes, affinity={"nodeAffinity": node_affinity(pl, rank, levels)},
                gpu_resource=pool.gpu_resource if pool else "nvidia.com/gpu",
                tolerations=pool.tolerations if pool else [], pool=placement.get("pool"),
                last_checkpoint=status.get("lastCheckpoint"),
            )
            for rank in plan.create_ranks
        ]
        await _bounded_gather([kube.create_if_absent("Pod", ns, p) for p in pods_to_create])
        # Every rank exists now (created here, or already there, gated): lift the gates in this
        # same pass rather than after the pod watch catches up.
        plan.ungate = [pod_name(name, r, attempt) for r in range(int(job["spec"]["replicas"]))]
    attempt_key = (key, restart_attempt(status))
    if plan.ungate and attempt_key not in _released:
        await _bounded_gather([kube.ungate_pod(ns, n) for n in plan.ungate])
        _released.add(attempt_key)
        kube.event_soon(job, "Normal", "GangReleased", f"all {len(plan.ungate)} pods created; scheduling gates lifted together", now)
    if plan.status:
        patch = dict(plan.status)
        patch["observedGeneration"] = job["metadata"].get("generation")
        await _write_status(job, patch)
    for type_, reason, message in plan.events:
        if type_ == "Warning" or reason in ("Running", "Succeeded", "Suspended", "Resumed"):
            log.info("trainingjob %s/%s: %s: %s", ns, name, reason, message)
        if reason == "Preempted":
            metrics.PREEMPTION_RESTARTS.inc()
        elif reason == "WorkerFailed":
            metrics.FAILURE_RESTARTS.inc()
        kube.event_soon(job, type_, reason, message, now)
    if plan.release:
        STATE.wake_admission()
    return plan.requeue_after if plan.requeue_after is not None else RESYNC_SECONDS
