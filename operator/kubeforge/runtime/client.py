"""The operator's API client: kubernetes_asyncio for configuration and authentication
(kubeconfig, in-cluster ServiceAccount, token refresh), a thin raw-JSON request path on top.

Why not the generated API classes: they turn every response into model objects, which costs
more CPU than the request itself, and most responses are not read at all. Bodies go out as
plain dicts (encoded by orjson) and come back as dicts only when asked for.

Every request is counted in ``kubeforge_api_requests_total{verb,resource,code}`` and bounded
by a timeout; at most :data:`MAX_IN_FLIGHT` run at once. Failures raise :class:`ApiError`,
which says once whether retrying can help (:attr:`ApiError.transient`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlencode

import aiohttp
import orjson
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio import config as kconfig

from kubeforge import GROUP, VERSION, metrics
from kubeforge.runtime.slots import PrioritySlots

log = logging.getLogger("kubeforge.client")

REQUEST_TIMEOUT = 10.0
"""Seconds for any single API request (connect + response)."""
MAX_IN_FLIGHT = 64
"""API requests in flight at once from this process."""

NO_RESPONSE = (asyncio.TimeoutError, OSError, aiohttp.ClientError, kclient.exceptions.ApiException)
"""What a request raises when the API server gave no answer. aiohttp.ServerDisconnectedError
(the API server went away mid-request: a restart) is a ClientError, not an OSError: without
it, it escaped as an unexpected error."""


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: ``/api/v1`` or ``/apis/<group>/<version>``, its plural,
    and whether it is namespaced."""

    prefix: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        p = self.prefix
        if self.namespaced:
            p += f"/namespaces/{namespace}"
        p += f"/{self.plural}"
        if name:
            p += f"/{name}"
        if sub:
            p += f"/{sub}"
        return p


_OURS = f"/apis/{GROUP}/{VERSION}"
RESOURCES: dict[str, Resource] = {
    "Pod": Resource("/api/v1", "pods"),
    "Service": Resource("/api/v1", "services"),
    "PersistentVolumeClaim": Resource("/api/v1", "persistentvolumeclaims"),
    "Event": Resource("/api/v1", "events"),
    "Deployment": Resource("/apis/apps/v1", "deployments"),
    "Lease": Resource("/apis/coordination.k8s.io/v1", "leases"),
    "Namespace": Resource("/api/v1", "namespaces", namespaced=False),
    "EndpointSlice": Resource("/apis/discovery.k8s.io/v1", "endpointslices"),
    "TrainingJob": Resource(_OURS, "trainingjobs"),
    "InferenceService": Resource(_OURS, "inferenceservices"),
    "GPUPool": Resource(_OURS, "gpupools", namespaced=False),
    "ModelCacheNode": Resource(_OURS, "modelcachenodes", namespaced=False),
}


FIELD_MANAGER = "kubeforge"
"""The field manager of the operator's server-side applies."""


class ApiError(Exception):
    """A request the API server refused or that did not complete.

    Attributes:
        code: HTTP status (0: no response: connection error or timeout).
        reason: Kubernetes' StatusReason (``Invalid``, ``Forbidden``, ``AlreadyExists``...).
        message: The API server's own message (from its Status object), one line.
    """

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(f"HTTP {code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed later by itself: no response, 429, 5xx,
        409 Conflict on an update (stale resourceVersion). 400/403/404/422 are permanent for
        this request: retrying the same body in a loop only floods the log."""
        return self.code == 0 or self.code == 429 or self.code >= 500 or (self.code == 409 and self.reason == "Conflict")


class KubeClient:
    """One per process; :meth:`start` loads the configuration."""

    def __init__(self) -> None:
        self._api: kclient.ApiClient | None = None
        self._slots = PrioritySlots(MAX_IN_FLIGHT)  # urgent work first (kubeforge.runtime.slots)

    async def start(self) -> None:
        """In-cluster config when running in a pod (``KUBERNETES_SERVICE_HOST`` set and no
        ``KUBECONFIG``), else ``$KUBECONFIG`` / ``~/.kube/config``."""
        cfg = kclient.Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            kconfig.load_incluster_config(client_configuration=cfg)
        else:
            await kconfig.load_kube_config(client_configuration=cfg)
        cfg.connection_pool_maxsize = MAX_IN_FLIGHT
        self._api = kclient.ApiClient(cfg)
        # aiohttp's trust_env looks up proxy variables and ~/.netrc in a thread on every request
        # (a tenth of the operator's CPU under load); the API server is reached directly, and a
        # proxy, if any, comes from the kubeconfig (kubernetes_asyncio honours proxy-url).
        session = getattr(self._api.rest_client, "pool_manager", None)
        if session is not None and hasattr(session, "_trust_env"):
            session._trust_env = False

    def server_addresses(self) -> frozenset[str]:
        """Where the API server answers, as this process reaches it: ``host:port`` of the
        configured server URL and of the in-cluster ``KUBERNETES_SERVICE_HOST``. What
        :mod:`kubeforge.runtime.prometheus_urls` never lets an InferenceService's prometheusURL reach."""
        assert self._api is not None, "KubeClient.start() first"
        from urllib.parse import urlsplit

        out: set[str] = set()
        parts = urlsplit(self._api.configuration.host)
        if parts.hostname:
            out.add(f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}")
        env_host = os.environ.get("KUBERNETES_SERVICE_HOST")
        if env_host:
            out.add(f"{env_host}:{os.environ.get('KUBERNETES_SERVICE_PORT', '443')}")
        return frozenset(out)

    @property
    def api(self) -> kclient.ApiClient:
        """The kubernetes_asyncio client (for libraries that take one, e.g. leader election)."""
        assert self._api is not None, "KubeClient.start() first"
        return self._api

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                      query: Mapping[str, Any] | None = None, read: bool = False,
                      resource: str = "", timeout: float = REQUEST_TIMEOUT, accept: str = "application/json") -> Any:
        """Send one request; return the parsed JSON body when ``read``, else None. ``accept``: e.g.
        ``application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`` for the metadata alone.

        Raises:
            ApiError: non-2xx status, or no response (code 0) after ``timeout``.
        """
        assert self._api is not None, "KubeClient.start() first"
        code = 0
        try:
            async with self._slots.slot():
                resp = await self._send(method, path, body, content_type, accept, query, timeout)
                try:
                    code = resp.status
                    raw = await resp.read()
                finally:
                    resp.release()
        except NO_RESPONSE as e:
            raise _no_response(e, method, resource) from None
        metrics.API_REQUESTS.labels(verb=method, resource=resource, code=str(code)).inc()
        if not 200 <= code <= 299:
            raise _error(code, raw)
        return orjson.loads(raw) if read and raw else None

    async def _send(self, method: str, path: str, body: Any, content_type: str, accept: str,
                    query: Mapping[str, Any] | None, timeout: float) -> aiohttp.ClientResponse:
        """One request on kubernetes_asyncio's own session (its TLS context, connection pool and
        proxy) with its authentication (the bearer token, refreshed as it refreshes it), the body
        encoded once by orjson. ``ApiClient.call_api`` walked every body through
        ``sanitize_for_serialization`` and ``json.dumps`` (6 % of the operator's CPU in a
        1,024-node burst, e2e/README-training-bench.md); a body orjson cannot encode (a
        generated model object) still goes that way."""
        api = self._api
        assert api is not None
        try:
            data = None if body is None else orjson.dumps(body)
        except TypeError:
            data = json.dumps(api.sanitize_for_serialization(body)).encode()
        headers = {**api.default_headers, "Content-Type": content_type, "Accept": accept}
        if api.cookie:
            headers["Cookie"] = api.cookie
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        rest = api.rest_client
        url = api.configuration.host + path
        if query:
            url += "?" + urlencode(list(query.items()))
        args: dict[str, Any] = {"method": method, "url": url, "headers": headers, "data": data,
                                "timeout": aiohttp.ClientTimeout(total=timeout)}
        if rest.proxy:
            args["proxy"] = rest.proxy
        if rest.proxy_headers:
            args["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            args["server_hostname"] = rest.server_hostname
        return await rest.pool_manager.request(**args)

    async def stream(self, path: str, query: Mapping[str, Any], *, resource: str = "",
                     read_timeout: float = 330.0) -> aiohttp.ClientResponse:
        """Open a streaming GET (a watch): the response, status 2xx, for the caller to read and
        release. Not bounded by :data:`MAX_IN_FLIGHT` (it stays open for minutes); ``read_timeout``
        seconds without a byte end it.

        Raises:
            ApiError: non-2xx status, or no response.
        """
        assert self._api is not None, "KubeClient.start() first"
        try:
            resp = await self._api.call_api(
                path, "GET", query_params=list(query.items()), header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"], _preload_content=False,
                _request_timeout=(REQUEST_TIMEOUT, read_timeout),
            )
        except NO_RESPONSE as e:
            raise _no_response(e, "WATCH", resource) from None
        metrics.API_REQUESTS.labels(verb="WATCH", resource=resource, code=str(resp.status)).inc()
        if not 200 <= resp.status <= 299:
            try:
                raw = await resp.read()
            finally:
                resp.release()
            raise _error(resp.status, raw)
        return resp

    # --- verbs ---------------------------------------------------------------------------------

    async def create(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> bool:
        """Create an object; False when one of that name exists (409 AlreadyExists)."""
        r = RESOURCES[kind]
        try:
            await self.request("POST", r.path(namespace), body, resource=r.plural)
            return True
        except ApiError as e:
            if e.code == 409 and e.reason == "AlreadyExists":
                return False
            raise

    async def delete(self, kind: str, namespace: str | None, name: str, grace_seconds: int | None = None) -> bool:
        """Delete an object (background propagation); False when it was already gone."""
        r = RESOURCES[kind]
        opts: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if grace_seconds is not None:
            opts["gracePeriodSeconds"] = grace_seconds
        try:
            await self.request("DELETE", r.path(namespace, name), opts, resource=r.plural)
            return True
        except ApiError as e:
            if e.code == 404:
                return False
            raise

    async def get(self, kind: str, namespace: str | None, name: str | None = None, **query: Any) -> dict | None:
        """GET an object (or a list when ``name`` is None); None when it does not exist."""
        r = RESOURCES[kind]
        try:
            return await self.request("GET", r.path(namespace, name), query=query or None, read=True, resource=r.plural)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    async def patch(self, kind: str, namespace: str | None, name: str, body: Any, *, sub: str | None = None,
                    patch_type: str = "merge", read: bool = False) -> dict | None:
        """PATCH an object (``merge`` or ``json``); returns the object when ``read``.

        Raises:
            ApiError: 404 included (the caller decides what a vanished object means).
        """
        r = RESOURCES[kind]
        ctype = {"merge": "application/merge-patch+json", "json": "application/json-patch+json"}[patch_type]
        return await self.request("PATCH", r.path(namespace, name, sub), body, content_type=ctype, read=read,
                                  resource=f"{r.plural}/{sub}" if sub else r.plural)

    async def apply(self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]) -> None:
        """Server-side apply ``body`` as field manager ``kubeforge`` (force: the operator owns
        the object), creating it when absent."""
        r = RESOURCES[kind]
        await self.request("PATCH", r.path(namespace, name), body, content_type="application/apply-patch+yaml",
                           query={"fieldManager": FIELD_MANAGER, "force": "true"}, resource=r.plural)

    async def patch_status(self, kind: str, namespace: str | None, name: str, status: Mapping[str, Any],
                           resource_version: str | None = None) -> dict | None:
        """Merge-patch ``status`` through the status subresource; returns the object as the
        server now holds it, None when it no longer exists. With ``resource_version`` the
        write only applies to that version (409 Conflict otherwise).

        Only ``status`` of our own kinds is ever written: the spec stays the user's.
        """
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            return await self.patch(kind, namespace, name, body, sub="status", read=True)
        except ApiError as e:
            if e.code == 404:
                return None
            raise


def _no_response(e: BaseException, verb: str, resource: str) -> ApiError:
    """Count a request that got no answer and say so as ``ApiError`` code 0 (transient)."""
    metrics.API_REQUESTS.labels(verb=verb, resource=resource, code="error").inc()
    return ApiError(0, "NoResponse", f"{type(e).__name__}: {str(e)[:200]}")


_REASONS = {404: "NotFound", 409: "Conflict", 429: "TooManyRequests", 503: "ServiceUnavailable"}
"""metav1.StatusReason by code, for answers that carry no Status object (an API server's
max-in-flight or APF rejection answers 429 with a plain-text body)."""


def _error(code: int, raw: bytes) -> ApiError:
    """The :class:`ApiError` of an answer: the Status object's reason and message, else the
    reason of the code and the plain body's first line (never more than 1,024 characters)."""
    try:
        st = json.loads(raw)
        reason = str(st.get("reason") or "")
        message = str(st.get("message") or "")
    except (ValueError, AttributeError):
        reason = ""
        message = raw.decode("utf-8", "replace").strip().splitlines()[0] if raw and raw.strip() else ""
    return ApiError(code, reason or _REASONS.get(code, "Error"), " ".join(message.split())[:1024] or f"HTTP {code}")
