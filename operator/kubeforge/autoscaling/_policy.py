"""The autoscaling policy: the InferenceService spec fields the core reads, as plain data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._forecast import PredictivePolicy

if TYPE_CHECKING:  # the core reads the parsed model's attributes; it imports nothing from api/ at run time
    from ..api import InferenceServiceSpec

__all__ = ["AutoscalingPolicy", "PANIC_THRESHOLD", "SLOPolicy"]

#: Panic mode's threshold: the queue, as a multiple of what the current replicas carry at the
#: target (``metric > PANIC_THRESHOLD * current * target``), above which the scale-up step
#: limit is lifted. Not an API field: the one core default the InferenceService spec does not
#: carry. The formula is Knative KPA's panic mode; Knative's default threshold, 200%
#: (``panic-threshold-percentage``), is measured on *concurrency* (running plus waiting
#: requests against a per-pod concurrency target), where twice the target means twice the
#: capacity. On the *waiting* queue alone, twice ``targetPerReplica`` is a few seconds of
#: backlog, routine in bursty LLM traffic: with 2.0 the jump fired on most bursts of the Azure
#: LLM inference trace and the replicas it added were then held for the whole 300 s
#: scale-down window, costing more replica-minutes than KEDA + HPA defaults on 13 of the 15
#: shapes of ``python -m e2e.bench.autoscaling --sweep`` (up to 18% more). Of the values measured
#: there (``--policy panic_threshold=...``: 0, 2, 4, 6, 8, 12), 8.0 is the lowest that stays at
#: or below KEDA + HPA's replica-minutes and reversals on all 15, while still lifting the
#: 1-per-10 s pacing for a service far behind a sustained surge (the sweep's 8x and 20x load
#: cases with up to 64 replicas: p95 queue wait 4-6 s, against 46 s and 169 s with panic
#: mode off).
PANIC_THRESHOLD = 8.0


@dataclass(frozen=True)
class SLOPolicy:
    """Latency targets (``spec.autoscaling.slo``): the service is sized so that they hold.

    Attributes:
        ttft_seconds: Time-to-first-token target at ``percentile``, s (> 0), or ``None``.
        itl_seconds: Inter-token-latency target at ``percentile``, s (> 0), or ``None``.
        percentile: The percentile both targets are for, in [50, 100).
        window_seconds: Window of the measured rates and percentiles, s (> 0).

    Raises:
        ValueError: When a value is out of range or neither target is given.
    """

    ttft_seconds: float | None
    itl_seconds: float | None
    percentile: float
    window_seconds: float

    def __post_init__(self) -> None:
        problems = []
        for name in ("ttft_seconds", "itl_seconds"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
                problems.append(f"{name} must be None or a finite number > 0, got {v!r}")
        if self.ttft_seconds is None and self.itl_seconds is None:
            problems.append("at least one of ttft_seconds and itl_seconds is needed")
        if not (isinstance(self.percentile, (int, float)) and 50 <= self.percentile < 100):
            problems.append(f"percentile must be in [50, 100), got {self.percentile!r}")
        if not (isinstance(self.window_seconds, (int, float)) and math.isfinite(self.window_seconds)
                and self.window_seconds > 0):
            problems.append(f"window_seconds must be > 0, got {self.window_seconds!r}")
        if problems:
            raise ValueError("invalid SLOPolicy: " + "; ".join(problems))


@dataclass(frozen=True)
class AutoscalingPolicy:
    """How one InferenceService scales, in plain snake_case (the API spells them camelCase).

    Build it from the parsed spec with :meth:`from_spec`: the defaults of every field live in
    the API models (``kubeforge.api.InferenceServiceSpec`` and its ``Autoscaling``,
    ``ScaleUpRules`` and ``ScaleDownRules``), never here. Only ``panic_threshold``, which the
    API does not expose, has a default (:data:`PANIC_THRESHOLD`).

    The metric the policy is written against is the **total** queue across the service (for
    vLLM, ``sum(vllm:num_requests_waiting)`` over its pods), in requests. The per-replica
    target turns it into a replica count the way KEDA's ``AverageValue`` metric target and the
    Kubernetes HPA's ``AverageValue`` external metric do: ``desired = ceil(total / target)``.

    Attributes:
        min_replicas: Lower bound on replicas (``minReplicas``). ``0`` allows scale to zero
            (KEDA ``minReplicaCount: 0``).
        max_replicas: Upper bound on replicas (``maxReplicas``), at least 1 and at least
            ``min_replicas``.
        target_per_replica: Queue length per replica that the service aims for
            (``targetPerReplica``), requests, > 0.
        tolerance: Relative band around the target inside which the replica count is kept
            (``tolerance``), a fraction >= 0. Kubernetes HPA
            ``--horizontal-pod-autoscaler-tolerance``.
        activation_threshold: Queue length that counts as "active" (``activationThreshold``),
            requests >= 0. Scale from zero happens only when the metric is strictly above it,
            and the idle clock for scale to zero runs while the metric is at or below it. KEDA
            ``activationThreshold``.
        scale_to_zero_after_seconds: How long the metric must stay at or below the activation
            threshold before replicas go to zero (``scaleToZeroAfterSeconds``), seconds >= 0.
            Only used when ``min_replicas`` is 0. KEDA ``cooldownPeriod``; Knative's
            scale-to-zero grace period plays the same part.
        scale_up_stabilization_seconds: Scale-up stabilization window, seconds >= 0: the
            scale-up target is the *minimum* recommendation seen in the window. HPA
            ``behavior.scaleUp.stabilizationWindowSeconds``.
        scale_up_max_step: At most this many replicas added per ``scale_up_period_seconds``,
            >= 1. HPA ``behavior.scaleUp.policies[{type: Pods, value, periodSeconds}]``.
        scale_up_period_seconds: The scale-up policy's period, seconds > 0.
        scale_down_stabilization_seconds: Scale-down stabilization window, seconds >= 0: the
            scale-down target is the *maximum* recommendation seen in the window. HPA
            ``behavior.scaleDown.stabilizationWindowSeconds``.
        scale_down_max_step: At most this many replicas removed per
            ``scale_down_period_seconds``, >= 1.
        scale_down_period_seconds: The scale-down policy's period, seconds > 0.
        gpus_per_replica: GPUs one replica needs, >= 0 (``gpusPerReplica``); only used to word
            the capacity limit ("needs 2 more replicas (16 GPUs)").
        panic_threshold: Knative KPA panic mode: when the queue is more than this multiple of
            the current capacity (``metric > panic_threshold * current * target``), the
            scale-up step limit is skipped so a burst is met in one decision (stabilization,
            bounds and capacity still apply). ``0`` disables panic mode; otherwise >= 1.
            Default :data:`PANIC_THRESHOLD` (8.0; why not Knative's 2.0 is written there).
        slo: The latency targets (``spec.autoscaling.slo``): set, the service scales in SLO
            mode (a queue model sizes it, see :func:`kubeforge.autoscaling.decide`); ``None``
            (no ``slo`` in the spec, not a default) keeps the queue-depth mode.
        predictive_mode: ``spec.autoscaling.predictive.mode``: ``"Off"`` (the default here
            means absent, as ``slo``'s None), ``"Trend"`` or ``"Seasonal"``: the forecast one
            lead time ahead sets a floor under the count (:mod:`kubeforge.autoscaling._forecast`,
            :attr:`predictive`).
        predictive_window_seconds: ``predictive.trendWindowSeconds``, s (> 0 unless Off; 0.0,
            absent, when Off).
        lead_seconds: ``predictive.leadSeconds``, s, or None: the measured p90 start.
        forecast_only: ``predictive.forecastOnly``: forecast and report, never act.
        standby_replicas: ``spec.standby.replicas``: replicas kept asleep besides the serving
            ones; :func:`~kubeforge.autoscaling.decide` passes it on (``Decision.standby``), the
            serving plan keeps them.
        peak_hold_seconds: ``scaleDown.peakHoldSeconds``, s >= 0: how long the highest
            recommendation sets a floor of ``peak_hold_fraction`` of it (0: off, the absent
            value here; :func:`~kubeforge.autoscaling._steps.peak_floor`).
        peak_hold_fraction: ``scaleDown.peakHoldPercent`` / 100, in (0, 1] (0.0, absent, when off).

    Raises:
        ValueError: From ``__post_init__`` when a field is out of range (see each field).
    """

    min_replicas: int
    max_replicas: int
    target_per_replica: float
    tolerance: float
    activation_threshold: float
    scale_to_zero_after_seconds: float
    scale_up_stabilization_seconds: float
    scale_up_max_step: int
    scale_up_period_seconds: float
    scale_down_stabilization_seconds: float
    scale_down_max_step: int
    scale_down_period_seconds: float
    gpus_per_replica: int
    panic_threshold: float = PANIC_THRESHOLD
    slo: SLOPolicy | None = None
    predictive_mode: str = "Off"
    predictive_window_seconds: float = 0.0
    lead_seconds: float | None = None
    forecast_only: bool = False
    standby_replicas: int = 0
    peak_hold_seconds: float = 0.0
    peak_hold_fraction: float = 0.0

    @classmethod
    def from_spec(cls, spec: InferenceServiceSpec) -> AutoscalingPolicy:
        """The policy of a parsed InferenceService spec (API defaults already applied).

        Args:
            spec: The validated ``kubeforge.api.InferenceServiceSpec``; its fields that the
                user left out hold the API defaults, which are therefore the policy's.

        Returns:
            The policy. Every field is copied (integer seconds become floats); nothing is
            defaulted here except ``panic_threshold``.

        Raises:
            ValueError: When a value is out of the core's range (the API's own bounds are
                stricter, so a spec that validated does not raise).
        """
        a = spec.autoscaling
        slo = None
        if a.slo is not None:
            slo = SLOPolicy(
                ttft_seconds=None if a.slo.time_to_first_token_seconds is None else float(a.slo.time_to_first_token_seconds),
                itl_seconds=None if a.slo.inter_token_latency_seconds is None else float(a.slo.inter_token_latency_seconds),
                percentile=float(a.slo.percentile),
                window_seconds=float(a.slo.window_seconds),
            )
        pr = a.predictive
        on = pr.mode.value != "Off"  # Off: every predictive field absent, as slo's None
        return cls(
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            target_per_replica=float(a.queue_target),
            tolerance=float(a.tolerance),
            activation_threshold=float(a.activation_threshold),
            scale_to_zero_after_seconds=float(a.scale_to_zero_after_seconds),
            scale_up_stabilization_seconds=float(a.scale_up.stabilization_window_seconds),
            scale_up_max_step=a.scale_up.max_step,
            scale_up_period_seconds=float(a.scale_up.period_seconds),
            scale_down_stabilization_seconds=float(a.scale_down.stabilization_window_seconds),
            scale_down_max_step=a.scale_down.max_step,
            scale_down_period_seconds=float(a.scale_down.period_seconds),
            gpus_per_replica=spec.replica_gpus,
            slo=slo,
            predictive_mode=pr.mode.value,
            predictive_window_seconds=float(pr.trend_window_seconds) if on else 0.0,
            lead_seconds=float(pr.lead_seconds) if on and pr.lead_seconds is not None else None,
            forecast_only=pr.forecast_only and on,
            standby_replicas=spec.standby.replicas,
            peak_hold_seconds=float(a.scale_down.peak_hold_seconds),
            peak_hold_fraction=a.scale_down.peak_hold_percent / 100.0 if a.scale_down.peak_hold_seconds else 0.0,
        )

    def __post_init__(self) -> None:
        problems: list[str] = []

        def finite(name: str) -> float:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                problems.append(f"{name} must be a number, got {value!r}")
                return math.nan
            if not math.isfinite(value):
                problems.append(f"{name} must be finite, got {value!r}")
            return float(value)

        def integer(name: str) -> int:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(f"{name} must be an integer, got {value!r}")
                return 0
            return value

        lo, hi = integer("min_replicas"), integer("max_replicas")
        if lo < 0:
            problems.append(f"min_replicas must be >= 0, got {lo}")
        if hi < 1 or hi < lo:
            problems.append(f"max_replicas must be >= 1 and >= min_replicas ({lo}), got {hi}")
        if not finite("target_per_replica") > 0:
            problems.append(f"target_per_replica must be > 0, got {self.target_per_replica!r}")
        for name in (
            "tolerance",
            "activation_threshold",
            "scale_to_zero_after_seconds",
            "scale_up_stabilization_seconds",
            "scale_down_stabilization_seconds",
        ):
            if not finite(name) >= 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("scale_up_period_seconds", "scale_down_period_seconds"):
            if not finite(name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("scale_up_max_step", "scale_down_max_step"):
            if integer(name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if integer("gpus_per_replica") < 0:
            problems.append(f"gpus_per_replica must be >= 0, got {self.gpus_per_replica!r}")
        panic = finite("panic_threshold")
        if not (panic == 0 or panic >= 1):
            problems.append(f"panic_threshold must be 0 (off) or >= 1, got {self.panic_threshold!r}")
        if self.slo is not None and not isinstance(self.slo, SLOPolicy):
            problems.append(f"slo must be an SLOPolicy or None, got {self.slo!r}")
        if self.predictive_mode != "Off":
            try:
                self.predictive  # noqa: B018  (validates the predictive fields)
            except ValueError as e:
                problems.append(str(e))
        if integer("standby_replicas") < 0:
            problems.append(f"standby_replicas must be >= 0, got {self.standby_replicas!r}")
        if not finite("peak_hold_seconds") >= 0:
            problems.append(f"peak_hold_seconds must be >= 0, got {self.peak_hold_seconds!r}")
        frac = finite("peak_hold_fraction")
        if self.peak_hold_seconds and not 0 < frac <= 1:
            problems.append(f"peak_hold_fraction must be in (0, 1] when peak_hold_seconds is set, got {frac!r}")
        if problems:
            raise ValueError("invalid AutoscalingPolicy: " + "; ".join(problems))

    @property
    def predictive(self) -> PredictivePolicy | None:
        """The predictive fields as a :class:`~kubeforge.autoscaling.PredictivePolicy`, None when Off.

        Raises:
            ValueError: An unknown mode, a window that is not > 0 or a lead that is not > 0.
        """
        if self.predictive_mode == "Off":
            return None
        return PredictivePolicy(self.predictive_mode, self.predictive_window_seconds, self.lead_seconds,
                                self.forecast_only)

    @property
    def longest_window_seconds(self) -> float:
        """The longest stabilization window or peak hold, seconds: how long recommendations are kept."""
        return max(self.scale_up_stabilization_seconds, self.scale_down_stabilization_seconds, self.peak_hold_seconds)

    @property
    def longest_period_seconds(self) -> float:
        """The longest step-limit period, seconds: how long scale events are kept."""
        return max(self.scale_up_period_seconds, self.scale_down_period_seconds)
