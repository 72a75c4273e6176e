"""Token buckets: the rate limit per job, and the bound on TokenReviews sent to the API server.

Pure: every call takes ``now`` (monotonic seconds), so the tests set time by hand.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable


@dataclass
class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` a second; one request takes one.

    Attributes:
        rate: Tokens added per second.
        burst: The most tokens held (and the start).
        tokens: Tokens now.
        at: When ``tokens`` was last brought up to date.
    """

    rate: float
    burst: float
    tokens: float = -1.0
    at: float = 0.0

    def take(self, now: float) -> float:
        """Take one token: 0.0 when one was there, else the seconds until one will be (nothing is
        taken then)."""
        if self.tokens < 0:  # a new bucket starts full
            self.tokens, self.at = self.burst, now
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate if self.rate > 0 else float("inf")


class Buckets:
    """One :class:`TokenBucket` per key (a job), at most ``max_keys`` of them: the least
    recently used goes first (a bucket left alone for ``burst / rate`` seconds is full again, so
    forgetting it loses nothing but a flood's memory)."""

    def __init__(self, rate: float, burst: float, max_keys: int = 100_000):
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()

    def take(self, key: Hashable, now: float) -> float:
        """:meth:`TokenBucket.take` on ``key``'s bucket."""
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = TokenBucket(self.rate, self.burst)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return b.take(now)

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s bucket (its job is gone)."""
        self._buckets.pop(key, None)

    def __len__(self) -> int:
        return len(self._buckets)
