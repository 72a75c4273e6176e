"""Thin async wrappers over the kubernetes client: create-if-absent, status patches, Events.

The sync ``kubernetes`` client runs in worker threads (``asyncio.to_thread``) so the event
loop that kopf shares with us never blocks on the network. Every call has a request timeout.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubeforge import GROUP, VERSION
from kubeforge.builders.common import rfc3339

log = logging.getLogger("kubeforge.kube")
REQUEST_TIMEOUT = 15  # seconds, for every API call we make
COMPONENT = "kubeforge-operator"
API_THREADS = 32  # concurrent API calls; the default executor has only min(32, cpus + 4) threads

_api: client.ApiClient | None = None
_pool = ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="kube-api")
_background: set[asyncio.Task] = set()


def load_config() -> None:
    """In-cluster config when running in a pod, else ``$KUBECONFIG`` / ``~/.kube/config``."""
    global _api
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = API_THREADS
    _api = client.ApiClient(cfg)


def api() -> client.ApiClient:
    if _api is None:
        load_config()
    assert _api is not None
    return _api


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api())


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api())


def apps() -> client.AppsV1Api:
    return client.AppsV1Api(api())


async def _call(fn, *args, **kwargs):
    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool, functools.partial(fn, *args, **kwargs))


def _discard_body(fn, *args, **kwargs) -> None:
    """Call ``fn`` without turning the response into client model objects (the client's
    deserialization costs more CPU than the request itself); errors still raise."""
    resp = fn(*args, _preload_content=False, **kwargs)
    try:
        resp.data  # read it all, so the connection goes back to the pool
    finally:
        resp.release_conn()


async def _call_no_result(fn, *args, **kwargs) -> None:
    await _call(_discard_body, fn, *args, **kwargs)


async def create_if_absent(kind: str, namespace: str, body: Mapping[str, Any]) -> bool:
    """Create ``body`` unless an object of that name exists; True when created.

    ``kind`` is one of Pod, Service, PersistentVolumeClaim, Deployment.

    Raises:
        ApiException: any error other than 409 AlreadyExists.
    """
    fn = {
        "Pod": core().create_namespaced_pod,
        "Service": core().create_namespaced_service,
        "PersistentVolumeClaim": core().create_namespaced_persistent_volume_claim,
        "Deployment": apps().create_namespaced_deployment,
    }[kind]
    try:
        await _call_no_result(fn, namespace, body)
        return True
    except ApiException as e:
        if e.status == 409:
            return False
        raise


async def delete(kind: str, namespace: str, name: str, grace_seconds: int | None = None) -> bool:
    """Delete one object (background propagation); True when it was there. 404 is fine."""
    fn = {
        "Pod": core().delete_namespaced_pod,
        "Service": core().delete_namespaced_service,
        "PersistentVolumeClaim": core().delete_namespaced_persistent_volume_claim,
        "Deployment": apps().delete_namespaced_deployment,
    }[kind]
    opts = client.V1DeleteOptions(propagation_policy="Background", grace_period_seconds=grace_seconds)
    try:
        await _call_no_result(fn, name, namespace, body=opts)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


async def patch_pod_json(namespace: str, name: str, ops: list[dict[str, Any]]) -> bool:
    """Apply a JSON patch to a pod; False when the pod is gone (404) or the patch no longer
    applies (422, e.g. its gate was lifted meanwhile), True when applied."""
    try:
        await _call_no_result(core().patch_namespaced_pod, name, namespace, ops)
        return True
    except ApiException as e:
        if e.status in (404, 422):
            log.info("pod %s/%s not patched: HTTP %s %s", namespace, name, e.status, e.reason)
            return False
        raise


async def ungate_pod(namespace: str, name: str) -> None:
    """Remove a pod's scheduling gates. A pod already ungated (422: nothing to remove) or gone
    (404) is fine: lifting the gates is idempotent."""
    try:
        await _call_no_result(core().patch_namespaced_pod, name, namespace, [{"op": "remove", "path": "/spec/schedulingGates"}])
    except ApiException as e:
        if e.status not in (404, 422):
            raise


async def patch_status(plural: str, namespace: str | None, name: str, status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Merge-patch ``status`` of one of our objects through the status subresource; returns
    the object as the API server now holds it (None when it was deleted meanwhile: 404 is
    ignored).

    Only ``status`` is ever written: the user's spec stays theirs (GitOps: no drift).
    """
    body = {"status": dict(status)}
    try:
        if namespace:
            obj = await _call(custom().patch_namespaced_custom_object_status, GROUP, VERSION, namespace, plural, name, body)
        else:
            obj = await _call(custom().patch_cluster_custom_object_status, GROUP, VERSION, plural, name, body)
    except ApiException as e:
        if e.status != 404:
            raise
        return None
    return obj


def event_soon(obj: Mapping[str, Any], type_: str, reason: str, message: str, now: float | None = None) -> None:
    """Post an Event in the background: a reconcile never waits for (or fails on) an Event."""
    task = asyncio.get_running_loop().create_task(event(obj, type_, reason, message, now))
    _background.add(task)
    task.add_done_callback(_background.discard)


async def event(
    obj: Mapping[str, Any], type_: str, reason: str, message: str, now: float | None = None
) -> None:
    """Post a core/v1 Event about ``obj`` (Normal or Warning). Failures are logged, not raised:
    an Event is best effort and must never break a reconcile."""
    md = obj["metadata"]
    now = now or time.time()
    ns = md.get("namespace") or "default"
    ev = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{md['name']}.", "namespace": ns},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": md["name"],
            "namespace": md.get("namespace"),
            "uid": md.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "firstTimestamp": rfc3339(now),
        "lastTimestamp": rfc3339(now),
        "count": 1,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": os.environ.get("HOSTNAME", "kubeforge"),
    }
    try:
        await _call_no_result(core().create_namespaced_event, ns, ev)
    except ApiException as e:
        if e.status == 403 and "NamespaceTerminating" in (e.body or ""):
            log.debug("event %s on %s/%s dropped: namespace terminating", reason, ns, md["name"])
        else:
            log.warning("event %s on %s/%s not posted: HTTP %s %s", reason, ns, md["name"], e.status, e.reason)
    except Exception as e:  # noqa: BLE001 - best effort by design
        log.warning("event %s on %s/%s not posted: %s", reason, ns, md["name"], e)
