"""InferenceService: validated and reflected in status (serving and autoscaling build on this).

At this stage the reconcile checks the spec against the model, resolves the pool, and writes
``status`` (conditions ``Ready`` / ``ScalingActive``, ``url``, ``desiredReplicas``) once per
change, with an Event when something is wrong.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from kubeforge import GROUP, VERSION
from kubeforge.builders.common import get_condition, set_condition
from kubeforge.handlers import kube
from kubeforge.handlers.state import STATE

PLURAL = "inferenceservices"


def _validate(body: dict[str, Any]) -> str | None:
    from kubeforge.api import InferenceService

    try:
        InferenceService.model_validate(body)
        return None
    except ValidationError as e:
        first = e.errors()[0]
        return f"{'.'.join(str(x) for x in first.get('loc', ()))}: {first.get('msg')}"


async def reconcile_service(key: tuple[str, str]) -> float | None:
    """Validate and report one InferenceService; returns seconds to requeue."""
    await STATE.ready.wait()
    ns, name = key
    try:
        body = await kube._call(kube.custom().get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    now = time.time()
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    gen = body["metadata"].get("generation")
    conds = status.get("conditions")
    err = _validate(body)
    pools = spec.get("pools") or []
    missing = [p for p in pools if STATE.one("kf_pools", p) is None]
    if err:
        conds = set_condition(conds, "Ready", False, "InvalidSpec", err, now, gen)
    elif missing:
        conds = set_condition(conds, "Ready", False, "PoolNotFound", f"GPUPool {missing[0]!r} does not exist", now, gen)
    else:
        conds = set_condition(conds, "Ready", False, "Accepted", "spec accepted; serving replicas are not created yet", now, gen)
    conds = set_condition(conds, "ScalingActive", False, "NotStarted", "the autoscaler has not run yet", now, gen)
    patch = {
        "observedGeneration": gen,
        "conditions": conds,
        "url": f"http://{name}.{ns}.svc:{spec.get('port', 8000)}",
        "desiredReplicas": int(spec.get("minReplicas", 1)),
        "replicas": 0,
        "readyReplicas": 0,
    }
    old = get_condition(status.get("conditions"), "Ready")
    new = get_condition(conds, "Ready")
    if status.get("observedGeneration") != gen or not old or old.get("reason") != new["reason"] or old.get("message") != new["message"]:
        await kube.patch_status(PLURAL, ns, name, patch)
        if new["reason"] in ("InvalidSpec", "PoolNotFound"):
            await kube.event(body, "Warning", new["reason"], new["message"], now)
    return 30.0
