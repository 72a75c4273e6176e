"""Pure helpers of the model-server simulator: traces and arrivals, percentiles, and which
replicas a Service routes to (from EndpointSlices and pods). No clock, no I/O but reading a file."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from ._latency import Request, ServiceModel, make_request
from .traces import AZURE_CODE, trace_path

__all__ = ["AZURE_CODE_TRACE", "Key", "PodView", "SliceView", "compressed", "load_trace", "percentile",
           "rate_arrivals", "routing_view", "service_for_host", "trace_arrivals"]

AZURE_CODE_TRACE = trace_path(AZURE_CODE)
"""The Azure LLM inference trace (code) shipped as package data (:mod:`kubeforge.sim.traces`)."""
Key = tuple[str, str]


def load_trace(path: Path = AZURE_CODE_TRACE) -> list[tuple[float, int, int]]:
    """The trace as (seconds since its first request, context tokens, generated tokens)."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            ts = r["TIMESTAMP"].strip()
            if "." in ts:  # 7 fractional digits in the file; datetime takes 6
                head, frac = ts.split(".", 1)
                ts = f"{head}.{frac[:6]}"
            fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in ts else "%Y-%m-%d %H:%M:%S"
            t = datetime.strptime(ts, fmt).replace(tzinfo=timezone.utc).timestamp()
            rows.append((t, int(r["ContextTokens"]), int(r["GeneratedTokens"])))
    rows.sort()
    t0 = rows[0][0] if rows else 0.0
    return [(t - t0, c, g) for t, c, g in rows]


def compressed(model: ServiceModel, factor: float) -> ServiceModel:
    """The same replica ``factor`` times faster (prefill, per-token time), for time-compressed
    replays; its latency histograms' bucket bounds shrink by the same factor
    (:attr:`ServiceModel.time_scale`), as the whole replica's time does."""
    return replace(model, base_seconds=model.base_seconds / factor,
                   prefill_tokens_per_second=model.prefill_tokens_per_second * factor,
                   seconds_per_output_token=model.seconds_per_output_token / factor,
                   time_scale=model.time_scale / factor)


def trace_arrivals(trace: list[tuple[float, int, int]], model: ServiceModel, compression: float = 1.0,
                   start: float = 0.0, offset: float = 0.0, end: float | None = None) -> list[Request]:
    """Requests of the trace rows with ``start <= t < end``, arriving at ``offset + (t - start) /
    compression``, sized for ``compressed(model, compression)`` (run the service with that model
    so that the queue behaves as in the trace, only faster)."""
    m = compressed(model, compression) if compression != 1.0 else model
    return [make_request(m, offset + (t - start) / compression, c, g, i)
            for i, (t, c, g) in enumerate(trace) if t >= start and (end is None or t < end)]


def rate_arrivals(rate: float, t0: float, t1: float, service: float, carry: float = 0.0) -> tuple[list[Request], float]:
    """Evenly spaced arrivals at ``rate`` per second in ``(t0, t1]``, each running ``service``
    seconds (all prefill, no decode); ``carry`` is the fractional request left from the
    previous interval. Returns (requests, new carry)."""
    if rate <= 0 or t1 <= t0:
        return [], 0.0 if rate <= 0 else carry
    total = carry + rate * (t1 - t0)
    n = int(total + 1e-9)
    return [Request(t0 + (k + 1 - carry) / rate, service) for k in range(n)], total - n


def percentile(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for an empty list."""
    if not xs:
        return math.nan
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))]


def service_for_host(host: str | None, header: str | None) -> Key | None:
    """The (namespace, name) a request is for: ``X-Kubeforge-Service: ns/name`` or a Host
    ``name.ns.svc[.cluster.local][:port]``; None when neither names one."""
    if header and "/" in header:
        ns, _, name = header.strip().partition("/")
        return (ns, name) if ns and name else None
    if host:
        parts = host.split(":", 1)[0].split(".")
        if len(parts) >= 3 and parts[2] == "svc" and parts[0] and parts[1]:
            return parts[1], parts[0]
    return None


@dataclass(frozen=True)
class PodView:
    """What the simulator reads of a pod: its service label, readiness and deletion."""

    namespace: str
    name: str
    service: str
    ready: bool
    deleting: bool = False


@dataclass(frozen=True)
class SliceView:
    """What it reads of an EndpointSlice: namespace, name, ``kubeforge.io/endpoints`` and the
    ``(pod name, ready)`` of each address with a Pod ``targetRef``."""

    namespace: str
    name: str
    endpoints: str | None
    addresses: tuple[tuple[str, bool], ...] = ()


def routing_view(keys: Iterable[Key], slices: Iterable[SliceView], pods: Iterable[PodView],
                 known: dict[Key, set[str]]) -> dict[Key, tuple[set[str], set[str]]]:
    """``(existing, routable)`` replica pod names per service, as the Service routes.

    Args:
        keys: The simulated services.
        slices: The EndpointSlices labelled ``kubeforge.io/inference-service``.
        pods: The pods labelled ``kubeforge.io/inference-service``.
        known: Replica names each service has now (a draining replica stays while its pod
            exists, though no slice lists it).

    Returns:
        Per key: routable = the addresses of slice ``kubeforge-<name>`` when it exists (none
        unless it is labelled ``kubeforge.io/endpoints: replicas``), else the Ready pods;
        existing = routable plus known replicas whose pod still exists and is not deleting.
    """
    live = {(p.namespace, p.name): p for p in pods if not p.deleting}
    by_slice = {(s.namespace, s.name): s for s in slices}
    out: dict[Key, tuple[set[str], set[str]]] = {}
    for ns, name in keys:
        sl = by_slice.get((ns, f"kubeforge-{name}"))
        if sl is not None:
            routable = {pod for pod, ready in sl.addresses if ready and (ns, pod) in live} \
                if sl.endpoints == "replicas" else set()
        else:
            routable = {p.name for (pns, _), p in live.items() if pns == ns and p.service == name and p.ready}
        existing = routable | {n for n in known.get((ns, name), ()) if (ns, n) in live}
        out[(ns, name)] = (existing, routable)
    return out


