"""kubeforge.autoscaling: desired InferenceService replicas from queue metrics and time.

The pure core (no I/O, no clock) is what this package exports::

    from kubeforge.autoscaling import AutoscalingPolicy, AutoscalerState, decide

    policy = AutoscalingPolicy.from_spec(spec)  # the parsed InferenceServiceSpec, API defaults applied
    d = decide(policy, state, current_replicas=2, metric=37.0, now=time.time(),
               placeable_replicas=5)
    # apply d.desired, keep d.state for the next call, write d.reason and the conditions

The metric is the **total** queue across the service (``sum(vllm:num_requests_waiting)``),
and ``desired = ceil(total / target_per_replica)`` (KEDA ``AverageValue`` semantics).
Rules come from the Kubernetes HPA (algorithm, tolerance, ``behavior`` stabilization windows
and policies, ``ScalingActive`` / ``ScalingLimited`` reasons), KEDA (activation threshold,
scale to zero after a cooldown) and Knative's KPA (panic mode); :func:`decide` lists them.
The defaults are the API's (``kubeforge.api``), read through :meth:`AutoscalingPolicy.from_spec`;
``e2e/bench_autoscaling.py`` measures them against KEDA + HPA defaults (``--sweep``: on 15
shapes of load).

Reading the metric from Prometheus is I/O and lives in :mod:`kubeforge.autoscaling.prometheus`
(not imported here).
"""

from ._decide import Decision, decide
from ._policy import PANIC_THRESHOLD, AutoscalingPolicy
from ._state import MAX_EVENTS, MAX_RECOMMENDATIONS, AutoscalerState, Direction, Sample, fresh_value

__all__ = [
    "MAX_EVENTS",
    "MAX_RECOMMENDATIONS",
    "PANIC_THRESHOLD",
    "AutoscalerState",
    "AutoscalingPolicy",
    "Decision",
    "Direction",
    "Sample",
    "decide",
    "fresh_value",
]
