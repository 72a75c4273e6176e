"""The model-server simulator's pure latency model: how fast a replica serves one request, and
the counters it keeps, no clock, no I/O. The replicas and the service that routes to them are in
:mod:`._replicas`.

Per request, on one replica:

* **queue wait** = admission - arrival (vLLM ``request_queue_time``);
* **prefill** = ``base_seconds + prompt tokens / prefill_tokens_per_second`` from admission
  to the first token (vLLM ``request_prefill_time``); fixed per request: prefills on one
  replica do not slow each other down here (a simplification: with chunked prefill they share
  the step's token budget);
* **TTFT** = queue wait + prefill (vLLM ``time_to_first_token``);
* **decode**: the remaining output tokens, one per engine step, all running requests of the
  replica stepping together. The step time (the inter-token latency) grows with the batch::

      ITL(b) = seconds_per_output_token * (1 + itl_growth * (b - 1))

  with ``b`` the replica's running requests at that moment. Decode time per step linear in
  the batch size is the model llm-d's workload-variant autoscaler fits for its queueing
  analysis (decode time = alpha + beta * batch size, "inferno" optimizer) and the shape
  NVIDIA Dynamo's profiler measures (ITL against active KV load). The batch changes as
  requests come and go, so decode progress is tracked exactly on a per-replica *token clock*
  ``v`` advancing at ``1 / ITL(b)`` tokens per second: a request that enters decode at
  ``v0`` with ``n`` tokens to go finishes when ``v`` reaches ``v0 + n`` (processor sharing
  with a load-dependent rate). Its ITL is its decode time over its decode tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

__all__ = [
    "ITL_BUCKETS", "REQUEST_LATENCY_BUCKETS", "TTFT_BUCKETS", "Done", "Request", "ServiceModel", "Stats", "itl_seconds",
    "make_request", "prefill_seconds", "scaled_bounds", "service_seconds",
]

#: vLLM's ``vllm:time_to_first_token_seconds`` bucket upper bounds (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
#: vLLM's ``vllm:inter_token_latency_seconds`` bucket upper bounds.
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
#: vLLM's request-latency buckets (``e2e_request_latency``, ``request_queue_time``,
#: ``request_prefill_time``, ``request_inference_time``...).
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


@dataclass(frozen=True)
class ServiceModel:
    """How fast one replica serves.

    Attributes:
        slots: Most requests running at once (vLLM ``--max-num-seqs``), >= 0; 0 serves nothing
            (requests only queue: the cluster tests use it to hold a queue still).
        base_seconds: Fixed prefill cost per request (scheduling, the first forward pass), s.
        prefill_tokens_per_second: Prompt tokens one request's prefill processes per second.
        seconds_per_output_token: Inter-token latency with one request running, s.
        itl_growth: Fractional ITL increase per extra running request (``ITL(b) =
            seconds_per_output_token * (1 + itl_growth * (b - 1))``), >= 0; 0 keeps ITL flat.
        kv_cache_tokens: KV-cache capacity in tokens; 0 for unlimited (then
            ``kv_cache_usage_perc`` reports running / slots).
        time_scale: Wall seconds per modelled second, > 0: 1 for a replica at its own speed,
            ``1 / factor`` for one time-compressed by ``factor`` (:func:`compressed`). The latency
            histograms' bucket bounds are vLLM's times this (:func:`scaled_bounds`), so that a
            compressed replica's latencies fall in the buckets the uncompressed one's would: with
            vLLM's own bounds a 6x-compressed prefill of 0.2 s of trace time (0.03 s) lands in the
            first ``request_prefill_time`` bucket, ``le=0.3``, and ``histogram_quantile`` reads its
            p99 as 0.297 s, 1.8 s of trace time (the live KEDA bench's SLO mode).
    """

    slots: int = 4
    base_seconds: float = 0.5
    prefill_tokens_per_second: float = 2000.0
    seconds_per_output_token: float = 0.05
    itl_growth: float = 0.0
    kv_cache_tokens: int = 0
    time_scale: float = 1.0


@functools.lru_cache(maxsize=64)
def scaled_bounds(bounds: tuple[float, ...], scale: float) -> tuple[float, ...]:
    """Histogram bucket upper bounds ``bounds`` times ``scale`` (> 0), to 12 significant digits
    (so that 0.3 / 6 is exported as 0.05); ``bounds`` itself when ``scale`` is 1. Kept per
    ``(bounds, scale)``: every observation of a compressed replica asks for them."""
    if scale == 1.0:
        return bounds
    return tuple(float(f"{b * scale:.12g}") for b in bounds)


def itl_seconds(model: ServiceModel, running: int) -> float:
    """Inter-token latency (s) with ``running`` requests in the batch (>= 1 counted)."""
    return model.seconds_per_output_token * (1.0 + model.itl_growth * (max(1, running) - 1))


def prefill_seconds(model: ServiceModel, context_tokens: int) -> float:
    """Seconds from admission to the first token for a prompt of ``context_tokens``."""
    return model.base_seconds + context_tokens / model.prefill_tokens_per_second


def service_seconds(model: ServiceModel, context_tokens: int, generated_tokens: int) -> float:
    """Seconds one request runs alone on a replica: prefill + decode at batch 1."""
    return prefill_seconds(model, context_tokens) + max(0, generated_tokens - 1) * itl_seconds(model, 1)


@dataclass(frozen=True)
class Request:
    """One request.

    Attributes:
        arrival: When it arrives, simulated seconds.
        prefill: Seconds from admission to its first token.
        tokens: Output tokens after the first one (decode steps), >= 0.
        context: Prompt tokens (its KV-cache reservation is ``context + tokens``).
        id: Caller's identifier (the live simulator answers HTTP requests by it).
    """

    arrival: float
    prefill: float
    tokens: int = 0
    context: int = 0
    id: int = 0


def make_request(model: ServiceModel, arrival: float, context_tokens: int, generated_tokens: int,
                 rid: int = 0) -> Request:
    """A request for a prompt of ``context_tokens`` that generates ``generated_tokens`` (>= 1 counted)."""
    return Request(arrival, prefill_seconds(model, context_tokens), max(0, generated_tokens - 1),
                   context_tokens, rid)


@dataclass(frozen=True)
class Done:
    """A request that left a replica: finished, or aborted when its replica disappeared.

    Times in simulated seconds; ``start``/``first_token`` are ``None`` when it never got there.
    ``itl`` is the mean inter-token latency of its decode (``None`` with no decode tokens).
    """

    request: Request
    replica: str
    start: float | None
    first_token: float | None
    finish: float
    itl: float | None = None
    aborted: bool = False

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.request.arrival

    @property
    def queue_wait(self) -> float | None:
        return None if self.start is None else self.start - self.request.arrival


def _bucket_counts(n: int) -> list[int]:
    return [0] * (n + 1)  # the last one is +Inf


def _observe(counts: list[int], bounds: tuple[float, ...], value: float, weight: int = 1) -> None:
    for i, b in enumerate(bounds):
        if value <= b:
            counts[i] += weight
            return
    counts[-1] += weight


@dataclass
class Stats:
    """Cumulative counters of one replica or service, as vLLM's counters and histograms hold them.

    Histograms keep per-bucket (not cumulative) counts plus sum and count; ``itl`` counts one
    observation per decode token (vLLM observes every inter-token interval). ``scale`` is the
    replica model's :attr:`ServiceModel.time_scale`: each histogram's bounds are vLLM's times it
    (:meth:`bounds`); values and sums are in the simulator's seconds as always.
    """

    ttft: list = field(default_factory=lambda: _bucket_counts(len(TTFT_BUCKETS)))
    ttft_sum: float = 0.0
    itl: list = field(default_factory=lambda: _bucket_counts(len(ITL_BUCKETS)))
    itl_sum: float = 0.0
    prefill: list = field(default_factory=lambda: _bucket_counts(len(REQUEST_LATENCY_BUCKETS)))
    prefill_sum: float = 0.0
    inference: list = field(default_factory=lambda: _bucket_counts(len(REQUEST_LATENCY_BUCKETS)))
    inference_sum: float = 0.0
    success: int = 0
    aborted: int = 0
    scale: float = 1.0

    def bounds(self, attr: str) -> tuple[float, ...]:
        """The bucket upper bounds of histogram ``attr`` (``ttft``, ``itl``, ``prefill`` or
        ``inference``): vLLM's times :attr:`scale`."""
        base = {"ttft": TTFT_BUCKETS, "itl": ITL_BUCKETS}.get(attr, REQUEST_LATENCY_BUCKETS)
        return scaled_bounds(base, self.scale)

    def first_token(self, ttft: float, prefill: float) -> None:
        _observe(self.ttft, self.bounds("ttft"), ttft)
        self.ttft_sum += ttft
        _observe(self.prefill, self.bounds("prefill"), prefill)
        self.prefill_sum += prefill

    def finished(self, done: Done) -> None:
        if done.itl is not None and done.request.tokens:
            _observe(self.itl, self.bounds("itl"), done.itl, done.request.tokens)
            self.itl_sum += done.itl * done.request.tokens
        if done.start is not None:
            _observe(self.inference, self.bounds("inference"), done.finish - done.start)
            self.inference_sum += done.finish - done.start
        self.success += 1
