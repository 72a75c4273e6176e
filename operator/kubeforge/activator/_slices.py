"""Pure: read the operator's EndpointSlices (``discovery.k8s.io/v1``, JSON form) into what the
activator needs: the service, the mode, the ready addresses and port, the hold policy.

The contract (see :class:`kubeforge.api.Activation`): one slice ``kubeforge-<service>`` per
InferenceService, labelled ``kubeforge.io/inference-service: <service>`` and
``kubeforge.io/endpoints: replicas | activator``; port ``http``; while ``activator`` it carries
``kubeforge.io/activation-hold-seconds`` and ``kubeforge.io/activation-queue-limit``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Mapping

from kubeforge.api import (
    DEFAULT_ACTIVATION_HOLD_SECONDS,
    DEFAULT_ACTIVATION_QUEUE_LIMIT,
    ENDPOINT_PORT_NAME,
    ENDPOINTS_LABEL,
    HOLD_SECONDS_ANNOTATION,
    MAX_ACTIVATION_HOLD_SECONDS,
    MAX_ACTIVATION_QUEUE_LIMIT,
    QUEUE_LIMIT_ANNOTATION,
)
from kubeforge.objects import SERVICE_NAME

SERVICE_LABEL = SERVICE_NAME
"""``kubeforge.io/inference-service``: the label the activator's watch selects slices by."""

ServiceKey = tuple[str, str]
"""(namespace, InferenceService name)."""


@dataclass(frozen=True)
class HoldPolicy:
    """How long and how many requests one service may have held.

    Attributes:
        hold_seconds: Seconds a request may wait for a ready replica (> 0).
        queue_limit: Most requests held at once for the service (>= 1).
    """

    hold_seconds: float = DEFAULT_ACTIVATION_HOLD_SECONDS
    queue_limit: int = DEFAULT_ACTIVATION_QUEUE_LIMIT


@dataclass(frozen=True, order=True)
class Backend:
    """One address to forward to: a Ready leader pod's IP and the model port."""

    ip: str
    port: int

    @property
    def url(self) -> str:
        """``http://<ip>:<port>`` (IPv6 addresses in brackets)."""
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class SliceView:
    """What the activator reads from one EndpointSlice.

    Attributes:
        namespace: The slice's (and service's) namespace.
        name: The slice's name.
        service: The InferenceService it serves (its ``kubeforge.io/inference-service`` label).
        mode: The ``kubeforge.io/endpoints`` label: ``replicas``, ``activator``, or another
            value (then treated like ``activator``: nothing is forwarded).
        addresses: Addresses of the endpoints whose ``conditions.ready`` is not false, in
            slice order, without repeats.
        port: The port named ``http`` (or the only port); None when the slice has none.
        policy: Hold seconds and queue limit from the annotations (defaults when absent).
        problems: Annotations or ports that could not be read, one message each (logged once).
    """

    namespace: str
    name: str
    service: str
    mode: str
    addresses: tuple[str, ...] = ()
    port: int | None = None
    policy: HoldPolicy = HoldPolicy()
    problems: tuple[str, ...] = ()

    @property
    def key(self) -> ServiceKey:
        """(namespace, service)."""
        return (self.namespace, self.service)

    def backends(self) -> tuple[Backend, ...]:
        """One :class:`Backend` per ready address; empty without a port."""
        if self.port is None:
            return ()
        return tuple(Backend(a, self.port) for a in self.addresses)


def _int_annotation(annotations: Mapping[str, str], key: str, default: int, hi: int,
                    problems: list[str]) -> int:
    raw = annotations.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        problems.append(f"annotation {key}={raw!r} is not an integer; using {default}")
        return default
    if not 1 <= value <= hi:
        problems.append(f"annotation {key}={raw!r} is outside 1..{hi}; using {default}")
        return default
    return value


def _ready_addresses(endpoints: Any) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for ep in endpoints or ():
        if not isinstance(ep, Mapping):
            continue
        cond = ep.get("conditions") or {}
        if cond.get("ready") is False:  # nil means ready (discovery.k8s.io/v1 EndpointConditions)
            continue
        for a in ep.get("addresses") or ():
            try:
                seen[str(ipaddress.ip_address(a))] = None
            except ValueError:
                continue  # FQDN slices are not ours; an address we cannot dial is skipped
    return tuple(seen)


def _port(ports: Any, problems: list[str]) -> int | None:
    ports = [p for p in ports or () if isinstance(p, Mapping) and isinstance(p.get("port"), int)]
    named = [p for p in ports if p.get("name") == ENDPOINT_PORT_NAME]
    if named:
        return int(named[0]["port"])
    if len(ports) == 1:
        return int(ports[0]["port"])
    problems.append(f"no port named {ENDPOINT_PORT_NAME!r} among {len(ports)} ports")
    return None


def parse_slice(obj: Mapping[str, Any]) -> SliceView | None:
    """Reads one EndpointSlice.

    Args:
        obj: The slice in its JSON form (camelCase keys, as the API server sends it).

    Returns:
        The :class:`SliceView`, or None when the slice has no ``kubeforge.io/inference-service``
        label (not one of ours) or no name/namespace.
    """
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    service, ns, name = labels.get(SERVICE_LABEL), meta.get("namespace"), meta.get("name")
    if not service or not ns or not name:
        return None
    annotations = meta.get("annotations") or {}
    problems: list[str] = []
    policy = HoldPolicy(
        hold_seconds=_int_annotation(annotations, HOLD_SECONDS_ANNOTATION, DEFAULT_ACTIVATION_HOLD_SECONDS,
                                     MAX_ACTIVATION_HOLD_SECONDS, problems),
        queue_limit=_int_annotation(annotations, QUEUE_LIMIT_ANNOTATION, DEFAULT_ACTIVATION_QUEUE_LIMIT,
                                    MAX_ACTIVATION_QUEUE_LIMIT, problems),
    )
    addresses = _ready_addresses(obj.get("endpoints"))
    port = _port(obj.get("ports"), problems) if addresses else None
    return SliceView(namespace=ns, name=name, service=service, mode=str(labels.get(ENDPOINTS_LABEL) or ""),
                     addresses=addresses, port=port, policy=policy, problems=tuple(problems))
