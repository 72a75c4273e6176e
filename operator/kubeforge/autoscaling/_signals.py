"""What the autoscaler reads about one service in one poll, as plain data (filled by the runtime's metrics source:
:func:`kubeforge.runtime.prometheus_http.read_signals`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["SIGNAL_NAMES", "Signals"]

#: Every signal :class:`Signals` carries, in the order ``read_signals`` asks for them.
SIGNAL_NAMES = ("waiting", "held", "running", "replicas", "kv_cache_usage", "saturated_running",
                "admission_rate", "admission_rate_recent", "running_mean", "service_seconds", "ttft", "itl", "prefill", "queue")


def _ok(x: float | None) -> bool:
    return x is not None and not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


@dataclass(frozen=True)
class Signals:
    """One service's signals at one time. ``None`` is "not available"; ``errors`` says why.

    Counts are over the whole service (every replica pod of it), rates per second, times in
    seconds, percentiles at ``percentile`` over the last ``window_seconds``.

    Attributes:
        time: Prometheus' evaluation time, unix seconds (``None`` when nothing answered).
        percentile: The latency percentile read (e.g. 90), in (0, 100).
        window_seconds: The window of the rates and histogram quantiles, s.
        waiting: ``sum(vllm:num_requests_waiting)``: requests queued in the engines.
        held: ``sum(kubeforge_activator_queue_length)``: requests the activator holds while the
            service has no ready replica (demand that no vLLM metric shows).
        running: ``sum(vllm:num_requests_running)``.
        replicas: Replica pods reporting (``count(vllm:num_requests_running)``).
        kv_cache_usage: Mean ``vllm:kv_cache_usage_perc`` over them, in [0, 1].
        saturated_running: The most requests running on a replica that also has requests
            waiting (``max`` of running ``and`` waiting > 0): a replica's concurrency limit
            (``--max-num-seqs`` or its KV cache), measured; ``None`` when no replica queues.
        admission_rate: Requests per second that got their first token
            (``rate(vllm:time_to_first_token_seconds_count)`` over the window): requests
            leaving the queue.
        admission_rate_recent: The same between the last two scrapes (``irate``): what the
            replicas admit now, read while requests queue (a burst, or new replicas catching up).
        service_seconds: Mean time a request spends running (prefill + decode), from
            ``vllm:request_inference_time_seconds`` sum / count over the window.
        running_mean: ``sum(vllm:num_requests_running)`` averaged over the window (a
            subquery): with ``admission_rate`` over the same window, Little's law gives the
            mean time in service of every request of the window, those still running included
            (the finished ones alone under-state it while a ramp fills the batch).
        ttft: ``histogram_quantile`` of ``vllm:time_to_first_token_seconds``.
        itl: ``histogram_quantile`` of ``vllm:inter_token_latency_seconds``.
        prefill: ``histogram_quantile`` of ``vllm:request_prefill_time_seconds``.
        queue: The queue-depth mode's metric (the named or custom query), requests.
        errors: ``(signal, short fixed text)`` for each signal that could not be read; never
            a copy of a response body.
        absent: The signals Prometheus answered with no series at all (a successful, empty
            answer: nothing reports them), ``"queue"`` included when the queue-depth metric was
            such an answer. Typed, so that decisions never read ``errors``' texts.
    """

    time: float | None = None
    percentile: float = 90.0
    window_seconds: float = 60.0
    waiting: float | None = None
    held: float | None = None
    running: float | None = None
    replicas: float | None = None
    kv_cache_usage: float | None = None
    saturated_running: float | None = None
    admission_rate: float | None = None
    admission_rate_recent: float | None = None
    service_seconds: float | None = None
    running_mean: float | None = None
    ttft: float | None = None
    itl: float | None = None
    prefill: float | None = None
    queue: float | None = None
    errors: tuple[tuple[str, str], ...] = field(default=())
    absent: tuple[str, ...] = field(default=())

    def error(self, name: str) -> str | None:
        """The error text of signal ``name``, or ``None``."""
        return next((e for n, e in self.errors if n == name), None)

    def value(self, name: str) -> float | None:
        """Signal ``name`` when usable (finite, >= 0), else ``None``."""
        v = getattr(self, name)
        return float(v) if _ok(v) else None

    @property
    def queued(self) -> float | None:
        """Requests waiting anywhere: in the engines plus held by the activator; ``None`` when
        neither was read (an absent activator series counts as 0 once vLLM's is there)."""
        w, h = self.value("waiting"), self.value("held")
        if w is None and h is None:
            return None
        return (w or 0.0) + (h or 0.0)
