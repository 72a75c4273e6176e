"""A thin, thread-safe raw-JSON client for the chaos suite (no model deserialization).

The suite polls a lot (every case of the hostile corpus, the lifecycle driver every tick); one
kubectl process per poll would cost more CPU than the cluster under test on a 2-core machine.
This wraps ``kubernetes.client.ApiClient.call_api`` with ``_preload_content=False`` and plain
dicts in and out. Every request is bounded by a timeout.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

GROUP_PATH = "/apis/kubeforge.io/v1alpha1"
TIMEOUT = 15


class Kube:
    """Raw JSON requests against one cluster (a kubeconfig path)."""

    def __init__(self, kubeconfig: str, pool_size: int = 48):
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = pool_size
        cfg.retries = 2
        self.api = client.ApiClient(cfg)

    def request(self, method: str, path: str, body: Any = None, query: dict | None = None,
                content_type: str = "application/json") -> dict | None:
        """One request; the decoded body, or None on 404. Raises ApiException otherwise."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method_, url, hdrs, data, post = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers, body=body,
            auth_settings=["BearerToken"])
        resp = self.api.call_api(method_, url, header_params=hdrs, body=data, post_params=post, _request_timeout=TIMEOUT)
        raw = resp.read()
        if resp.status == 404:
            return None
        if not 200 <= resp.status < 300:
            raise ApiException(status=resp.status, reason=resp.reason, http_resp=resp.response)
        return json.loads(raw) if raw else {}

    # --- shorthands ------------------------------------------------------------------------

    def get(self, path: str) -> dict | None:
        return self.request("GET", path)

    def items(self, path: str, **query: str) -> list[dict]:
        out = self.request("GET", path, query=query)
        return (out or {}).get("items") or []

    def merge(self, path: str, body: dict) -> dict | None:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def strategic(self, path: str, body: dict) -> dict | None:
        return self.request("PATCH", path, body, content_type="application/strategic-merge-patch+json")

    def delete(self, path: str, grace: int | None = None) -> dict | None:
        body = {"propagationPolicy": "Background"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        return self.request("DELETE", path, body)

    def create(self, path: str, body: dict) -> dict | None:
        return self.request("POST", path, body)


def jobs_path(ns: str, name: str = "") -> str:
    return f"{GROUP_PATH}/namespaces/{ns}/trainingjobs" + (f"/{name}" if name else "")


def services_path(ns: str, name: str = "") -> str:
    return f"{GROUP_PATH}/namespaces/{ns}/inferenceservices" + (f"/{name}" if name else "")


def pools_path(name: str = "") -> str:
    return f"{GROUP_PATH}/gpupools" + (f"/{name}" if name else "")


def pods_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def object_path(kind: str, ns: str | None, name: str) -> str:
    if kind == "TrainingJob":
        return jobs_path(ns or "", name)
    if kind == "InferenceService":
        return services_path(ns or "", name)
    if kind == "GPUPool":
        return pools_path(name)
    raise ValueError(kind)


def condition(obj: dict | None, type_: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def live(pod: dict) -> bool:
    """Not terminal and not being deleted."""
    return pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def gpus_of(pod: dict, resource: str = "nvidia.com/gpu") -> int:
    """The pod's request of ``resource`` as kube-scheduler counts it (containers summed, init
    containers as a maximum; requests default to limits)."""
    def one(c: dict) -> int:
        r = c.get("resources") or {}
        v = (r.get("requests") or {}).get(resource, (r.get("limits") or {}).get(resource, 0))
        try:
            return int(v)
        except (TypeError, ValueError):
            return 0
    spec = pod.get("spec") or {}
    app = sum(one(c) for c in spec.get("containers") or [])
    init = max([one(c) for c in spec.get("initContainers") or []] or [0])
    return max(app, init)
