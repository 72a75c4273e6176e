"""TrainingJob reconcile: read the cache, ask :func:`kubeforge.lifecycle.plan_training`, apply.

This is the one writer of a TrainingJob's status. Order of the writes (see
:class:`~kubeforge.lifecycle.TrainingPlan`): the status first (a new attempt, or a placement,
is on record before any pod is deleted or created: crash-safe, and kubeforge's own deletes
never look like someone else's), then deletes, then the volume claim (a claim per job) and the
namespace's workers Service if missing, then the pods (after checking that an object store's
Secret exists), all at once (behind the volume gate while the
claim is not Bound: :func:`kubeforge.lifecycle.claim_wait`). A refused create is handed back to
the next decision (:class:`~kubeforge.lifecycle.CreateError`), which releases the GPUs and
says why; it is never retried in a loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Mapping, Sequence

from kubeforge import metrics
from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME
from kubeforge.builders.training import build_pvc, build_worker_pod, build_workers_service, spec_hash
from kubeforge.lifecycle import (
    OUR_GATES, CreateError, RestartCause, TrainingContext, TrainingPlan, claim_wait, plan_training,
)
from kubeforge.admission import PoolView, gang_request
from kubeforge.objects import (
    RESUMED, RUNNING, SPEC_CHANGED, SUCCEEDED, SUSPENDED, VOLUME_GATE, WARNING, WORKERS_SERVICE, Key, Pod,
    TrainingJobRecord, current_attempt, placement_of, pvc_name, rank_gpus, worker_pod_name,
)

from kubeforge.runtime.checkpoint_secrets import SECRETS
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.dra import before_pods, claim_templates, domain_cliques, release_domains
from kubeforge.runtime.state import Runtime
from kubeforge.runtime.status_tls import ensure_status_ca
from kubeforge.runtime.training_status import KIND, write_status

log = logging.getLogger("kubeforge.training")
RESYNC_SECONDS = 300.0
"""Level-based safety net: every job is looked at again at least this often. Every decision
that changes with time alone asks for its own reconcile (``TrainingPlan.requeue``: startup and
scheduling timeouts, restart back-off, a disruption's grace, a wait message's refresh, the
GPU-hours fold), so this only repairs a missed watch event. It was 60 s: in a burst of 800 jobs
that was a reconcile per job per minute finding nothing to do (controller-runtime's
``SyncPeriod`` default is 10 hours)."""
LOGGED_NORMAL_REASONS = (RUNNING, SUCCEEDED, SUSPENDED, RESUMED, SPEC_CHANGED)
"""Normal Events also logged (every Warning is): the steps of a job's life worth a log line."""


async def gather_bounded(coros: list, limit: int = 32) -> list[Any]:
    """Await every coroutine, ``limit`` at a time; return results and exceptions in order."""
    sem = asyncio.Semaphore(limit)

    async def one(c):
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)


async def namespace_terminating(rt: Runtime, namespace: str, pods: list[Pod]) -> bool:
    """Whether ``namespace`` is being deleted. The namespaces watch says so, but its event may
    come after the namespace controller's first pod deletions (another watch): when a pod was
    deleted by someone else and the watch says nothing yet, the namespace is read once (one
    GET, only on such a deletion) so that it is never taken for a preemption."""
    if rt.cache.namespace_terminating(namespace):
        return True
    mine = rt.cache.expectations.pending_deletes((namespace, pods[0].job or "")) if pods else set()
    if not any(p.deleting and not p.terminal and p.name not in mine for p in pods):
        return False
    try:
        body = await rt.client.get("Namespace", None, namespace)
    except ApiError as e:
        if e.transient:
            raise
        return False  # no right to read it: decide as before
    md = (body or {}).get("metadata") or {}
    return body is None or bool(md.get("deletionTimestamp"))


def _context(rt: Runtime, job: TrainingJobRecord, now: float, terminating: bool = False) -> TrainingContext:
    key = job.key
    pods = rt.cache.job_pods(key)
    placement = placement_of(job.status)
    assumed = rt.cache.assumptions.unless_placed(key, placement is not None)
    if placement is None:
        rt.cache.handoffs.stop_done(key)  # nothing left to preempt
    held = placement or assumed
    names = set(held.nodes if held else ()) | {p.node for p in pods if p.node}
    nodes = {n: node for n in names if (node := rt.cache.node(n)) is not None}
    prices = {name: (p.spec.price_per_gpu_hour if p.spec else None) for name, p in rt.cache.pools().items()}
    view = rt.cache.view(held.pool) if held is not None else None
    request = pool_nodes = rank = None
    if view is not None and job.spec is not None:
        try:
            request = gang_request(job, view.resource)
        except (TypeError, ValueError, AttributeError, KeyError):
            request = None  # a template admission could not read either: the job waits InvalidSpec
        pool_nodes = {n: view.by_name[n] for n in names if n in view.by_name}
        rank = rank_gpus(job, view.resource)
    return TrainingContext(
        request=request, pool_nodes=pool_nodes or {}, rank_gpus=rank, namespace_terminating=terminating,
        claim_wait=_claim_wait(rt, job),
        now=now, pods=pods, nodes=nodes, assumed=assumed,
        waiting=rt.cache.handoffs.wait_of(key), last_wait_write=rt.cache.handoffs.last_wait_write(key),
        pool_prices=prices, create_error=rt.cache.handoffs.create_error(key),
        spec_hash=spec_hash(job) if job.spec is not None else "",
        preempted_by=rt.cache.handoffs.stop_request(key),
        domain_cliques=domain_cliques(rt, view, placement or assumed, job),
        compute_domains=tuple(rt.cache.job_compute_domains(key)),
        report=rt.reports.get(key), report_write_seconds=rt.progress_interval(),
    )


def _claim_wait(rt: Runtime, job: TrainingJobRecord) -> str | None:
    claim = rt.cache.claim((job.namespace, pvc_name(job.name)))
    # An absent claim will be created with spec.checkpoint.storageClassName (or the default
    # class, unknown here: then the pods are gated and lifted once the claim shows its class).
    cls = claim[1] if claim else (job.spec.checkpoint.storage_class_name if job.spec else None)
    return claim_wait(job, claim, rt.cache.binding_mode(cls) if cls else None)


async def reconcile_job(rt: Runtime, key: Key) -> float | None:
    """One step of one job; returns seconds until it wants another look."""
    await rt.ready.wait()
    rec = rt.cache.job(key)
    if rec is None or rec.deleting:
        # The job is gone (or going): its pods go now, not whenever the garbage collector gets
        # to them: until then they hold their GPUs, and a pod whose create was in flight when
        # the job was deleted would hold them for as long as the collector is behind.
        pods = rt.cache.job_pods(key)
        live = [p.name for p in pods if not p.deleting]
        if live:
            log.info("trainingjob %s/%s deleted: deleting its %d pods", key[0], key[1], len(live))
            await gather_bounded([rt.client.delete("Pod", key[0], n) for n in live])
        domains = [cd.name for cd in rt.cache.job_compute_domains(key)]
        if domains and any(not p.terminal for p in pods):
            return 2.0  # its ComputeDomains go once no pod may hold their channel any more
        if domains:
            await release_domains(rt, key, domains)
        rt.cache.forget(key)
        rt.jobs.forget(key)
        rt.reports.forget(key)
        rt.wake_admission()
        return None
    job = rt.cache.effective(key, rec)
    if rt.status_ca_refresh:
        await ensure_status_ca(rt, key[0])  # once per namespace and CA: running pods read the new copy
    now = time.time()
    terminating = await namespace_terminating(rt, key[0], rt.cache.job_pods(key))
    plan = plan_training(job, _context(rt, job, now, terminating))
    rt.cache.held_events.hold(key, plan.events, now)
    if not await write_status(rt, job, plan, now):
        rt.cache.held_events.drop(key)
        return 1.0
    # The Events narrate the status just written: posted before the pods are touched, so a
    # failed create or delete (retried by the work queue) does not lose them.
    for type_, reason, message, at in rt.cache.held_events.take(key):
        if type_ == WARNING or reason in LOGGED_NORMAL_REASONS:
            log.info("trainingjob %s/%s: %s: %s", key[0], key[1], reason, message)
        rt.event(KIND, job, type_, reason, message, at)
    _count_restart(plan)
    if _admissions_first(rt, key, plan):
        rt.queue_job(key, follow_up=True)
        return None
    _settle_release(rt, job, plan)
    await _apply(rt, job, plan)
    if plan.release:
        rt.wake_admission()
    return plan.requeue_after if plan.requeue_after is not None else RESYNC_SECONDS


def _admissions_first(rt: Runtime, key: Key, plan: TrainingPlan) -> bool:
    """Whether this reconcile, which has just written ``plan``'s status, leaves its creates
    and deletes to a second pass: it wrote an admission (``plan.admitted``) while other urgent
    keys wait (the rest of an admission round). The job goes to the work queue's follow-up lane,
    after every urgent key (the later rounds' admissions too), so every gang of a burst is
    ``Admitted`` (its GPUs on record, its placement visible to users and GitOps tools) after
    one API round trip each, before any of them spends two more on its claim, Service and pods.
    With the second passes at the back of the urgent lane instead, a later round's admissions
    waited behind the earlier ones' creates: 6.5 s from assumed to written at p50 in a burst of
    800 on 1,024 nodes, for a write of 0.18 s. Kueue likewise records a Workload's admission
    before the job's pods exist. The second pass finds the placement in status and creates
    what is missing, as after a restart between the two; an admission is deferred at most
    once (the second pass admits nothing). In a quiet cluster (no backlog) nothing is
    deferred."""
    return plan.admitted and rt.jobs is not None and rt.jobs.urgent_waiting(besides=key) > 0


def _settle_release(rt: Runtime, job: TrainingJobRecord, plan: TrainingPlan) -> None:
    """Settle a release whose status write got neither an answer nor a read-back
    (:meth:`HandOffs.release_unsettled <kubeforge.runtime.cache_handoffs.HandOffs.release_unsettled>`),
    once ``job`` (the version this reconcile decided from) is newer than the one the release was
    decided from. Only this process writes the status, and a placement changes only with the
    attempt, so a newer version without a placement or in a later attempt means the release
    landed: its pods are deleted by name with ``plan``'s (the watch may still hide them, and a
    plan decided from the released status cannot name them). A newer version that still holds
    it means it never landed (this plan decided afresh, naming the pods itself if it released
    again). An older or equal version (the watch lags) settles nothing: the names wait."""
    unsettled = rt.cache.handoffs.unsettled_release(job.key)
    if unsettled is None or int(job.resource_version or 0) <= unsettled[0]:
        return
    _, attempt, names = unsettled
    if placement_of(job.status) is None or current_attempt(job.status) != attempt:
        plan.delete_pods = sorted(set(plan.delete_pods) | set(names))
    rt.cache.handoffs.settle_release(job.key)


def _count_restart(plan: TrainingPlan) -> None:
    """Count the restart the plan made (applied: its status is written) in its metric, by the
    plan's typed outcome."""
    if plan.restart is RestartCause.PREEMPTION:
        metrics.PREEMPTION_RESTARTS.inc()
    elif plan.restart is RestartCause.FAILURE:
        metrics.FAILURE_RESTARTS.inc()
    elif plan.restart is RestartCause.STARTUP:
        metrics.STARTUP_FAILURES.labels(reason=plan.startup_failure or "Unknown").inc()


async def _apply(rt: Runtime, job: TrainingJobRecord, plan: TrainingPlan) -> None:
    """Apply what the plan asks beyond its status, in order: release ComputeDomains, delete pods,
    lift kubeforge's gates, then (for a placed gang) create what must exist before the pods (the
    workers Service, the checkpoint claim, the DRA templates and ComputeDomain) and then the pods.
    Every write is expected in the cache before it is sent; a permanent refusal is handed to the
    next decision (:func:`_refused`), anything else raises for the work queue to retry."""
    key = job.key
    cache = rt.cache
    if plan.release_compute_domains:
        await release_domains(rt, key, plan.release_compute_domains)
    await _delete_pods(rt, key, plan)
    if plan.ungate:
        await _lift_gates(rt, key, plan.ungate)
    status = job.status if plan.status is None else {**job.status, **plan.status}  # job: the effective record
    placement = placement_of(status)
    if placement is None:
        return
    attempt = current_attempt(status)
    view = cache.view(placement.pool)
    if not await _create_before_pods(rt, job, plan, view, attempt):
        return
    made = cache.expectations.pending_creates(key)
    ranks = [r for r in plan.create_ranks if worker_pod_name(job.name, r, attempt) not in made]
    if ranks:
        await _create_pods(rt, job, plan, view, status, ranks)


async def _delete_pods(rt: Runtime, key: Key, plan: TrainingPlan) -> None:
    """Delete the plan's pods not already being deleted (each expected gone first)."""
    gone = rt.cache.expectations.pending_deletes(key)
    doomed = [n for n in plan.delete_pods if n not in gone]
    if doomed:
        rt.cache.expectations.expect_deleted(key, doomed)
        await gather_bounded([rt.client.delete("Pod", key[0], n, plan.delete_grace_seconds) for n in doomed])


async def _lift_gates(rt: Runtime, key: Key, ungate: Sequence[str]) -> None:
    """Lift kubeforge's gates from the named pods (:func:`_ungate_patch`), once per pod.

    A lift sent is expected until the index shows the pod ungated (the claim's status events
    bring the job back several times within a second): kept in the job's book of its own writes
    not yet seen, under a name no pod has.
    """
    cache = rt.cache
    sent = cache.expectations.pending_creates(key)
    gates = {p.name: p.gates for p in cache.job_pods(key)}
    patches = [(n, _ungate_patch(gates[n])) for n in ungate if n in gates and f"ungate:{n}" not in sent]
    cache.expectations.expect_created(key, [f"ungate:{n}" for n, _ in patches])
    results = await gather_bounded([rt.client.patch("Pod", key[0], n, body, patch_type="json") for n, body in patches])
    failed = [(n, r) for (n, _), r in zip(patches, results) if isinstance(r, BaseException)]
    for n, r in failed:
        cache.expectations.created_observed(key, f"ungate:{n}")
        log.info("trainingjob %s/%s: lifting the gates of pod %s: %s", key[0], key[1], n, r)
    # Gates that changed meanwhile (422 from the test, 404): the pod's event brings the job
    # back. Anything else (no answer, 5xx): the work queue retries with its backoff.
    retry = next((r for _, r in failed if not isinstance(r, ApiError) or r.transient), None)
    if retry is not None:
        raise retry


async def _create_before_pods(rt: Runtime, job: TrainingJobRecord, plan: TrainingPlan, view: PoolView | None,
                              attempt: int) -> bool:
    """Create what the pods need first and is missing: the namespace's workers Service, the
    checkpoint claim (mode ClaimPerJob only), the DRA claim templates and the ComputeDomain
    (:func:`before_pods`); before new pods, the object store's Secret must exist
    (:mod:`kubeforge.runtime.checkpoint_secrets`). Returns False when a create failed (or the
    Secret is missing) with a refusal handed to the next decision (no pods now); raises anything
    else."""
    key, ns, cache = job.key, job.key[0], rt.cache
    if plan.create_ranks and not await _secret_found(rt, job, attempt):
        return False
    first = []
    if plan.ensure_service and not cache.workers_service_made(ns):
        first.append(("Service", WORKERS_SERVICE, build_workers_service(ns)))
        cache.workers_service_sent(ns)
    claim = pvc_name(job.name)
    if plan.ensure_claim and cache.claim((ns, claim)) is None and claim not in cache.expectations.pending_creates(key):
        first.append(("PersistentVolumeClaim", claim, build_pvc(job)))
    for kind, name, body in before_pods(view, job, plan.compute_domain) if plan.create_ranks or plan.compute_domain else ():
        if name not in cache.expectations.pending_creates(key):
            first.append((kind, name, body))
    if not first:
        return True
    cache.expectations.expect_created(key, [name for kind, name, _ in first if kind != "Service"])
    results = await gather_bounded([rt.client.create(kind, ns, body) for kind, _, body in first])
    failed = [(kind, name, r) for (kind, name, _), r in zip(first, results) if isinstance(r, BaseException)]
    # Forget the expectation of EVERY create that failed before raising: left behind, the
    # claim's would hide for EXPECTATION_TTL that it was never created, and the job (no pod,
    # no claim whose event would bring it back) would sleep until its startup timeout.
    for kind, name, _r in failed:
        cache.expectations.created_observed(key, name)
        if kind == "Service":
            cache.workers_service_failed(ns)
    for kind, name, r in failed:
        if not _refused(rt, key, attempt, kind, name, r):
            raise r
    return not failed


async def _secret_found(rt: Runtime, job: TrainingJobRecord, attempt: int) -> bool:
    """False (the 404 handed to the next decision) when ``checkpoint.objectStore.secretName``
    names no Secret; True when it exists, when none is named, or when it cannot be known."""
    store = job.spec.checkpoint.object_store if job.spec is not None else None
    if store is None or not store.secret_name:
        return True
    err = await SECRETS.missing(rt.client, job.namespace, store.secret_name, time.monotonic())
    if err is None:
        return True
    _refused(rt, job.key, attempt, "Secret", store.secret_name, err)
    return False


async def _create_pods(rt: Runtime, job: TrainingJobRecord, plan: TrainingPlan, view: PoolView | None,
                       status: Mapping[str, Any], ranks: Sequence[int]) -> None:
    """Create the worker pods of ``ranks`` on the gang's placement, after the status CA they
    read; the first permanent refusal is handed to the next decision, anything else raises."""
    key, ns, cache = job.key, job.key[0], rt.cache
    placement = placement_of(status)
    assert placement is not None
    attempt = current_attempt(status)
    await ensure_status_ca(rt, ns)  # the CA the pods' projected volume reads, before the pods
    gpu_template, channel_template = claim_templates(view, job, domain_cliques(rt, view, placement, job))
    pods = [build_worker_pod(job, rank=r, attempt=attempt, placement=placement,
                             levels=view.levels if view else (),
                             gpu_resource=view.resource if view else DEFAULT_GPU_RESOURCE_NAME,
                             tolerations=view.tolerations if view else (), last_checkpoint=status.get("lastCheckpoint"),
                             gpu_claim_template=gpu_template, channel_claim_template=channel_template,
                             scheduling_gates=(VOLUME_GATE,) if plan.volume_gate else (), reporting=rt.reporting())
            for r in ranks]
    cache.expectations.expect_created(key, [p["metadata"]["name"] for p in pods])
    results = await gather_bounded([rt.client.create("Pod", ns, p) for p in pods])
    errors = [(p, r) for p, r in zip(pods, results) if isinstance(r, BaseException)]
    for p, r in errors:
        cache.expectations.created_observed(key, p["metadata"]["name"])
    for p, r in errors:
        if not _refused(rt, key, attempt, "Pod", p["metadata"]["name"], r):
            raise r
        break


def _ungate_patch(gates: tuple[str, ...]) -> list[dict[str, Any]]:
    """JSON patch lifting kubeforge's gates (:data:`kubeforge.lifecycle.OUR_GATES`)
    from a pod whose ``spec.schedulingGates`` are ``gates``, and nobody else's: it first tests
    that the gates are still those (a 422 otherwise, and the next reconcile decides again)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/spec/schedulingGates", "value": [{"name": g} for g in gates]}]
    if all(g in OUR_GATES for g in gates):
        return ops + [{"op": "remove", "path": "/spec/schedulingGates"}]
    return ops + [{"op": "remove", "path": f"/spec/schedulingGates/{i}"}
                  for i in reversed(range(len(gates))) if gates[i] in OUR_GATES]


def _refused(rt: Runtime, key: Key, attempt: int, kind: str, name: str, err: BaseException) -> bool:
    """Hand a permanent refusal to the next decision (True); False for anything else."""
    if isinstance(err, ApiError) and not err.transient:
        log.warning("trainingjob %s/%s: %s %s refused: %s", key[0], key[1], kind, name, err)
        rt.cache.handoffs.create_refused(key, CreateError(attempt, kind, name, err.code, err.message))
        rt.queue_job(key)
        return True
    return False
