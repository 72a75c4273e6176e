"""What predictive scale-up asks Prometheus, and how it reads the answers: range queries of the
service's admission rate (pure: strings in, data out; the requests are the runtime's
:class:`~kubeforge.runtime.metrics_source.MetricsSource`).

Three ranges make a :class:`~kubeforge.autoscaling.DemandHistory` (:func:`history_ranges`): the
last trend window, and the same window plus the lead time one day and one week ago. Asking for
``[now - 1d - window, now - 1d + lead]`` is what ``demand offset 1d`` over
``[now - window, now + lead]`` returns, without evaluating at future times.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ._forecast import DAY_SECONDS, WEEK_SECONDS, DemandHistory

__all__ = ["DEMAND_QUERY", "demand_query", "history_of", "history_ranges", "history_step", "parse_range_response",
           "range_request"]

#: The admission rate of one service, requests/s (see :mod:`kubeforge.autoscaling.prometheus`
#: for why the TTFT histogram's count is the admission rate). ``{namespace}`` and ``{service}``
#: are substituted by :func:`demand_query`.
DEMAND_QUERY = 'sum(rate(vllm:time_to_first_token_seconds_count{namespace="{namespace}",service="{service}"}[1m]))'
MAX_POINTS = 240
"""Points asked for per range (Prometheus refuses more than 11,000; a few hundred fit a trend)."""


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def demand_query(namespace: str, service: str) -> str:
    """:data:`DEMAND_QUERY` for one service (label values escaped)."""
    return DEMAND_QUERY.replace("{namespace}", _esc(namespace)).replace("{service}", _esc(service))


def history_step(window: float, lead: float) -> float:
    """The resolution of every range: at most :data:`MAX_POINTS` points over ``window + lead``,
    and no finer than 15 s (Prometheus' default scrape interval)."""
    return max(15.0, math.ceil((window + lead) / MAX_POINTS))


def history_ranges(now: float, window: float, lead: float) -> dict[str, tuple[float, float]]:
    """``{"recent" | "day" | "week": (start, end)}``, unix seconds, of a :class:`DemandHistory`'s
    fields at ``now`` for a trend ``window`` and a ``lead``, s."""
    return {"recent": (now - window, now),
            "day": (now - DAY_SECONDS - window, now - DAY_SECONDS + lead),
            "week": (now - WEEK_SECONDS - window, now - WEEK_SECONDS + lead)}


def range_request(base_url: str, promql: str, start: float, end: float, step: float,
                  timeout: float) -> tuple[str, dict[str, str]]:
    """The ``GET`` of one range query: ``(base_url + "/api/v1/query_range", parameters)``."""
    return base_url.rstrip("/") + "/api/v1/query_range", {
        "query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}s",
        "timeout": f"{max(1, round(timeout * 1000))}ms"}


def parse_range_response(status_code: int, body: str) -> tuple[tuple[float, float], ...] | None:
    """The one series of a ``query_range`` answer as ``((t, value), ...)``, NaN and infinite
    points left out; ``()`` for no series (no history); None for a failed or odd answer."""
    if not 200 <= status_code < 300:
        return None
    try:
        doc: Any = json.loads(body)
    except ValueError:
        return None
    data = doc.get("data") if isinstance(doc, dict) and doc.get("status") == "success" else None
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        return None
    result = data["result"]
    if not result:
        return ()
    series = result[0] if isinstance(result[0], dict) else {}
    out = []
    for point in series.get("values") or []:
        try:
            t, v = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError, KeyError):
            continue
        if math.isfinite(t) and math.isfinite(v):
            out.append((t, v))
    return tuple(out)


def history_of(parts: dict[str, tuple[tuple[float, float], ...] | None]) -> DemandHistory:
    """A :class:`DemandHistory` from the three answers by name (a failed one counts as none)."""
    return DemandHistory(recent=parts.get("recent") or (), day=parts.get("day") or (), week=parts.get("week") or ())
