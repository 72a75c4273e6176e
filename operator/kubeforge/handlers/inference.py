"""InferenceService: serving objects and the queue-driven autoscaler loop.

Each reconcile (every ``autoscaling.pollingIntervalSeconds``, and on every change) does:

1. validate the spec; resolve the first existing pool of ``spec.pools``;
2. create the Service and the Deployment if absent (owned by the InferenceService);
3. read the queue metric from Prometheus (never from the pods directly);
4. ask the pure autoscaler (:func:`kubeforge.autoscaling.decide`) for the replica count,
   capped by what the pool can place now (free GPUs on usable nodes);
5. patch the Deployment's ``replicas`` when it changes (an Event gives the numbers), and
   write ``status`` once.

The autoscaler's memory (:class:`~kubeforge.autoscaling.AutoscalerState`) lives in the
process; after a restart it is seeded from the current replica count, as the HPA seeds from
``status.desiredReplicas``, so a restart never causes a sudden scale-down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
from kubernetes.client.rest import ApiException

from kubeforge import GROUP, VERSION, metrics
from kubeforge.api import spec_error
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, decide
from kubeforge.autoscaling.prometheus import DEFAULT_QUERIES, query_scalar, render_query
from kubeforge.builders.common import (
    ADMISSION_GATE, ASSIGNED_NODE, POOL_LABEL, conditions_equal, get_condition, rfc3339, set_condition,
)
from kubeforge.builders.inference import build_deployment, build_service
from kubeforge.handlers import kube
from kubeforge.handlers.pools import ledger, pool_view
from kubeforge.handlers.state import STATE
from kubeforge.placement import GangRequest, PendingGang, Placement, admit

log = logging.getLogger("kubeforge.inference")
PLURAL = "inferenceservices"
_states: dict[tuple[str, str], AutoscalerState] = {}
_last_decision: dict[tuple[str, str], tuple[float, int | None]] = {}  # key -> (time, generation)
_http: httpx.AsyncClient | None = None


def _release_patch(pod: dict[str, Any], node: str) -> list[dict[str, Any]]:
    """JSON patch that pins a gated serving pod to ``node`` and lifts our gate.

    While a pod is gated its node affinity may only be narrowed (KEP-3838, GA in 1.30): we
    add ``matchFields metadata.name In [node]`` to every existing nodeSelectorTerm, or set
    one term when there is none, record the node in ``kubeforge.io/assigned-node`` (the GPU
    ledger counts it from now on) and remove the scheduling gates.
    """
    field = [{"key": "metadata.name", "operator": "In", "values": [node]}]
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    terms = (((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
             .get("nodeSelectorTerms") or [])
    ops: list[dict[str, Any]] = []
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    if terms:
        for i, term in enumerate(terms):
            if term.get("matchFields"):
                ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields/-", "value": field[0]})
            else:
                ops.append({"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields", "value": field})
    elif affinity.get("nodeAffinity"):
        ops.append({"op": "add", "path": base, "value": {"nodeSelectorTerms": [{"matchFields": field}]}})
    elif affinity:
        ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity",
                    "value": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": field}]}}})
    else:
        ops.append({"op": "add", "path": "/spec/affinity",
                    "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": field}]}}}})
    if (pod.get("metadata") or {}).get("annotations"):
        ops.append({"op": "add", "path": "/metadata/annotations/kubeforge.io~1assigned-node", "value": node})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {ASSIGNED_NODE: node}})
    ops.append({"op": "remove", "path": "/spec/schedulingGates"})
    return ops


async def admit_serving_pods(ledgers: dict[str, dict[str, int]], now: float) -> None:
    """Give every gated serving pod a node from the GPU ledger, or leave it gated.

    Runs inside the admission round (under its lock), after the training gangs, so serving
    replicas and gangs draw on one ledger: none is ever promised GPUs another holds. A pod
    that fits nowhere stays gated; the autoscaler's capacity cap keeps that rare.
    """
    waiting: dict[str, list[tuple[str, dict[str, Any], int]]] = {}
    idx = STATE.index("kf_service_pods")
    for key in list(idx.keys()):
        svc = STATE.one("kf_services", key)
        if svc is None:
            continue
        gpus = int((svc.get("spec") or {}).get("gpusPerReplica", 1))
        for pod in STATE.many("kf_service_pods", key):
            md = pod["metadata"]
            gates = [g.get("name") for g in pod["spec"].get("schedulingGates") or []]
            if ADMISSION_GATE not in gates or md.get("deletionTimestamp"):
                continue
            pool = (md.get("labels") or {}).get(POOL_LABEL)
            if pool:
                waiting.setdefault(pool, []).append((f"{md['namespace']}/{md['name']}", pod, gpus))
    for pool_name, pods in sorted(waiting.items()):
        probe = STATE.one("kf_pools", pool_name)
        if probe is None:
            continue
        res = (probe.get("spec") or {}).get("gpuResourceName") or "nvidia.com/gpu"
        if res not in ledgers:
            ledgers[res], _ = ledger(res)
        view = pool_view(pool_name, ledgers[res])
        if view is None:
            continue
        queue = [PendingGang(k, GangRequest(1, g, mode="None"), 0, 0.0) for k, _, g in sorted(pods, key=lambda x: x[0])]
        by_key = {k: p for k, p, _ in pods}
        releases = []
        for d in admit(queue, view.nodes, view.levels):
            if not isinstance(d.result, Placement):
                continue
            node = d.result.nodes[0]
            for n, g in d.result.gpus_by_node.items():
                ledgers[res][n] = ledgers[res].get(n, 0) + g
            pod = by_key[d.key]
            releases.append(kube.patch_pod_json(pod["metadata"]["namespace"], pod["metadata"]["name"], _release_patch(pod, node)))
        await asyncio.gather(*releases)


def policy_from_spec(spec: dict[str, Any]) -> AutoscalingPolicy:
    """Map ``spec`` (camelCase, API defaults applied) to the pure core's policy."""
    a = spec.get("autoscaling") or {}
    up = a.get("scaleUp") or {}
    down = a.get("scaleDown") or {}
    kw: dict[str, Any] = {
        "min_replicas": int(spec.get("minReplicas", 1)),
        "max_replicas": int(spec.get("maxReplicas", 4)),
        "gpus_per_replica": int(spec.get("gpusPerReplica", 1)),
    }
    for src, dst in (("targetPerReplica", "target_per_replica"), ("tolerance", "tolerance"),
                     ("activationThreshold", "activation_threshold"), ("scaleToZeroAfterSeconds", "scale_to_zero_after_seconds")):
        if a.get(src) is not None:
            kw[dst] = float(a[src])
    for rules, prefix in ((up, "scale_up"), (down, "scale_down")):
        if rules.get("stabilizationWindowSeconds") is not None:
            kw[f"{prefix}_stabilization_seconds"] = float(rules["stabilizationWindowSeconds"])
        if rules.get("maxStep") is not None:
            kw[f"{prefix}_max_step"] = int(rules["maxStep"])
        if rules.get("periodSeconds") is not None:
            kw[f"{prefix}_period_seconds"] = float(rules["periodSeconds"])
    return AutoscalingPolicy(**kw)


def query_for(spec: dict[str, Any], namespace: str, name: str) -> str:
    """The PromQL to run: the user's query (Custom or any given), else the metric's default."""
    a = spec.get("autoscaling") or {}
    template = a.get("query") or DEFAULT_QUERIES.get(a.get("metric") or "VLLMWaiting", DEFAULT_QUERIES["VLLMWaiting"])
    return render_query(template, namespace, name)


def placeable(view, gpus_per_replica: int, current: int, unplaced: int = 0) -> int | None:
    """Replicas the pool can hold in total now: the current ones plus whole replicas that fit
    in the free GPUs of usable nodes, less ``unplaced`` (replicas already asked for but not
    bound to a node yet: their GPUs do not show as allocated, yet they will take them).
    None when there is no pool view."""
    if view is None:
        return None
    extra = sum(n.gpus_free // gpus_per_replica for n in view.nodes if n.usable)
    return current + max(0, extra - unplaced)


async def _get(fn, *args):
    try:
        return await kube._call(fn, *args)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


async def reconcile_service(key: tuple[str, str]) -> float | None:
    """One autoscaling step for one InferenceService; returns seconds until the next."""
    global _http
    await STATE.ready.wait()
    ns, name = key
    body = await _get(kube.custom().get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        _states.pop(key, None)
        _last_decision.pop(key, None)
        return None
    now = time.time()
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    gen = body["metadata"].get("generation")
    conds = status.get("conditions")
    interval = float((spec.get("autoscaling") or {}).get("pollingIntervalSeconds", 5))
    err = spec_error(body)
    pool_name = next((p for p in spec.get("pools") or [] if STATE.one("kf_pools", p) is not None), None)
    if err or pool_name is None:
        reason, msg = ("InvalidSpec", err) if err else ("PoolNotFound", f"none of the GPUPools {spec.get('pools')} exists")
        old = get_condition(conds, "Ready")
        if not old or old.get("reason") != reason or old.get("message") != msg:
            conds = set_condition(conds, "Ready", False, reason, msg, now, gen)
            await kube.patch_status(PLURAL, ns, name, {"conditions": conds, "observedGeneration": gen})
            kube.event_soon(body, "Warning", reason, msg, now)
        return 30.0

    # Decide once per polling interval (and at once when the spec changes); the pod events
    # that also wake this reconcile must not make the autoscaler act on half-updated state, nor redo
    # the ledger, the Service and the Deployment read for nothing.
    last_t, last_gen = _last_decision.get(key, (None, None))
    if last_t is not None and last_gen == gen and now - last_t < interval:
        return interval - (now - last_t)
    _last_decision[key] = (now, gen)
    res = (STATE.one("kf_pools", pool_name).get("spec") or {}).get("gpuResourceName") or "nvidia.com/gpu"
    per_node, _ = ledger(res)
    view = pool_view(pool_name, per_node)
    policy = policy_from_spec(spec)
    await kube.create_if_absent("Service", ns, build_service(body))
    dep = await _get(kube.apps().read_namespaced_deployment, name, ns)
    level_label = None
    topo = spec.get("topology") or {}
    if topo.get("mode") == "Required" and topo.get("level") and view:
        level_label = next((l.node_label for l in view.levels if l.name == topo["level"]), None)
    if dep is None:
        first = max(policy.min_replicas, 0)
        cap = placeable(view, policy.gpus_per_replica, 0)
        if cap is not None:
            first = min(first, cap)
        manifest = build_deployment(body, replicas=first, gpu_resource=res, node_selector=(view.body.get("spec") or {}).get("nodeSelector") if view else None,
                                    tolerations=view.tolerations if view else [], pool=pool_name, level_label=level_label)
        await kube.create_if_absent("Deployment", ns, manifest)
        kube.event_soon(body, "Normal", "Created", f"Deployment and Service created with {first} replicas", now)
        dep = await _get(kube.apps().read_namespaced_deployment, name, ns)
    dep_d = kube.api().sanitize_for_serialization(dep) if dep is not None else {}
    current = int((dep_d.get("spec") or {}).get("replicas") or 0)
    dep_st = dep_d.get("status") or {}

    a = spec.get("autoscaling") or {}
    if _http is None:
        _http = httpx.AsyncClient()
    q = await query_scalar(_http, a.get("prometheusURL") or "http://prometheus-operated.monitoring.svc:9090", query_for(spec, ns, name), timeout=2.0)
    state = _states.get(key) or AutoscalerState()
    pods = [p for p in STATE.many("kf_service_pods", key) if not p["metadata"].get("deletionTimestamp")]
    bound = sum(1 for p in pods if (p["spec"].get("nodeName") or (p["metadata"].get("annotations") or {}).get(ASSIGNED_NODE))
                and p["status"].get("phase") not in ("Succeeded", "Failed"))
    d = decide(policy, state, current, q.value, now,
               placeable(view, policy.gpus_per_replica, current, unplaced=max(0, current - bound)))
    _states[key] = d.state
    metrics.AUTOSCALER_DECISIONS.labels(direction=(d.direction or "hold").lower()).inc()
    patch: dict[str, Any] = {}
    if d.desired != current:
        await kube._call(kube.apps().patch_namespaced_deployment_scale, name, ns, {"spec": {"replicas": d.desired}})
        patch["lastScaleTime"] = rfc3339(now)
        patch["lastScaleDirection"] = "Up" if d.desired > current else "Down"
        kube.event_soon(body, "Normal", "Scaled", f"replicas {current} -> {d.desired}: {d.reason}", now)
    ready = int(dep_st.get("readyReplicas") or 0)
    if q.value is not None:
        patch["lastMetricValue"] = q.value
        patch["lastMetricTime"] = rfc3339(q.time or now)
    active_msg = d.inactive_reason or d.reason
    if q.error:
        active_msg = f"Prometheus query failed ({q.error}); {active_msg}"
        old_active = get_condition(conds, "ScalingActive")
        if not old_active or old_active.get("status") != "False":
            kube.event_soon(body, "Warning", "FailedGetMetric", active_msg, now)
    conds = set_condition(conds, "ScalingActive", d.scaling_active, d.active_condition_reason, active_msg, now, gen)
    conds = set_condition(conds, "ScalingLimited", d.limited, d.limited_condition_reason,
                          d.limited_reason or "desired replicas within bounds and capacity", now, gen)
    if d.desired == 0 and policy.min_replicas == 0:
        conds = set_condition(conds, "Ready", True, "ScaledToZero", "no replicas: scaled to zero while idle", now, gen)
    else:
        conds = set_condition(conds, "Ready", ready > 0, "ReplicasReady" if ready else "NoReadyReplicas",
                              f"{ready} of {d.desired} replicas ready", now, gen)
    patch.update({
        "observedGeneration": gen,
        "replicas": int(dep_st.get("replicas") or 0),
        "readyReplicas": ready,
        "desiredReplicas": d.desired,
        "conditions": conds,
        "url": f"http://{name}.{ns}.svc:{spec.get('port', 8000)}",
    })
    if _changed(status, patch):
        await kube.patch_status(PLURAL, ns, name, patch)
    return interval


def _changed(old: dict[str, Any], patch: dict[str, Any]) -> bool:
    for k, v in patch.items():
        if k == "conditions":
            if not conditions_equal(v, old.get("conditions")):
                return True
        elif k == "lastMetricTime":
            continue  # moves every poll; written along with anything else that changed
        elif old.get(k) != v:
            return True
    return False
