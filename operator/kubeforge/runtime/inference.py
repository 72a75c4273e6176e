"""InferenceService reconcile: serving objects and the queue-driven autoscaler.

Once per ``autoscaling.pollingIntervalSeconds`` (and at once when the spec changes):

1. resolve the first existing pool of ``spec.pools``;
2. create the Service and the Deployment when absent (owned by the InferenceService); when
   the pod template the spec asks for (template, GPUs, pool, topology) differs from the one
   last written, write it once: a rolling update with ``maxSurge: 0``;
3. read the queue metric from Prometheus (never from the pods), only from an allowed URL;
4. ask the pure autoscaler (:func:`kubeforge.autoscaling.decide`) for the replica count,
   capped by what the pool can place now (the GPU ledger after the last admission round);
5. scale the Deployment when the count changes (an Event gives the numbers), write the
   status once.

The autoscaler's memory lives in the process; after a restart it is seeded from the current
replica count (as the HPA seeds from ``status.desiredReplicas``), so a restart never causes a
sudden scale-down. This is the one writer of an InferenceService's status.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from kubeforge import metrics
from kubeforge.admission import PoolView, placeable
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, decide
from kubeforge.autoscaling.prometheus import DEFAULT_QUERIES, QueryResult, query_scalar, render_query
from kubeforge.autoscaling.urls import resolved_refusal, url_refusal
from kubeforge.builders.common import conditions_equal, rfc3339, set_condition
from kubeforge.builders.inference import build_deployment, build_pod_template, build_service, template_hash
from kubeforge.objects import InferenceServiceRecord, Key, condition
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.state import Runtime

log = logging.getLogger("kubeforge.inference")
KIND = "InferenceService"
PROMETHEUS_TIMEOUT = 2.0


@dataclass
class ServiceMemory:
    """What the process remembers about one InferenceService between decisions."""

    autoscaler: AutoscalerState = field(default_factory=AutoscalerState)
    decided_at: float | None = None
    generation: int | None = None
    service_made: bool = False
    deployment_made_at: float | None = None


_http: httpx.AsyncClient | None = None


def query_for(rec: InferenceServiceRecord) -> str:
    """The PromQL to run: the user's query (Custom, or any given), else the metric's default."""
    a = rec.spec.autoscaling  # type: ignore[union-attr]
    template = a.query or DEFAULT_QUERIES.get(a.metric.value, DEFAULT_QUERIES["VLLMWaiting"])
    return render_query(template, rec.namespace, rec.name)


def _placeable(rt: Runtime, view: PoolView | None, gpus: int, current: int, unplaced: int = 0) -> int | None:
    if view is None:
        return None
    led = rt.cache.ledgers.get(view.resource)
    held = led.per_node if led is not None else {n.name: n.gpus_allocated for n in view.nodes}
    return placeable(view, held, gpus, current, unplaced)


async def _write(rt: Runtime, rec: InferenceServiceRecord, patch: dict[str, Any]) -> None:
    patch = {**patch, "observedGeneration": rec.generation}
    written = await rt.client.patch_status(KIND, rec.namespace, rec.name, patch)
    rt.cache.remember(rec.key, written)


async def _not_ready(rt: Runtime, rec: InferenceServiceRecord, reason: str, message: str, now: float) -> None:
    old = condition(rec.status, "Ready")
    if old and old.get("reason") == reason and old.get("message") == message:
        return
    conds = set_condition(rec.status.get("conditions"), "Ready", False, reason, message, now, rec.generation)
    await _write(rt, rec, {"conditions": conds})
    rt.event(KIND, rec, "Warning", reason, message, now)


async def _refused(rt: Runtime, rec: InferenceServiceRecord, kind: str, name: str, e: ApiError, now: float) -> None:
    """The API server refused an object built from the spec (400/422: the template is not a
    valid pod; 403: a quota, PodSecurity or a webhook): say so in ``Ready`` and a Warning
    Event, instead of retrying the same body in silence."""
    reason = "InvalidSpec" if e.code in (400, 422) else "CreateFailed"
    await _not_ready(rt, rec, reason, f"the API server refused {kind} {name} (HTTP {e.code}): {e.message}", now)


async def reconcile_service(rt: Runtime, key: Key) -> float | None:
    """One autoscaling step for one InferenceService; returns seconds until the next."""
    global _http
    await rt.ready.wait()
    cache = rt.cache
    rec = cache.service(key)
    if rec is None or rec.deleting:
        cache.forget(key)
        rt.services.forget(key)
        return None
    rec = cache.effective(key, rec)
    now = time.time()
    mem = cache.serving.setdefault(key, ServiceMemory())
    spec = rec.spec
    if spec is None:
        await _not_ready(rt, rec, "InvalidSpec", rec.spec_error or "invalid spec", now)
        return 30.0
    pool_name = next((p for p in spec.pools if cache.pool(p) is not None), None)
    if pool_name is None:
        await _not_ready(rt, rec, "PoolNotFound", f"none of the GPUPools {list(spec.pools)} exists", now)
        return 30.0
    interval = float(spec.autoscaling.polling_interval_seconds)
    if mem.decided_at is not None and mem.generation == rec.generation and now - mem.decided_at < interval:
        return interval - (now - mem.decided_at)
    mem.decided_at, mem.generation = now, rec.generation

    pool = cache.pool(pool_name)
    view = cache.view(pool_name)
    level = spec.topology.level if spec.topology.mode.value == "Required" else None
    level_label = next((lv.node_label for lv in view.levels if lv.name == level), None) if (view and level) else None
    template = build_pod_template(
        rec, gpu_resource=view.resource if view else "nvidia.com/gpu",
        node_selector=pool.spec.node_selector.to_dict() if pool and pool.spec else None,
        tolerations=view.tolerations if view else (), pool=pool_name, level_label=level_label,
    )
    thash = template_hash(template)
    ns, name = key
    if not mem.service_made:
        await rt.client.create("Service", ns, build_service(rec))
        mem.service_made = True
    dep = cache.deployment(key)
    gpus = spec.gpus_per_replica
    rollout: list[dict[str, Any]] = []  # JSON-patch ops of a template change, written with the scale
    if dep is None:
        if mem.deployment_made_at is not None and now - mem.deployment_made_at < 30:
            return 1.0  # created a moment ago; the index has not shown it yet
        first = spec.min_replicas
        cap = _placeable(rt, view, gpus, 0)
        if cap is not None:
            first = min(first, cap)
        try:
            await rt.client.create("Deployment", ns, build_deployment(rec, replicas=first, template=template))
        except ApiError as e:
            if e.transient:
                raise
            await _refused(rt, rec, "Deployment", name, e, now)
            return 30.0
        mem.deployment_made_at = now
        rt.event(KIND, rec, "Normal", "Created", f"Deployment and Service created with {first} replicas", now)
        current, ready, total = first, 0, 0
    else:
        current, ready, total = dep.replicas, dep.ready, dep.current
        if dep.template_hash != thash:
            rollout = [
                {"op": "replace", "path": "/spec/template", "value": template},
                {"op": "add", "path": "/metadata/annotations/kubeforge.io~1template-hash", "value": thash},
            ]

    a = spec.autoscaling
    refusal = url_refusal(a.prometheus_url, rt.options.prometheus_allow, rt.api_servers) or \
        await resolved_refusal(a.prometheus_url, rt.api_servers)
    if refusal:
        q = QueryResult(None, None, refusal)
    else:
        if _http is None:
            _http = httpx.AsyncClient()
        q = await query_scalar(_http, a.prometheus_url, query_for(rec), timeout=PROMETHEUS_TIMEOUT)
    pods = [p for p in cache.service_pods(key) if not p.deleting]
    bound = sum(1 for p in pods if p.where and not p.terminal)
    policy = AutoscalingPolicy.from_spec(spec)
    d = decide(policy, mem.autoscaler, current, q.value, now, _placeable(rt, view, gpus, current, unplaced=max(0, current - bound)))
    mem.autoscaler = d.state
    metrics.AUTOSCALER_DECISIONS.labels(direction=(d.direction or "hold").lower()).inc()
    patch: dict[str, Any] = {}
    if rollout:
        # The new template and the new replica count go in ONE write. Written apart (template,
        # then replicas a moment later), a maxSurge-0 rollout can wedge forever in the
        # Deployment controller: kubernetes/kubernetes#102551 (fix proposed in #138036).
        if d.desired != current:
            rollout.append({"op": "replace", "path": "/spec/replicas", "value": d.desired})
        try:
            await rt.client.patch("Deployment", ns, name, rollout, patch_type="json")
        except ApiError as e:
            if e.transient:
                raise
            await _refused(rt, rec, "Deployment", name, e, now)
            return 30.0
        rt.event(KIND, rec, "Normal", "Updated", "pod template changed: rolling out one replica at a time (maxSurge 0)", now)
    elif d.desired != current:
        await rt.client.patch("Deployment", ns, name, {"spec": {"replicas": d.desired}}, sub="scale")
    if d.desired != current:
        patch["lastScaleTime"] = rfc3339(now)
        patch["lastScaleDirection"] = "Up" if d.desired > current else "Down"
        rt.event(KIND, rec, "Normal", "Scaled", f"replicas {current} -> {d.desired}: {d.reason}", now)
    if q.value is not None:
        patch["lastMetricValue"] = q.value
        patch["lastMetricTime"] = rfc3339(q.time or now)
    conds = rec.status.get("conditions")
    active_msg = d.inactive_reason or d.reason
    if q.error:
        active_msg = f"Prometheus query failed ({q.error}); {active_msg}"
        old_active = condition(rec.status, "ScalingActive")
        if not old_active or old_active.get("status") != "False":
            rt.event(KIND, rec, "Warning", "FailedGetMetric", active_msg, now)
    gen = rec.generation
    conds = set_condition(conds, "ScalingActive", d.scaling_active, d.active_condition_reason, active_msg, now, gen)
    conds = set_condition(conds, "ScalingLimited", d.limited, d.limited_condition_reason,
                          d.limited_reason or "desired replicas within bounds and capacity", now, gen)
    old_limited = condition(rec.status, "ScalingLimited")
    if d.limited and d.limited_condition_reason == "InsufficientCapacity" and not (
            old_limited and old_limited.get("status") == "True" and old_limited.get("reason") == "InsufficientCapacity"):
        rt.event(KIND, rec, "Warning", "InsufficientCapacity", d.limited_reason or "the pool cannot place the replicas", now)
    if d.desired == 0 and policy.min_replicas == 0:
        conds = set_condition(conds, "Ready", True, "ScaledToZero", "no replicas: scaled to zero while idle", now, gen)
    else:
        conds = set_condition(conds, "Ready", ready > 0, "ReplicasReady" if ready else "NoReadyReplicas",
                              f"{ready} of {d.desired} replicas ready", now, gen)
    patch.update({
        "replicas": total,
        "readyReplicas": ready,
        "desiredReplicas": d.desired,
        "conditions": conds,
        "url": f"http://{name}.{ns}.svc:{spec.port}",
    })
    if _changed(rec.status, patch):
        try:
            await _write(rt, rec, patch)
        except ApiError as e:
            if e.transient:
                raise
            log.error("inferenceservice %s/%s: status write refused: %s", ns, name, e)
    return interval


def _changed(old: Any, patch: dict[str, Any]) -> bool:
    for k, v in patch.items():
        if k == "conditions":
            if not conditions_equal(v, old.get("conditions")):
                return True
        elif k == "lastMetricTime":
            continue  # moves every poll; written along with anything else that changed
        elif old.get(k) != v:
            return True
    return False
