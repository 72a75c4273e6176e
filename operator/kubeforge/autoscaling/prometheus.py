"""Read the autoscaling metric from Prometheus (the only I/O in ``kubeforge.autoscaling``).

The operator asks Prometheus' HTTP API for one instant value (``GET /api/v1/query``) and hands
it to :func:`kubeforge.autoscaling.decide`. Nothing here raises on a bad answer: every failure
comes back as a :class:`QueryResult` with ``value=None`` and an ``error`` text, which the
autoscaler turns into "hold replicas, ScalingActive=False".

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
and fixed messages go out; the operator can restrict the URLs with ``--prometheus-url-allow``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = [
    "DEFAULT_QUERIES",
    "PROMETHEUS_ERROR_TYPES",
    "QueryResult",
    "parse_query_response",
    "query_scalar",
    "query_scalar_sync",
    "render_query",
    "resolve_query",
    "url_allowed",
]

#: Named PromQL templates for the total queue of one InferenceService.
DEFAULT_QUERIES: dict[str, str] = {
    # vLLM: requests waiting to be scheduled (not yet running), per server.
    "VLLMWaiting": 'sum(vllm:num_requests_waiting{namespace="{namespace}",service="{service}"})',
    # SGLang: requests in the waiting queue, per server.
    "SGLangQueue": 'sum(sglang:num_queue_reqs{namespace="{namespace}",service="{service}"})',
    # NVIDIA Triton: requests received but not yet executing, per model and server.
    "TritonPending": 'sum(nv_inference_pending_request_count{namespace="{namespace}",service="{service}"})',
    # Hugging Face TGI: requests waiting in the router's queue.
    "TGIQueue": 'sum(tgi_queue_size{namespace="{namespace}",service="{service}"})',
}

#: The query used when the spec names none.
DEFAULT_QUERY_NAME = "VLLMWaiting"


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
    """

    value: float | None
    time: float | None
    error: str | None

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
            return _fail("empty result")
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


def url_allowed(url: str, allow: tuple[str, ...]) -> bool:
    """Whether ``url`` starts with one of the ``allow`` prefixes (an empty list allows any).

    A prefix ``http://prometheus.monitoring:9090`` allows that host and port and any path
    under it; compare on the whole prefix, so ``http://prom`` does not allow
    ``http://prometheus-evil``... unless written so.
    """
    if not allow:
        return True
    return any(url == p or url.startswith(p.rstrip("/") + "/") for p in allow)


def _params(promql: str, timeout: float) -> dict[str, str]:
    # Prometheus parses durations like "1500ms" (model.ParseDuration); fractional "1.5s" is not one.
    return {"query": promql, "timeout": f"{max(1, round(timeout * 1000))}ms"}


def _url(base_url: str) -> str:
    return base_url.rstrip("/") + "/api/v1/query"


def _transport_error(exc: Exception, timeout: float) -> QueryResult:
    if isinstance(exc, httpx.TimeoutException):
        return _fail(f"timeout after {timeout:g}s")
    if isinstance(exc, httpx.ConnectError):
        return _fail("connection failed")
    return _fail(f"request failed ({type(exc).__name__})")


async def query_scalar(
    client: httpx.AsyncClient, base_url: str, promql: str, timeout: float = 2.0
) -> QueryResult:
    """Run an instant query and return its single value.

    ``GET {base_url}/api/v1/query?query=<promql>`` (Prometheus HTTP API), evaluated at the
    server's current time.

    Args:
        client: The HTTP client (carries auth headers, TLS settings, proxies).
        base_url: Prometheus' address, e.g. ``http://prometheus.monitoring:9090``; a
            trailing slash is fine, a path prefix (``/prometheus``) is kept.
        promql: The rendered query (see :func:`render_query`).
        timeout: Seconds for the whole request; also sent as Prometheus' own ``timeout``.

    Returns:
        The :class:`QueryResult`; HTTP errors, refused connections, timeouts and malformed
        answers come back as ``error`` text. Never raises (except on cancellation).
    """
    try:
        resp = await client.get(
            _url(base_url), params=_params(promql, timeout), timeout=timeout
        )
    except httpx.HTTPError as exc:
        return _transport_error(exc, timeout)
    except (OSError, ValueError) as exc:  # e.g. an invalid URL
        return _fail(f"request failed ({type(exc).__name__})")
    return parse_query_response(resp.status_code, resp.text)


def query_scalar_sync(client: httpx.Client, base_url: str, promql: str, timeout: float = 2.0) -> QueryResult:
    """Blocking twin of :func:`query_scalar`, same arguments and results, with ``httpx.Client``."""
    try:
        resp = client.get(_url(base_url), params=_params(promql, timeout), timeout=timeout)
    except httpx.HTTPError as exc:
        return _transport_error(exc, timeout)
    except (OSError, ValueError) as exc:
        return _fail(f"request failed ({type(exc).__name__})")
    return parse_query_response(resp.status_code, resp.text)
