"""Arrival streams of the autoscaling benchmark: the Azure trace, a day built from it, a cold ramp.

Every stream is a sorted list of :class:`kubeforge.sim.modelserver.Request`, deterministic for
its seed, sized for the benchmark's replica model (:data:`MODEL`).

Trace: Azure LLM inference trace 2023 (code), Azure ``AzurePublicDataset``, CC BY 4.0;
Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024.
"""

from __future__ import annotations

import bisect
import math
import random
from pathlib import Path

from kubeforge.sim.modelserver import Request, ServiceModel, make_request

__all__ = ["DAY_S", "MODEL", "NIGHT_FRACTION", "PEAK_HOUR", "cold_ramp", "day_arrivals", "diurnal_fraction",
           "rate_series", "step_stream", "superpose", "trace_requests"]

#: The replica every autoscaler scales, assumed (not measured): a large model on one
#: tensor-parallel group. Prompts prefill at 8,000 tokens/s after 50 ms; decoding takes 50 ms
#: per token alone and 5% more per extra running request (the linear ITL model); the KV cache
#: holds 32,000 tokens (prompt + output reserved at admission), which binds before
#: ``--max-num-seqs`` 64, as with vLLM's defaults: about 15 requests of the trace's mean size
#: run at once. One replica serves about 6 requests/s of the trace; its bursts (up to 50
#: requests/s over 5 s) need about 9.
MODEL = ServiceModel(slots=64, base_seconds=0.05, prefill_tokens_per_second=8000.0,
                     seconds_per_output_token=0.05, itl_growth=0.05, kv_cache_tokens=32000)
DAY_S = 24 * 3600.0
#: The diurnal curve's defaults: rate at the night trough as a fraction of the peak, and the
#: hour of the peak; the trough is 12 h away.
NIGHT_FRACTION = 0.15
PEAK_HOUR = 15.0


def trace_requests(trace: list[tuple[float, int, int]], model: ServiceModel = MODEL) -> list[Request]:
    """The trace's rows as requests at trace speed (arrival = seconds since its first request)."""
    return [make_request(model, t, c, g, i + 1) for i, (t, c, g) in enumerate(trace)]


def diurnal_fraction(t: float, night_fraction: float = NIGHT_FRACTION, peak_hour: float = PEAK_HOUR) -> float:
    """Arrival rate at ``t`` as a fraction of the day's peak rate: one smooth day/night cycle.

    ``f(t) = n + (1 - n) * (1 + cos(2 pi (h - peak_hour) / 24)) / 2`` with ``h`` the hour of
    the day at ``t`` and ``n = night_fraction``: a single 24 h cosine harmonic, ``1.0`` at
    ``peak_hour`` and ``n`` twelve hours away (03:00 with the defaults). The shape is the
    first-order (one harmonic) fit commonly used for diurnal load (e.g. Shahrad et al.,
    "Serverless in the Wild", USENIX ATC 2020, on Azure Functions invocations); the 15%
    trough and 15:00 peak are this benchmark's assumptions, printed with its output.

    Args:
        t: Seconds since the simulated day's midnight (any real; taken modulo 24 h).
        night_fraction: The trough as a fraction of the peak, in ``[0, 1]``.
        peak_hour: Hour of the peak, ``[0, 24)``.

    Returns:
        A fraction in ``[night_fraction, 1]``.
    """
    h = (t / 3600.0) % 24.0
    return night_fraction + (1.0 - night_fraction) * (1.0 + math.cos(2.0 * math.pi * (h - peak_hour) / 24.0)) / 2.0


def day_arrivals(trace: list[tuple[float, int, int]], model: ServiceModel = MODEL, seed: int = 1,
                 seconds: float = DAY_S, night_fraction: float = NIGHT_FRACTION,
                 peak_hour: float = PEAK_HOUR) -> list[Request]:
    """A day-long arrival stream from a short trace: tiled, shifted, then thinned by time of day.

    1. **Tile**: the trace (``T`` seconds long, its period taken as its span plus one mean
       inter-arrival gap) is repeated back to back until ``seconds`` are covered, each tile
       circularly shifted by a random offset in ``[0, T)`` (from ``seed``), so that the
       bursts do not fall at the same minute of every hour.
    2. **Thin**: each request at time ``t`` is kept with probability
       :func:`diurnal_fraction` ``(t)`` (Lewis & Shedler, "Simulation of nonhomogeneous
       Poisson processes by thinning", 1979, applied to the trace's own arrival process).
       The trace's rate is the day's peak rate; its bursts keep their shape, scaled down at night.

    Args:
        trace: ``(seconds since first request, context tokens, generated tokens)`` rows, sorted.
        model: Sizes each request.
        seed: Seeds the tile shifts and the thinning.
        seconds: Length of the stream, s.
        night_fraction: See :func:`diurnal_fraction`.
        peak_hour: See :func:`diurnal_fraction`.

    Returns:
        Requests sorted by arrival (seconds since the simulated midnight).
    """
    if not trace:
        return []
    span = trace[-1][0]
    period = span + (span / (len(trace) - 1) if len(trace) > 1 else 1.0)
    rng = random.Random(seed)
    rows: list[tuple[float, int, int]] = []
    base = 0.0
    while base < seconds:
        shift = rng.uniform(0.0, period)
        for t, c, g in trace:
            at = base + (t - shift) % period
            if at < seconds and rng.random() < diurnal_fraction(at, night_fraction, peak_hour):
                rows.append((at, c, g))
        base += period
    rows.sort()
    return [make_request(model, t, c, g, i + 1) for i, (t, c, g) in enumerate(rows)]


def superpose(base: list[Request], copies: int, seed: int, period: float,
              start: float = 0.0, end: float = math.inf) -> list[Request]:
    """More load of the same shape: ``base`` plus ``copies`` circularly shifted copies of it,
    added only in ``[start, end)`` (ids renumbered)."""
    rng = random.Random(seed)
    out = list(base)
    for _ in range(copies):
        shift = rng.uniform(0.0, period)
        for r in base:
            at = (r.arrival - shift) % period
            if start <= at < end:
                out.append(Request(at, r.prefill, r.tokens, r.context))
    out.sort(key=lambda r: r.arrival)
    return [Request(r.arrival, r.prefill, r.tokens, r.context, i + 1) for i, r in enumerate(out)]


def cold_ramp(trace: list[tuple[float, int, int]], rate: float, seconds: float, model: ServiceModel = MODEL,
              seed: int = 1, start: float = 10.0) -> list[Request]:
    """A steady Poisson stream of ``rate`` requests/s from ``start`` for ``seconds``, each
    request's prompt and output sizes drawn from the trace's rows (so the mix is the trace's,
    the burstiness Poisson's)."""
    rng = random.Random(seed)
    out, t, i = [], start, 0
    while True:
        t += rng.expovariate(rate)
        if t >= start + seconds:
            return out
        _, c, g = trace[rng.randrange(len(trace))]
        i += 1
        out.append(make_request(model, t, c, g, i))


def step_stream(trace: list[tuple[float, int, int]], base: float, rate: float, step_at: float, seconds: float,
                tail: float, model: ServiceModel = MODEL, seed: int = 1) -> list[Request]:
    """A steady Poisson stream of ``base`` requests/s from time 0 that steps up to ``rate`` for
    ``seconds`` from ``step_at``, then back to ``base`` for ``tail`` s; sizes drawn from the
    trace (:func:`cold_ramp`'s). The sum of two Poisson streams is Poisson at the summed rate,
    so the step is ``base`` over the whole run plus ``rate - base`` during the step."""
    whole = cold_ramp(trace, base, step_at + seconds + tail, model, seed, start=0.0) if base > 0 else []
    extra = cold_ramp(trace, rate - base, seconds, model, seed + 1, start=step_at) if rate > base else []
    out = sorted(whole + extra, key=lambda r: r.arrival)
    return [Request(r.arrival, r.prefill, r.tokens, r.context, i + 1) for i, r in enumerate(out)]


def rate_series(arrivals: list[Request], seconds: float, shift: float, step: float = 15.0,
                window: float = 60.0) -> tuple[tuple[float, float], ...]:
    """The arrival rate over ``window`` s every ``step`` s of ``[step, seconds)``, stamped ``t +
    shift``: what Prometheus would hold of a day served well (its admission rate is then its
    arrival rate), e.g. yesterday's with ``shift = -DAY_S`` for a seasonal forecast."""
    times = [r.arrival for r in arrivals]
    out, k = [], 1
    while k * step < seconds:
        t = k * step
        n = bisect.bisect_right(times, t) - bisect.bisect_right(times, t - window)
        out.append((t + shift, n / window))
        k += 1
    return tuple(out)


def load_rows(path: Path) -> list[tuple[float, int, int]]:
    """The trace file's rows (see :func:`kubeforge.sim.modelserver.load_trace`)."""
    from kubeforge.sim.modelserver import load_trace

    return load_trace(path)
