"""The causal reference: the cheapest policy that knows the past exactly and nothing ahead.

The oracle (:mod:`~e2e.bench.autoscaling.oracle`) sees every arrival ahead; an autoscaler sees
none. Between them, this row asks what knowing the **past** perfectly buys when a replica takes
one start to be Ready: at every minute boundary ``m`` it asks for

    ``a_m = clamp(max(F, max(need_j for j in [m - W, m)) + H), minReplicas, maxReplicas)``

replicas (at least a floor ``F``), ``need_j`` being minute ``j``'s need as the oracle measures it
(:meth:`~e2e.bench.autoscaling.oracle.MissCurves.need`: the fewest replicas at which the
minute's own arrivals, simulated in hindsight, miss no more than at ``maxReplicas``). Only
minutes that are over are read, so the policy is causal; ``need_j`` is exact, what no real
autoscaler measures (it reads queues and latencies, not the count a minute needed), so this is
a generous causal policy. ``W`` (minutes of memory: how long a burst's count is held), ``H``
(replicas of headroom, negative to spend the miss budget) and ``F`` (a floor: with a low ``H``
the family holds a static count, so its best is never worse than the static row's) are swept
(:func:`causal_reference`) and the cheapest replay that reaches the goal is the row's figure.

It is the best of **this family**, not a proof that no causal policy does better (one could, for
instance, size from the past day's need at the same hour, see the README). What it shows: how
much of the oracle's saving is foresight of bursts that rise within one start, which nothing that
reads only the past can have, and so how far the 1.2x-the-oracle target is from any causal
policy on the same arrivals.

Between the replays, :func:`plan` estimates each ``(W, H)`` from the miss curves the oracle
already computed (the count Ready in minute ``i`` taken as the least asked for over the start
before it; curve entries the oracle did not simulate count as all-miss), which guesses the
``H`` each ``W`` needs; the replays decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from e2e.bench.autoscaling.oracle import MissCurves
from e2e.bench.autoscaling.result import Result

__all__ = ["WINDOWS", "CausalNeed", "CausalResult", "asked_counts", "causal_reference", "past_need", "plan"]

#: Minutes of memory swept (``W``): from one start (5 min at the default 300 s) to two hours.
WINDOWS = (5, 10, 15, 20, 30, 45, 60, 90, 120)
#: Headroom in replicas (``H``) the sweep may go down to (below 0 it spends the miss budget).
LEAST_HEADROOM = -3


def past_need(need: list[int], window: int) -> list[int | None]:
    """Per minute ``m``, the most ``need_j`` over the ``window`` minutes before it (``None`` at
    minute 0, which has no past).

    Raises:
        ValueError: ``window`` < 1.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1 minute, got {window!r}")
    return [max(need[max(0, m - window):m]) if m else None for m in range(len(need))]


def asked_counts(need: list[int], window: int, headroom: int, lo: int, hi: int, floor: int = 0,
                 past: list[int | None] | None = None) -> list[int]:
    """Replicas asked for at each minute boundary ``m``: the most ``need_j`` over the ``window``
    minutes before ``m`` (the minutes that are over), plus ``headroom``, at least ``floor``,
    within ``[lo, hi]``.

    Args:
        need: Per minute, the replicas its arrivals needed (``MissCurves.need``).
        window: Minutes of memory ``W``, >= 1.
        headroom: Replicas added ``H`` (may be negative).
        lo: ``minReplicas``.
        hi: ``maxReplicas``.
        floor: Replicas held whatever the past (``F``; a static count is ``F`` with a low ``H``).
        past: :func:`past_need` of ``need`` and ``window``, when already computed.

    Returns:
        ``a_m`` for ``m`` in ``0 .. len(need) - 1``; minute 0 has no past and asks for
        ``max(lo, floor)`` (the replay's warm start covers it).

    Raises:
        ValueError: ``window`` < 1.
    """
    past = past_need(need, window) if past is None else past
    return [min(hi, max(lo, floor, lo if p is None else p + headroom)) for p in past]


def plan(curves: list[list[int]], asked: list[int], lo: int, lag: int, interval: float) -> tuple[int, float]:
    """``(misses, replica-seconds)`` a schedule of asks is estimated at from the miss curves.

    Args:
        curves: Per minute, misses at ``lo``, ``lo + 1``, ... replicas (``MissCurves.curve``).
        asked: Replicas asked for at each minute boundary (:func:`asked_counts`).
        lo: The count of each curve's first entry.
        lag: Minutes a start takes, rounded up: minute ``i`` is served by what was asked for at
            ``i - lag`` and kept since (the least ask over ``[i - lag, i]``); before minute
            ``lag``, the warm start's replicas are taken as enough.
        interval: Minute length, s.

    Returns:
        Planned misses, and the replica-seconds paid (every replica asked for is paid from the
        ask, as in the replay).
    """
    misses, paid = 0, 0.0
    for i, row in enumerate(curves):
        paid += asked[i] * interval
        if i < lag:
            continue
        ready = min(asked[i - lag:i + 1])
        misses += row[min(len(row) - 1, max(0, ready - lo))]
    return misses, paid


class CausalNeed:
    """The causal reference as a scaler: asks for ``asked[m]`` from minute boundary ``m`` on.

    Args:
        asked: :func:`asked_counts`'s list.
        window: ``W``, minutes (printed).
        headroom: ``H``, replicas (printed).
        floor: ``F``, replicas (printed when above 1).
        interval: Minute length, s.
    """

    drain, name = True, "causal (past need, exact; nothing ahead)"

    def __init__(self, asked: list[int], window: int, headroom: int, floor: int = 0, interval: float = 60.0):
        self.asked, self.interval = asked, interval
        self.knob = f"max need of the last {window} min {headroom:+d}" + (f", >= {floor}" if floor > 1 else "")

    def tick(self, now: float, current: int, view) -> int | None:
        """The ask of the minute ``now`` is in (at least 1), or None when unchanged."""
        m = min(len(self.asked) - 1, int(now // self.interval))
        want = max(1, self.asked[m]) if m >= 1 else None
        return None if want is None or want == current else want


@dataclass
class CausalResult:
    """What the causal sweep found.

    Attributes:
        best: The cheapest replay that reached the goal, or None.
        setting: Its ``(W minutes, H replicas, F replicas)``, or None.
        tried: Replays run.
    """

    best: Result | None
    setting: tuple[int, int, int] | None
    tried: int


def _cheapest_plans(need: list[int], table: list[list[int]], lo: int, hi: int, lag: int, interval: float,
                    budget: int, windows: tuple[int, ...]) -> list[tuple[float, int, int, int]]:
    """Per ``(W, F)``, the least ``H`` whose planned misses fit ``budget`` (the cost grows with
    ``H``): ``(planned replica-seconds, W, H, F)``, cheapest first."""
    out = []
    for w in windows:
        past = past_need(need, w)
        for f in range(lo, max(need) + 1):
            for h in range(LEAST_HEADROOM, hi - lo + 1):
                misses, paid = plan(table, asked_counts(need, w, h, lo, hi, f, past), lo, lag, interval)
                if misses <= budget:
                    out.append((paid, w, h, f))
                    break
    return sorted(out)


def causal_reference(mc: MissCurves, run: Callable[[CausalNeed], Result], goal: float, ttft: float, start: float,
                     requests: int, windows: tuple[int, ...] = WINDOWS, depth: int = 4,
                     candidates: int = 5) -> CausalResult:
    """The cheapest ``(W, H, F)`` of the causal family whose replay reaches ``goal``.

    :func:`plan` ranks every ``(W, F)`` at the least ``H`` it estimates within the miss budget
    (:func:`_cheapest_plans`); the ``candidates`` cheapest distinct ones are replayed, ``H``
    walking down while the replay reaches the goal, or up until it does (the static count's
    walk). The estimate is close, not exact (curve entries the oracle did not simulate count as
    all-miss; the lead-in before a change is not modelled), so the replays decide.

    Args:
        mc: The run's miss curves (the oracle's, so their simulations are shared).
        run: Replays one :class:`CausalNeed` on the run's arrivals.
        goal: Attainment to reach, in (0, 1).
        ttft: The TTFT target, s.
        start: The longest start, s (the ``lag`` of :func:`plan`).
        requests: The run's requests (the miss budget is ``(1 - goal)`` of them).
        windows: The ``W`` values, minutes.
        depth: Levels below each minute's need whose misses the curves simulate.
        candidates: ``(W, F)`` pairs replayed.
    """
    n = mc.n_intervals
    need = [mc.need(i) for i in range(n)]
    table = [mc.curve(i, depth) for i in range(n)]
    budget = math.floor((1.0 - goal) * requests)
    lag = max(1, math.ceil(start / mc.interval))
    best: tuple[Result, tuple[int, int, int]] | None = None
    tried = 0
    for _, w, h, f in _cheapest_plans(need, table, mc.lo, mc.hi, lag, mc.interval, budget, windows)[:candidates]:
        done: dict[int, Result] = {}

        def reaches(hh: int) -> bool:
            nonlocal tried
            if hh not in done:
                tried += 1
                done[hh] = run(CausalNeed(asked_counts(need, w, hh, mc.lo, mc.hi, f), w, hh, f, mc.interval))
            return done[hh].attainment(ttft) >= goal

        if reaches(h):
            while h > LEAST_HEADROOM and reaches(h - 1):
                h -= 1
        else:
            while h < mc.hi - mc.lo and not reaches(h + 1):
                h += 1
        for hh, r in done.items():
            if r.attainment(ttft) >= goal and (best is None or r.replica_seconds < best[0].replica_seconds):
                best = (r, (w, hh, f))
    if best is None:
        return CausalResult(None, None, tried)
    r, setting = best
    r.name = CausalNeed.name
    return CausalResult(r, setting, tried)
