"""Samples and the state carried from one autoscaling decision to the next."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = [
    "AutoscalerState",
    "Direction",
    "MAX_EVENTS",
    "MAX_RECOMMENDATIONS",
    "STATE_VERSION",
    "Sample",
    "fresh_value",
]

Direction = Literal["Up", "Down"]

#: Hard cap on stored recommendations (after pruning by age and de-duplication by value).
MAX_RECOMMENDATIONS = 64
#: Hard cap on stored scale events per direction.
MAX_EVENTS = 64
#: Version written by :meth:`AutoscalerState.to_dict`.
STATE_VERSION = 1


@dataclass(frozen=True)
class Sample:
    """One metric sample.

    Attributes:
        time: When the value was measured, unix seconds (Prometheus' evaluation timestamp).
        value: The metric value; for the queue metric, the total number of waiting requests
            across the service.
    """

    time: float
    value: float


def fresh_value(sample: Sample | None, now: float, max_age_seconds: float = 60.0) -> float | None:
    """The sample's value if it is usable for a decision at ``now``, else ``None``.

    A missing sample, one older than ``max_age_seconds`` (stale: the exporter or Prometheus
    stopped), one from more than ``max_age_seconds`` in the future (clock skew) and a
    non-finite value all give ``None``, which :func:`decide` treats as missing data.

    Args:
        sample: The latest sample, or ``None``.
        now: Current time, unix seconds.
        max_age_seconds: Oldest acceptable sample age, seconds.

    Returns:
        The value, or ``None``.
    """
    if sample is None or not math.isfinite(sample.value) or not math.isfinite(sample.time):
        return None
    if abs(now - sample.time) > max_age_seconds:
        return None
    return sample.value


def _pairs(raw: Any, what: str) -> tuple[tuple[float, int], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{what} must be a list of [time, count] pairs, got {raw!r}")
    out: list[tuple[float, int]] = []
    for item in raw:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise ValueError(f"{what}: each entry must be [time, count], got {item!r}")
        t, n = item
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise ValueError(f"{what}: time must be a finite number, got {t!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{what}: count must be an integer >= 0, got {n!r}")
        out.append((float(t), n))
    return tuple(sorted(out, key=lambda p: p[0]))


def _opt_time(raw: Any, what: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ValueError(f"{what} must be a finite number or null, got {raw!r}")
    return float(raw)


def _opt_pair(raw: Any, what: str) -> tuple[float, float] | None:
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        raise ValueError(f"{what} must be [time, value] or null, got {raw!r}")
    return (_opt_time(raw[0], what) or 0.0, _opt_time(raw[1], what) or 0.0)


def _floats(raw: Any, what: str, n: int) -> tuple[float, ...]:
    if raw is None or raw == []:
        return ()
    if not isinstance(raw, (list, tuple)) or len(raw) != n:
        raise ValueError(f"{what} must be a list of {n} numbers or empty, got {raw!r}")
    return tuple(_opt_time(x, what) or 0.0 for x in raw)


@dataclass(frozen=True)
class AutoscalerState:
    """What one InferenceService's autoscaler carries between decisions.

    Everything is plain data and round-trips through :meth:`to_dict` / :meth:`from_dict`, so
    the operator can keep it in memory or in an annotation on the object it owns. The size is
    bounded: :func:`decide` drops recommendations older than the longest stabilization window
    and scale events older than the longest step-limit period, keeps only the newest
    recommendation per replica count (exact for both the min and the max over a window), and
    caps both lists (:data:`MAX_RECOMMENDATIONS`, :data:`MAX_EVENTS`).

    A fresh ``AutoscalerState()`` is the right start for a new service and the safe fallback
    when a stored state cannot be read.

    Attributes:
        recommendations: ``(time, replicas)`` pairs, oldest first: the raw recommendations
            of past decisions, read by the stabilization windows (Kubernetes HPA keeps the
            same list per HPA).
        scale_up_events: ``(time, replicas_added)`` pairs, oldest first, read by the scale-up
            step limit (HPA ``scaleUpEvents``).
        scale_down_events: ``(time, replicas_removed)`` pairs, oldest first, read by the
            scale-down step limit (HPA ``scaleDownEvents``).
        last_active_time: Last time the metric was above the activation threshold (or
            missing, which counts as active), unix seconds; the scale-to-zero idle clock runs
            from here (KEDA ``lastActiveTime``). ``None`` before the first decision.
        last_scale_time: When a decision last changed the replica count, unix seconds.
        last_scale_direction: ``"Up"`` or ``"Down"`` for that change.
        last_decision_time: When :func:`decide` last ran, unix seconds; ``None`` marks a
            fresh state, which the first decision seeds with the current replica count.
        queue_sample: ``(time, requests queued)`` at the last SLO-mode decision: the queue's
            growth since then is the part of the arrival rate that no replica admitted yet.
        service_seconds: Last measured mean time a request runs (SLO mode), s; used while
            nothing runs (scale from zero, idle windows).
        prefill_seconds: Last measured prefill-time percentile (SLO mode), s.
        concurrency: Last measured concurrency limit of a replica (requests running on a
            replica that queues, SLO mode); ``None`` until one queued.
        itl_fit: Exponentially decayed sums ``(weight, sum b, sum y, sum b*b, sum b*y)`` of
            (running per replica ``b``, ITL percentile ``y``) samples, for the linear ITL
            model of SLO mode (:func:`kubeforge.autoscaling.fit_itl`); ``()`` when empty.
        itl_fit_time: When ``itl_fit`` was last updated, unix seconds.
        breach_time: When SLO mode last added a replica because the measured TTFT was
            above target (at most one per window), unix seconds.
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    scale_up_events: tuple[tuple[float, int], ...] = ()
    scale_down_events: tuple[tuple[float, int], ...] = ()
    last_active_time: float | None = None
    last_scale_time: float | None = None
    last_scale_direction: Direction | None = None
    last_decision_time: float | None = field(default=None)
    queue_sample: tuple[float, float] | None = None
    service_seconds: float | None = None
    prefill_seconds: float | None = None
    concurrency: float | None = None
    itl_fit: tuple[float, ...] = ()
    itl_fit_time: float | None = None
    breach_time: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The state as a JSON-ready dict with camelCase keys.

        Returns:
            ``{"version": 1, "recommendations": [[t, n], ...], "scaleUpEvents": [...],
            "scaleDownEvents": [...], "lastActiveTime": t | None, "lastScaleTime": t | None,
            "lastScaleDirection": "Up" | "Down" | None, "lastDecisionTime": t | None,
            "queueSample": [t, n] | None, "serviceSeconds": s | None, "prefillSeconds": s | None,
            "concurrency": n | None, "itlFit": [w, sb, sy, sbb, sby], "itlFitTime": t | None,
            "breachTime": t | None}``.
        """
        return {
            "version": STATE_VERSION,
            "recommendations": [[t, n] for t, n in self.recommendations],
            "scaleUpEvents": [[t, n] for t, n in self.scale_up_events],
            "scaleDownEvents": [[t, n] for t, n in self.scale_down_events],
            "lastActiveTime": self.last_active_time,
            "lastScaleTime": self.last_scale_time,
            "lastScaleDirection": self.last_scale_direction,
            "lastDecisionTime": self.last_decision_time,
            "queueSample": list(self.queue_sample) if self.queue_sample is not None else None,
            "serviceSeconds": self.service_seconds,
            "prefillSeconds": self.prefill_seconds,
            "concurrency": self.concurrency,
            "itlFit": list(self.itl_fit),
            "itlFitTime": self.itl_fit_time,
            "breachTime": self.breach_time,
        }

    @classmethod
    def from_dict(cls, data: Any) -> AutoscalerState:
        """Read a state written by :meth:`to_dict`; missing keys take their defaults.

        The size caps are applied on the way in, so a hand-edited annotation cannot grow the
        state without bound.

        Args:
            data: A dict as written by :meth:`to_dict` (already JSON-decoded).

        Returns:
            The state.

        Raises:
            ValueError: When ``data`` is not a dict, has an unknown version, or a field has the
                wrong shape. Callers should fall back to ``AutoscalerState()``.
        """
        if not isinstance(data, dict):
            raise ValueError(f"autoscaler state must be a dict, got {type(data).__name__}")
        version = data.get("version", STATE_VERSION)
        if version != STATE_VERSION:
            raise ValueError(f"unsupported autoscaler state version {version!r}")
        direction = data.get("lastScaleDirection")
        if direction not in (None, "Up", "Down"):
            raise ValueError(f"lastScaleDirection must be Up, Down or null, got {direction!r}")
        return cls(
            recommendations=_dedupe(_pairs(data.get("recommendations"), "recommendations")),
            scale_up_events=_cap_events(_pairs(data.get("scaleUpEvents"), "scaleUpEvents")),
            scale_down_events=_cap_events(_pairs(data.get("scaleDownEvents"), "scaleDownEvents")),
            last_active_time=_opt_time(data.get("lastActiveTime"), "lastActiveTime"),
            last_scale_time=_opt_time(data.get("lastScaleTime"), "lastScaleTime"),
            last_scale_direction=direction,
            last_decision_time=_opt_time(data.get("lastDecisionTime"), "lastDecisionTime"),
            queue_sample=_opt_pair(data.get("queueSample"), "queueSample"),
            service_seconds=_opt_time(data.get("serviceSeconds"), "serviceSeconds"),
            prefill_seconds=_opt_time(data.get("prefillSeconds"), "prefillSeconds"),
            concurrency=_opt_time(data.get("concurrency"), "concurrency"),
            itl_fit=_floats(data.get("itlFit"), "itlFit", 5),
            itl_fit_time=_opt_time(data.get("itlFitTime"), "itlFitTime"),
            breach_time=_opt_time(data.get("breachTime"), "breachTime"),
        )

    def pruned(self, now: float, keep_recommendations_s: float, keep_events_s: float) -> AutoscalerState:
        """Drop entries that no window can read any more, then apply the size caps.

        Args:
            now: Current time, unix seconds.
            keep_recommendations_s: Keep recommendations newer than ``now`` minus this
                (the longest stabilization window).
            keep_events_s: Keep scale events newer than ``now`` minus this (the longest
                step-limit period).

        Returns:
            The pruned state.
        """
        rec_cut = now - keep_recommendations_s
        ev_cut = now - keep_events_s
        return replace(
            self,
            recommendations=_dedupe(tuple(p for p in self.recommendations if p[0] > rec_cut)),
            scale_up_events=_cap_events(tuple(p for p in self.scale_up_events if p[0] > ev_cut)),
            scale_down_events=_cap_events(tuple(p for p in self.scale_down_events if p[0] > ev_cut)),
        )


def _dedupe(recs: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """Keep the newest entry per replica count, oldest first, at most MAX_RECOMMENDATIONS.

    A window's min and max only ask whether a value occurs after a cutoff, and the newest
    occurrence answers that for all older ones, so this loses nothing. Past the cap the
    oldest entries are dropped.
    """
    newest: dict[int, float] = {}
    for t, n in recs:
        if n not in newest or t >= newest[n]:
            newest[n] = t
    out = sorted(((t, n) for n, t in newest.items()), key=lambda p: (p[0], p[1]))
    return tuple(out[-MAX_RECOMMENDATIONS:])


def _cap_events(events: tuple[tuple[float, int], ...]) -> tuple[tuple[float, int], ...]:
    """Sort events and, past MAX_EVENTS, merge the oldest pairs into the later timestamp.

    Merging into the later time keeps the replicas counted at least as long as before, so the
    step limit can only get stricter, never looser.
    """
    out = sorted(events, key=lambda p: p[0])
    while len(out) > MAX_EVENTS:
        (_, n1), (t2, n2) = out[0], out[1]
        out[:2] = [(t2, n1 + n2)]
    return tuple(out)
