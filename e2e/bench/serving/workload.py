"""The serving placement benchmark's workload, pure: services whose replica counts follow the
Azure trace, and training gangs arriving and leaving beside them.

Replica counts (per service, per step): the trace is cut into windows of ``window_s`` trace
seconds; a service reads its own slice of the trace (its ``offset_s``, taken circularly, so
services do not peak together) and, for window ``k``, needs

    replicas_k = clamp(ceil(demand x rate_k x S / C), 1, max_replicas)

with ``rate_k`` the window's arrivals per second, ``S`` the mean service time of one request
(prefill + decode alone) and ``C`` the requests one replica runs at once (its KV cache over the
mean prompt + output tokens), both from the autoscaling bench's replica model
(:data:`e2e.bench.autoscaling.arrivals.MODEL`) on the same trace: Little's law, ``L = lambda x W``, over
``C`` slots. ``demand`` multiplies the trace's rate (one service of the trace is small for a
64-node fleet). Windows are replayed ``step_s`` wall seconds apart: the time compression is
``window_s / step_s``.

Trace: Azure LLM inference trace 2023 (code), Azure ``AzurePublicDataset``, CC BY 4.0;
Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["Gang", "Service", "Workload", "make_gangs", "make_services", "replicas_per_step",
           "service_time_and_slots"]


@dataclass(frozen=True)
class Service:
    """One InferenceService of the run.

    Attributes:
        name: Its name (``s<gpus>-<i>`` single-node, ``llm-<i>`` tensor x pipeline).
        gpus_per_pod: GPUs each pod of a replica holds.
        pods: Pods per replica (1: single-node; 2: tensor 8 x pipeline 2 on 8-GPU nodes).
        max_replicas: The most replicas the trace may ask for.
        demand: Multiplier of the trace's arrival rate.
        offset_s: Where in the trace this service's slice starts, trace seconds.
    """

    name: str
    gpus_per_pod: int
    pods: int
    max_replicas: int
    demand: float
    offset_s: float

    @property
    def multi(self) -> bool:
        """Whether a replica is a group of several pods."""
        return self.pods > 1


@dataclass(frozen=True)
class Gang:
    """One training gang: ``nodes`` pods of 8 GPUs, created at step ``arrive``, deleted at
    step ``leave`` (None: still there at the end)."""

    name: str
    nodes: int
    arrive: int
    leave: int | None
    gpus_per_pod: int = 8


@dataclass(frozen=True)
class Workload:
    """Everything a phase replays: per step, each service's replicas; the gangs."""

    services: list[Service]
    replicas: dict[str, list[int]]  # service -> replicas at step k
    gangs: list[Gang]
    steps: int
    service_s: float
    slots: float

    def asked_gpus(self, step: int) -> int:
        """GPUs the run asks for at ``step`` (replicas of every service and the gangs present)."""
        svc = sum(self.replicas[s.name][step] * s.pods * s.gpus_per_pod for s in self.services)
        return svc + sum(g.nodes * g.gpus_per_pod for g in self.gangs if g.arrive <= step and (g.leave is None or step < g.leave))


def service_time_and_slots(trace: list[tuple[float, int, int]]) -> tuple[float, float]:
    """``(S, C)`` on ``trace``: mean of ``prefill + (generated - 1) x seconds_per_output_token``
    (decode alone, no batching slowdown), and ``kv_cache_tokens / mean(context + generated)``
    capped by the model's slots."""
    from e2e.bench.autoscaling.arrivals import MODEL
    from kubeforge.sim.modelserver import make_request

    if not trace:
        raise ValueError("the trace has no rows")
    total = 0.0
    kv = 0
    for t, c, g in trace:
        r = make_request(MODEL, t, c, g)
        total += r.prefill + r.tokens * MODEL.seconds_per_output_token
        kv += c + g
    s = total / len(trace)
    slots = min(float(MODEL.slots), MODEL.kv_cache_tokens / (kv / len(trace))) if MODEL.kv_cache_tokens else float(MODEL.slots)
    return s, slots


def replicas_per_step(times: list[float], svc: Service, steps: int, window_s: float, start_s: float,
                      service_s: float, slots: float) -> list[int]:
    """The replica count of ``svc`` for each of ``steps`` windows (formula in the module docstring).

    Args:
        times: The trace's arrival times, seconds since its first request, sorted.
        svc: The service (its ``offset_s``, ``demand``, ``max_replicas``).
        steps: Windows to read.
        window_s: Trace seconds per window.
        start_s: Trace second of the run's first window (before the service's offset).
        service_s: ``S``, seconds.
        slots: ``C``, requests.

    Returns:
        ``steps`` integers in ``[1, max_replicas]``.
    """
    import bisect

    span = times[-1] if times else 0.0
    period = span + (span / (len(times) - 1) if len(times) > 1 else 1.0)
    out = []
    for k in range(steps):
        a = (start_s + svc.offset_s + k * window_s) % period
        b = a + window_s
        n = bisect.bisect_left(times, min(b, period)) - bisect.bisect_left(times, a)
        if b > period:  # the window wraps around the trace's end
            n += bisect.bisect_left(times, b - period)
        rate = n / window_s
        out.append(max(1, min(svc.max_replicas, math.ceil(svc.demand * rate * service_s / slots - 1e-9))))
    return out


def make_services(single_gpus: list[int], single_max: int, single_demand: float, large: int, large_max: int,
                  large_demand: float, trace_span: float) -> list[Service]:
    """The run's services: one single-node service per entry of ``single_gpus`` and ``large``
    tensor 8 x pipeline 2 services; offsets spread evenly over the trace."""
    out: list[Service] = []
    n = len(single_gpus) + large
    step = trace_span / max(1, n)
    for i, g in enumerate(single_gpus):
        out.append(Service(f"s{g}-{i}", g, 1, single_max, single_demand, i * step))
    for j in range(large):
        out.append(Service(f"llm-{j}", 8, 2, large_max, large_demand, (len(single_gpus) + j) * step))
    return out


def make_gangs(seed: int, steps: int, initial: int, arrival_p: float, sizes: tuple[int, int],
               lifetime: tuple[int, int]) -> list[Gang]:
    """Training gangs: ``initial`` at step 0, then one more at each later step with probability
    ``arrival_p``; ``sizes`` and ``lifetime`` (in steps) drawn uniformly from their inclusive
    ranges with ``random.Random(seed)``; a gang whose lifetime runs past the last step stays."""
    rng = random.Random(seed)
    out: list[Gang] = []
    for k in range(steps):
        n = initial if k == 0 else int(rng.random() < arrival_p)
        for _ in range(n):
            size = rng.randint(*sizes)
            leave = k + rng.randint(*lifetime)
            out.append(Gang(f"train-{len(out):02d}-{size}x8", size, k, leave if leave < steps else None))
    return out
