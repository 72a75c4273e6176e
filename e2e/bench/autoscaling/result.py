"""The figures of one replay: per request TTFT, queue wait and abort; replicas over time."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

__all__ = ["Result"]


@dataclass
class Result:
    """Figures of one replay; times in simulated seconds.

    Attributes:
        name: The row's name.
        ttfts: TTFT of every request that got its first token, s (aborted ones are not here).
        arrivals: Their arrival times, s (same order).
        waits: Their queue waits, s.
        aborted: Requests aborted on scale-down.
        requests: Every request that arrived.
        replica_seconds: Every replica that existed (starting, serving, draining, standby)
            integrated over time: what the GPUs cost.
        reversals: Scale-direction changes of the count asked for.
        patches: Changes of the count asked for.
        max_replicas: The most replicas that existed at once.
        timeline: ``(t, existing, asked, ready, standby)`` every 10 s.
        starts: How many starts of each kind (``cold``, ``cached``, ``wake``).
        knob: The setting the row ran with, printed beside its name.
        diagnostics: The scaler's own figures, when it has a ``diagnostics()`` (kubeforge SLO:
            the per-replica concurrency its queue model used).
    """

    name: str
    ttfts: list = field(default_factory=list)  # per finished request, s
    arrivals: list = field(default_factory=list)  # their arrival times
    waits: list = field(default_factory=list)
    aborted: int = 0
    requests: int = 0
    replica_seconds: float = 0.0
    reversals: int = 0
    patches: int = 0
    max_replicas: int = 0
    timeline: list = field(default_factory=list)  # (t, replicas existing, asked, ready, standby)
    starts: dict = field(default_factory=dict)  # "cold" / "cached" / "wake" -> how many
    knob: str = ""  # the setting the row ran with (the sweep's value), printed beside its name
    diagnostics: dict = field(default_factory=dict)  # the scaler's own figures (kubeforge: its concurrency estimate)
    _aborted_minutes: list = field(default_factory=list)  # arrival minute of each aborted request

    def attainment(self, target: float) -> float:
        """Fraction of all requests (aborted ones fail) whose TTFT is within ``target``."""
        ok = sum(1 for x in self.ttfts if x <= target)
        return ok / self.requests if self.requests else math.nan

    def minute_p90(self) -> list[tuple[int, float]]:
        """(minute, p90 TTFT of the requests that arrived in it); aborted requests count as infinite."""
        by: dict[int, list[float]] = {}
        for a, x in zip(self.arrivals, self.ttfts):
            by.setdefault(int(a // 60), []).append(x)
        for m in self._aborted_minutes:
            by.setdefault(m, []).append(math.inf)
        out = []
        for m in sorted(by):
            xs = sorted(by[m])
            out.append((m, xs[max(0, math.ceil(0.9 * len(xs)) - 1)]))
        return out

    def starting_share(self, target: float) -> float:
        """Share of the requests that missed ``target`` which arrived while replicas the
        autoscaler had asked for were still starting (reaction-time misses)."""
        line = self.timeline
        times = [x[0] for x in line]
        missed = starting = 0
        for a, x in zip(self.arrivals, self.ttfts):
            if x <= target:
                continue
            missed += 1
            i = bisect.bisect_right(times, a) - 1
            if 0 <= i < len(line) and line[i][2] > line[i][3]:
                starting += 1
        return starting / missed if missed else math.nan

    def misses(self, target: float) -> int:
        """Requests whose TTFT is above ``target`` or that were aborted."""
        return self.requests - sum(1 for x in self.ttfts if x <= target)

    def minutes_attained(self, target: float) -> float:
        """Share of the minutes (by arrival) whose p90 TTFT is within ``target``."""
        mins = self.minute_p90()
        return sum(1 for _, v in mins if v <= target) / len(mins) if mins else math.nan
