"""Prometheus text exposition of the simulator's replicas, as vLLM (and a ServiceMonitor) label them."""

from __future__ import annotations

from typing import Iterable

from ._latency import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, Stats
from ._replicas import Service

__all__ = ["ABORTED_METRIC", "render_services"]

#: Counter of requests aborted because their replica disappeared (per service).
ABORTED_METRIC = "kubeforge_sim_aborted_requests_total"

_GAUGES = (
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)
_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS, "ttft"),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS, "itl"),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
     REQUEST_LATENCY_BUCKETS, "prefill"),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
     REQUEST_LATENCY_BUCKETS, "inference"),
)


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in pairs.items()) + "}"


def _num(x: float) -> str:
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


def _histogram(lines: list[str], name: str, labels: dict[str, str], bounds: tuple[float, ...],
               counts: list[int], total: float) -> None:
    acc = 0
    for b, c in zip(bounds, counts):
        acc += c
        lines.append(f"{name}_bucket{_labels({**labels, 'le': _num(b)})} {acc}")
    acc += counts[-1]
    lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {acc}")
    lines.append(f"{name}_sum{_labels(labels)} {_num(total)}")
    lines.append(f"{name}_count{_labels(labels)} {acc}")


def render_services(services: Iterable[tuple[str, str, Service]]) -> str:
    """The ``/metrics`` text for ``(namespace, name, service)`` triples.

    Per replica (labels ``namespace``, ``service``, ``pod``): the vLLM gauges
    ``num_requests_waiting``, ``num_requests_running``, ``kv_cache_usage_perc``, the counter
    ``request_success_total`` and the histograms ``time_to_first_token_seconds``,
    ``inter_token_latency_seconds``, ``request_prefill_time_seconds`` and
    ``request_inference_time_seconds`` with vLLM's bucket boundaries (times the model's
    ``time_scale``: a time-compressed replica's are compressed alike). A replica's series go
    with it, as a vLLM pod's do.

    Per service (labels ``namespace``, ``service``, no ``pod``): ``vllm:num_requests_waiting``
    counting the requests *held* at the service while no replica is routable (so that a
    ``sum(...)`` over the service counts every waiting request once, and a service at zero
    replicas still shows its queue), and :data:`ABORTED_METRIC`.
    """
    rows = sorted(services, key=lambda s: (s[0], s[1]))
    lines: list[str] = []
    for metric, help_text in _GAUGES:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for ns, name, svc in rows:
            base = {"namespace": ns, "service": name}
            if metric == "vllm:num_requests_waiting":
                lines.append(f"{metric}{_labels(base)} {len(svc.held)}")
            for pod, rep in sorted(svc.replicas.items()):
                value = {"vllm:num_requests_waiting": len(rep.waiting), "vllm:num_requests_running": rep.running,
                         "vllm:kv_cache_usage_perc": rep.kv_usage(svc.model)}[metric]
                lines.append(f"{metric}{_labels({**base, 'pod': pod})} {_num(value)}")
    lines += ["# HELP vllm:request_success_total Count of successfully processed requests.",
              "# TYPE vllm:request_success_total counter"]
    for ns, name, svc in rows:
        for pod, rep in sorted(svc.replicas.items()):
            lines.append(f"vllm:request_success_total{_labels({'namespace': ns, 'service': name, 'pod': pod})} "
                         f"{rep.stats.success}")
    for metric, help_text, _, attr in _HISTOGRAMS:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} histogram"]
        for ns, name, svc in rows:
            for pod, rep in sorted(svc.replicas.items()):
                st: Stats = rep.stats
                _histogram(lines, metric, {"namespace": ns, "service": name, "pod": pod}, st.bounds(attr),
                           getattr(st, attr), getattr(st, f"{attr}_sum"))
    lines += [f"# HELP {ABORTED_METRIC} Requests aborted because their replica disappeared while holding them.",
              f"# TYPE {ABORTED_METRIC} counter"]
    for ns, name, svc in rows:
        lines.append(f"{ABORTED_METRIC}{_labels({'namespace': ns, 'service': name})} {svc.aborted}")
    return "\n".join(lines) + "\n"
