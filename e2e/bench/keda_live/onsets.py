"""How soon each system asked for more replicas once the queue called for them (pure).

Both systems get the same arrivals and start from 1 replica, so up to their first scale-up the
simulator's queue is the same for both: the time from the first look at which that queue is
beyond what the replicas asked for carry (``queue > asked * target * (1 + tolerance)``, the
rule both autoscalers apply: ceil(queue / target) outside the tolerance band) to the first look
at which the count asked for rises is each system's reaction time at that rise: the scrape
(1 s), the autoscaler's poll, its decision and the write, and the bench's half-second look.

:func:`poll_cadence` measures kubeforge's real decision interval from its operator's counter of
decisions (``kubeforge_autoscaler_decisions_total``) read at each look.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

__all__ = ["Onset", "onsets", "poll_cadence"]

_EPS = 1e-9


@dataclass(frozen=True)
class Onset:
    """One rise: the queue called for more than was asked for, and the system asked.

    Attributes:
        need: trace s of the first look whose queue was beyond what ``before`` replicas carry.
        asked: trace s of the first look at which the count asked for rose.
        lag: ``asked - need``, trace s.
        before, after: the counts asked for at ``need`` and at ``asked``.
        queue: the simulator's queue at ``need``, requests.
        seen: what the autoscaler had read when it rose (None: unknown).
    """

    need: float
    asked: float
    lag: float
    before: int
    after: int
    queue: int
    seen: float | None

    def as_dict(self) -> dict:
        """The fields as a dict (for the JSON)."""
        return asdict(self)


def _beyond(queue: int | None, asked: int | None, target: float, tolerance: float) -> bool:
    return queue is not None and asked is not None and asked > 0 and queue > asked * target * (1 + tolerance) + _EPS


def onsets(samples: Sequence, target: float, tolerance: float, compression: float,
           patience: float = 2.0) -> list[Onset]:
    """Each rise of the count asked for that the queue called for, with its reaction time.

    Args:
        samples: the looks (``t`` wall s, ``asked``, ``waiting``, ``seen``), in time order.
        target: the queue one replica carries (threshold / targetPerReplica), requests.
        tolerance: the band around it inside which neither system scales (0.1).
        compression: trace seconds per wall second.
        patience: wall seconds the queue may fall back within the replicas' capacity before a
            pending rise is forgotten (a blip neither system could have seen).

    Returns:
        The rises in time order; a look with an unknown count or queue neither starts nor ends one.
    """
    out: list[Onset] = []
    pending = None  # (sample at need, count asked at need)
    calm_since = None
    for s in samples:
        if s.asked is None:
            continue
        if pending is not None and s.asked > pending[1]:
            p, before = pending
            out.append(Onset(round(p.t * compression, 1), round(s.t * compression, 1),
                             round((s.t - p.t) * compression, 1), before, s.asked, int(p.waiting), s.seen))
            pending, calm_since = None, None
        beyond = _beyond(s.waiting, s.asked, target, tolerance)
        if pending is None and beyond:
            pending, calm_since = (s, s.asked), None
        elif pending is not None and not beyond and s.waiting is not None:
            calm_since = s.t if calm_since is None else calm_since
            if s.t - calm_since >= patience:
                pending, calm_since = None, None
        elif pending is not None and beyond:
            calm_since = None
    return out


def poll_cadence(samples: Sequence) -> dict | None:
    """kubeforge's decisions over the looks: how many, over how long, the mean interval, and
    the longest stretch of looks without a new one (wall s; at the looks' half-second grain).
    None when fewer than two looks read the counter."""
    looks = [(s.t, s.decisions) for s in samples if getattr(s, "decisions", None) is not None]
    if len(looks) < 2:
        return None
    (t0, d0), (t1, d1) = looks[0], looks[-1]
    n = d1 - d0
    longest, last_t, last_d = 0.0, t0, d0
    for t, d in looks[1:]:
        if d > last_d:
            longest = max(longest, t - last_t)
            last_t, last_d = t, d
    longest = max(longest, t1 - last_t)
    return {"decisions": n, "seconds": round(t1 - t0, 2),
            "mean_interval_s": round((t1 - t0) / n, 3) if n > 0 else None, "longest_gap_s": round(longest, 2)}
