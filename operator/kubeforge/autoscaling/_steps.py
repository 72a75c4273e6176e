"""The named steps of one decision, as the Kubernetes HPA controller has them: read metrics ->
desired -> stabilize -> rate-limit -> bound. Each is a pure function, tested alone;
:func:`kubeforge.autoscaling.decide` composes them."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from . import _reasons as R
from ._policy import AutoscalingPolicy
from ._signals import Signals
from ._slo import SLOSizing, size_for_slo
from ._state import AutoscalerState

__all__ = ["Limit", "Reading", "Recommendation", "bound", "peak_floor", "rate_limit", "read_metrics", "recommend",
           "stabilize"]

# Float slack for the tolerance band and the ceil(), so that 4.4 / 4.0 sits inside a 0.1 band
# and 8.000000000001 / 4 does not ask for a third replica.
_EPS = 1e-9


def _num(x: float) -> str:
    """Short human form of a number: 12, 4.4, 0.33."""
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


@dataclass(frozen=True)
class Reading:
    """Step 1's outcome: what the decision reads, or why it cannot.

    Attributes:
        slo: Whether the decision runs in SLO mode (an SLO policy and :class:`Signals`).
        value: Queue-depth mode: the total queue, requests; SLO mode: the requests in the
            system (queued + running), which the activation threshold is compared with.
        signals: The signals (SLO mode, or queue mode fed by ``read_signals``).
        active_reason: :data:`VALID_METRIC_FOUND`, :data:`FAILED_GET_METRIC` or
            :data:`INVALID_METRIC`.
        problem: Why the reading is unusable, ``None`` when usable.
        note: A remark for the decision's message (e.g. SLO mode given a bare number).
    """

    slo: bool
    value: float | None
    signals: Signals | None
    active_reason: str
    problem: str | None = None
    note: str | None = None

    @property
    def usable(self) -> bool:
        return self.problem is None


def _number_problem(metric: object) -> tuple[str, str] | None:
    if metric is None:
        return R.FAILED_GET_METRIC, "no metric value"
    if isinstance(metric, bool) or not isinstance(metric, (int, float)):
        return R.INVALID_METRIC, f"metric value {metric!r} is not a number"
    if not math.isfinite(metric):
        return R.INVALID_METRIC, f"metric value {metric} is not finite"
    if metric < 0:
        return R.INVALID_METRIC, f"metric value {_num(metric)} is negative"
    return None


_EMPTY_AT_ZERO = ("no series at 0 replicas (no pod reports, no request is held): read as 0, "
                  "as KEDA's Prometheus scaler does (ignoreNullValues: true)")


def read_metrics(policy: AutoscalingPolicy, metric: float | Signals | None, current: int | None = None) -> Reading:
    """Step 1: check what came in.

    Queue-depth mode reads a number (the total queue) or ``Signals.queue``. SLO mode needs
    :class:`Signals` with the queue (vLLM's waiting or the activator's held) or the admission
    rate; given a bare number it scales on that queue in queue-depth mode instead and says so.

    At zero replicas (``current`` 0) a successful Prometheus answer with no series for the
    queue (``Signals.absent``) reads as 0: no pod exists to report vLLM's series and the
    activator reports none while it holds nothing. KEDA's Prometheus scaler reads every empty
    answer as 0 (``ignoreNullValues``, default true); kubeforge does so only at zero, so that
    running replicas nobody scrapes show ``ScalingActive=False`` instead of a silent 0.

    Returns:
        The :class:`Reading`; unusable ones carry the HPA's reason and a message.
    """
    at_zero_empty = current == 0 and isinstance(metric, Signals) and (
        "queue" in metric.absent or {"waiting", "held"} <= set(metric.absent))
    if policy.slo is not None and isinstance(metric, Signals):
        sig = replace(metric, held=0.0) if at_zero_empty and metric.queued is None else metric
        queued, adm = sig.queued, sig.value("admission_rate")
        if queued is None and adm is None:
            why = sig.error("waiting") or sig.error("admission_rate") or "no series"
            return Reading(True, None, sig, R.FAILED_GET_METRIC,
                           f"no vLLM or activator signal for the service ({why})")
        return Reading(True, (queued or 0.0) + (sig.value("running") or 0.0), sig, R.VALID_METRIC_FOUND,
                       note=_EMPTY_AT_ZERO if sig is not metric else None)
    note = None
    signals = metric if isinstance(metric, Signals) else None
    if signals is not None:
        value: object = signals.queue
        if value is None and at_zero_empty:
            return Reading(False, 0.0, signals, R.VALID_METRIC_FOUND, None, _EMPTY_AT_ZERO)
        if value is None:
            why = signals.error("queue") or "no value"
            return Reading(False, None, signals, R.FAILED_GET_METRIC, f"no metric value ({why})")
    else:
        value = metric
        if policy.slo is not None:
            note = "SLO mode needs the service's signals (read_signals): scaling on the queue depth meanwhile"
    problem = _number_problem(value)
    if problem is not None:
        return Reading(False, None, signals, problem[0], problem[1], note)
    return Reading(False, float(value), signals, R.VALID_METRIC_FOUND, None, note)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Recommendation:
    """Step 2's outcome: the raw recommendation and the activity that shapes it.

    Attributes:
        raw: Replicas recommended before stabilization (stored for the windows).
        active: Whether the demand is above the activation threshold.
        last_active: The new idle clock origin, unix seconds.
        to_zero: The service has been idle long enough: go to zero now.
        stay_zero: At zero and not active: stay there.
        note: The sentence behind ``raw``.
        sizing: SLO mode's queue-model outcome.
    """

    raw: int
    active: bool
    last_active: float
    to_zero: bool
    stay_zero: bool
    note: str
    sizing: SLOSizing | None = None


def recommend(policy: AutoscalingPolicy, reading: Reading, state: AutoscalerState, current: int,
              now: float) -> Recommendation:
    """Step 2: the desired replicas from the reading, before stabilization.

    Queue-depth mode: ``ceil(metric / targetPerReplica)`` (HPA ``AverageValue``, KEDA), kept
    at ``current`` inside the tolerance band. SLO mode: the queue model's count
    (:func:`kubeforge.autoscaling._slo.size_for_slo`), or ``current`` while it lacks data.
    Both: at least 1 above the activation threshold (KEDA activation); 0 at zero replicas
    below it, and 0 once idle (at or below it, and, when the signals say so, no request running)
    for ``scale_to_zero_after_seconds`` with ``min_replicas`` 0 (KEDA ``cooldownPeriod``).

    Args:
        reading: A usable :class:`Reading`.
    """
    p = policy
    assert reading.value is not None
    m = reading.value
    act = p.activation_threshold
    sizing = None
    if reading.slo:
        sig = reading.signals
        assert sig is not None and p.slo is not None
        active = m > act or (sig.value("admission_rate") or 0.0) > 0
        sizing = size_for_slo(p.slo, sig, state, current, p.max_replicas, now, p.tolerance)
        raw = current if sizing.needed is None else sizing.needed
        note = sizing.message + ("" if sizing.needed is not None else f"; holding {_replicas(current)}")
    else:
        # Requests still being generated are activity too (Knative counts in-flight requests):
        # a service whose queue is empty but whose replicas are busy is not idle, and going to
        # zero then would abort them and send the next requests into a cold start.
        running = reading.signals.value("running") if reading.signals is not None else None
        active = m > act or (running or 0.0) > 0
        target = p.target_per_replica
        raw = max(0, math.ceil(m / target - _EPS))
        in_band = current > 0 and abs(m / (current * target) - 1.0) <= p.tolerance + _EPS
        if in_band:
            raw = current
        note = f"queue {_num(m)} on {_replicas(current)} (target {_num(target)} per replica) recommends"
    last_active = float(now) if (active or state.last_active_time is None) else state.last_active_time
    if active:
        raw = max(raw, 1)
    idle_for = max(0.0, now - last_active)
    to_zero = p.min_replicas == 0 and not active and current > 0 and idle_for >= p.scale_to_zero_after_seconds
    stay_zero = current == 0 and not active
    if to_zero or stay_zero:
        raw = 0
    if not reading.slo:
        note += f" {raw}" + (f" (within the {_num(p.tolerance * 100)}% tolerance)" if in_band else "")
    return Recommendation(raw, active, last_active, to_zero, stay_zero, note, sizing)


def stabilize(policy: AutoscalingPolicy, recommendations: tuple[tuple[float, int], ...], raw: int, current: int,
              now: float) -> tuple[int, str | None]:
    """Step 3: HPA ``behavior`` stabilization windows.

    The scale-up target is the lowest recommendation of the last
    ``scale_up_stabilization_seconds`` (``raw`` included), the scale-down target the highest
    of the last ``scale_down_stabilization_seconds``; ``current`` moves up to the former or
    down to the latter.

    Returns:
        ``(replicas, note)``; the note says which window held the count, else ``None``.
    """
    p = policy
    up_rec = min([raw] + [n for t, n in recommendations if t > now - p.scale_up_stabilization_seconds])
    down_rec = max([raw] + [n for t, n in recommendations if t > now - p.scale_down_stabilization_seconds])
    stab = current
    if stab < up_rec:
        stab = up_rec
    if stab > down_rec:
        stab = down_rec
    if stab > raw:
        return stab, (f"held at {stab} by the {_num(p.scale_down_stabilization_seconds)}s scale-down "
                      f"stabilization window (highest recent recommendation {down_rec})")
    if stab < raw:
        return stab, (f"held at {stab} by the {_num(p.scale_up_stabilization_seconds)}s scale-up "
                      f"stabilization window (lowest recent recommendation {up_rec})")
    return stab, None


def peak_floor(policy: AutoscalingPolicy, recommendations: tuple[tuple[float, int], ...], raw: int,
               now: float) -> tuple[int, str] | None:
    """Step 3b, the peak hold (``scaleDown.peakHoldSeconds``, off at 0): at least
    ``ceil(peak_hold_fraction x peak)``, ``peak`` the highest recommendation of the last
    ``peak_hold_seconds`` (``raw`` included), so a burst that recurs within the hold finds most
    of its replicas. ``None`` when off or when the floor is not above ``raw``.

    Why a floor below the peak for a long hold rather than the peak for a longer scale-down
    window: on bench-autoscaling's day (5-minute starts, 2026-12-07) the missed requests came
    in bursts whose replicas the 300 s window had let go, and 80 % of them in minutes needing
    no more than the most of the hour before; holding the whole peak for 30 minutes cost more
    than ``minReplicas`` at 99 %, 75 % of it for 2 hours less than any window or floor (the
    numbers: e2e/README-autoscaling.md, "Reading it"). The floor is recorded nowhere: it is
    recomputed from the recommendations each decision, so it never holds itself up.

    Returns:
        ``(floor, note)`` or None.
    """
    p = policy
    if p.peak_hold_seconds <= 0 or p.peak_hold_fraction <= 0:
        return None
    peak = max([raw] + [n for t, n in recommendations if t > now - p.peak_hold_seconds])
    floor = math.ceil(p.peak_hold_fraction * peak - 1e-9)
    if floor <= raw:
        return None
    return floor, (f"held at {floor} by the peak hold ({p.peak_hold_fraction:.0%} of {peak}, the highest "
                   f"recommendation of the last {_num(p.peak_hold_seconds)}s)")


@dataclass(frozen=True)
class Limit:
    """Outcome of :func:`rate_limit` and :func:`bound`: replicas, the ``ScalingLimited``
    reason (:data:`DESIRED_WITHIN_RANGE` when not limited), its message, and panic mode."""

    desired: int
    reason: str = R.DESIRED_WITHIN_RANGE
    message: str | None = None
    panic: bool = False


def _sum_after(events: tuple[tuple[float, int], ...], cutoff: float) -> int:
    return sum(n for t, n in events if t > cutoff)


def rate_limit(policy: AutoscalingPolicy, state: AutoscalerState, target: int, current: int, now: float,
               queue: float | None = None, slo: bool = False) -> Limit:
    """Step 4: HPA ``behavior`` policies, one ``Pods`` policy per direction.

    At most ``max_step`` replicas per ``period_seconds`` relative to the count at the start of
    the period (``current`` minus what this autoscaler added, plus what it removed, within
    it: the HPA's computation from its scale events). A limit at or beyond the bound that
    :func:`bound` enforces anyway (``max_replicas`` up; ``min_replicas``, or 1, down) is not
    reported. **Panic mode** (Knative KPA; queue-depth mode): with ``queue > panic_threshold
    * current * targetPerReplica`` the scale-up limit is skipped. **SLO mode** has no
    scale-up limit: the queue model's count is reached in one decision.

    Args:
        target: The stabilized count.
        queue: Queue-depth mode's metric (for panic mode).
        slo: SLO mode.
    """
    p = policy
    if target > current:
        if slo:
            return Limit(target)
        cut = now - p.scale_up_period_seconds
        start = current - _sum_after(state.scale_up_events, cut) + _sum_after(state.scale_down_events, cut)
        step_limit = max(start + p.scale_up_max_step, current)
        panic = (p.panic_threshold > 0 and queue is not None and queue > p.activation_threshold
                 and queue > p.panic_threshold * current * p.target_per_replica
                 and step_limit < min(target, p.max_replicas))
        if not panic and step_limit < p.max_replicas and target > step_limit:
            return Limit(step_limit, R.SCALE_UP_LIMIT,
                         f"scale-up limited to {p.scale_up_max_step} per {_num(p.scale_up_period_seconds)}s "
                         f"from {start} at the start of the period: {step_limit} of {target}")
        return Limit(target, panic=panic)
    if target < current:
        cut = now - p.scale_down_period_seconds
        start = current + _sum_after(state.scale_down_events, cut) - _sum_after(state.scale_up_events, cut)
        step_limit = min(start - p.scale_down_max_step, current)
        floor = p.min_replicas if p.min_replicas > 0 else 1
        if floor < step_limit and target < step_limit:
            return Limit(step_limit, R.SCALE_DOWN_LIMIT,
                         f"scale-down limited to {p.scale_down_max_step} per {_num(p.scale_down_period_seconds)}s "
                         f"from {start} at the start of the period: {step_limit} instead of {target}")
    return Limit(target)


def bound(policy: AutoscalingPolicy, limit: Limit, current: int, placeable: int | None, clamp: bool = True) -> Limit:
    """Step 5: replica bounds, then the pool's capacity.

    ``[min_replicas, max_replicas]`` in the direction of the change (HPA ``TooFewReplicas`` /
    ``TooManyReplicas``; with ``min_replicas`` 0 the floor is 1 here: zero comes only from the
    idle period, and a count already out of bounds is moved by :func:`decide` first). Then never
    ask for replicas the pool cannot place: a scale-up past ``placeable`` (replicas in total)
    gets ``max(current, placeable)`` (:data:`INSUFFICIENT_CAPACITY`, counting the missing
    replicas and GPUs), except from zero: a service at zero with demand (requests the
    activator holds) asks for one replica even when none fits now, so that replica waits for
    GPUs in admission's queue (placed the moment room appears) and the status says what it waits
    for instead of "scaled to zero while idle"; never a scale-down because of capacity. A count
    held (desired = current) that is more than ``placeable`` stays :data:`INSUFFICIENT_CAPACITY`
    too, unchanged, for as long as its replicas wait for GPUs: the condition does not turn back
    to "within range" one decision after the step up while nothing was placed.

    Args:
        limit: :func:`rate_limit`'s outcome (its reason stands unless a bound moves it).
        clamp: Apply the replica bounds (off for the direct paths: out of bounds, to zero).
    """
    p = policy
    desired, reason, msg = limit.desired, limit.reason, limit.message
    if clamp:
        if desired > current and desired > p.max_replicas:
            reason, msg = R.TOO_MANY_REPLICAS, f"{desired} wanted, more than maxReplicas {p.max_replicas}"
            desired = p.max_replicas
        floor = p.min_replicas if p.min_replicas > 0 else 1
        if desired < current and desired < floor:
            if p.min_replicas > 0:
                reason, msg = R.TOO_FEW_REPLICAS, f"{desired} wanted, less than minReplicas {p.min_replicas}"
            desired = floor
    if placeable is not None and desired >= current and desired > placeable:
        gpr = p.gpus_per_replica
        reason = R.INSUFFICIENT_CAPACITY
        msg = f"{desired} wanted but the pool can place {_replicas(placeable)} in total: "
        if desired > current:
            fits = max(current, placeable)
            capped = max(fits, 1 if current == 0 else 0)
            need, can, short = desired - current, fits - current, desired - fits
            msg += (f"needs {need} more {'replica' if need == 1 else 'replicas'} ({_gpus(need * gpr)}); "
                    f"the pool can place {can} more ({_gpus(can * gpr)}), {short} short ({_gpus(short * gpr)})")
            if capped > fits:
                msg += "; from zero, 1 replica is asked for anyway and waits for GPUs"
            desired = capped
        else:
            # holding a count the pool cannot place (replicas asked for earlier, still waiting for
            # GPUs): still limited by capacity, for as long as that lasts, not only on the step up
            short = desired - placeable
            msg += f"{short} {'replica waits' if short == 1 else 'replicas wait'} for GPUs ({_gpus(short * gpr)})"
    return Limit(desired, reason, msg, limit.panic)
