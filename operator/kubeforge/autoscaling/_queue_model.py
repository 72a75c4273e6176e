"""The queue model of SLO mode: M/M/c waiting times (Erlang C) and the linear ITL model. Pure math.

**TTFT.** A service of ``n`` replicas, each running up to ``k`` requests at once (vLLM's
``--max-num-seqs`` or what its KV cache holds), is treated as an M/M/c queue with
``c = floor(n * k)`` servers, Poisson arrivals at rate ``lambda`` and exponential service of
mean ``S`` (the time a request runs). With offered load ``a = lambda * S`` (Erlangs), the
probability that an arrival waits is Erlang's C formula, and the wait is exponential beyond
it (Kleinrock, *Queueing Systems* vol. 1, 1975, sec. 3.5; Gross & Harris, *Fundamentals of
Queueing Theory*, sec. 2.3)::

    B(0) = 1,  B(j) = a B(j-1) / (j + a B(j-1))          (Erlang B, the stable recursion)
    C(c, a) = c B(c) / (c - a (1 - B(c)))                 for a < c
    P(W > t) = C(c, a) exp(-(c - a) t / S)
    W_q = S / (c - a) * ln(C / (1 - q))   when C > 1 - q, else 0   (the q-quantile of the wait)

A request's TTFT is its queue wait plus its prefill, so the TTFT target at percentile ``q``
leaves a wait budget of ``target - prefill_q``; :func:`replicas_for_wait` finds the fewest
replicas whose ``W_q`` fits it. The join-the-shortest-queue router in front of vLLM replicas
makes the replicas behave close to one shared queue, which is what M/M/c assumes; bursts
(arrivals burstier than Poisson) wait longer than the model says, which the measured-TTFT
feedback of SLO mode and the stabilization windows cover.

**ITL.** Decode steps take longer as the batch grows; the model is linear in the running
requests per replica ``b`` (the decode-time model ``alpha + beta * batch`` of llm-d's
workload-variant autoscaler), ``ITL_q(b) = intercept + slope * b``, fitted online from the
measured (``b``, ITL percentile) pairs by exponentially weighted least squares
(:func:`update_itl_fit`, :func:`fit_itl`). The most running requests per replica that keep
the target is ``(target - intercept) / slope``; by Little's law the mean running requests are
``lambda * S``, so the replicas needed are ``ceil(lambda * S / that)``.
"""

from __future__ import annotations

import math

__all__ = [
    "ITL_FIT_HALF_LIFE_SECONDS", "ITL_FIT_MIN_SPREAD", "ITL_FIT_MIN_WEIGHT", "erlang_c", "fit_itl",
    "itl_concurrency", "replicas_for_wait", "update_itl_fit", "wait_quantile",
]

#: Half-life of the ITL samples' weight, s: a model or hardware change is learnt within hours.
ITL_FIT_HALF_LIFE_SECONDS = 3600.0
#: Least total weight (about that many recent samples) before the fit is used.
ITL_FIT_MIN_WEIGHT = 5.0
#: Least standard deviation of running-per-replica among the samples, requests: below it the
#: slope is noise, and the fit is not used.
ITL_FIT_MIN_SPREAD = 0.5


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang C).

    Args:
        servers: ``c`` >= 1.
        offered: Offered load ``a = lambda * S`` in Erlangs, >= 0.

    Returns:
        ``C(c, a)`` in [0, 1]; 1.0 when ``a >= c`` (the queue grows without bound).
    """
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    b = 1.0
    for j in range(1, servers + 1):
        b = offered * b / (j + offered * b)
    return servers * b / (servers - offered * (1.0 - b))


def wait_quantile(servers: int, offered: float, service_seconds: float, quantile: float) -> float:
    """The ``quantile`` (0..1) of the M/M/c queue wait, s; ``inf`` when ``offered >= servers``."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return math.inf
    c = erlang_c(servers, offered)
    if c <= 1.0 - quantile:
        return 0.0
    return service_seconds / (servers - offered) * math.log(c / (1.0 - quantile))


MAX_SERVERS = 1e6
"""The most requests the model lets a service run at once: far above any real deployment (vLLM's
--max-num-seqs is 256 by default per replica), it only keeps a broken signal (a capacity of
1e300 requests per replica) from overflowing the count."""


def replicas_for_wait(arrival_rate: float, service_seconds: float, concurrency: float, wait_budget: float,
                      quantile: float, max_replicas: int) -> int | None:
    """Fewest replicas whose M/M/c wait at ``quantile`` is within ``wait_budget``.

    Args:
        arrival_rate: Requests per second, >= 0.
        service_seconds: Mean time a request runs, s, > 0.
        concurrency: Requests one replica runs at once (servers per replica), > 0.
        wait_budget: Longest acceptable wait at ``quantile``, s; <= 0 asks for no queueing
            at that quantile (``C <= 1 - quantile``).
        quantile: In (0, 1).
        max_replicas: The most replicas to consider, >= 1.

    Returns:
        The replica count in ``[1, max_replicas]``, ``0`` with no arrivals, or ``None`` when
        even ``max_replicas`` do not meet it.
    """
    if arrival_rate <= 0:
        return 0
    a = arrival_rate * service_seconds
    budget = max(0.0, wait_budget)
    b, j = 1.0, 0  # Erlang B at j servers, extended as n grows (one pass in all)
    for n in range(1, max_replicas + 1):
        c = max(1, int(math.floor(min(n * concurrency, MAX_SERVERS) + 1e-9)))  # no int(inf) on a broken signal
        while j < c:
            j += 1
            b = a * b / (j + a * b)
        if a >= c:
            continue
        erl = c * b / (c - a * (1.0 - b))
        if erl <= 1.0 - quantile:
            return n
        if budget > 0 and service_seconds / (c - a) * math.log(erl / (1.0 - quantile)) <= budget:
            return n
    return None


def update_itl_fit(sums: tuple[float, ...], last_time: float | None, now: float, running_per_replica: float,
                   itl: float) -> tuple[float, ...]:
    """Add one (running per replica, ITL percentile) sample to the decayed sums.

    Args:
        sums: ``(w, sum b, sum y, sum b*b, sum b*y)`` or ``()``.
        last_time: When ``sums`` were last updated, unix seconds (``None`` when empty).
        now: This sample's time.
        running_per_replica: ``b`` >= 0.
        itl: ``y`` > 0, s.

    Returns:
        The new sums, older samples weighted down by ``2 ** (-age / half-life)``
        (:data:`ITL_FIT_HALF_LIFE_SECONDS`).
    """
    w, sb, sy, sbb, sby = sums if len(sums) == 5 else (0.0, 0.0, 0.0, 0.0, 0.0)
    decay = 1.0 if last_time is None else 0.5 ** (max(0.0, now - last_time) / ITL_FIT_HALF_LIFE_SECONDS)
    b, y = running_per_replica, itl
    return (w * decay + 1.0, sb * decay + b, sy * decay + y, sbb * decay + b * b, sby * decay + b * y)


def fit_itl(sums: tuple[float, ...]) -> tuple[float, float] | None:
    """``(intercept, slope)`` of the weighted least-squares line through the samples, or
    ``None`` with too little weight (:data:`ITL_FIT_MIN_WEIGHT`) or spread
    (:data:`ITL_FIT_MIN_SPREAD`)."""
    if len(sums) != 5 or sums[0] < ITL_FIT_MIN_WEIGHT:
        return None
    w, sb, sy, sbb, sby = sums
    mb, my = sb / w, sy / w
    var = sbb / w - mb * mb
    if var < ITL_FIT_MIN_SPREAD ** 2:
        return None
    slope = (sby / w - mb * my) / var
    return my - slope * mb, slope


def itl_concurrency(target: float, fit: tuple[float, float] | None, running_per_replica: float | None,
                    measured: float | None) -> float | None:
    """Most running requests per replica that keep the ITL percentile at ``target``, or ``None`` (no bound).

    With a fit of positive slope: ``(target - intercept) / slope`` (at least 0). Without one,
    when the measured ITL is above the target: ``b * target / measured`` (ITL taken as
    proportional to the batch, which asks for at least the reduction needed). Otherwise no
    bound is known.
    """
    if fit is not None and fit[1] > 0:
        return max(0.0, (target - fit[0]) / fit[1])
    if measured is not None and running_per_replica and measured > target:
        return running_per_replica * target / measured
    return None
