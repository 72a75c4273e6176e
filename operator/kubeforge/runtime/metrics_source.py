"""Where the autoscaler's numbers come from: the :class:`MetricsSource` protocol, handed to the
InferenceService reconcile by the :class:`~kubeforge.runtime.state.Runtime` that owns it.

The Kubernetes HPA controller hands its replica calculator a ``metrics.MetricsClient``
interface, with ``fake_client.go`` for tests; kubeforge does the same, so the deciding code
(:mod:`kubeforge.autoscaling`, :mod:`kubeforge.serving`) stays pure and every read is in one
place:

* :class:`PrometheusSource` is the operator's: Prometheus' HTTP API
  (:mod:`kubeforge.runtime.prometheus_http`) through one ``httpx.AsyncClient`` that
  :meth:`PrometheusSource.start` opens and :meth:`PrometheusSource.close` closes (the
  operator's start-up and cleanup, :mod:`kubeforge.runtime.operator`);
* :class:`FakeMetrics` answers from what a test put in it, records what was asked, and never
  touches the network (it lives here, beside the protocol, as ``fake_client.go`` beside
  ``metrics_client.go``: tests and benches import it from ``kubeforge.runtime.metrics_source``).

:func:`read_queue` is what one autoscaling decision reads through either: vLLM's signals in one
query, or a one-number queue (SGLang, Triton, TGI, a Custom query) plus, while no replica is
ready, the activator's held requests. :func:`read_history` is predictive scale-up's: three range
queries of the admission rate (the trend window now, and one day and one week ago). A source never checks a URL: the reconcile applies the
operator's ``prometheusURL`` policy (:mod:`kubeforge.runtime.prometheus_urls`) before it asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import asyncio

import httpx

from kubeforge.autoscaling import DemandHistory, Signals
from kubeforge.autoscaling.prometheus import (
    HELD_QUERY, QueryResult, demand_query, history_of, history_ranges, history_step, parse_range_response,
    parse_signals_response, queue_template, range_request, reads_held, render_query, with_held, with_queue,
)
from kubeforge.objects import InferenceServiceRecord
from kubeforge.runtime import prometheus_http
from kubeforge.runtime.http_client import LazyHttpClient

__all__ = ["PROMETHEUS_TIMEOUT", "FakeMetrics", "MetricsSource", "PrometheusSource", "read_history", "read_queue"]

Series = tuple[tuple[float, float], ...]

PROMETHEUS_TIMEOUT = 2.0
"""Seconds for each Prometheus request (also sent as Prometheus' own query ``timeout``)."""


@runtime_checkable
class MetricsSource(Protocol):
    """What the InferenceService reconcile reads, from the Prometheus at ``url`` (the service's
    ``autoscaling.prometheusURL``, already allowed by the operator's policy).

    No method raises on a failed read (only on cancellation): a failure is data (an ``error``
    text, a signal's error, ``None``), which the autoscaler turns into "hold the replicas,
    ScalingActive=False".
    """

    async def start(self) -> None:
        """Open what the source needs (the operator's start-up); reads before it open it too."""

    async def close(self) -> None:
        """Release it (the operator's cleanup)."""

    async def scalar(self, url: str, promql: str) -> QueryResult:
        """The single value of one instant query (``promql`` rendered)."""

    async def signals(self, url: str, namespace: str, service: str, *, percentile: float = 90.0,
                      window_seconds: float = 60.0) -> Signals:
        """Every vLLM signal of one service (percentiles at ``percentile`` over
        ``window_seconds``), with ``Signals.queue`` set to its waiting plus held requests (or
        a ``"queue"`` error): :func:`kubeforge.autoscaling.prometheus.with_queue`."""

    async def in_flight_by_pod(self, url: str, namespace: str, service: str) -> dict[str, float] | None:
        """Requests in flight (running and waiting in its engine) of each pod of one service;
        None when there is no answer."""

    async def history(self, url: str, promql: str, start: float, end: float, step: float) -> Series | None:
        """One range query's single series, ``((t, value), ...)`` (``()``: no series); None
        when there is no answer."""


class PrometheusSource(LazyHttpClient):
    """:class:`MetricsSource` over Prometheus' HTTP API, with one HTTP client for the process
    (:class:`~kubeforge.runtime.http_client.LazyHttpClient`).

    Args:
        timeout: Seconds for each request (:data:`PROMETHEUS_TIMEOUT`).
    """

    def __init__(self, timeout: float = PROMETHEUS_TIMEOUT) -> None:
        self.timeout = timeout
        super().__init__()

    async def scalar(self, url: str, promql: str) -> QueryResult:
        """See :meth:`MetricsSource.scalar` (:func:`~kubeforge.runtime.prometheus_http.query_scalar`)."""
        return await prometheus_http.query_scalar(await self.client(), url, promql, timeout=self.timeout)

    async def signals(self, url: str, namespace: str, service: str, *, percentile: float = 90.0,
                      window_seconds: float = 60.0) -> Signals:
        """See :meth:`MetricsSource.signals` (:func:`~kubeforge.runtime.prometheus_http.read_signals`)."""
        return await prometheus_http.read_signals(await self.client(), url, namespace, service, percentile=percentile,
                                                  window_seconds=window_seconds, timeout=self.timeout)

    async def in_flight_by_pod(self, url: str, namespace: str, service: str) -> dict[str, float] | None:
        """See :meth:`MetricsSource.in_flight_by_pod`."""
        return await prometheus_http.in_flight_by_pod(await self.client(), url, namespace, service, self.timeout)

    async def history(self, url: str, promql: str, start: float, end: float, step: float) -> Series | None:
        """See :meth:`MetricsSource.history` (``GET /api/v1/query_range``)."""
        target, params = range_request(url, promql, start, end, step, self.timeout)
        try:
            resp = await (await self.client()).get(target, params=params, timeout=self.timeout)
        except (httpx.HTTPError, OSError, ValueError):
            return None
        return parse_range_response(resp.status_code, resp.text)


_NO_SERIES = '{"status": "success", "data": {"resultType": "vector", "result": []}}'
_EMPTY = QueryResult(value=None, time=None, error="empty result", empty=True)


@dataclass
class FakeMetrics:
    """:class:`MetricsSource` for tests: answers what was put in it, as a Prometheus that has
    scraped nothing else would, and records every call.

    Attributes:
        scalars: Answers to :meth:`scalar` by rendered PromQL; any other query is an empty
            result (no series).
        signals_of: Answers to :meth:`signals` by ``(namespace, service)``, through
            :func:`~kubeforge.autoscaling.prometheus.with_queue` when their ``queue`` is unset;
            any other service has no series.
        running: Answers to :meth:`in_flight_by_pod` (running and waiting requests) by
            ``(namespace, service)``; any other is ``None`` (no answer).
        series: Answers to :meth:`history` by PromQL: ``(t, value)`` points, of which those in
            ``[start, end]`` are returned; any other query has no series.
        calls: ``(method, url, what)`` of every read, in order (``what``: the PromQL, or
            ``"namespace/service"``).
        started: Whether :meth:`start` was called since the last :meth:`close`.
    """

    scalars: dict[str, QueryResult] = field(default_factory=dict)
    signals_of: dict[tuple[str, str], Signals] = field(default_factory=dict)
    running: dict[tuple[str, str], dict[str, float] | None] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    started: bool = False

    def set_scalar(self, promql: str, value: float | None, time: float = 0.0) -> None:
        """Answer ``promql`` with ``value`` at ``time`` (``None``: an empty result)."""
        self.scalars[promql] = _EMPTY if value is None else QueryResult(value=value, time=time, error=None)

    async def start(self) -> None:
        """See :meth:`MetricsSource.start`."""
        self.started = True

    async def close(self) -> None:
        """See :meth:`MetricsSource.close`."""
        self.started = False

    async def scalar(self, url: str, promql: str) -> QueryResult:
        """See :meth:`MetricsSource.scalar`."""
        self.calls.append(("scalar", url, promql))
        return self.scalars.get(promql, _EMPTY)

    async def signals(self, url: str, namespace: str, service: str, *, percentile: float = 90.0,
                      window_seconds: float = 60.0) -> Signals:
        """See :meth:`MetricsSource.signals`."""
        self.calls.append(("signals", url, f"{namespace}/{service}"))
        sig = self.signals_of.get((namespace, service))
        if sig is None:
            sig = parse_signals_response(200, _NO_SERIES, percentile, window_seconds)
        return sig if sig.queue is not None else with_queue(sig, None)

    async def in_flight_by_pod(self, url: str, namespace: str, service: str) -> dict[str, float] | None:
        """See :meth:`MetricsSource.in_flight_by_pod`."""
        self.calls.append(("in_flight_by_pod", url, f"{namespace}/{service}"))
        return self.running.get((namespace, service))

    async def history(self, url: str, promql: str, start: float, end: float, step: float) -> Series | None:
        """See :meth:`MetricsSource.history`."""
        self.calls.append(("history", url, promql))
        return tuple((t, v) for t, v in self.series.get(promql, ()) if start <= t <= end)


async def read_queue(source: MetricsSource, rec: InferenceServiceRecord) -> tuple[QueryResult, Signals | None]:
    """What one autoscaling decision of ``rec`` reads, through ``source``.

    vLLM's signals in one query (queue-depth mode with the default metric, and SLO mode); or
    one number (SGLang's, Triton's, TGI's or a custom query), plus, while no replica is ready
    and the query does not already count them
    (:func:`~kubeforge.autoscaling.prometheus.reads_held`), the requests the activator holds
    (:func:`~kubeforge.autoscaling.prometheus.with_held`: a second query, only then).

    Args:
        source: Where to read.
        rec: The service (spec parsed, not None; ``autoscaling.prometheusURL`` allowed).

    Returns:
        The queue as a :class:`QueryResult` (for ``lastMetricValue`` and the ScalingActive
        message's error text) and the :class:`Signals` when they were read, else None.
    """
    a = rec.spec.autoscaling  # type: ignore[union-attr]
    if a.slo is None and (a.query or a.metric.value != "VLLMWaiting"):  # a named or custom queue: one number
        template = queue_template(a.metric.value, a.query)
        q = await source.scalar(a.prometheus_url, render_query(template, rec.namespace, rec.name))
        if reads_held(template) or rec.status.get("readyReplicas"):
            return q, None  # the activator holds requests only while no replica is ready
        held = render_query(HELD_QUERY, rec.namespace, rec.name)
        return with_held(q, await source.scalar(a.prometheus_url, held)), None
    # vLLM's own series: the queue (waiting + the activator's held), and the running requests that
    # keep a service from counting as idle; every latency signal in SLO mode. One query.
    slo = a.slo
    sig = await source.signals(a.prometheus_url, rec.namespace, rec.name,
                               percentile=slo.percentile if slo else 90.0,
                               window_seconds=slo.window_seconds if slo else 60.0)
    queue = sig.value("queue")
    error = None if sig.time is not None else (sig.errors[0][1] if sig.errors else "no answer")
    return QueryResult(queue, sig.time, error), sig


async def read_history(source: MetricsSource, rec: InferenceServiceRecord, now: float, window: float,
                       lead: float) -> DemandHistory:
    """Predictive scale-up's history of ``rec`` (:class:`~kubeforge.autoscaling.DemandHistory`):
    its admission rate over the last ``window`` and over the same window plus ``lead`` one day
    and one week ago, three range queries at once (a failed one counts as no history).

    Args:
        source: Where to read.
        rec: The service (spec parsed, not None; ``autoscaling.prometheusURL`` allowed).
        now: Unix seconds.
        window: The trend window, s.
        lead: The lead time, s.
    """
    url = rec.spec.autoscaling.prometheus_url  # type: ignore[union-attr]
    promql, step = demand_query(rec.namespace, rec.name), history_step(window, lead)
    ranges = history_ranges(now, window, lead)
    answers = await asyncio.gather(*(source.history(url, promql, a, b, step) for a, b in ranges.values()))
    return history_of(dict(zip(ranges, answers)))
