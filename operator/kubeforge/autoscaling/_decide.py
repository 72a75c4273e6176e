"""One autoscaling decision: desired replicas from the policy, the carried state, what was read and now.

:func:`decide` composes the HPA controller's named steps (:mod:`kubeforge.autoscaling._steps`:
read metrics -> desired -> stabilize -> rate-limit -> bound) through small functions, each one
path of the decision: :func:`_seeded` (the state it starts from), :func:`_hold` (unusable input),
:func:`_scale` (usable input: :func:`_direct` for the paths past the windows and limits,
:func:`_paced` for stabilize -> rate-limit -> bound), :func:`_ahead` (predictive scale-up's
floor, issue 28) and :func:`_recorded` (the state it hands on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import _reasons as R
from ._forecast import DemandHistory, Forecast, forecast_demand, forecast_replicas
from ._policy import AutoscalingPolicy
from ._signals import Signals
from ._slo import SLOSizing, SLOStatus, slo_status
from ._state import AutoscalerState, Direction, _dedupe
from ._steps import (
    Limit, Reading, Recommendation, _num, _replicas, bound, peak_floor, rate_limit, read_metrics, recommend, stabilize,
)

__all__ = ["Decision", "decide"]


@dataclass(frozen=True)
class Decision:
    """The outcome of :func:`decide`.

    Attributes:
        desired: Replicas to run now, an integer >= 0.
        state: The state to pass to the next :func:`decide` call for this service. It
            assumes ``desired`` is applied: if the scale is not written, keep the old state.
        reason: One human sentence with the numbers behind ``desired``, for Events, logs and
            the ``ScalingActive`` condition message.
        direction: ``"Up"`` when ``desired > current_replicas``, ``"Down"`` when lower,
            ``None`` when unchanged.
        limited: Whether a bound held ``desired`` back (the HPA ``ScalingLimited`` condition).
        limited_reason: Message for that limit, ``None`` when not limited.
        scaling_active: Whether the input was usable (the HPA ``ScalingActive`` condition).
        inactive_reason: Why it was not, ``None`` when active.
        active_condition_reason: ``ScalingActive`` reason: :data:`VALID_METRIC_FOUND`,
            :data:`FAILED_GET_METRIC` or :data:`INVALID_METRIC`.
        limited_condition_reason: ``ScalingLimited`` reason: :data:`DESIRED_WITHIN_RANGE`
            (not limited), :data:`TOO_MANY_REPLICAS`, :data:`TOO_FEW_REPLICAS`,
            :data:`SCALE_UP_LIMIT`, :data:`SCALE_DOWN_LIMIT` or :data:`INSUFFICIENT_CAPACITY`.
        recommendation: The raw recommendation stored for the stabilization windows, ``None``
            when the input was unusable.
        panic: Whether panic mode skipped the scale-up step limit (queue-depth mode).
        slo_mode: Whether the decision ran in SLO mode.
        slo: SLO mode: the ``SLOMet`` condition (``slo.met`` None = Unknown, ``slo.reason``
            one of :data:`SLO_MET_REASONS`, ``slo.message`` with the measured percentiles
            against the targets); ``None`` in queue-depth mode or when nothing was read.
        sizing: SLO mode: the queue model's numbers (arrival rate, service time, replicas
            needed, predicted TTFT), ``None`` otherwise.
        scale_down_count: Replicas to remove (``current - desired`` when scaling down, else
            0). Which ones, and draining them first, is the runtime's.
        forecast: Predictive scale-up's forecast (``policy.predictive``), None when off or
            when there was none (the reason says why).
        predicted: The replicas the forecast demand needs (before the bounds), or None.
        standby: Replicas to keep asleep besides ``desired`` (``policy.standby_replicas``).
    """

    desired: int
    state: AutoscalerState
    reason: str
    direction: Direction | None
    limited: bool
    limited_reason: str | None
    scaling_active: bool
    inactive_reason: str | None
    active_condition_reason: str = R.VALID_METRIC_FOUND
    limited_condition_reason: str = R.DESIRED_WITHIN_RANGE
    recommendation: int | None = None
    panic: bool = False
    slo_mode: bool = False
    slo: SLOStatus | None = None
    sizing: SLOSizing | None = None
    scale_down_count: int = 0
    forecast: Forecast | None = None
    predicted: int | None = None
    standby: int = 0


def _check_inputs(current: int, placeable: int | None, now: float) -> None:
    if isinstance(current, bool) or not isinstance(current, int) or current < 0:
        raise ValueError(f"current_replicas must be an integer >= 0, got {current!r}")
    if placeable is not None and (isinstance(placeable, bool) or not isinstance(placeable, int) or placeable < 0):
        raise ValueError(f"placeable_replicas must be None or an integer >= 0, got {placeable!r}")
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError(f"now must be a finite number of unix seconds, got {now!r}")


@dataclass(frozen=True)
class _Course:
    """What one decision's path settled on, before the state is recorded.

    Attributes:
        limit: The count and the ``ScalingLimited`` outcome (:class:`Limit`).
        notes: The sentences of the decision's message, in order.
        state: The state after the path (the SLO model's measurements remembered).
        last_active: The new idle clock origin, unix seconds.
        raw: The recommendation for the stabilization windows (None: nothing usable read).
        sizing: SLO mode's queue-model outcome.
        slo: SLO mode's ``SLOMet`` content.
        inactive: Why the input was unusable (the ``ScalingActive`` message), else None.
    """

    limit: Limit
    notes: tuple[str, ...]
    state: AutoscalerState
    last_active: float
    raw: int | None = None
    sizing: SLOSizing | None = None
    slo: SLOStatus | None = None
    inactive: str | None = None


def _seeded(policy: AutoscalingPolicy, state: AutoscalerState, current: int, now: float) -> AutoscalerState:
    """The state a decision starts from: the carried one pruned to the longest window and
    period; a fresh one (no decision yet) seeded with ``(now, current)`` as the HPA seeds from
    ``status.desiredReplicas``, so that an operator restart allows no immediate scale-down."""
    p = policy
    st = state.pruned(now, p.longest_window_seconds, p.longest_period_seconds)
    if state.last_decision_time is None:
        st = replace(st, recommendations=_dedupe(st.recommendations + ((now, current),)))
    return st


def _hold(policy: AutoscalingPolicy, reading: Reading, st: AutoscalerState, current: int,
          placeable: int | None, now: float) -> _Course:
    """Unusable input: hold ``current`` (moved into ``[min, max]`` when outside), bounded by the
    pool's capacity only; the idle clock restarts (unknown counts as active) and nothing is
    recommended for the windows. ``ScalingActive`` False says the count it is held at."""
    lo, hi = policy.min_replicas, policy.max_replicas
    held = min(max(current, lo), hi)
    notes = [f"{reading.problem}; holding {_replicas(current)}"]
    if held != current:
        notes.append(f"moving into [minReplicas {lo}, maxReplicas {hi}]: {held}")
    limit = bound(policy, Limit(held), current, placeable, clamp=False)
    if limit.message:
        notes.append(limit.message)
    # the count the service is held at, not the one it had (a new service at 0 goes to minReplicas)
    inactive = f"{reading.problem}; scaling paused at {_replicas(limit.desired)}"
    return _Course(limit, tuple(notes), st, float(now), inactive=inactive)


def _direct(policy: AutoscalingPolicy, rec: Recommendation, current: int, placeable: int | None,
            now: float) -> tuple[Limit, str] | None:
    """The paths past the windows and step limits, or None: a count out of ``[min, max]`` goes
    to the bound it broke (the HPA's first check); an idle service goes to zero after
    ``scale_to_zero_after_seconds`` (KEDA's cooldown); at zero without demand it stays there.
    Each bounded by the pool's capacity only."""
    p = policy
    lo, hi, act = p.min_replicas, p.max_replicas, p.activation_threshold
    if current > hi or current < lo:
        target = hi if current > hi else lo
        note = (f"{_replicas(current)} {'above maxReplicas' if current > hi else 'below minReplicas'} "
                f"{target}: scaling to {target}")
    elif rec.to_zero:
        idle_for = max(0.0, now - rec.last_active)
        target = 0
        note = (f"demand at or below the activation threshold {_num(act)} for {_num(idle_for)}s "
                f"(>= {_num(p.scale_to_zero_after_seconds)}s): scaling to zero")
    elif rec.stay_zero:
        target = 0
        note = f"at zero and demand not above the activation threshold {_num(act)}: staying at zero"
    else:
        return None
    return bound(p, Limit(target), current, placeable, clamp=False), note


def _paced(policy: AutoscalingPolicy, reading: Reading, rec: Recommendation, st: AutoscalerState,
           history: tuple[tuple[float, int], ...], current: int, placeable: int | None,
           now: float) -> tuple[Limit, list[str]]:
    """Steps 3 to 5 on the raw recommendation: :func:`stabilize` (the windows over
    ``history``; :func:`peak_floor`, the peak hold, under them), :func:`rate_limit` (the step
    limits; panic mode in queue-depth mode, none up in SLO mode), :func:`bound` (``[min, max]``,
    then the pool's capacity). With ``min_replicas`` 0 and no demand, the message counts down to
    scale to zero."""
    p = policy
    notes: list[str] = []
    stab, why = stabilize(p, history, rec.raw, current, now)
    held = peak_floor(p, history, rec.raw, now)
    if held is not None and held[0] > stab:
        stab, why = held
    if why:
        notes.append(why)
    limit = rate_limit(p, st, stab, current, now, None if reading.slo else reading.value, reading.slo)
    if limit.panic:
        notes.append(f"panic mode: queue above {_num(p.panic_threshold)}x the capacity of "
                     f"{_replicas(current)}, skipping the scale-up step limit")
    limit = bound(p, limit, current, placeable)
    if p.min_replicas == 0 and not rec.active and limit.desired > 0:
        idle_for = max(0.0, now - rec.last_active)
        notes.append(f"demand at or below the activation threshold {_num(p.activation_threshold)} for "
                     f"{_num(idle_for)}s: scale to zero in {_num(p.scale_to_zero_after_seconds - idle_for)}s "
                     f"unless it rises")
    return limit, notes


def _scale(policy: AutoscalingPolicy, reading: Reading, st: AutoscalerState,
           history: tuple[tuple[float, int], ...], current: int, placeable: int | None, now: float) -> _Course:
    """Usable input: step 2 (:func:`recommend`: the queue's or the SLO model's count, the
    activation threshold, scale to zero), the ``SLOMet`` outcome in SLO mode, then either a
    direct path (:func:`_direct`) or the paced one (:func:`_paced`)."""
    rec = recommend(policy, reading, st, current, now)
    if rec.sizing is not None:
        st = rec.sizing.state
    notes = [rec.note]
    slo_out = None
    if reading.slo and policy.slo is not None and reading.signals is not None:
        slo_out = slo_status(policy.slo, reading.signals, st.prefill_seconds)
    direct = _direct(policy, rec, current, placeable, now)
    if direct is not None:
        limit, note = direct
        notes.append(note)
    else:
        limit, more = _paced(policy, reading, rec, st, history, current, placeable, now)
        notes += more
    if limit.message:
        notes.append(limit.message)
    return _Course(limit, tuple(notes), st, rec.last_active, rec.raw, rec.sizing, slo_out)


def _basis(policy: AutoscalingPolicy, course: _Course, reading: Reading, current: int, now: float) -> int | None:
    """The replicas the current demand needs, which the forecast's growth scales: SLO mode's
    count for the measured rate, or None while the model has none or only holds the count
    (:attr:`SLOSizing.held`: a held ``current`` is a count the forecast itself raised; grown
    each decision, it reached maxReplicas on the autoscaling bench's day and stayed there all
    day); in queue-depth mode ``current``, but
    never above the highest reactive recommendation the scale-down window still holds (this
    one's included), so that replicas a forecast added are not taken as the demand's and grown
    again next decision."""
    if reading.slo:
        counted = course.sizing is not None and course.sizing.needed is not None and not course.sizing.held
        return course.raw if counted else None
    cut = now - policy.scale_down_stabilization_seconds
    held = [r for t, r in course.state.recommendations if t >= cut]
    if course.raw is not None:
        held.append(course.raw)
    return min(current, max(held)) if held else current


def _ahead(policy: AutoscalingPolicy, course: _Course, reading: Reading, history: DemandHistory | None,
           lead: float | None, current: int, placeable: int | None,
           now: float) -> tuple[_Course, Forecast | None, int | None]:
    """Predictive scale-up (:mod:`kubeforge.autoscaling._forecast`): the demand one lead time
    ahead (``policy.lead_seconds``, else the measured ``lead``) needs ``predicted`` replicas,
    scaled from the replicas the current rate needs (the SLO model's count, else ``current``);
    bounded like any scale-up (maxReplicas, the pool) it is a floor under the course: it may
    raise the count or keep it, never lower it. Nothing without a usable reading, with
    ``forecast_only``, or without a lead time (no start measured yet).

    The floor is **not** recorded as the recommendation: the scale-down window keeps the
    reactive counts only. The window damps the reactive count's noise; a forecast already
    looks a start ahead, and each decision recomputes it. Recorded, every forecast would be
    held for the whole window (300 s by default) after the next one fell, so the window's
    maximum of noisy forecasts, not the forecast, set the count (on bench-autoscaling's trace,
    Trend sat at maxReplicas: 997 replica-minutes recorded even with the smoothed forecast,
    432 unrecorded, against 226 for the oracle). Unrecorded, replicas asked for ahead of a rise that comes are held by the
    reactive counts that rise records, for the same window as any scale-up; a rise that does
    not come releases them as soon as the forecast falls, never later than the reactive
    scale-down would."""
    pp = policy.predictive
    if pp is None or history is None or course.inactive is not None:
        return course, None, None
    lead = pp.lead_seconds or lead
    if lead is None or lead <= 0:
        why = "no start measured yet, no lead time" if lead is None else "starts take 0s: nothing to ask for ahead"
        return replace(course, notes=course.notes + (f"predictive: {why}",)), None, None
    fc = forecast_demand(pp, history, now, lead)
    if isinstance(fc, str):
        return replace(course, notes=course.notes + (f"predictive: {fc}",)), None, None
    basis = _basis(policy, course, reading, current, now)
    if basis is None:
        return replace(course, notes=course.notes + ("predictive: no replica count for the current demand yet",)), fc, None
    predicted = forecast_replicas(fc, basis)
    note = f"predictive: {fc.message}, needing {_replicas(predicted)}"
    floor = bound(policy, Limit(predicted), current, placeable)
    if pp.forecast_only or floor.desired <= course.limit.desired:
        suffix = " (forecastOnly)" if pp.forecast_only else ""
        return replace(course, notes=course.notes + (note + suffix,)), fc, predicted
    notes = course.notes + (f"{note}: asking for {floor.desired} one start ahead",)
    return replace(course, limit=floor, notes=notes), fc, predicted


def _recorded(policy: AutoscalingPolicy, course: _Course, history: tuple[tuple[float, int], ...], current: int,
              now: float) -> AutoscalerState:
    """The state handed to the next decision, assuming ``course.limit.desired`` is applied: the
    raw recommendation added to the windows' history, the scale event (for the step limits'
    periods), the idle clock, the last scale and decision times; pruned."""
    p, st, desired = policy, course.state, course.limit.desired
    up_events, down_events = st.scale_up_events, st.scale_down_events
    last_scale_time, last_scale_direction = st.last_scale_time, st.last_scale_direction
    if desired > current:
        up_events = up_events + ((float(now), desired - current),)
        last_scale_time, last_scale_direction = float(now), "Up"
    elif desired < current:
        down_events = down_events + ((float(now), current - desired),)
        last_scale_time, last_scale_direction = float(now), "Down"
    return replace(
        st,
        recommendations=_dedupe(history + ((float(now), course.raw),)) if course.raw is not None else history,
        scale_up_events=up_events,
        scale_down_events=down_events,
        last_active_time=course.last_active,
        last_scale_time=last_scale_time,
        last_scale_direction=last_scale_direction,
        last_decision_time=float(now),
    ).pruned(now, p.longest_window_seconds, p.longest_period_seconds)


def decide(
    policy: AutoscalingPolicy,
    state: AutoscalerState,
    current_replicas: int,
    metric: float | Signals | None,
    now: float,
    placeable_replicas: int | None = None,
    *,
    history: DemandHistory | None = None,
    lead_seconds: float | None = None,
) -> Decision:
    """Decide how many replicas an InferenceService should run now.

    Pure: no clock, no I/O; ``now`` and the previous ``state`` come in, the new state goes out.
    The steps are the Kubernetes HPA controller's (:mod:`kubeforge.autoscaling._steps`), each
    documented where it is done:

    1. **Read metrics** (:func:`read_metrics`). Unusable input (``None``, NaN, infinite,
       negative; in SLO mode no queue and no admission rate) holds ``current_replicas``
       (:func:`_hold`), with ``ScalingActive`` False.
    2. **Desired** (:func:`recommend`): queue-depth mode ``ceil(queue / targetPerReplica)``
       with the tolerance band; SLO mode the queue model's count
       (:func:`kubeforge.autoscaling._slo.size_for_slo`). A count out of ``[min, max]``,
       scale to zero after ``scale_to_zero_after_seconds`` idle (KEDA), and staying at zero go
       there directly, past the windows and limits (:func:`_direct`).
    3. **Stabilize** (:func:`stabilize`): HPA ``behavior`` windows, over a history seeded with
       ``(now, current_replicas)`` when the state is fresh (:func:`_seeded`).
    4. **Rate-limit** (:func:`rate_limit`): one ``Pods`` policy per direction; Knative's
       panic mode lifts the scale-up limit in queue-depth mode; SLO mode has no scale-up limit.
    5. **Bound** (:func:`bound`): ``[min_replicas, max_replicas]``, then the pool's capacity
       (never ask for what cannot be placed, never scale down because of it).
    6. **Ahead** (:func:`_ahead`, with ``policy.predictive`` and a ``history``): the forecast
       demand one lead time ahead sets a floor (bounded as in 5); never a scale-down.

    Args:
        policy: The service's autoscaling policy.
        state: The state returned by the previous decision, or ``AutoscalerState()``.
        current_replicas: Replicas the service has now (asked for, Ready or not), >= 0.
        metric: Queue-depth mode: the total queue, requests (``None`` when unread), or the
            :class:`Signals` of the runtime's metrics source (their ``queue``). SLO mode: the
            :class:`Signals`; a bare number scales on it in queue-depth mode meanwhile.
        now: Current time, unix seconds.
        placeable_replicas: How many replicas **in total** (running ones included) the pool
            can hold right now; ``None`` for unknown or unlimited.
        history: The admission rate's history for predictive scale-up
            (:class:`~kubeforge.autoscaling.DemandHistory`), or None (not read: no forecast).
        lead_seconds: The service's measured p90 start, s (``status.startTime``), or None;
            ``policy.lead_seconds`` wins over it.

    Returns:
        The :class:`Decision`, with the state for the next call (:func:`_recorded`).

    Raises:
        ValueError: When ``current_replicas`` or ``placeable_replicas`` is negative or not an
            integer, or ``now`` is not finite.
    """
    _check_inputs(current_replicas, placeable_replicas, now)
    current = current_replicas
    st = _seeded(policy, state, current, now)
    reading = read_metrics(policy, metric, current)
    if reading.usable:
        course = _scale(policy, reading, st, st.recommendations, current, placeable_replicas, now)
    else:
        course = _hold(policy, reading, st, current, placeable_replicas, now)
    course, fc, predicted = _ahead(policy, course, reading, history, lead_seconds, current, placeable_replicas, now)
    limit, desired = course.limit, course.limit.desired
    direction: Direction | None = "Up" if desired > current else "Down" if desired < current else None
    notes = ((reading.note,) if reading.note else ()) + course.notes + (f"desired {desired}",)
    return Decision(
        desired=desired, state=_recorded(policy, course, st.recommendations, current, now), reason="; ".join(notes),
        direction=direction, limited=limit.message is not None, limited_reason=limit.message,
        scaling_active=reading.usable, inactive_reason=course.inactive, active_condition_reason=reading.active_reason,
        limited_condition_reason=limit.reason, recommendation=course.raw, panic=limit.panic, slo_mode=reading.slo,
        slo=course.slo, sizing=course.sizing, scale_down_count=max(0, current - desired), forecast=fc,
        predicted=predicted, standby=policy.standby_replicas,
    )
