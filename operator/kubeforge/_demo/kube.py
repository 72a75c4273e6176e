"""Reading the demo cluster with the kubernetes client, as JSON dicts (what ``kubectl get -o
json`` shows), in-process: a sample of the pool and the service every half second would cost a
kubectl process each on a loaded machine. Every call has a timeout."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

GROUP, VERSION = "kubeforge.io", "v1alpha1"
TIMEOUT = 10


def wait_until(pred: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """``pred()`` until truthy (returned) or ``timeout`` seconds (then its last value): every
    wait of the demo is bounded."""
    deadline = time.monotonic() + timeout
    while True:
        last = pred()
        if last or time.monotonic() >= deadline:
            return last
        time.sleep(interval)


class Kube:
    """A small reader of one cluster; one instance per thread (each has its own connection pool).

    Args:
        kubeconfig: Path of the cluster's kubeconfig.
    """

    def __init__(self, kubeconfig: str):
        from kubernetes import client, config

        self._api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self._api)
        self.custom = client.CustomObjectsApi(self._api)

    @staticmethod
    def _json(resp: Any) -> Any:
        return json.loads(resp.data)

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """One kubeforge object (``gpupools``, ``trainingjobs``, ``inferenceservices``); ``{}`` when absent."""
        from kubernetes.client.rest import ApiException

        try:
            if namespace is None:
                return self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name, _request_timeout=TIMEOUT)
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name,
                                                            _request_timeout=TIMEOUT)
        except ApiException as e:
            if e.status == 404:
                return {}
            raise

    def pods(self, namespace: str | None, selector: str | None = None, terminating: bool = False) -> list[dict[str, Any]]:
        """Pods of a namespace (every namespace when None; ``selector``: a label selector); those
        being deleted only with ``terminating`` (they hold their GPUs until they are gone)."""
        if namespace is None:
            resp = self.core.list_pod_for_all_namespaces(label_selector=selector or "", _preload_content=False,
                                                         _request_timeout=TIMEOUT)
        else:
            resp = self.core.list_namespaced_pod(namespace, label_selector=selector or "", _preload_content=False,
                                                 _request_timeout=TIMEOUT)
        return [p for p in self._json(resp)["items"] if terminating or not p["metadata"].get("deletionTimestamp")]

    def endpoints(self, namespace: str, service: str) -> str | None:
        """The ``kubeforge.io/endpoints`` label of the operator's EndpointSlice for ``service``
        (``replicas`` or ``activator``); None when there is no such slice yet."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            resp = client.DiscoveryV1Api(self._api).read_namespaced_endpoint_slice(
                f"kubeforge-{service}", namespace, _preload_content=False, _request_timeout=TIMEOUT)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return (self._json(resp)["metadata"].get("labels") or {}).get("kubeforge.io/endpoints")

    def config_map(self, namespace: str, name: str) -> dict[str, Any]:
        """A ConfigMap; ``{}`` when absent."""
        from kubernetes.client.rest import ApiException

        try:
            return self._json(self.core.read_namespaced_config_map(name, namespace, _preload_content=False,
                                                                   _request_timeout=TIMEOUT))
        except ApiException as e:
            if e.status == 404:
                return {}
            raise

    def nodes(self) -> list[dict[str, Any]]:
        return self._json(self.core.list_node(_preload_content=False, _request_timeout=TIMEOUT))["items"]

    def events(self, namespace: str | None = None, field_selector: str = "") -> list[dict[str, Any]]:
        """core/v1 Events (every namespace when ``namespace`` is None), oldest first."""
        if namespace is None:
            resp = self.core.list_event_for_all_namespaces(field_selector=field_selector, _preload_content=False,
                                                           _request_timeout=TIMEOUT)
        else:
            resp = self.core.list_namespaced_event(namespace, field_selector=field_selector, _preload_content=False,
                                                   _request_timeout=TIMEOUT)
        items = self._json(resp)["items"]
        return sorted(items, key=lambda e: (e.get("firstTimestamp") or e.get("eventTime") or "",
                                            e["metadata"].get("creationTimestamp") or ""))

    def close(self) -> None:
        self._api.close()
