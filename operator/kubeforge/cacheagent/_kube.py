"""The agent's three calls to the API server (the synchronous ``kubernetes`` client): read its
node's ModelCacheNode, read a Secret the spec names, and merge-patch the ModelCacheNode's
status subresource. :class:`CacheApi` is what the agent needs; tests hand it a fake.

RBAC (the chart's agent ClusterRole): ``get``/``watch`` on ``modelcachenodes``, ``patch`` on
``modelcachenodes/status``, ``get`` on ``secrets``. A Secret's values go into the download's
environment only: never into a log line, an Event or the status.
"""

from __future__ import annotations

import base64
from typing import Any, Mapping, Protocol

from kubeforge import GROUP, VERSION
from kubeforge.api import ModelCacheNode


class SecretMissing(Exception):
    """The Secret the spec names does not exist (or the agent may not read it)."""


class CacheApi(Protocol):
    """What the agent asks of the API server."""

    def get_node_cache(self, name: str) -> dict[str, Any] | None:
        """The ModelCacheNode ``name`` as a dict, or None when there is none."""

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """The Secret's data, decoded. Raises :class:`SecretMissing`."""

    def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the ModelCacheNode's ``status``."""


class KubeCacheApi:
    """:class:`CacheApi` on the ``kubernetes`` client.

    Args:
        kubeconfig: A kubeconfig file; None: in-cluster when in a pod, else ``$KUBECONFIG``.
    """

    def __init__(self, kubeconfig: str | None = None) -> None:
        import os

        from kubernetes import client, config

        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        elif os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config()
        else:
            config.load_kube_config()
        self._custom = client.CustomObjectsApi()
        self._core = client.CoreV1Api()

    def get_node_cache(self, name: str) -> dict[str, Any] | None:
        """See :class:`CacheApi`."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self._custom.get_cluster_custom_object(GROUP, VERSION, ModelCacheNode.PLURAL, name,
                                                          _request_timeout=30)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """See :class:`CacheApi`."""
        from kubernetes.client.exceptions import ApiException

        try:
            secret = self._core.read_namespaced_secret(name, namespace, _request_timeout=30)
        except ApiException as e:
            if e.status in (403, 404):
                raise SecretMissing(f"Secret {namespace}/{name}: {'not found' if e.status == 404 else 'forbidden'}") \
                    from None
            raise
        return decode_secret(secret.data or {})

    def patch_status(self, name: str, status: Mapping[str, Any]) -> None:
        """See :class:`CacheApi`."""
        self._custom.patch_cluster_custom_object_status(GROUP, VERSION, ModelCacheNode.PLURAL, name,
                                                        {"status": dict(status)}, _request_timeout=30)


def decode_secret(data: Mapping[str, str]) -> dict[str, str]:
    """A Secret's ``data`` (base64) as text; keys whose value is not UTF-8 are left out."""
    out = {}
    for key, value in data.items():
        try:
            out[key] = base64.b64decode(value).decode()
        except (ValueError, UnicodeDecodeError):
            continue
    return out
