"""Prometheus' HTTP API, the requests: the I/O behind :class:`~kubeforge.runtime.metrics_source.PrometheusSource`.

Each function sends one instant query (``GET {base_url}/api/v1/query``, evaluated at the
server's current time, bounded by a timeout that is also Prometheus' own) and hands the answer
to the pure parsers of :mod:`kubeforge.autoscaling.prometheus`. Nothing here raises on a bad
answer or a failed request (only on cancellation): a refused connection, a timeout, an invalid
URL come back as short fixed error texts, never a response body (``prometheusURL`` is the
user's; see :mod:`kubeforge.autoscaling.prometheus`).

These functions do not check the URL: the operator's policy
(:mod:`kubeforge.runtime.prometheus_urls`) is applied before them.
"""

from __future__ import annotations

import httpx

from kubeforge.autoscaling import Signals
from kubeforge.autoscaling.prometheus import (
    IN_FLIGHT_BY_POD, QueryResult, failed, failed_signals, parse_by_pod, parse_query_response, parse_signals_response,
    query_request, render_query, resolve_query, signals_query, with_queue,
)

__all__ = ["in_flight_by_pod", "query_scalar", "query_scalar_sync", "read_signals", "transport_error"]


def transport_error(exc: Exception, timeout: float) -> QueryResult:
    """The :class:`QueryResult` of a request that got no answer: ``"timeout after 2s"``,
    ``"connection failed"`` or ``"request failed (<exception type>)"``."""
    if isinstance(exc, httpx.TimeoutException):
        return failed(f"timeout after {timeout:g}s")
    if isinstance(exc, httpx.ConnectError):
        return failed("connection failed")
    return failed(f"request failed ({type(exc).__name__})")


async def query_scalar(
    client: httpx.AsyncClient, base_url: str, promql: str, timeout: float = 2.0
) -> QueryResult:
    """Run an instant query and return its single value.

    Args:
        client: The HTTP client (carries auth headers, TLS settings, proxies).
        base_url: Prometheus' address, e.g. ``http://prometheus.monitoring:9090``; a
            trailing slash is fine, a path prefix (``/prometheus``) is kept.
        promql: The rendered query (see :func:`kubeforge.autoscaling.prometheus.render_query`).
        timeout: Seconds for the whole request; also sent as Prometheus' own ``timeout``.

    Returns:
        The :class:`QueryResult`
        (:func:`~kubeforge.autoscaling.prometheus.parse_query_response`); HTTP errors, refused
        connections, timeouts and malformed answers come back as ``error`` text. Never raises
        (except on cancellation).
    """
    url, params = query_request(base_url, promql, timeout)
    try:
        resp = await client.get(url, params=params, timeout=timeout)
    except httpx.HTTPError as exc:
        return transport_error(exc, timeout)
    except (OSError, ValueError) as exc:  # e.g. an invalid URL
        return failed(f"request failed ({type(exc).__name__})")
    return parse_query_response(resp.status_code, resp.text)


def query_scalar_sync(client: httpx.Client, base_url: str, promql: str, timeout: float = 2.0) -> QueryResult:
    """Blocking twin of :func:`query_scalar`, same arguments and results, with ``httpx.Client``
    (the local simulator's :meth:`kubeforge.sim.prometheus.Prometheus.query` and tests)."""
    url, params = query_request(base_url, promql, timeout)
    try:
        resp = client.get(url, params=params, timeout=timeout)
    except httpx.HTTPError as exc:
        return transport_error(exc, timeout)
    except (OSError, ValueError) as exc:
        return failed(f"request failed ({type(exc).__name__})")
    return parse_query_response(resp.status_code, resp.text)


async def read_signals(
    client: httpx.AsyncClient,
    base_url: str,
    namespace: str,
    service: str,
    *,
    percentile: float = 90.0,
    window_seconds: float = 60.0,
    queue_query: str | None = None,
    timeout: float = 2.0,
) -> Signals:
    """Everything one autoscaling decision needs about one service, in one or two queries.

    Query 1 (:func:`kubeforge.autoscaling.prometheus.signals_query`): vLLM's waiting, running,
    replicas reporting, KV-cache usage, the running count of replicas that queue, the
    admission rate, the mean running time, the TTFT / ITL / prefill percentiles over
    ``window_seconds``, and the activator's held requests. Query 2, only with
    ``queue_query``: the queue-depth metric (SGLang's or a Custom query).

    Args:
        client: The HTTP client.
        base_url: Prometheus' address (a path prefix is kept).
        namespace: The InferenceService's namespace.
        service: Its name (the ``service`` label of its series).
        percentile: Latency percentile, in (0, 100) (``slo.percentile``).
        window_seconds: Window of rates and percentiles, s (``slo.windowSeconds``).
        queue_query: ``None`` for vLLM: the queue-depth metric is then vLLM's waiting plus the
            activator's held (``Signals.queue``); else a template or a ``DEFAULT_QUERIES``
            name, rendered and read with :func:`query_scalar`.
        timeout: Seconds for each request (also Prometheus' own ``timeout``).

    Returns:
        The :class:`Signals` (:func:`~kubeforge.autoscaling.prometheus.with_queue`); per-signal
        errors are short fixed texts (HTTP status, ``errorType``, "no series", "timeout after
        2s"), never a response body. Never raises (except on cancellation).
    """
    promql = signals_query(namespace, service, percentile, window_seconds)
    url, params = query_request(base_url, promql, timeout)
    try:
        resp = await client.get(url, params=params, timeout=timeout)
        sig = parse_signals_response(resp.status_code, resp.text, percentile, window_seconds)
    except httpx.HTTPError as exc:
        sig = failed_signals(transport_error(exc, timeout).error or "request failed", percentile, window_seconds)
    except (OSError, ValueError) as exc:
        sig = failed_signals(f"request failed ({type(exc).__name__})", percentile, window_seconds)
    if queue_query is None:
        return with_queue(sig, None)
    q = await query_scalar(client, base_url, resolve_query(queue_query, namespace, service), timeout=timeout)
    return with_queue(sig, q)


async def in_flight_by_pod(client: httpx.AsyncClient, base_url: str, namespace: str, service: str,
                           timeout: float = 2.0) -> dict[str, float] | None:
    """Requests in flight (running and waiting in its engine) of each pod of one service
    (:data:`~kubeforge.autoscaling.prometheus.IN_FLIGHT_BY_POD`), or None when Prometheus does not
    answer. Never raises (except on cancellation)."""
    url, params = query_request(base_url, render_query(IN_FLIGHT_BY_POD, namespace, service), timeout)
    try:
        resp = await client.get(url, params=params, timeout=timeout)
    except (httpx.HTTPError, OSError, ValueError):
        return None
    return parse_by_pod(resp.status_code, resp.text)
