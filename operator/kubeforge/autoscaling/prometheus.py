"""What the autoscaler asks Prometheus and how it reads the answers: PromQL and parsing, pure.

The requests themselves are the runtime's (:mod:`kubeforge.runtime.metrics_source`: the
:class:`~kubeforge.runtime.metrics_source.MetricsSource` protocol, its Prometheus
implementation over :mod:`kubeforge.runtime.prometheus_http` and a fake for tests; the
``prometheusURL`` policy is :mod:`kubeforge.runtime.prometheus_urls`). This module holds what
they send and how each answer becomes data, instant queries (``GET /api/v1/query``) and ranges:

* the signals of one decision (vLLM's queue, running requests, KV-cache usage, the activator's
  held requests, the admission rate, the mean running time, the TTFT / ITL / prefill
  percentiles) in **one** query, each signal labelled (``label_replace(...,
  "kubeforge_signal", ...)``) and joined with ``or`` (:func:`signals_query`,
  :func:`parse_signals_response`); :func:`with_queue` adds the queue-depth metric to them;
* one value of one query (queue-depth mode's metric: :func:`resolve_query`,
  :func:`parse_query_response`), plus the activator's held requests while no replica is ready
  (:func:`with_held`);
* predictive scale-up's history, range queries (``GET /api/v1/query_range``) of the admission
  rate now, a day and a week ago (:func:`demand_query`, :func:`history_ranges`,
  :func:`parse_range_response`, :mod:`kubeforge.autoscaling._history`).

Nothing here raises on a bad answer: every failure comes back as ``None`` with an ``error``
text, which the autoscaler turns into "hold replicas, ScalingActive=False".

**The arrival rate.** vLLM counts a request in ``vllm:time_to_first_token_seconds_count``
when its first token comes out, that is when it leaves the queue: its ``rate`` is the
*admission* rate. Arrivals are admissions plus the growth of the queue (engines' waiting +
the activator's held) by conservation; the core adds the growth it sees between two
decisions (:func:`kubeforge.autoscaling.size_for_slo`). ``vllm:request_success_total`` was
not used: it counts at completion, a request's running time late, and misses the queue;
nor a gateway counter: not every installation has one, and the activator only sees traffic
while the service is at zero.

**Zero replicas.** vLLM's series go with the last pod. The activator's
``kubeforge_activator_queue_length{namespace, service}`` (scraped with ``honorLabels``)
holds the requests that arrive meanwhile: it is part of the queue in both modes, so a service
at zero comes back.

Queries. ``DEFAULT_QUERIES`` maps a short name to a PromQL template that returns the **total**
queue across one InferenceService (``sum(...)``, matching the core's ``ceil(total / target)``).
Templates select series by two labels:

* ``namespace``: the namespace of the scraped pod, which both the prometheus-operator
  (``ServiceMonitor`` / ``PodMonitor``) and the usual ``kubernetes_sd_configs`` relabeling
  attach;
* ``service``: the name of the Kubernetes Service the pods are scraped through, which a
  ``ServiceMonitor`` attaches. kubeforge names that Service after the InferenceService, so
  ``{service}`` is the InferenceService's name. Anything that feeds Prometheus for kubeforge
  (the local simulator's model-server pods included) must put these two labels on the series.

:func:`render_query` substitutes ``{namespace}`` and ``{name}`` (``{service}`` is the same as
``{name}``), and nothing else: PromQL's own braces are left alone. A user may give any PromQL
instead of a name; placeholders in it are substituted the same way, and a query without them
is sent as written. The query must return a single series or a scalar; wrap it in
``sum(...)`` otherwise.

What a failed query reports (in status conditions and Events, which namespace users read)
never includes the response body: ``prometheusURL`` is the user's, so a body could come from
any in-cluster endpoint. Only the HTTP status code, Prometheus' ``errorType`` (a fixed set)
and fixed messages go out; the operator restricts the URLs (``--prometheus-url-allow``,
:mod:`kubeforge.runtime.prometheus_urls`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

from ._history import (
    DEMAND_QUERY, demand_query, history_of, history_ranges, history_step, parse_range_response, range_request,
)
from ._promql import (
    IN_FLIGHT_BY_POD, SIGNAL_EXPRESSIONS, failed_signals, parse_by_pod, parse_signals_response, signals_query,
)
from ._signals import Signals

__all__ = [
    "DEMAND_QUERY",
    "demand_query",
    "history_of",
    "history_ranges",
    "history_step",
    "parse_range_response",
    "range_request",
    "DEFAULT_QUERIES",
    "DEFAULT_QUERY_NAME",
    "HELD_METRIC",
    "HELD_QUERY",
    "PROMETHEUS_ERROR_TYPES",
    "IN_FLIGHT_BY_POD",
    "SIGNAL_EXPRESSIONS",
    "QueryResult",
    "failed",
    "failed_signals",
    "parse_by_pod",
    "parse_query_response",
    "parse_signals_response",
    "query_request",
    "queue_template",
    "reads_held",
    "render_query",
    "resolve_query",
    "signals_query",
    "with_held",
    "with_queue",
]

_SEL = '{namespace="{namespace}",service="{service}"}'
_VLLM_WAITING = "sum(vllm:num_requests_waiting" + _SEL + ")"
_HELD = "sum(kubeforge_activator_queue_length" + _SEL + ")"

#: Named PromQL templates for the total queue of one InferenceService.
DEFAULT_QUERIES: dict[str, str] = {
    # vLLM: requests waiting to be scheduled (not yet running), per server, plus the requests
    # the activator holds while the service has no ready replica (a missing side counts as 0;
    # both missing is "empty result", which holds the replicas).
    "VLLMWaiting": f"({_VLLM_WAITING} or on() ({_HELD} * 0)) + on() ({_HELD} or on() ({_VLLM_WAITING} * 0))",
    # SGLang: requests in the waiting queue, per server.
    "SGLangQueue": 'sum(sglang:num_queue_reqs{namespace="{namespace}",service="{service}"})',
    # NVIDIA Triton: requests received but not yet executing, per model and server.
    "TritonPending": 'sum(nv_inference_pending_request_count{namespace="{namespace}",service="{service}"})',
    # Hugging Face TGI: requests waiting in the router's queue.
    "TGIQueue": 'sum(tgi_queue_size{namespace="{namespace}",service="{service}"})',
}

#: The query used when the spec names none.
DEFAULT_QUERY_NAME = "VLLMWaiting"

#: The requests the kubeforge activator holds for one service while it has no ready replica.
HELD_QUERY = _HELD
HELD_METRIC = "kubeforge_activator_queue_length"


def reads_held(template: str) -> bool:
    """Whether a queue query already counts the activator's held requests (it names
    :data:`HELD_METRIC`, as ``VLLMWaiting`` does): such a query is sent as written; any other is
    summed with :data:`HELD_QUERY` while the service has no ready replica (:func:`with_held`)."""
    return HELD_METRIC in template


def with_held(queue: QueryResult, held: QueryResult) -> QueryResult:
    """The queue plus the requests the activator holds, so that a service at zero replicas comes
    back whatever its metric (issue 32: a Custom or SGLang queue has no series once the last pod
    is gone, and without the held requests nothing would ever scale it up again).

    A missing side counts as 0 (as in ``VLLMWaiting``); both missing stays "empty result",
    which holds the replicas. A failed queue query stays failed (its error is reported); a
    failed held query leaves the queue as read.

    Args:
        queue: The service's queue metric (the answer to its query).
        held: The answer to :data:`HELD_QUERY`.

    Returns:
        The combined :class:`QueryResult`.
    """
    if not queue.ok and not queue.empty:
        return queue
    if not held.ok:
        return queue
    if queue.empty:
        return QueryResult(value=held.value, time=held.time, error=None)
    assert queue.value is not None and held.value is not None
    return QueryResult(value=queue.value + held.value, time=queue.time, error=None)


def _escape_label_value(value: str) -> str:
    """Escape a string for a double-quoted PromQL label matcher."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_query(template: str, namespace: str, service: str) -> str:
    """Fill ``{namespace}`` and ``{name}`` (or ``{service}``, the same) in a PromQL template.

    Only those placeholders are replaced (``str.format`` would trip over PromQL's label
    braces); values are escaped for a double-quoted label matcher.

    Args:
        template: PromQL, e.g. ``DEFAULT_QUERIES["VLLMWaiting"]`` or the user's own.
        namespace: The InferenceService's namespace.
        service: The InferenceService's name (also its Service's name).

    Returns:
        The PromQL to send.
    """
    name = _escape_label_value(service)
    return (template.replace("{namespace}", _escape_label_value(namespace))
            .replace("{service}", name).replace("{name}", name))


def resolve_query(query: str | None, namespace: str, service: str) -> str:
    """The PromQL for a spec's ``query`` field: a name from ``DEFAULT_QUERIES`` or PromQL.

    Args:
        query: ``None`` or empty for the default (``VLLMWaiting``), a key of
            ``DEFAULT_QUERIES``, or any PromQL template.
        namespace: The InferenceService's namespace.
        service: The InferenceService's name.

    Returns:
        The rendered PromQL.
    """
    template = DEFAULT_QUERIES.get(query or DEFAULT_QUERY_NAME, query or "")
    return render_query(template, namespace, service)


@dataclass(frozen=True)
class QueryResult:
    """One instant-query answer.

    Attributes:
        value: The sample value, finite; ``None`` on any failure.
        time: Prometheus' evaluation timestamp for the value, unix seconds; ``None`` when
            there was none.
        error: ``None`` on success, else a short fixed text ("empty result", "HTTP 503",
            "connection failed", "timeout after 2s", "Prometheus error bad_data"); never a
            copy of the response body.
        empty: Prometheus answered, with an empty vector (no series matched): typed, so that
            callers never read ``error``'s text.
    """

    value: float | None
    time: float | None
    error: str | None
    empty: bool = False

    @property
    def ok(self) -> bool:
        """True when ``value`` is usable."""
        return self.error is None and self.value is not None


def _fail(error: str, time: float | None = None) -> QueryResult:
    return QueryResult(value=None, time=time, error=error)


def _point(point: Any) -> QueryResult:
    """Parse a Prometheus ``[<unix seconds>, "<value>"]`` pair."""
    if not isinstance(point, (list, tuple)) or len(point) != 2:
        return _fail("malformed sample")
    ts_raw, value_raw = point
    try:
        ts = float(ts_raw)
        value = float(value_raw)
    except (TypeError, ValueError):
        return _fail("malformed sample")
    if not math.isfinite(value):
        return _fail(f"value is {value}", ts)
    return QueryResult(value=value, time=ts, error=None)


def parse_query_response(status_code: int, body: str) -> QueryResult:
    """Turn an ``/api/v1/query`` HTTP answer into a :class:`QueryResult`.

    Handles ``resultType`` ``vector`` (exactly one series) and ``scalar``; an empty vector
    is ``error="empty result"``; more than one series is an error asking for ``sum(...)``;
    NaN and infinite values are errors; a Prometheus error body gives ``"<errorType>:
    <error>"``; any other non-2xx status gives ``"HTTP <code>: <start of body>"``.

    Args:
        status_code: HTTP status code.
        body: Response body text.

    Returns:
        The result; never raises.
    """
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("status") == "error":
        kind = doc.get("errorType")
        kind = kind if kind in PROMETHEUS_ERROR_TYPES else "unknown"
        return _fail(f"Prometheus error {kind} (HTTP {status_code})")
    if not 200 <= status_code < 300:
        return _fail(f"HTTP {status_code}")
    if not isinstance(doc, dict) or doc.get("status") != "success":
        return _fail("response is not a Prometheus query result")
    data = doc.get("data")
    if not isinstance(data, dict):
        return _fail("response has no data")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return _point(result)
    if kind == "vector":
        if not isinstance(result, list):
            return _fail("malformed vector result")
        if not result:
            return QueryResult(value=None, time=None, error="empty result", empty=True)
        if len(result) > 1:
            return _fail(f"query returned {len(result)} series; wrap it in sum(...)")
        series = result[0]
        if not isinstance(series, dict):
            return _fail("malformed vector result")
        return _point(series.get("value"))
    return _fail(f"unsupported result type {kind!r}; use an instant vector or scalar query")


PROMETHEUS_ERROR_TYPES = ("timeout", "canceled", "execution", "bad_data", "internal", "unavailable", "not_found",
                          "not_acceptable")
"""``errorType`` values of the Prometheus HTTP API (``web/api/v1``)."""


def query_request(base_url: str, promql: str, timeout: float) -> tuple[str, dict[str, str]]:
    """The ``GET`` of one instant query: ``(URL, query parameters)``.

    Args:
        base_url: Prometheus' address, e.g. ``http://prometheus.monitoring:9090``; a trailing
            slash is fine, a path prefix (``/prometheus``) is kept.
        promql: The rendered query.
        timeout: Seconds for the whole request, also sent as Prometheus' own ``timeout``
            (in milliseconds: Prometheus parses ``1500ms``, not a fractional ``1.5s``).

    Returns:
        ``(base_url + "/api/v1/query", {"query": promql, "timeout": "<ms>ms"})``.
    """
    return base_url.rstrip("/") + "/api/v1/query", {"query": promql, "timeout": f"{max(1, round(timeout * 1000))}ms"}


def failed(error: str) -> QueryResult:
    """A :class:`QueryResult` with no value and the short fixed ``error`` text (never a body)."""
    return _fail(error)


def queue_template(metric: str, query: str | None) -> str:
    """The queue's PromQL template of a spec: the user's ``query`` (Custom, or any given), else
    the named ``metric``'s (``DEFAULT_QUERIES``; an unknown name gives ``VLLMWaiting``'s)."""
    return query or DEFAULT_QUERIES.get(metric, DEFAULT_QUERIES[DEFAULT_QUERY_NAME])


def with_queue(signals: Signals, queue: QueryResult | None) -> Signals:
    """The signals with their queue-depth metric (``Signals.queue``) set.

    Args:
        signals: :func:`parse_signals_response`'s (or :func:`failed_signals`') signals.
        queue: ``None`` for vLLM's own queue: the engines' waiting plus the activator's held
            requests (``Signals.queued``); else the answer to the service's queue query (SGLang's,
            a Custom one), read apart.

    Returns:
        The signals with ``queue`` set, or, when there is none, a ``"queue"`` error (the
        waiting signal's, or the query's) and ``"queue"`` in ``absent`` when Prometheus answered
        with no series at all.
    """
    if queue is None:
        queued = signals.queued
        if queued is not None:
            return replace(signals, queue=queued)
        empty = ("queue",) if {"waiting", "held"} <= set(signals.absent) else ()
        return replace(signals, errors=signals.errors + (("queue", signals.error("waiting") or "no series"),),
                       absent=signals.absent + empty)
    if queue.value is not None:
        return replace(signals, queue=queue.value)
    return replace(signals, errors=signals.errors + (("queue", queue.error or "no value"),),
                   absent=signals.absent + (("queue",) if queue.empty else ()))
