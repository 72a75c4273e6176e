"""Which ``prometheusURL`` the operator may query (issue 18: server-side request forgery).

``spec.autoscaling.prometheusURL`` is written by any user who may create an InferenceService,
and the operator sends a request there from its own network position, with its own identity.
So, by default, only in-cluster Service URLs are queried (``http(s)://NAME.NAMESPACE.svc[...]``,
where a Prometheus in the cluster lives); an explicit allow-list (``--prometheus-url-allow``,
chart value ``prometheus.allowedURLs``) replaces that rule; and the Kubernetes API server is
never queried, allow-listed or not: by its names (``kubernetes.default.svc`` ...), by the
address the operator itself reaches it at, or by a name that resolves to one of its addresses
(an ``ExternalName`` Service pointing at it). URLs that carry credentials (``user@host``) are
refused: they are how one host name hides behind another.

:func:`url_refusal` is pure; :func:`resolved_refusal` resolves a host (bounded) and is the only
I/O here; :func:`refusal` is both, in that order. The InferenceService reconcile
(:mod:`kubeforge.runtime.inference`) applies them before it asks its
:class:`~kubeforge.runtime.metrics_source.MetricsSource` anything: a refused URL is never sent a
request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from typing import Collection
from urllib.parse import urlsplit

__all__ = ["API_SERVER_NAMES", "SERVICE_HOST", "refusal", "resolved_refusal", "url_allowed", "url_refusal"]

API_SERVER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
"""The API server's in-cluster names (``kubernetes.default.svc.<cluster domain>`` too)."""

SERVICE_HOST = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[a-z0-9]([-a-z0-9]*[a-z0-9])?\.svc(\.[a-z0-9.-]+)?$")
"""An in-cluster Service DNS name: ``NAME.NAMESPACE.svc`` or ``NAME.NAMESPACE.svc.<cluster domain>``."""


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _allowed_by(url: str, prefix: str) -> bool:
    """A prefix allows itself and any path under it (``http://prom`` does not allow
    ``http://prometheus-evil``); one ending in ``:`` allows every port of that host (the local
    sim's Prometheus listens on a free loopback port: ``http://127.0.0.1:``)."""
    if prefix.endswith(":"):
        rest = url[len(prefix):] if url.startswith(prefix) else ""
        return bool(re.match(r"^[0-9]+(/|$)", rest))
    return url == prefix or url.startswith(prefix.rstrip("/") + "/")


def url_allowed(url: str, allow: tuple[str, ...]) -> bool:
    """Whether ``url`` starts with one of the ``allow`` prefixes (an empty list allows any).

    A prefix ``http://prometheus.monitoring:9090`` allows that host and port and any path
    under it; compare on the whole prefix, so ``http://prom`` does not allow
    ``http://prometheus-evil``... unless written so. (:func:`url_refusal` is the operator's
    rule; this is the bare prefix test, without its ``host:`` form.)
    """
    if not allow:
        return True
    return any(url == p or url.startswith(p.rstrip("/") + "/") for p in allow)


def url_refusal(url: str, allow: tuple[str, ...], api_servers: Collection[str] = ()) -> str | None:
    """Why the operator will not query ``url``, or None when it may.

    Args:
        url: The InferenceService's ``prometheusURL``.
        allow: URL prefixes the operator was started with (``--prometheus-url-allow``); a
            prefix allows that scheme, host and port and any path under it. Empty: only
            in-cluster Service URLs.
        api_servers: ``host:port`` the API server answers at, as the operator reaches it
            (names and IP addresses): always refused.

    Returns:
        A fixed sentence for the ``ScalingActive`` condition (never the response of anything).
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "prometheusURL is not a valid URL"
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("http", "https") or not host:
        return "prometheusURL must be an http(s) URL with a host"
    if "@" in parts.netloc:
        return "prometheusURL must not carry credentials (user@host)"
    port = port or _default_port(parts.scheme)
    if host in API_SERVER_NAMES or host.startswith("kubernetes.default.svc.") or f"{host}:{port}" in api_servers:
        return "prometheusURL points at the Kubernetes API server, which the operator never queries"
    if allow:
        if any(_allowed_by(url, p) for p in allow):
            return None
        return "prometheusURL is not one of the operator's allowed Prometheus URLs (--prometheus-url-allow)"
    if not SERVICE_HOST.match(host):
        return ("prometheusURL must be an in-cluster Service URL (http://NAME.NAMESPACE.svc:PORT); the operator "
                "queries other addresses only when its --prometheus-url-allow (chart value "
                "prometheus.allowedURLs) lists them")
    return None


async def resolved_refusal(url: str, api_servers: Collection[str], timeout: float = 1.0) -> str | None:
    """Why ``url`` must not be queried once its host is resolved: one of its addresses, with the
    URL's port, is where the API server answers (``api_servers``, ``ip:port``), e.g. through an
    ``ExternalName`` Service. None when it may be, or when the name does not resolve (the query
    then fails on its own). Bounded by ``timeout`` seconds."""
    if not api_servers:
        return None
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port or _default_port(parts.scheme)
    except ValueError:
        return None
    if not host:
        return None
    try:
        ipaddress.ip_address(host)
        addresses = {host}
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), timeout)
        except (OSError, asyncio.TimeoutError, UnicodeError):
            return None
        addresses = {i[4][0] for i in infos}
    if {f"{a}:{port}" for a in addresses} & set(api_servers):
        return "prometheusURL resolves to the Kubernetes API server, which the operator never queries"
    return None


async def refusal(url: str, allow: tuple[str, ...], api_servers: Collection[str], timeout: float = 1.0) -> str | None:
    """Why the operator will not query ``url``: :func:`url_refusal`, else (the host resolved)
    :func:`resolved_refusal`; None when it may.

    Args:
        url: The InferenceService's ``prometheusURL``.
        allow: The operator's ``--prometheus-url-allow`` prefixes.
        api_servers: ``host:port`` the API server answers at.
        timeout: Seconds for resolving the host.
    """
    return url_refusal(url, allow, api_servers) or await resolved_refusal(url, api_servers, timeout)
