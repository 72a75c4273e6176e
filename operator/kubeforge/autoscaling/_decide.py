"""One autoscaling decision: desired replicas from the policy, the carried state, the metric and now."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ._policy import AutoscalingPolicy
from ._state import AutoscalerState, Direction, _dedupe

__all__ = ["Decision", "decide"]

# Float slack for the tolerance band and the ceil(), so that 4.4 / 4.0 sits inside a 0.1 band
# and 8.000000000001 / 4 does not ask for a third replica.
_EPS = 1e-9


@dataclass(frozen=True)
class Decision:
    """The outcome of :func:`decide`.

    Attributes:
        desired: Replicas to run now, an integer >= 0.
        state: The state to pass to the next :func:`decide` call for this service. It
            assumes ``desired`` is applied: if the scale is not written, keep the old state.
        reason: One human sentence with the numbers behind ``desired``, for events, logs and
            the ``ScalingActive`` / ``ScalingLimited`` condition messages.
        direction: ``"Up"`` when ``desired > current_replicas``, ``"Down"`` when lower,
            ``None`` when unchanged.
        limited: Whether a bound held ``desired`` back from what the metric asked for
            (the HPA ``ScalingLimited`` condition): ``max_replicas``, ``min_replicas``, a step
            limit, or the pool's placeable capacity.
        limited_reason: Human message for that limit, ``None`` when not limited.
        limited_condition_reason: CamelCase reason for the ``ScalingLimited`` condition:
            ``DesiredWithinRange`` (not limited), ``TooManyReplicas``, ``TooFewReplicas``,
            ``ScaleUpLimit``, ``ScaleDownLimit`` (the HPA's reasons) or
            ``InsufficientCapacity`` (ours: the pool cannot place more replicas).
        scaling_active: Whether the metric was usable (the HPA ``ScalingActive`` condition).
        inactive_reason: Why it was not, ``None`` when active.
        active_condition_reason: CamelCase reason for ``ScalingActive``:
            ``ValidMetricFound``, ``FailedGetMetric`` (no value) or ``InvalidMetric``
            (NaN, infinite or negative).
        recommendation: The raw recommendation stored for the stabilization windows
            (after tolerance, activation and scale to zero), ``None`` when the metric was
            unusable.
        panic: Whether Knative-style panic mode skipped the scale-up step limit.
    """

    desired: int
    state: AutoscalerState
    reason: str
    direction: Direction | None
    limited: bool
    limited_reason: str | None
    scaling_active: bool
    inactive_reason: str | None
    active_condition_reason: str = "ValidMetricFound"
    limited_condition_reason: str = "DesiredWithinRange"
    recommendation: int | None = None
    panic: bool = False


def _num(x: float) -> str:
    """Short human form of a number: 12, 4.4, 0.33."""
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _metric_problem(metric: object) -> tuple[str, str] | None:
    """(condition reason, message) when the metric cannot drive a decision, else None."""
    if metric is None:
        return "FailedGetMetric", "no metric value"
    if isinstance(metric, bool) or not isinstance(metric, (int, float)):
        return "InvalidMetric", f"metric value {metric!r} is not a number"
    if not math.isfinite(metric):
        return "InvalidMetric", f"metric value {metric} is not finite"
    if metric < 0:
        return "InvalidMetric", f"metric value {_num(metric)} is negative"
    return None


def _sum_after(events: tuple[tuple[float, int], ...], cutoff: float) -> int:
    return sum(n for t, n in events if t > cutoff)


def decide(
    policy: AutoscalingPolicy,
    state: AutoscalerState,
    current_replicas: int,
    metric: float | None,
    now: float,
    placeable_replicas: int | None = None,
) -> Decision:
    """Decide how many replicas an InferenceService should run now.

    Pure: no clock, no I/O; ``now`` and the previous ``state`` come in, the new state goes out.

    The metric is the **total** queue across the service (e.g. ``sum(vllm:num_requests_waiting)``),
    in requests; the per-replica target divides it. The steps, in order:

    1. **Unusable metric** (``None``, NaN, infinite, negative): hold ``current_replicas``
       (still clamped into ``[min, max]``), ``scaling_active`` False. Missing data never scales
       anything to zero, and it restarts the scale-to-zero idle clock (unknown counts as
       active). Nothing is recorded for the stabilization windows (the HPA skips a cycle
       whose metric fetch failed the same way).
    2. **Out of bounds**: ``current > max`` goes straight to ``max``, ``current < min``
       straight to ``min`` (the HPA controller's first check, before any metric math).
    3. **Raw recommendation** ``ceil(metric / target)`` (Kubernetes HPA algorithm with an
       ``AverageValue`` target; equal to KEDA's). Inside the **tolerance** band,
       ``|metric / (current * target) - 1| <= tolerance``, it is ``current`` (HPA, default
       0.1). When the metric is above the **activation threshold** it is at least 1; at zero
       replicas with the metric at or below it, it stays 0 (KEDA activation).
    4. **Scale to zero** (``min_replicas == 0``): once the metric has been at or below the
       activation threshold for ``scale_to_zero_after_seconds`` (KEDA ``cooldownPeriod``,
       Knative's scale-to-zero grace period), the decision is 0 directly, past stabilization
       and step limits, as KEDA does: the idle period is itself the stabilization. Until then
       the service keeps at least 1 replica.
    5. **Stabilization** (HPA ``behavior``): the scale-up target is the minimum
       recommendation over the last ``scale_up_stabilization_seconds``, the scale-down target
       the maximum over the last ``scale_down_stabilization_seconds``; the result is
       ``current`` moved up to the former or down to the latter. A fresh state is seeded with
       ``(now, current_replicas)`` as the HPA controller seeds from ``status.desiredReplicas``,
       so an operator restart does not allow an immediate scale-down.
    6. **Step limits** (HPA ``behavior`` policies, simplified to one ``Pods`` policy per
       direction): at most ``max_step`` replicas per ``period_seconds`` relative to the count
       at the start of the period, which is ``current`` minus the replicas this autoscaler
       added, plus those it removed, within the period (the HPA's own computation from its
       scale events). No ``Percent`` policies and no ``selectPolicy``.
       **Panic mode** (Knative KPA, optional via ``panic_threshold``): when
       ``metric > panic_threshold * current * target`` the scale-up step limit is skipped.
    7. **Bounds**: clamp to ``[min_replicas, max_replicas]``; ``limited`` with the HPA's
       ``TooManyReplicas`` / ``TooFewReplicas``, or ``ScaleUpLimit`` / ``ScaleDownLimit`` for
       step limits.
    8. **Capacity**: when scaling up past ``placeable_replicas``, ask for
       ``max(current, placeable)`` instead: never ask for replicas the pool cannot place,
       never scale down because of capacity. ``limited`` with ``InsufficientCapacity`` and a
       message counting the missing replicas and GPUs.

    Args:
        policy: The service's autoscaling policy.
        state: The state returned by the previous decision, or ``AutoscalerState()``.
        current_replicas: Replicas the service has now (its Deployment's ``spec.replicas``),
            >= 0.
        metric: Total queue across the service, requests; ``None`` when it could not be read.
        now: Current time, unix seconds.
        placeable_replicas: How many replicas **in total** (running ones included) the pool
            can hold right now; ``None`` for unknown or unlimited.

    Returns:
        The :class:`Decision`, with the state for the next call.

    Raises:
        ValueError: When ``current_replicas`` or ``placeable_replicas`` is negative or not an
            integer, or ``now`` is not finite.
    """
    if isinstance(current_replicas, bool) or not isinstance(current_replicas, int) or current_replicas < 0:
        raise ValueError(f"current_replicas must be an integer >= 0, got {current_replicas!r}")
    if placeable_replicas is not None and (
        isinstance(placeable_replicas, bool) or not isinstance(placeable_replicas, int) or placeable_replicas < 0
    ):
        raise ValueError(f"placeable_replicas must be None or an integer >= 0, got {placeable_replicas!r}")
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError(f"now must be a finite number of unix seconds, got {now!r}")

    p = policy
    current = current_replicas
    lo, hi = p.min_replicas, p.max_replicas
    st = state.pruned(now, p.longest_window_seconds, p.longest_period_seconds)
    if state.last_decision_time is None:
        st = replace(st, recommendations=_dedupe(st.recommendations + ((now, current),)))
    history = st.recommendations

    notes: list[str] = []
    limit_code = "DesiredWithinRange"
    limit_msg: str | None = None
    raw: int | None = None
    panic = False

    problem = _metric_problem(metric)
    if problem is not None:
        active_code, problem_msg = problem
        last_active = float(now)
        desired = min(max(current, lo), hi)
        notes.append(f"{problem_msg}; holding {_replicas(current)}")
        if desired != current:
            notes.append(f"moving into [minReplicas {lo}, maxReplicas {hi}]: {desired}")
        inactive_reason: str | None = f"{problem_msg}; scaling paused at {_replicas(current)}"
    else:
        assert metric is not None
        m = float(metric)
        active_code, inactive_reason = "ValidMetricFound", None
        target, act = p.target_per_replica, p.activation_threshold
        active = m > act
        if active or st.last_active_time is None:
            last_active = float(now)
        else:
            last_active = st.last_active_time
        idle_for = max(0.0, now - last_active)

        raw = max(0, math.ceil(m / target - _EPS))
        in_band = current > 0 and abs(m / (current * target) - 1.0) <= p.tolerance + _EPS
        if in_band:
            raw = current
        if active:
            raw = max(raw, 1)
        to_zero = lo == 0 and not active and current > 0 and idle_for >= p.scale_to_zero_after_seconds
        if to_zero or (current == 0 and not active):
            raw = 0
        base = (
            f"queue {_num(m)} on {_replicas(current)} (target {_num(target)} per replica) "
            f"recommends {raw}"
        )
        if in_band:
            base += f" (within the {_num(p.tolerance * 100)}% tolerance)"
        notes.append(base)

        if current > hi:
            desired = hi
            notes.append(f"{_replicas(current)} above maxReplicas {hi}: scaling to {hi}")
        elif current < lo:
            desired = lo
            notes.append(f"{_replicas(current)} below minReplicas {lo}: scaling to {lo}")
        elif to_zero:
            desired = 0
            notes.append(
                f"queue at or below the activation threshold {_num(act)} for {_num(idle_for)}s "
                f"(>= {_num(p.scale_to_zero_after_seconds)}s): scaling to zero"
            )
        elif current == 0 and not active:
            desired = 0
            notes.append(f"at zero and queue not above the activation threshold {_num(act)}: staying at zero")
        else:
            up_cut = now - p.scale_up_stabilization_seconds
            down_cut = now - p.scale_down_stabilization_seconds
            up_rec = min([raw] + [n for t, n in history if t > up_cut])
            down_rec = max([raw] + [n for t, n in history if t > down_cut])
            stab = current
            if stab < up_rec:
                stab = up_rec
            if stab > down_rec:
                stab = down_rec
            if stab > raw:
                notes.append(
                    f"held at {stab} by the {_num(p.scale_down_stabilization_seconds)}s scale-down "
                    f"stabilization window (highest recent recommendation {down_rec})"
                )
            elif stab < raw:
                notes.append(
                    f"held at {stab} by the {_num(p.scale_up_stabilization_seconds)}s scale-up "
                    f"stabilization window (lowest recent recommendation {up_rec})"
                )
            desired = stab
            if stab > current:
                cut = now - p.scale_up_period_seconds
                start = current - _sum_after(st.scale_up_events, cut) + _sum_after(st.scale_down_events, cut)
                step_limit = max(start + p.scale_up_max_step, current)
                panic = (
                    p.panic_threshold > 0
                    and active
                    and m > p.panic_threshold * current * target
                    and step_limit < min(stab, hi)
                )
                if panic:
                    notes.append(
                        f"panic mode: queue above {_num(p.panic_threshold)}x the capacity of "
                        f"{_replicas(current)}, skipping the scale-up step limit"
                    )
                if not panic and step_limit < hi:
                    ceiling = step_limit
                    code = "ScaleUpLimit"
                    msg = (
                        f"scale-up limited to {p.scale_up_max_step} per {_num(p.scale_up_period_seconds)}s "
                        f"from {start} at the start of the period: {ceiling} of {stab}"
                    )
                else:
                    ceiling = hi
                    code = "TooManyReplicas"
                    msg = f"{stab} wanted, more than maxReplicas {hi}"
                if stab > ceiling:
                    desired, limit_code, limit_msg = ceiling, code, msg
            elif stab < current:
                cut = now - p.scale_down_period_seconds
                start = current + _sum_after(st.scale_down_events, cut) - _sum_after(st.scale_up_events, cut)
                step_limit = min(start - p.scale_down_max_step, current)
                floor = lo if lo > 0 else 1  # min 0: hold one replica until the idle period ends
                if floor < step_limit:
                    bottom = step_limit
                    code = "ScaleDownLimit"
                    msg = (
                        f"scale-down limited to {p.scale_down_max_step} per "
                        f"{_num(p.scale_down_period_seconds)}s from {start} at the start of the period: "
                        f"{bottom} instead of {stab}"
                    )
                elif lo > 0:
                    bottom = lo
                    code = "TooFewReplicas"
                    msg = f"{stab} wanted, less than minReplicas {lo}"
                else:
                    bottom, code, msg = 1, "", ""
                if stab < bottom:
                    desired = bottom
                    if code:
                        limit_code, limit_msg = code, msg
            if lo == 0 and not active and desired > 0:
                left = p.scale_to_zero_after_seconds - idle_for
                notes.append(
                    f"queue at or below the activation threshold {_num(act)} for {_num(idle_for)}s: "
                    f"scale to zero in {_num(left)}s unless it rises"
                )
            if limit_msg:
                notes.append(limit_msg)

    # Capacity: never ask for replicas the pool cannot place, never scale down because of it.
    if placeable_replicas is not None and desired > current and desired > placeable_replicas:
        capped = max(current, placeable_replicas)
        gpr = p.gpus_per_replica
        need, can, short = desired - current, capped - current, desired - capped
        limit_code = "InsufficientCapacity"
        limit_msg = (
            f"{desired} wanted but the pool can place {_replicas(placeable_replicas)} in total: "
            f"needs {need} more {'replica' if need == 1 else 'replicas'} ({_gpus(need * gpr)}); "
            f"the pool can place {can} more ({_gpus(can * gpr)}), "
            f"{short} short ({_gpus(short * gpr)})"
        )
        notes.append(limit_msg)
        desired = capped

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
        limited=limit_msg is not None,
        limited_reason=limit_msg,
        scaling_active=problem is None,
        inactive_reason=inactive_reason,
        active_condition_reason=active_code,
        limited_condition_reason=limit_code,
        recommendation=raw,
        panic=panic,
    )
