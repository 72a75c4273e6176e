"""Running requests per pod, for draining a replica before it is deleted (I/O: one Prometheus
query, only while some replica drains).

``sum by (pod) (vllm:num_requests_running{namespace=..,service=..})``: vLLM's gauge of requests
being generated, per pod. Scrape the model servers with a PodMonitor (or pod annotations): a
ServiceMonitor scrapes through the Service's endpoints, which a draining leader has just left,
so its series would stop exactly when it is needed; without a value the drain ends at
``drainSeconds``.
"""

from __future__ import annotations

import json
import math

import httpx

from kubeforge.autoscaling.prometheus import render_query

RUNNING_BY_POD = 'sum by (pod) (vllm:num_requests_running{namespace="{namespace}",service="{service}"})'
"""The query; ``pod`` is the label Prometheus' Kubernetes discovery (PodMonitor and
ServiceMonitor alike) attaches."""


def parse_by_pod(status_code: int, body: str) -> dict[str, float] | None:
    """``{pod: value}`` from a Prometheus instant-vector answer; None on any error (a value
    that is not a finite number >= 0 is left out)."""
    if status_code != 200:
        return None
    try:
        data = json.loads(body)
        result = data["data"]["result"] if data.get("status") == "success" else None
    except (ValueError, KeyError, TypeError):
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


async def running_by_pod(client: httpx.AsyncClient, base_url: str, namespace: str, service: str,
                         timeout: float = 2.0) -> dict[str, float] | None:
    """Running requests of each pod of one service, or None when Prometheus does not answer.
    Never raises (except on cancellation)."""
    promql = render_query(RUNNING_BY_POD, namespace, service)
    try:
        resp = await client.get(base_url.rstrip("/") + "/api/v1/query",
                                params={"query": promql, "timeout": f"{max(1, round(timeout * 1000))}ms"},
                                timeout=timeout)
    except (httpx.HTTPError, OSError, ValueError):
        return None
    return parse_by_pod(resp.status_code, resp.text)
