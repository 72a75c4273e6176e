"""One autoscaling decision: desired replicas from the policy, the carried state, what was read and now."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import _reasons as R
from ._policy import AutoscalingPolicy
from ._signals import Signals
from ._slo import SLOSizing, SLOStatus, slo_status
from ._state import AutoscalerState, Direction, _dedupe
from ._steps import Limit, _num, _replicas, bound, rate_limit, read_metrics, recommend, stabilize

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


def _check_inputs(current: int, placeable: int | None, now: float) -> None:
    if isinstance(current, bool) or not isinstance(current, int) or current < 0:
        raise ValueError(f"current_replicas must be an integer >= 0, got {current!r}")
    if placeable is not None and (isinstance(placeable, bool) or not isinstance(placeable, int) or placeable < 0):
        raise ValueError(f"placeable_replicas must be None or an integer >= 0, got {placeable!r}")
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError(f"now must be a finite number of unix seconds, got {now!r}")


def decide(
    policy: AutoscalingPolicy,
    state: AutoscalerState,
    current_replicas: int,
    metric: float | Signals | None,
    now: float,
    placeable_replicas: int | None = None,
) -> Decision:
    """Decide how many replicas an InferenceService should run now.

    Pure: no clock, no I/O; ``now`` and the previous ``state`` come in, the new state goes out.
    The steps are the Kubernetes HPA controller's, each a function of
    :mod:`kubeforge.autoscaling._steps`:

    1. **Read metrics** (:func:`read_metrics`). Unusable input (``None``, NaN, infinite,
       negative; in SLO mode no queue and no admission rate) holds ``current_replicas``
       (clamped into ``[min, max]``) with ``ScalingActive`` False, restarts the scale-to-zero
       idle clock (unknown counts as active), records nothing for the windows.
    2. **Out of bounds**: ``current > max`` goes to ``max``, ``current < min`` to ``min``
       straight away (the HPA's first check).
    3. **Desired** (:func:`recommend`): queue-depth mode ``ceil(queue / targetPerReplica)``
       with the tolerance band; SLO mode the queue model's count
       (:func:`kubeforge.autoscaling._slo.size_for_slo`: M/M/c with Erlang C for the TTFT
       percentile, the linear ITL model, measured-TTFT feedback). Activation threshold and
       scale to zero as KEDA: idle (at or below the threshold) for
       ``scale_to_zero_after_seconds`` with ``min_replicas`` 0 goes to 0 directly, past the
       windows and limits; until then at least 1.
    4. **Stabilize** (:func:`stabilize`): HPA ``behavior`` windows (scale up to the lowest
       recent recommendation, down to the highest). A fresh state is seeded with
       ``(now, current_replicas)`` as the HPA seeds from ``status.desiredReplicas``, so an
       operator restart does not allow an immediate scale-down.
    5. **Rate-limit** (:func:`rate_limit`): one ``Pods`` policy per direction; Knative's
       panic mode lifts the scale-up limit in queue-depth mode; SLO mode has no scale-up
       limit (it goes to the model's count in one decision), the scale-down limit holds.
    6. **Bound** (:func:`bound`): ``[min_replicas, max_replicas]``, then the pool's capacity
       (never ask for what cannot be placed, never scale down because of it).

    Args:
        policy: The service's autoscaling policy.
        state: The state returned by the previous decision, or ``AutoscalerState()``.
        current_replicas: Replicas the service has now (asked for, Ready or not), >= 0.
        metric: Queue-depth mode: the total queue, requests (``None`` when unread), or the
            :class:`Signals` of ``read_signals`` (their ``queue``). SLO mode: the
            :class:`Signals`; a bare number scales on it in queue-depth mode meanwhile.
        now: Current time, unix seconds.
        placeable_replicas: How many replicas **in total** (running ones included) the pool
            can hold right now; ``None`` for unknown or unlimited.

    Returns:
        The :class:`Decision`, with the state for the next call.

    Raises:
        ValueError: When ``current_replicas`` or ``placeable_replicas`` is negative or not an
            integer, or ``now`` is not finite.
    """
    _check_inputs(current_replicas, placeable_replicas, now)
    p, current = policy, current_replicas
    lo, hi = p.min_replicas, p.max_replicas
    st = state.pruned(now, p.longest_window_seconds, p.longest_period_seconds)
    if state.last_decision_time is None:
        st = replace(st, recommendations=_dedupe(st.recommendations + ((now, current),)))
    history = st.recommendations

    reading = read_metrics(p, metric, current)
    notes: list[str] = [reading.note] if reading.note else []
    raw: int | None = None
    sizing, slo_out = None, None
    limit = Limit(current)
    if not reading.usable:
        last_active = float(now)
        held = min(max(current, lo), hi)
        notes.append(f"{reading.problem}; holding {_replicas(current)}")
        if held != current:
            notes.append(f"moving into [minReplicas {lo}, maxReplicas {hi}]: {held}")
        limit = bound(p, Limit(held), current, placeable_replicas, clamp=False)
        # the count the service is held at, not the one it had (a new service at 0 goes to minReplicas)
        inactive: str | None = f"{reading.problem}; scaling paused at {_replicas(limit.desired)}"
    else:
        inactive = None
        rec = recommend(p, reading, st, current, now)
        raw, last_active, sizing = rec.raw, rec.last_active, rec.sizing
        if sizing is not None:
            st = sizing.state
        notes.append(rec.note)
        if reading.slo and p.slo is not None and reading.signals is not None:
            slo_out = slo_status(p.slo, reading.signals, st.prefill_seconds)
        act = p.activation_threshold
        if current > hi or current < lo:
            target = hi if current > hi else lo
            notes.append(f"{_replicas(current)} {'above maxReplicas' if current > hi else 'below minReplicas'} "
                         f"{target}: scaling to {target}")
            limit = bound(p, Limit(target), current, placeable_replicas, clamp=False)
        elif rec.to_zero:
            idle_for = max(0.0, now - last_active)
            notes.append(f"demand at or below the activation threshold {_num(act)} for {_num(idle_for)}s "
                         f"(>= {_num(p.scale_to_zero_after_seconds)}s): scaling to zero")
            limit = bound(p, Limit(0), current, placeable_replicas, clamp=False)
        elif rec.stay_zero:
            notes.append(f"at zero and demand not above the activation threshold {_num(act)}: staying at zero")
            limit = bound(p, Limit(0), current, placeable_replicas, clamp=False)
        else:
            stab, why = stabilize(p, history, raw, current, now)
            if why:
                notes.append(why)
            limit = rate_limit(p, st, stab, current, now, None if reading.slo else reading.value, reading.slo)
            if limit.panic:
                notes.append(f"panic mode: queue above {_num(p.panic_threshold)}x the capacity of "
                             f"{_replicas(current)}, skipping the scale-up step limit")
            limit = bound(p, limit, current, placeable_replicas)
            if lo == 0 and not rec.active and limit.desired > 0:
                idle_for = max(0.0, now - last_active)
                notes.append(f"demand at or below the activation threshold {_num(act)} for {_num(idle_for)}s: "
                             f"scale to zero in {_num(p.scale_to_zero_after_seconds - idle_for)}s unless it rises")
        if limit.message:
            notes.append(limit.message)
    if not reading.usable and limit.message:
        notes.append(limit.message)

    desired = limit.desired
    direction: Direction | None = "Up" if desired > current else "Down" if desired < current else None
    notes.append(f"desired {desired}")
    up_events, down_events = st.scale_up_events, st.scale_down_events
    last_scale_time, last_scale_direction = st.last_scale_time, st.last_scale_direction
    if direction == "Up":
        up_events = up_events + ((float(now), desired - current),)
    elif direction == "Down":
        down_events = down_events + ((float(now), current - desired),)
    if direction is not None:
        last_scale_time, last_scale_direction = float(now), direction
    new_state = replace(
        st,
        recommendations=_dedupe(history + ((float(now), raw),)) if raw is not None else history,
        scale_up_events=up_events,
        scale_down_events=down_events,
        last_active_time=last_active,
        last_scale_time=last_scale_time,
        last_scale_direction=last_scale_direction,
        last_decision_time=float(now),
    ).pruned(now, p.longest_window_seconds, p.longest_period_seconds)
    return Decision(
        desired=desired,
        state=new_state,
        reason="; ".join(notes),
        direction=direction,
        limited=limit.message is not None,
        limited_reason=limit.message,
        scaling_active=reading.usable,
        inactive_reason=inactive,
        active_condition_reason=reading.active_reason,
        limited_condition_reason=limit.reason,
        recommendation=raw,
        panic=limit.panic,
        slo_mode=reading.slo,
        slo=slo_out,
        sizing=sizing,
        scale_down_count=max(0, current - desired),
    )
