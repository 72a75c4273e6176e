"""The autoscaling policy: the InferenceService spec fields the core reads, as plain data."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AutoscalingPolicy"]


@dataclass(frozen=True)
class AutoscalingPolicy:
    """How one InferenceService scales, in plain snake_case (the API spells them camelCase).

    The metric the policy is written against is the **total** queue across the service (for
    vLLM, ``sum(vllm:num_requests_waiting)`` over its pods), in requests. The per-replica
    target turns it into a replica count the way KEDA's ``AverageValue`` metric target and the
    Kubernetes HPA's ``AverageValue`` external metric do: ``desired = ceil(total / target)``.

    Attributes:
        min_replicas: Lower bound on replicas (``minReplicas``). ``0`` allows scale to zero
            (KEDA ``minReplicaCount: 0``). Default 1.
        max_replicas: Upper bound on replicas (``maxReplicas``), at least 1 and at least
            ``min_replicas``. Default 4.
        target_per_replica: Queue length per replica that the service aims for
            (``targetPerReplica``), requests, > 0. Default 4.0.
        tolerance: Relative band around the target inside which the replica count is kept
            (``tolerance``), a fraction >= 0. Kubernetes HPA
            ``--horizontal-pod-autoscaler-tolerance``, default 0.1.
        activation_threshold: Queue length that counts as "active" (``activationThreshold``),
            requests >= 0. Scale from zero happens only when the metric is strictly above it,
            and the idle clock for scale to zero runs while the metric is at or below it. KEDA
            ``activationThreshold``. Default 0.0.
        scale_to_zero_after_seconds: How long the metric must stay at or below the activation
            threshold before replicas go to zero (``scaleToZeroAfterSeconds``), seconds >= 0.
            Only used when ``min_replicas`` is 0. KEDA ``cooldownPeriod`` (default 300 s there
            too); Knative's scale-to-zero grace period plays the same part. Default 300.
        scale_up_stabilization_seconds: Scale-up stabilization window, seconds >= 0: the
            scale-up target is the *minimum* recommendation seen in the window. HPA
            ``behavior.scaleUp.stabilizationWindowSeconds`` (default 0). Default 0.
        scale_up_max_step: At most this many replicas added per ``scale_up_period_seconds``,
            >= 1. HPA ``behavior.scaleUp.policies[{type: Pods, value: 4, periodSeconds: 15}]``.
            Default 4.
        scale_up_period_seconds: The scale-up policy's period, seconds > 0. Default 15.
        scale_down_stabilization_seconds: Scale-down stabilization window, seconds >= 0: the
            scale-down target is the *maximum* recommendation seen in the window. HPA
            ``behavior.scaleDown.stabilizationWindowSeconds`` (HPA's default is 300). Default 60.
        scale_down_max_step: At most this many replicas removed per
            ``scale_down_period_seconds``, >= 1. Default 1.
        scale_down_period_seconds: The scale-down policy's period, seconds > 0. Default 30.
        gpus_per_replica: GPUs one replica needs, >= 0; only used to word the capacity
            limit ("needs 2 more replicas (16 GPUs)"). Default 1.
        panic_threshold: Knative KPA panic mode: when the queue is more than this multiple of
            the current capacity (``metric > panic_threshold * current * target``), the
            scale-up step limit is skipped so a burst is met in one decision (stabilization,
            bounds and capacity still apply). ``0`` disables panic mode; otherwise >= 1.
            Knative's ``panic-threshold-percentage`` defaults to 200%. Default 2.0.

    Raises:
        ValueError: From ``__post_init__`` when a field is out of range (see each field).
    """

    min_replicas: int = 1
    max_replicas: int = 4
    target_per_replica: float = 4.0
    tolerance: float = 0.1
    activation_threshold: float = 0.0
    scale_to_zero_after_seconds: float = 300.0
    scale_up_stabilization_seconds: float = 0.0
    scale_up_max_step: int = 4
    scale_up_period_seconds: float = 15.0
    scale_down_stabilization_seconds: float = 60.0
    scale_down_max_step: int = 1
    scale_down_period_seconds: float = 30.0
    gpus_per_replica: int = 1
    panic_threshold: float = 2.0

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
        if problems:
            raise ValueError("invalid AutoscalingPolicy: " + "; ".join(problems))

    @property
    def longest_window_seconds(self) -> float:
        """The longest stabilization window, seconds: how long recommendations are kept."""
        return max(self.scale_up_stabilization_seconds, self.scale_down_stabilization_seconds)

    @property
    def longest_period_seconds(self) -> float:
        """The longest step-limit period, seconds: how long scale events are kept."""
        return max(self.scale_up_period_seconds, self.scale_down_period_seconds)
