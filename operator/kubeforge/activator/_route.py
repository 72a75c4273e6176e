"""Pure: which service a request is for, and which headers travel with a forward.

A request names its service by ``X-Kubeforge-Service: <namespace>/<name>`` (wins when present)
or by its Host header, in any of the forms cluster DNS gives a Service:
``<name>.<namespace>``, ``<name>.<namespace>.svc``, ``<name>.<namespace>.svc.<cluster domain>``
(``cluster.local`` or another), each with or without ``:<port>`` and a trailing dot. A bare
``<name>`` or an IP address names nothing: the namespace is unknown (a client that dials the
ClusterIP must send X-Kubeforge-Service).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable, Mapping

from ._slices import ServiceKey

SERVICE_HEADER = "X-Kubeforge-Service"
"""Request header naming the service as ``<namespace>/<name>``."""
MARKER_HEADER = "X-Kubeforge-Activator"
"""Header the activator adds to every request it forwards (value: its identity). A request that
arrives carrying it has been through an activator already: answering it 508 breaks a loop."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade",
})
"""Headers that describe one connection, not the message (RFC 9110 7.6.1): never forwarded."""


def _key(namespace: str, name: str) -> ServiceKey | None:
    if _DNS_LABEL.match(namespace) and _DNS_LABEL.match(name):
        return (namespace, name)
    return None


def _strip_port(host: str) -> str:
    if host.startswith("["):  # [v6]:port
        return host[1:host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.rsplit(":", 1)[0]
    return host


def service_from_host(host: str | None) -> ServiceKey | None:
    """The (namespace, name) a Host header names, or None.

    Args:
        host: The Host header (``name.ns.svc.cluster.local:8000`` and the shorter forms).

    Returns:
        (namespace, name), or None for an IP address, a single label, or labels that are not
        DNS-1123 labels.
    """
    if not host:
        return None
    h = _strip_port(host.strip().lower()).rstrip(".")
    try:
        ipaddress.ip_address(h)
        return None
    except ValueError:
        pass
    parts = h.split(".")
    if len(parts) == 2 or (len(parts) >= 3 and parts[2] == "svc"):
        return _key(parts[1], parts[0])
    return None


def service_from_header(value: str | None) -> ServiceKey | None:
    """The (namespace, name) of an ``X-Kubeforge-Service: <namespace>/<name>`` header, or None
    when absent or malformed."""
    if not value:
        return None
    ns, sep, name = value.strip().lower().partition("/")
    return _key(ns, name) if sep else None


def identify(headers: Mapping[str, str]) -> tuple[ServiceKey | None, str]:
    """The service a request is for.

    Args:
        headers: The request headers (a case-insensitive mapping such as aiohttp's).

    Returns:
        ((namespace, name) or None, how it was found: ``header``, ``host``, or a message saying
        why nothing was found).
    """
    raw = headers.get(SERVICE_HEADER)
    if raw is not None:
        key = service_from_header(raw)
        return (key, "header") if key else (None, f"{SERVICE_HEADER} must be <namespace>/<name>, got {raw!r}")
    host = headers.get("Host")
    key = service_from_host(host)
    if key:
        return key, "host"
    return None, (f"Host {host!r} names no service: use <name>.<namespace>.svc[.cluster.local] "
                  f"or the header {SERVICE_HEADER}: <namespace>/<name>")


def forward_headers(items: Iterable[tuple[str, str]], peer: str | None, identity: str) -> list[tuple[str, str]]:
    """The headers of a forwarded request: the client's, less hop-by-hop ones (and those its
    ``Connection`` header names), plus ``X-Forwarded-For`` (the client address appended) and the
    activator's marker. Host is kept as the client sent it.

    Args:
        items: The request's headers as (name, value) pairs, repeats kept.
        peer: The client's address (None when unknown).
        identity: This activator's identity (the marker's value).
    """
    items = list(items)
    named = {t.strip().lower() for k, v in items if k.lower() == "connection" for t in v.split(",")}
    drop = HOP_BY_HOP | named | {MARKER_HEADER.lower()}
    out = [(k, v) for k, v in items if k.lower() not in drop and k.lower() != "x-forwarded-for"]
    xff = [v for k, v in items if k.lower() == "x-forwarded-for"]
    if peer:
        xff.append(peer)
    if xff:
        out.append(("X-Forwarded-For", ", ".join(xff)))
    out.append((MARKER_HEADER, identity))
    return out


def response_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers of a backend's response passed back to the client: all but hop-by-hop ones
    (and those its ``Connection`` header names)."""
    items = list(items)
    named = {t.strip().lower() for k, v in items if k.lower() == "connection" for t in v.split(",")}
    return [(k, v) for k, v in items if k.lower() not in HOP_BY_HOP | named]
