"""What the live operator knows about a running job, for the replays through the pure admission
core: only what its workers reported (issue 27).

A worker reports to the operator's status endpoint every ``report_every`` seconds of its run
(the Hugging Face callback at its logging steps, ``kubeforge.workload.report`` in a custom loop),
and each report carries the last checkpoint it saved and an ETA; ``status.lastCheckpoint`` and
``status.progress`` are then what the latest report said. So at ``now`` the operator knows the
last checkpoint written up to the last report, never one written since, and a job that does not
report shows no checkpoint for its current run (admission falls back on the time since its
placement). A replay that gave the policy every checkpoint the moment it is written (``oracle``)
would measure a policy no cluster runs.

The mix (:class:`ReportMix`, the replays' defaults): 30 % of jobs never report (scripts that do
not use a reporting helper), the rest report every 1, 2, 5 or 10 minutes (drawn per job). Drawn
from its own seeded stream, so the arrivals, sizes and teams of a replay do not move with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["ReportMix", "known_checkpoint", "last_report"]


@dataclass(frozen=True)
class ReportMix:
    """Which jobs report and how often.

    Attributes:
        silent_share: The share of jobs that never report (0-1).
        minutes: The reporting intervals of the others, minutes, one drawn uniformly per job.
    """

    silent_share: float = 0.3
    minutes: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)

    def draw(self, n: int, seed: int) -> list[float | None]:
        """``n`` reporting intervals in seconds (None: never reports), from ``seed``'s own stream."""
        rng = random.Random(f"reports-{seed}")
        return [None if rng.random() < self.silent_share else 60.0 * rng.choice(self.minutes) for _ in range(n)]

    def describe(self) -> str:
        """One line for the bench's header."""
        every = "/".join(f"{m:g}" for m in self.minutes)
        return f"{self.silent_share:.0%} of jobs never report, the rest every {every} min"

    @classmethod
    def parse(cls, text: str) -> "ReportMix":
        """``"0.3:1,2,5,10"`` (silent share, then the minutes) as a mix; ``"oracle"`` is not a mix."""
        share, _, minutes = text.partition(":")
        return cls(float(share), tuple(float(m) for m in minutes.split(",") if m) or cls.minutes)


def last_report(start: float, now: float, every: float | None) -> float | None:
    """When a run that started at ``start`` last reported by ``now`` (its first report
    ``every`` seconds in), or None: it never reports, or has not yet."""
    if every is None or now - start < every:
        return None
    return start + ((now - start) // every) * every


def known_checkpoint(start: float, now: float, ckpt: float, every: float | None) -> float | None:
    """The time of the last checkpoint the operator knows at ``now`` for a run that started at
    ``start`` and checkpoints every ``ckpt`` seconds of it: the last one written up to its last
    report (:func:`last_report`), or None (no report yet, or none written before it)."""
    seen = last_report(start, now, every)
    if seen is None or seen - start < ckpt:
        return None
    return start + ((seen - start) // ckpt) * ckpt
