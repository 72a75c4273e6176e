"""The PromQL the autoscaler sends and the parsing of the answers (pure: strings in, data out).

:func:`signals_query` is the one query behind a decision's :class:`Signals` (sent by
:func:`kubeforge.runtime.prometheus_http.read_signals`); :data:`IN_FLIGHT_BY_POD` the one behind a
drain (each pod's requests in flight, :func:`parse_by_pod`).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from ._signals import Signals

__all__ = ["IN_FLIGHT_BY_POD", "SIGNAL_LABEL", "SIGNAL_EXPRESSIONS", "failed_signals", "parse_by_pod",
           "parse_signals_response", "signals_query"]

#: The label each signal's series carries in the combined answer.
SIGNAL_LABEL = "kubeforge_signal"

#: ``signal -> PromQL template``; ``{sel}`` is the service's label matcher, ``{w}`` the window,
#: ``{step}`` the subquery resolution (a twelfth of it), ``{q}`` the quantile. Every expression returns one series without labels (or none).
SIGNAL_EXPRESSIONS: dict[str, str] = {
    "waiting": "sum(vllm:num_requests_waiting{sel})",
    "held": "sum(kubeforge_activator_queue_length{sel})",
    "running": "sum(vllm:num_requests_running{sel})",
    "replicas": "count(vllm:num_requests_running{sel})",
    "kv_cache_usage": "avg(vllm:kv_cache_usage_perc{sel})",
    # the running count of replicas that queue: what one replica holds at most, measured
    "saturated_running": "max(vllm:num_requests_running{sel} and on(pod) (vllm:num_requests_waiting{sel} > 0))",
    "admission_rate": "sum(rate(vllm:time_to_first_token_seconds_count{sel}[{w}]))",
    "admission_rate_recent": "sum(irate(vllm:time_to_first_token_seconds_count{sel}[{w}]))",
    "service_seconds": ("sum(rate(vllm:request_inference_time_seconds_sum{sel}[{w}])) / "
                        "sum(rate(vllm:request_inference_time_seconds_count{sel}[{w}]))"),
    "running_mean": "avg_over_time(sum(vllm:num_requests_running{sel})[{w}:{step}])",
    "ttft": "histogram_quantile({q}, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{sel}[{w}])))",
    "itl": "histogram_quantile({q}, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{sel}[{w}])))",
    "prefill": "histogram_quantile({q}, sum by (le) (rate(vllm:request_prefill_time_seconds_bucket{sel}[{w}])))",
}

#: Signals that are NaN when no request finished (or started) in the window.
_PER_REQUEST = {"service_seconds", "ttft", "itl", "prefill"}

_ERROR_TYPES = ("timeout", "canceled", "execution", "bad_data", "internal", "unavailable", "not_found",
                "not_acceptable")


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def signals_query(namespace: str, service: str, percentile: float = 90.0, window_seconds: float = 60.0) -> str:
    """The PromQL of every :data:`SIGNAL_EXPRESSIONS` for one service, in one instant query.

    Each expression is wrapped in ``label_replace(expr, "kubeforge_signal", "<name>", "", "")``
    and the results are joined with ``or`` (distinct label sets, so all are kept).

    Args:
        namespace: The InferenceService's namespace (``namespace`` label).
        service: Its name (``service`` label, the Service's name).
        percentile: The latency percentile, in (0, 100).
        window_seconds: The range of ``rate`` and ``histogram_quantile``, s (whole seconds).

    Returns:
        The query text.
    """
    sel = '{namespace="%s",service="%s"}' % (_esc(namespace), _esc(service))
    w = f"{max(1, int(round(window_seconds)))}s"
    step = f"{max(1, int(round(window_seconds / 12)))}s"  # 12 points of the window for the subquery
    q = repr(round(percentile / 100.0, 6))
    parts = []
    for name, tpl in SIGNAL_EXPRESSIONS.items():
        expr = tpl.replace("{sel}", sel).replace("{w}", w).replace("{step}", step).replace("{q}", q)
        parts.append(f'label_replace({expr}, "{SIGNAL_LABEL}", "{name}", "", "")')
    return " or ".join(parts)


def _all_failed(base: Signals, error: str, names: tuple[str, ...]) -> Signals:
    return replace(base, errors=tuple((n, error) for n in names))


def failed_signals(error: str, percentile: float = 90.0, window_seconds: float = 60.0) -> Signals:
    """The :class:`Signals` of a query that got no answer: every signal of
    :data:`SIGNAL_EXPRESSIONS` carries ``error`` (a short fixed text: "connection failed",
    "timeout after 2s"), none a value."""
    return _all_failed(Signals(percentile=percentile, window_seconds=window_seconds), error, tuple(SIGNAL_EXPRESSIONS))


def parse_signals_response(status_code: int, body: str, percentile: float = 90.0,
                           window_seconds: float = 60.0) -> Signals:
    """Turn the answer to :func:`signals_query` into :class:`Signals`; never raises.

    A series per signal (by its ``kubeforge_signal`` label); a missing one is
    ``"no series"``, NaN ``"no requests in the window"`` for per-request signals and ``"not
    a number"`` for the others, infinite ``"infinite"``. A failed request gives every signal
    the same fixed error (HTTP status, Prometheus' ``errorType``), never the body's text.

    Returns:
        The signals (``queue`` left unset: the caller decides what the queue-depth metric is).
    """
    base = Signals(percentile=percentile, window_seconds=window_seconds)
    names = tuple(SIGNAL_EXPRESSIONS)
    try:
        doc: Any = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("status") == "error":
        kind = doc.get("errorType")
        return _all_failed(base, f"Prometheus error {kind if kind in _ERROR_TYPES else 'unknown'} (HTTP {status_code})",
                           names)
    if not 200 <= status_code < 300:
        return _all_failed(base, f"HTTP {status_code}", names)
    data = doc.get("data") if isinstance(doc, dict) and doc.get("status") == "success" else None
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        return _all_failed(base, "response is not a Prometheus vector result", names)
    values: dict[str, float] = {}
    errors: dict[str, str] = {}
    when = None
    for series in data["result"]:
        if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
            continue
        name = series["metric"].get(SIGNAL_LABEL)
        point = series.get("value")
        if name not in SIGNAL_EXPRESSIONS or not isinstance(point, (list, tuple)) or len(point) != 2:
            continue
        try:
            ts, v = float(point[0]), float(point[1])
        except (TypeError, ValueError):
            errors[name] = "malformed sample"
            continue
        when = ts if when is None else max(when, ts)
        if math.isnan(v):
            errors[name] = "no requests in the window" if name in _PER_REQUEST else "not a number"
        elif math.isinf(v):
            errors[name] = "infinite"
        else:
            values[name] = v
    absent = tuple(n for n in names if n not in values and n not in errors)
    for name in absent:
        errors[name] = "no series"
    return replace(base, time=when, errors=tuple((n, errors[n]) for n in names if n in errors), absent=absent,
                   **values)


IN_FLIGHT_BY_POD = ('sum by (pod) ({__name__=~"vllm:num_requests_running|vllm:num_requests_waiting",'
                    'namespace="{namespace}",service="{service}"})')
"""Requests in flight per pod of one service, for draining a replica before it is deleted (read
only while some replica drains; rendered with :func:`kubeforge.autoscaling.prometheus.render_query`).

``vllm:num_requests_running`` is vLLM's gauge of requests being generated and
``vllm:num_requests_waiting`` of those queued in the same engine for a free batch slot: deleting
the pod aborts both, so the drain waits for their sum (the running ones alone let a replica go
with requests still queued in it: the live KEDA bench's aborted requests, e2e/README-keda-live.md).
One selector for both names, so a pod that exports only one of them still counts. ``pod`` is the
label Prometheus' Kubernetes discovery (PodMonitor and ServiceMonitor alike) attaches. Scrape the
model servers with a PodMonitor (or pod annotations): a ServiceMonitor scrapes through the
Service's endpoints, which a draining leader has just left, so its series would stop exactly
when it is needed; without a value the drain ends at ``drainSeconds``."""


def parse_by_pod(status_code: int, body: str) -> dict[str, float] | None:
    """``{pod: value}`` from a Prometheus instant-vector answer (:data:`IN_FLIGHT_BY_POD`'s).

    Returns:
        The values by pod name; None on any error (a status other than 200, a body that is not a
        Prometheus vector). A value that is not a finite number >= 0 is left out.
    """
    if status_code != 200:
        return None
    try:
        data = json.loads(body)
        result = data["data"]["result"] if isinstance(data, dict) and data.get("status") == "success" else None
    except (ValueError, KeyError, TypeError):  # also a "data" that is no object: TypeError
        return None
    if not isinstance(result, list):
        return None
    out: dict[str, float] = {}
    for item in result:
        try:
            pod = item["metric"]["pod"]
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isfinite(value) and value >= 0:
            out[str(pod)] = value
    return out
