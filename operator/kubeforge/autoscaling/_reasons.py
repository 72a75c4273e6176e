"""Condition types and reasons the autoscaler reports: one constant each, used once (JobSet style).

The runtime writes them into ``status.conditions`` as they are; code that reacts to an
outcome reads the :class:`kubeforge.autoscaling.Decision` fields that hold these constants,
never a message.
"""

from __future__ import annotations

from typing import Final

# --- condition types -------------------------------------------------------------------------

#: Whether the autoscaler could read what it needs (the Kubernetes HPA's condition).
SCALING_ACTIVE: Final = "ScalingActive"
#: Whether a bound held the replica count back from what the metric asked (the HPA's condition).
SCALING_LIMITED: Final = "ScalingLimited"
#: Whether the measured latency percentiles meet ``spec.autoscaling.slo`` (SLO mode only).
SLO_MET: Final = "SLOMet"

# --- ScalingActive reasons (the HPA's) -------------------------------------------------------

VALID_METRIC_FOUND: Final = "ValidMetricFound"
FAILED_GET_METRIC: Final = "FailedGetMetric"
INVALID_METRIC: Final = "InvalidMetric"

# --- ScalingLimited reasons ------------------------------------------------------------------

DESIRED_WITHIN_RANGE: Final = "DesiredWithinRange"
TOO_MANY_REPLICAS: Final = "TooManyReplicas"
TOO_FEW_REPLICAS: Final = "TooFewReplicas"
SCALE_UP_LIMIT: Final = "ScaleUpLimit"
SCALE_DOWN_LIMIT: Final = "ScaleDownLimit"
#: Ours: the pool cannot place the replicas asked for.
INSUFFICIENT_CAPACITY: Final = "InsufficientCapacity"

# --- SLOMet reasons --------------------------------------------------------------------------

#: True: every configured percentile is at or below its target.
TARGET_MET: Final = "TargetMet"
#: False: the time-to-first-token percentile is above its target and requests queue.
TIME_TO_FIRST_TOKEN_ABOVE_TARGET: Final = "TimeToFirstTokenAboveTarget"
#: False: the time-to-first-token target is below the prefill time alone; more replicas
#: cannot meet it (a faster replica, shorter prompts or a looser target can).
PREFILL_ABOVE_TARGET: Final = "PrefillAboveTarget"
#: False: the inter-token-latency percentile is above its target.
INTER_TOKEN_LATENCY_ABOVE_TARGET: Final = "InterTokenLatencyAboveTarget"
#: Unknown: no request completed its first token in the window, nothing to measure.
NO_RECENT_REQUESTS: Final = "NoRecentRequests"

SCALING_ACTIVE_REASONS: Final = (VALID_METRIC_FOUND, FAILED_GET_METRIC, INVALID_METRIC)
SCALING_LIMITED_REASONS: Final = (DESIRED_WITHIN_RANGE, TOO_MANY_REPLICAS, TOO_FEW_REPLICAS, SCALE_UP_LIMIT,
                                  SCALE_DOWN_LIMIT, INSUFFICIENT_CAPACITY)
SLO_MET_REASONS: Final = (TARGET_MET, TIME_TO_FIRST_TOKEN_ABOVE_TARGET, PREFILL_ABOVE_TARGET,
                          INTER_TOKEN_LATENCY_ABOVE_TARGET, NO_RECENT_REQUESTS)
