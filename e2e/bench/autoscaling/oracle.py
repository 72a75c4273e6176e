"""The oracle: the fewest GPU replica-minutes that meet the SLO for the arrivals, with perfect
foresight of them and the same start time as every row.

Method (:func:`oracle`):

1. **Miss curves.** Time is cut into intervals of ``interval`` s (60). For interval ``i`` and
   ``n`` replicas, ``m_i(n)`` is how many of the requests arriving in it miss the TTFT target
   when ``n`` replicas serve them (the simulator's replicas behind the same gateway, starting
   ``warmup`` s earlier with the arrivals of that lead-in, run until those requests finish):
   :class:`MissCurves`, computed lazily. ``need_i`` is the fewest replicas at which the
   interval misses no more than at ``maxReplicas`` (what the interval's arrivals need: the
   figure's "demand").
2. **Allocation.** The SLO allows ``B = floor((1 - goal) N)`` misses over the run's ``N``
   requests. The counts ``e_i`` (replicas Ready in interval ``i``) minimize
   ``sum_i e_i * interval + S * sum_i (e_i - e_{i-1})^+`` (every replica added is paid for
   during its start ``S``, which it must begin one start ahead) subject to ``sum_i m_i(e_i) <=
   B``: a Lagrangian relaxation (price ``lam`` per miss) solved exactly for each price by
   dynamic programming over ``e`` (:func:`allocate`), the price bisected to the cheapest
   schedule within the budget. The counts at time 0 are free (the warm start).
3. **Schedule.** Each replica "layer" ``k`` is asked for one start before the first interval
   that needs ``e >= k`` and kept until the last interval of that run; gaps shorter than a
   start are bridged (stopping and restarting would cost more) (:func:`schedule`).
4. **Verification.** The schedule is replayed through the same replay as every row (drain on
   scale-down): its attainment and GPU replica-minutes are what the table prints. When the
   replay misses more than planned (the curves assume the same count in the lead-in), the
   budget is cut by the difference and the allocation solved again (up to 3 times).

Why it is a bound (close to one, not a proof): within its model (per-minute counts, starts paid
one start ahead) the allocation is the optimum for its price, and the bisected price gives the
cheapest schedule of the relaxation that meets the budget; a finer schedule could save part of
a minute per change, and the lead-in assumption can be off either way, which step 4 measures.
Every autoscaler sees less than it knows (the arrivals ahead), so none can beat it by more than
that granularity; a row below 1.0x means the oracle's minute grid, not the row, is at fault.
Dynamic right-sizing with switching costs: Lin, Wierman, Andrew, Thereska, "Dynamic right-sizing
for power-proportional data centers", INFOCOM 2011 (the offline optimum's lazy structure).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kubeforge.sim.modelserver import Request, Service, ServiceModel

from e2e.bench.autoscaling.replay import GATEWAY, Result, replay
from e2e.bench.autoscaling.starts import StartTimes

__all__ = ["MissCurves", "OracleResult", "allocate", "oracle", "schedule"]


class MissCurves:
    """Misses per interval at ``n`` replicas (``m_i(n)``), computed on demand and kept.

    Args:
        arrivals: The run's requests, sorted.
        end: The run's end, s.
        model: The replica model.
        ttft: The TTFT target, s.
        lo: Fewest replicas considered (``minReplicas``).
        hi: Most replicas (``maxReplicas``).
        interval: Interval length, s.
        warmup: Lead-in replayed before each interval, s.
    """

    def __init__(self, arrivals: list[Request], end: float, model: ServiceModel, ttft: float, lo: int, hi: int,
                 interval: float = 60.0, warmup: float = 30.0):
        self.arrivals, self.model, self.ttft = arrivals, model, ttft
        self.lo, self.hi, self.interval, self.warmup = max(1, lo), hi, interval, warmup
        self.n_intervals = max(1, math.ceil(end / interval))
        self.index = [0] * (self.n_intervals + 1)  # first arrival of each interval
        j = 0
        for i in range(self.n_intervals + 1):
            while j < len(arrivals) and arrivals[j].arrival < i * interval:
                j += 1
            self.index[i] = j
        self._memo: dict[tuple[int, int], int] = {}
        self._need: dict[int, int] = {}
        self.sims = 0

    def count(self, i: int) -> int:
        """Requests arriving in interval ``i``."""
        return self.index[i + 1] - self.index[i]

    def misses(self, i: int, n: int) -> int:
        """``m_i(n)``: requests of interval ``i`` whose TTFT is above the target with ``n`` replicas."""
        n = max(self.lo, min(self.hi, n))
        if self.count(i) == 0:
            return 0
        key = (i, n)
        if key not in self._memo:
            self._memo[key] = self._simulate(i, n)
        return self._memo[key]

    def _simulate(self, i: int, n: int) -> int:
        self.sims += 1
        t0, t1 = i * self.interval, (i + 1) * self.interval
        first = self.index[i]
        k = first
        while k > 0 and self.arrivals[k - 1].arrival >= t0 - self.warmup:
            k -= 1
        svc = Service(self.model, max(0.0, t0 - self.warmup) - 1e-9, gateway=GATEWAY)
        names = [f"o{x}" for x in range(n)]
        svc.set_replicas(names, names, svc.time)
        svc.advance(t1, self.arrivals[k:self.index[i + 1]])
        t = t1
        while svc.held or any(r.outstanding for r in svc.replicas.values()):
            t += 60.0
            svc.advance(t)
        hits = sum(1 for d in svc.done if not d.aborted and t0 <= d.request.arrival < t1
                   and d.ttft is not None and d.ttft <= self.ttft)
        return self.count(i) - hits

    def floor(self, i: int) -> int:
        """Misses of interval ``i`` at the most replicas (prompts too long for the target)."""
        return self.misses(i, self.hi)

    def need(self, i: int) -> int:
        """Fewest replicas at which interval ``i`` misses no more than at the most: a walk from
        the previous interval's need (neighbouring minutes need similar counts), assuming
        misses do not grow with replicas."""
        if i not in self._need:
            if self.count(i) == 0:
                self._need[i] = self.lo
                return self.lo
            f, n = self.floor(i), self._need.get(i - 1, self.lo)
            if self.misses(i, n) <= f:
                while n > self.lo and self.misses(i, n - 1) <= f:
                    n -= 1
            else:
                while n < self.hi and self.misses(i, n) > f:
                    n += 1
            self._need[i] = n
        return self._need[i]

    def curve(self, i: int, depth: int) -> list[int]:
        """``m_i(n)`` for ``n`` in ``lo..hi``: computed from ``need_i`` down ``depth`` levels (or
        until every request of the interval misses), the rest taken as all-miss (pessimistic)."""
        need, c = self.need(i), self.count(i)
        out = [c] * (self.hi - self.lo + 1)
        for n in range(need, self.hi + 1):
            out[n - self.lo] = self.floor(i)
        for n in range(need - 1, max(self.lo, need - depth) - 1, -1):
            m = self.misses(i, n)
            out[n - self.lo] = m
            if m >= c:
                break
        return out


def allocate(curves: list[list[int]], lo: int, interval: float, start: float, price: float) -> tuple[list[int], int]:
    """The counts that minimize cost + ``price`` x misses (dynamic programming over the count).

    Args:
        curves: Per interval, misses at ``lo``, ``lo + 1``, ... replicas.
        lo: The count of each curve's first entry.
        interval: Interval length, s.
        start: Seconds a replica is paid for before it serves (its start).
        price: Replica-seconds one miss is worth.

    Returns:
        ``(counts, misses)``: the count per interval and the misses it plans.
    """
    n_levels = len(curves[0])
    best = [(lo + e) * interval + price * curves[0][e] for e in range(n_levels)]
    back: list[list[int]] = []
    for i in range(1, len(curves)):
        lead = min(start, i * interval)  # a replica needed before one start is paid from time 0
        suffix, arg_s = [0.0] * n_levels, [0] * n_levels
        m, a = math.inf, n_levels - 1
        for e in range(n_levels - 1, -1, -1):
            if best[e] <= m:
                m, a = best[e], e
            suffix[e], arg_s[e] = m, a
        row, cur, prefix, arg_p = [0] * n_levels, [0.0] * n_levels, math.inf, -1
        for e in range(n_levels):
            up = prefix + lead * e if arg_p >= 0 else math.inf
            if up < suffix[e]:
                cur[e], row[e] = up, arg_p
            else:
                cur[e], row[e] = suffix[e], arg_s[e]
            cur[e] += (lo + e) * interval + price * curves[i][e]
            if best[e] - lead * e < prefix:
                prefix, arg_p = best[e] - lead * e, e
        back.append(row)
        best = cur
    e = min(range(n_levels), key=lambda x: best[x])
    idx = [e]
    for row in reversed(back):
        e = row[e]
        idx.append(e)
    idx.reverse()
    return [lo + e for e in idx], sum(curves[i][e] for i, e in enumerate(idx))


def schedule(counts: list[int], interval: float, starts: StartTimes) -> list[tuple[float, float]]:
    """Layer spans ``[ask, release)`` that put ``counts[i]`` replicas Ready in each interval,
    each asked for one (longest) start ahead; spans starting before 0 start at 0 (warm)."""
    spans: list[tuple[float, float]] = []
    top = max(counts) if counts else 0
    for k in range(1, top + 1):
        runs, i = [], 0
        while i < len(counts):
            if counts[i] >= k:
                j = i
                while j < len(counts) and counts[j] >= k:
                    j += 1
                runs.append((i * interval, j * interval))
                i = j
            else:
                i += 1
        layer: list[list[float]] = []
        for a, b in runs:
            ask = 0.0 if a == 0 else max(0.0, a - starts.longest())
            if layer and ask <= layer[-1][1]:
                layer[-1][1] = b
            else:
                layer.append([ask, b])
        spans.extend((a, b) for a, b in layer)
    return spans


class Scripted:
    """Asks for the number of layer spans that contain ``now`` (the oracle's schedule)."""

    drain, name = True, "oracle (perfect foresight, same start)"

    def __init__(self, spans: list[tuple[float, float]], knob: str = ""):
        self.spans, self.knob = spans, knob
        self.events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        self.k, self.count = 0, 0

    def at(self, t: float) -> int:
        """Replicas asked for at ``t``."""
        return sum(1 for a, b in self.spans if a <= t < b)

    def tick(self, now: float, current: int, view) -> int | None:
        """The schedule's count at ``now`` (at least 1, as every row's ``minReplicas``); ``now`` only grows."""
        ev = self.events
        while self.k < len(ev) and ev[self.k][0] <= now:
            self.count += ev[self.k][1]
            self.k += 1
        return max(1, self.count)


@dataclass
class OracleResult:
    """The oracle's schedule and what its replay measured.

    Attributes:
        result: The verified replay.
        counts: Replicas Ready per interval, as planned.
        need: Per interval, the fewest replicas the arrivals need (the figure's demand).
        planned_misses: Misses the allocation planned.
        budget: Misses the SLO allows.
        floor_seconds: ``sum need_i x interval``: replica-seconds if every interval had exactly
            what it needs and starts were free, no miss budget spent (printed beside it: the
            oracle spends the budget, so with short starts it can cost less).
        sims: Interval simulations run for the curves.
        tries: Allocations solved (1 unless the replay missed more than planned).
    """

    result: Result
    counts: list[int]
    need: list[int]
    planned_misses: int
    budget: int
    floor_seconds: float
    sims: int = 0
    tries: int = 1
    notes: list[str] = field(default_factory=list)


def _bisect_price(curves: list[list[int]], lo: int, interval: float, start: float, budget: int) -> tuple[list[int], int]:
    """The cheapest allocation whose planned misses fit ``budget`` (price bisected)."""
    hi_price = 1.0
    counts, misses = allocate(curves, lo, interval, start, hi_price)
    while misses > budget and hi_price < 1e12:
        hi_price *= 4.0
        counts, misses = allocate(curves, lo, interval, start, hi_price)
    lo_price = 0.0
    for _ in range(40):
        mid = (lo_price + hi_price) / 2
        c, m = allocate(curves, lo, interval, start, mid)
        if m <= budget:
            hi_price, counts, misses = mid, c, m
        else:
            lo_price = mid
        if hi_price - lo_price < 1e-3 * max(1.0, hi_price):
            break
    return counts, misses


def oracle(arrivals: list[Request], end: float, model: ServiceModel, ttft: float, lo: int, hi: int,
           starts: StartTimes, goal: float = 0.99, interval: float = 60.0, depth: int = 4,
           curves: MissCurves | None = None) -> OracleResult:
    """The oracle of a run (see the module for the method).

    Args:
        arrivals: The run's requests, sorted.
        end: The run's end, s.
        model: The replica model.
        ttft: The TTFT target, s.
        lo: ``minReplicas`` (the oracle keeps it too).
        hi: ``maxReplicas``.
        starts: The run's start times (the oracle plans with the longest cold start).
        goal: The attainment to reach, in (0, 1).
        interval: Interval length, s.
        depth: Levels below ``need_i`` whose misses are simulated.
        curves: Miss curves already computed for this run (shared with the warm start).

    Returns:
        The :class:`OracleResult` (its ``result`` may miss ``goal`` when even ``hi`` replicas
        everywhere do; ``notes`` say so).
    """
    mc = curves or MissCurves(arrivals, end, model, ttft, lo, hi, interval)
    n = mc.n_intervals
    table = [mc.curve(i, depth) for i in range(n)]
    need = [mc.need(i) for i in range(n)]
    budget = int(math.floor((1.0 - goal) * len(arrivals)))
    out = OracleResult(Result("oracle"), need, need, 0, budget, sum(need) * interval)
    floor_misses = sum(row[-1] for row in table)
    if floor_misses > budget:
        out.notes.append(f"even {hi} replicas throughout miss {floor_misses} requests (> {budget} allowed)")
    plan_budget = budget
    for attempt in range(1, 5):
        counts, planned = _bisect_price(table, mc.lo, interval, starts.longest(), plan_budget)
        while attempt > 1 and counts == out.counts and plan_budget > 0:  # nothing changed: cut deeper
            plan_budget = max(0, min(plan_budget - 1, planned - 1))
            counts, planned = _bisect_price(table, mc.lo, interval, starts.longest(), plan_budget)
        sc = Scripted(schedule(counts, interval, starts))
        res = replay(sc, arrivals, end, max(1, sc.at(0.0)), True, model, starts)
        out.result, out.counts, out.planned_misses, out.tries = res, counts, planned, attempt
        excess = res.misses(ttft) - planned  # what the curves' lead-in assumption left out
        if res.misses(ttft) <= budget or plan_budget <= 0:
            break
        out.notes.append(f"try {attempt}: the replay missed {res.misses(ttft)}, {excess} more than planned")
        plan_budget = max(0, min(plan_budget - 1, budget - int(1.1 * excess) - 1))  # a margin: the excess grows a little
    out.sims = mc.sims
    return out
