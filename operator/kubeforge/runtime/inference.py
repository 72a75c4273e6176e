"""InferenceService reconcile: read the cache, autoscale, ask :func:`kubeforge.serving.plan_serving`,
apply. The one writer of an InferenceService's status.

Every reconcile (a pod, a node, admission or a timer brought it here):

1. resolve the first existing pool of ``spec.pools`` and the replica's shape there
   (:func:`kubeforge.admission.group_shape`: pods per replica, GPUs each);
2. make sure the Service exists (no selector: the operator writes its EndpointSlice);
3. once per ``autoscaling.pollingIntervalSeconds`` (and at once when the spec changes), read
   the metric through the runtime's :class:`~kubeforge.runtime.metrics_source.MetricsSource`
   (only from an allowed URL: :mod:`kubeforge.runtime.prometheus_urls`) and ask the pure
   autoscaler (:func:`kubeforge.autoscaling.decide`) for the replica count, capped by how many
   whole groups the pool can place now (:func:`kubeforge.admission.groups_that_fit`);
4. ask :func:`~kubeforge.serving.plan_serving` what to do with the groups (admission's new
   groups, failures, startup, drain, rollout, scale), given the autoscaler's outcome: the plan
   holds the whole status patch (the autoscaling conditions, ``desiredReplicas``,
   ``lastScaleTime``, ``lastMetricValue``, ``url`` included) and every Event;
5. write the status once (the groups' nodes are on record before their pods exist), post the
   Events that narrate it (held in the Cache until the write answers, so neither a lost answer
   nor a failed create loses them), then delete, create, write the EndpointSlice.

Replicas that take minutes to start (issue 28, :mod:`kubeforge.runtime.serving_engines`): with
``autoscaling.predictive`` the decision also gets the service's demand history (read at most
every 30 s) and its measured p90 start (``status.startTime``) as the lead time; with
``spec.standby`` the standby leaders' ``/is_sleeping`` is read before the plan and the plan's
sleeps and wakes are sent after it, in the background (their end queues the next look).

The autoscaler's memory lives in the process; after a restart it is seeded from
``status.desiredReplicas`` (as the HPA seeds from the scale's replicas), so a restart never
causes a sudden scale-down. A Deployment left by kubeforge 0.1 (replicas behind an admission
gate) is deleted once: it is ours, and the groups replace it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubeforge import metrics
from kubeforge.admission import GroupShape, PoolView, group_request, group_shape, groups_that_fit
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, Decision, DemandHistory, Signals, decide
from kubeforge.autoscaling.prometheus import QueryResult, queue_template, render_query
from kubeforge.api import ModelCachePolicy
from kubeforge.modelcache import cache_key
from kubeforge.builders.serving import build_endpoint_slice, build_group_pod, build_service, serving_hash
from kubeforge.builders.training import build_workers_service
from kubeforge.objects import (
    INVALID_SPEC, MODEL_NOT_MOUNTED, POOL_NOT_FOUND, READY, WARNING, WORKERS_SERVICE, InferenceServiceRecord, Key, condition,
    conditions_equal, groups_of, refusal_reason, set_condition, slice_name,
)
from kubeforge.runtime.cache import service_key
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.engine_control import EngineCalls
from kubeforge.runtime.metrics_source import read_queue
from kubeforge.runtime.prometheus_urls import refusal, url_refusal
from kubeforge.runtime.state import Runtime
from kubeforge.runtime.serving_engines import read_sleeping, refresh_history, send_engine_calls
from kubeforge.runtime.training import gather_bounded
from kubeforge.serving import ScalingOutcome, ServingContext, ServingPlan, is_serving, lead_seconds, plan_serving

log = logging.getLogger("kubeforge.inference")
KIND = "InferenceService"


@dataclass
class ServiceMemory:
    """What the process remembers about one InferenceService between reconciles."""

    autoscaler: AutoscalerState = field(default_factory=AutoscalerState)
    decided_at: float | None = None
    generation: int | None = None
    decision: Decision | None = None
    query: QueryResult | None = None
    capacity_note: str | None = None
    service_made: bool = False
    slice_written: str | None = None
    history: tuple[float, DemandHistory] | None = None
    engines: EngineCalls = field(default_factory=EngineCalls)
    model_warned: int | None = None


def model_key(rt: Runtime, rec: InferenceServiceRecord) -> str | None:
    """The node caches' key of the service's ``spec.model`` when its pods get it from them
    (``--model-cache``, a cached scheme), else None."""
    model = rec.spec.model if rec.spec is not None else None
    if not rt.options.model_cache or model is None or not model.cached:
        return None
    return cache_key(model, rec.namespace)


def _cache_policy(rt: Runtime, view: PoolView) -> ModelCachePolicy | None:
    """The pool's ``spec.modelCache`` when node agents serve it (``--model-cache``), else None:
    the pods then get no node copy to wait for."""
    spec = view.record.spec
    return spec.model_cache if rt.options.model_cache and spec is not None else None


def _warn_model_not_mounted(rt: Runtime, rec: InferenceServiceRecord, mem: ServiceMemory, now: float) -> None:
    """A Warning Event, once a generation, when ``spec.model`` needs the node caches and they are off."""
    model = rec.spec.model if rec.spec is not None else None
    if model is None or not model.cached or rt.options.model_cache or mem.model_warned == rec.generation:
        return
    mem.model_warned = rec.generation
    rt.event(KIND, rec, WARNING, MODEL_NOT_MOUNTED, f"spec.model {model.uri} is not mounted: the operator runs "
             "without --model-cache (the chart's cacheAgent.enabled), so no node agent fetches it; the template "
             "loads its own weights", now)


def query_for(rec: InferenceServiceRecord) -> str:
    """The PromQL to run: the user's query (Custom, or any given), else the metric's default."""
    a = rec.spec.autoscaling  # type: ignore[union-attr]
    return render_query(queue_template(a.metric.value, a.query), rec.namespace, rec.name)


async def _write(rt: Runtime, rec: InferenceServiceRecord, patch: dict[str, Any]) -> None:
    patch = {**patch, "observedGeneration": rec.generation}
    books = service_key(rec.key)
    with rt.cache.assumptions.status_write(books):  # admitted groups must not expire while their write is in flight
        written = await rt.client.patch_status(KIND, rec.namespace, rec.name, patch)
    rt.cache.remember(books, written)


async def _not_ready(rt: Runtime, rec: InferenceServiceRecord, reason: str, message: str, now: float) -> None:
    old = condition(rec.status, READY)
    if old and old.get("reason") == reason and old.get("message") == message:
        return
    conds = set_condition(rec.status.get("conditions"), READY, False, reason, message, now, rec.generation)
    await _write(rt, rec, {"conditions": conds})
    rt.event(KIND, rec, WARNING, reason, message, now)


async def _invalid(rt: Runtime, rec: InferenceServiceRecord, now: float) -> None:
    """A spec the models refuse (only objects made before a schema change get this far): say so
    once, and hold nothing: its groups are released and their pods deleted, as a TrainingJob's
    placement is (never GPUs booked for replicas nobody manages)."""
    live = [p.name for p in rt.cache.service_pods(rec.key) if not p.deleting]
    if live:
        await gather_bounded([rt.client.delete("Pod", rec.namespace, n) for n in live])
    if rec.status.get("groups"):
        await _write(rt, rec, {"groups": [], "replicas": 0, "readyReplicas": 0})
        rt.wake_admission()
    await _not_ready(rt, rec, INVALID_SPEC, rec.spec_error or "invalid spec", now)


async def _being_deleted(rt: Runtime, key: Key) -> bool:
    """Whether the service is gone or going although the index does not show it yet. Its pods'
    deletions by the garbage collector can arrive before the service's own event (another
    watch): read it once, only when a pod of it is being deleted by someone else, so that its
    deletion is never taken for lost replicas (a Warning and a recreation per group)."""
    mine = rt.cache.expectations.pending_deletes(service_key(key))
    if not any(p.deleting and not p.terminal and p.name not in mine for p in rt.cache.service_pods(key)):
        return False
    body = await rt.client.get(KIND, key[0], key[1])
    return body is None or bool((body.get("metadata") or {}).get("deletionTimestamp"))


async def _query(rt: Runtime, rec: InferenceServiceRecord) -> tuple[QueryResult, Signals | None]:
    """What the autoscaler decides on (:func:`~kubeforge.runtime.metrics_source.read_queue`
    through ``rt.metrics``), from an allowed URL only: a refused one is never sent a request,
    and its refusal is the error the ScalingActive condition shows."""
    a = rec.spec.autoscaling  # type: ignore[union-attr]
    why = await refusal(a.prometheus_url, rt.options.prometheus_allow, rt.api_servers)
    if why:
        return QueryResult(None, None, why), None
    return await read_queue(rt.metrics, rec)


async def _ensure_children(rt: Runtime, rec: InferenceServiceRecord, mem: ServiceMemory, multi: bool) -> bool:
    """The Service (no selector) and, for groups of several pods, the namespace's headless
    Service their leaders are found through; a 0.1 Deployment goes. False when the API server
    refused the Service (reported)."""
    ns, name = rec.key
    if not mem.service_made:
        try:
            await rt.client.apply("Service", ns, name, build_service(rec))
            # A Service made by kubeforge 0.1 selected the replicas itself: its endpoints are ours now.
            await rt.client.patch("Service", ns, name, {"spec": {"selector": None}})
        except ApiError as e:
            if e.transient:
                raise
            await _not_ready(rt, rec, refusal_reason(e.code),
                             f"the API server refused Service {name} (HTTP {e.code}): {e.message}", time.time())
            return False
        mem.service_made = True
    if rt.cache.deployment(rec.key) is not None:
        log.info("inferenceservice %s/%s: deleting the Deployment of kubeforge 0.1 (replaced by replica groups)", ns, name)
        await rt.client.delete("Deployment", ns, name)
    if multi and not rt.cache.workers_service_made(ns):
        rt.cache.workers_service_sent(ns)
        await rt.client.create("Service", ns, build_workers_service(ns))
    return True


def _capacity(rt: Runtime, rec: InferenceServiceRecord, shape: GroupShape | None, holding: int) -> tuple[int | None, str | None]:
    """(replicas the pool can hold in all now, why not one more) for the autoscaler's cap."""
    if shape is None:
        return None, None
    view = rt.cache.view(shape.pool)
    if view is None:
        return None, None
    led = rt.cache.ledger(view.resource)
    held = led.per_node if led is not None else {n.name: n.gpus_allocated for n in view.nodes}
    limit = max(0, rec.spec.max_replicas - holding)  # type: ignore[union-attr]
    fit, why = groups_that_fit(view, held, group_request(rec, view, shape), limit)
    return holding + fit, why


async def _load(rt: Runtime, rec: InferenceServiceRecord, pods: list, desired: int) -> dict[int, float]:
    """Requests in flight per group (running and waiting in its engine), from its leader pod's
    series: read only while a group drains or a scale-down has to choose which to drain (the
    least loaded)."""
    groups = groups_of(rec.status)
    active = sum(1 for g in groups if not g.leaving)
    if not any(g.draining_since is not None for g in groups) and desired >= active:
        return {}
    a = rec.spec.autoscaling  # type: ignore[union-attr]
    if url_refusal(a.prometheus_url, rt.options.prometheus_allow, rt.api_servers):
        return {}
    by_pod = await rt.metrics.in_flight_by_pod(a.prometheus_url, rec.namespace, rec.name)
    if by_pod is None:
        return {}
    leaders = {p.name: p.group for p in pods if p.worker == 0 and p.group is not None}
    out: dict[int, float] = {}
    for g in groups:
        names = [n for n, idx in leaders.items() if idx == g.index]
        if names and all(n in by_pod for n in names):
            out[g.index] = sum(by_pod[n] for n in names)
    return out


async def _autoscale(rt: Runtime, rec: InferenceServiceRecord, mem: ServiceMemory, current: int,
                     capacity: tuple[int | None, str | None], now: float) -> tuple[Decision, QueryResult]:
    """The autoscaler's decision (:func:`kubeforge.autoscaling.decide`), anew once per polling
    interval or when the spec changed, else the last one: the metric, the pool's capacity, and
    with predictive scale-up the history and the measured p90 start as the lead time."""
    spec = rec.spec
    assert spec is not None
    interval = float(spec.autoscaling.polling_interval_seconds)
    if mem.decision is None or mem.generation != rec.generation or now - (mem.decided_at or 0) >= interval:
        q, signals = await _query(rt, rec)
        mem.history = await refresh_history(rt, rec, mem.history, now)
        cap, note = capacity
        d = decide(AutoscalingPolicy.from_spec(spec), mem.autoscaler, current, signals if signals is not None else q.value,
                   now, cap, history=mem.history[1] if mem.history else None, lead_seconds=lead_seconds(rec.status))
        mem.autoscaler, mem.decision, mem.query, mem.capacity_note = d.state, d, q, note
        mem.decided_at, mem.generation = now, rec.generation
        metrics.AUTOSCALER_DECISIONS.labels(direction=(d.direction or "hold").lower()).inc()
    assert mem.decision is not None and mem.query is not None
    return mem.decision, mem.query


UNSEEN_CREATES_RECHECK = 0.5
"""Seconds before a service's reconcile looks again while pods its last reconciles created are not
in the pod index yet: it decides nothing until they are. Its plan reads the pods from the index,
so a group released then (a scale-down, a restart's old attempt, a failed group) kept such a pod
running with none of it deleted, and no ledger counted it until the pod watch showed it: the next
admission round gave its GPUs again (tests/test_serving_concurrency.py, helper-38). The wait
comes before the invalid-spec path too, which releases the groups the same way. The Job
controller waits for its expectations the same way (``SatisfiedExpectations``); an expectation
never seen is dropped after :data:`~kubeforge.runtime.cache_expectations.EXPECTATION_TTL`."""


async def reconcile_service(rt: Runtime, key: Key) -> float | None:
    """One step of one InferenceService; returns seconds until it wants another look."""
    await rt.ready.wait()
    cache = rt.cache
    rec = cache.service(key)
    if rec is None or rec.deleting:
        known = cache.known_service_memory(key)
        if known is not None:
            known.engines.cancel_all()
        cache.forget_service(key)
        rt.services.forget(key)
        rt.wake_admission()
        return None
    if cache.namespace_terminating(key[0]):
        return None  # the namespace controller deletes everything: nothing is created or counted
    if await _being_deleted(rt, key):
        return None
    books = service_key(key)  # its entries in the books TrainingJobs use too
    if cache.expectations.pending_creates(books):
        return UNSEEN_CREATES_RECHECK  # see its docstring: decided now, pods no ledger counts could stay
    rec = cache.effective(books, rec)
    now = time.time()
    mem = cache.service_memory(key, ServiceMemory)
    spec = rec.spec
    if spec is None:
        await _invalid(rt, rec, now)
        return 30.0
    _warn_model_not_mounted(rt, rec, mem, now)
    pool_name = next((p for p in spec.pools if cache.pool(p) is not None), None)
    if pool_name is None:
        await _not_ready(rt, rec, POOL_NOT_FOUND, f"none of the GPUPools {list(spec.pools)} exists", now)
        return 30.0
    view = cache.view(pool_name)
    shaped = group_shape(rec, view) if view is not None else "the pool is not known yet"
    shape = shaped if isinstance(shaped, GroupShape) else None
    if not await _ensure_children(rt, rec, mem, multi=bool(shape and shape.pods > 1)):
        return 30.0

    groups = groups_of(rec.status)
    assumed = cache.assumptions.groups_of(key)
    holding = sum(1 for g in groups if g.holds) + sum(1 for i in assumed if i not in {g.index for g in groups})
    current = int(rec.status.get("desiredReplicas", sum(1 for g in groups if is_serving(g))))
    d, q = await _autoscale(rt, rec, mem, current, _capacity(rt, rec, shape, holding), now)
    pods = cache.service_pods(key)
    names = {n for g in groups for n in g.nodes} | {n for a in assumed.values() for n in a.placement.nodes}
    ctx = ServingContext(
        now=now, desired=d.desired, pods=pods, nodes={n: x for n in names if (x := cache.node(n)) is not None},
        shape=shape, shape_error=None if shape is not None or view is None else str(shaped),
        template_hash=serving_hash(rec), assumed=assumed, load=await _load(rt, rec, pods, d.desired),
        waiting=cache.handoffs.serving_wait_of(key), scaling=ScalingOutcome(d, q, current, mem.capacity_note),
        sleeping=await read_sleeping(rt, rec, pods), model_key=model_key(rt, rec),
        model_caches={n: c.copies for n in names if (c := cache.model_cache(n)) is not None},
    )
    plan = plan_serving(rec, ctx)  # the whole status patch and every Event, the autoscaler's included
    patch = plan.status or {}
    cache.held_events.hold(books, plan.events, now)
    if _changed(rec.status, patch):
        try:
            await _write(rt, rec, patch)
        except ApiError as e:
            if e.transient:
                raise  # it may be on record all the same: the held Events wait for the next reconcile
            cache.held_events.drop(books)
            log.error("inferenceservice %s/%s: status write refused: %s", key[0], key[1], e)
            return 30.0
    for type_, reason, message, at in cache.held_events.take(books):  # before the pods: a failed create must not lose them
        rt.event(KIND, rec, type_, reason, message, at)
    cache.assumptions.forget_groups(key, plan.written_assumed)
    await _apply(rt, rec, plan, ctx)
    send_engine_calls(rt, key, rec, plan, mem.engines)
    if plan.release or d.desired + spec.standby.replicas > holding:
        rt.wake_admission()
    interval = float(spec.autoscaling.polling_interval_seconds)
    left = max(0.5, interval - (now - (mem.decided_at or now)))
    return min(left, plan.requeue_after) if plan.requeue_after is not None else left


async def _apply(rt: Runtime, rec: InferenceServiceRecord, plan: ServingPlan, ctx: ServingContext) -> None:
    ns, name = rec.key
    cache = rt.cache
    books = service_key(rec.key)
    if plan.delete:
        cache.expectations.expect_deleted(books, plan.delete)  # ours: never taken for lost replicas
        await gather_bounded([rt.client.delete("Pod", ns, n) for n in plan.delete])
    bodies = []
    made = cache.expectations.pending_creates(books)
    for g, worker in plan.create:
        view = cache.view(g.pool)
        shape = group_shape(rec, view) if view is not None else None
        if view is None or not isinstance(shape, GroupShape):
            continue
        body = build_group_pod(rec, group=g, worker=worker, pods=len(g.nodes), gpus_per_pod=shape.gpus,
                               template_hash=ctx.template_hash, levels=view.levels, gpu_resource=view.resource,
                               tolerations=view.tolerations, model_cache=_cache_policy(rt, view))
        if body["metadata"]["name"] not in made:
            bodies.append(body)
    if bodies:
        cache.expectations.expect_created(books, [b["metadata"]["name"] for b in bodies])
        results = await gather_bounded([rt.client.create("Pod", ns, b) for b in bodies])
        for b, r in zip(bodies, results):
            if isinstance(r, BaseException):
                cache.expectations.created_observed(books, b["metadata"]["name"])
                if isinstance(r, ApiError) and not r.transient:
                    msg = f"the API server refused pod {b['metadata']['name']} (HTTP {r.code}): {r.message}"
                    await _not_ready(rt, rec, refusal_reason(r.code), msg, ctx.now)
                    break
                raise r
    addresses, port = cache.activator
    slice_ = build_endpoint_slice(rec, leaders=plan.endpoints, activator=addresses, activator_port=port)
    text = json.dumps(slice_, sort_keys=True)
    mem = cache.known_service_memory(rec.key)
    if mem is not None and mem.slice_written != text:
        await rt.client.apply("EndpointSlice", ns, slice_name(name), slice_)
        mem.slice_written = text


def _changed(old: Any, patch: dict[str, Any]) -> bool:
    for k, v in patch.items():
        if k == "conditions":
            if not conditions_equal(v, old.get("conditions")):
                return True
        elif k == "lastMetricTime":
            continue  # moves every poll; written along with anything else that changed
        elif k == "forecast":
            if not isinstance(old.get(k), dict) or any(old[k].get(f) != v.get(f) for f in ("method", "replicas")):
                return True  # its rates and time move every poll: written along with anything else
        elif old.get(k) != v:
            return True
    return False


__all__ = ["ServiceMemory", "reconcile_service", "query_for", "WORKERS_SERVICE"]
