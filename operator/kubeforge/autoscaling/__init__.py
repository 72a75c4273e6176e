"""kubeforge.autoscaling: desired InferenceService replicas from queue depth or latency SLOs, and time.

The pure core (no I/O, no clock) is what this package exports::

    from kubeforge.autoscaling import AutoscalingPolicy, AutoscalerState, decide

    policy = AutoscalingPolicy.from_spec(spec)  # the parsed InferenceServiceSpec, API defaults applied
    signals = await rt.metrics.signals(url, namespace, name, ...)  # the runtime's MetricsSource
    d = decide(policy, state, current_replicas=2, metric=signals, now=time.time(),
               placeable_replicas=5)
    # apply d.desired (drain d.scale_down_count replicas first), keep d.state for the next
    # call; kubeforge.serving.scaling_status writes the ScalingActive / ScalingLimited / SLOMet
    # conditions from d's reasons

Two modes. **Queue depth** (no ``spec.autoscaling.slo``, the default): the metric is the
**total** queue across the service and ``desired = ceil(total / target_per_replica)`` (KEDA
``AverageValue`` semantics), paced by the HPA's step limits with Knative's panic mode.
**SLO** (``slo`` set): an M/M/c queue model (Erlang C) sizes the service for the
time-to-first-token percentile and a linear model of inter-token latency against the batch
for the ITL percentile, and scale-up goes to that count in one decision
(:mod:`kubeforge.autoscaling._queue_model` cites and states the model). Both share the
HPA's named steps (:mod:`kubeforge.autoscaling._steps`: read metrics -> desired -> stabilize
-> rate-limit -> bound), KEDA's activation threshold and scale to zero, the stabilization
windows. **Predictive scale-up** (``spec.autoscaling.predictive``,
:mod:`kubeforge.autoscaling._forecast`) adds a floor from the demand forecast one measured start
ahead; it never scales down. The defaults are the API's (``kubeforge.api``), read through
:meth:`AutoscalingPolicy.from_spec`; ``python -m e2e.bench.autoscaling`` measures them against
KEDA + HPA, llm-d's saturation autoscaler and a Dynamo-planner-like load mode.

No I/O here: what to ask Prometheus and how to read its answers (PromQL templates and
rendering, response parsing, the activator's held requests) is :mod:`kubeforge.autoscaling.prometheus`
(pure, not imported here); the requests are the runtime's, through the
:class:`~kubeforge.runtime.metrics_source.MetricsSource` protocol (Prometheus in the operator, a
fake in tests), as the HPA controller's ``metrics.MetricsClient``.
"""

from . import _reasons as reasons
from ._decide import Decision, decide
from ._forecast import MAX_GROWTH, DemandHistory, Forecast, PredictivePolicy, forecast_demand, forecast_replicas
from ._policy import PANIC_THRESHOLD, AutoscalingPolicy, SLOPolicy
from ._queue_model import erlang_c, fit_itl, itl_concurrency, replicas_for_wait, update_itl_fit, wait_quantile
from ._signals import SIGNAL_NAMES, Signals
from ._slo import SLOSizing, SLOStatus, size_for_slo, slo_status
from ._state import MAX_EVENTS, MAX_RECOMMENDATIONS, AutoscalerState, Direction, Sample, fresh_value
from ._steps import Limit, Reading, Recommendation, bound, peak_floor, rate_limit, read_metrics, recommend, stabilize

__all__ = [
    "MAX_EVENTS",
    "MAX_GROWTH",
    "MAX_RECOMMENDATIONS",
    "PANIC_THRESHOLD",
    "SIGNAL_NAMES",
    "AutoscalerState",
    "AutoscalingPolicy",
    "Decision",
    "DemandHistory",
    "Forecast",
    "PredictivePolicy",
    "forecast_demand",
    "forecast_replicas",
    "Direction",
    "Limit",
    "Reading",
    "Recommendation",
    "SLOPolicy",
    "SLOSizing",
    "SLOStatus",
    "Sample",
    "Signals",
    "bound",
    "decide",
    "erlang_c",
    "fit_itl",
    "fresh_value",
    "itl_concurrency",
    "peak_floor",
    "rate_limit",
    "read_metrics",
    "reasons",
    "recommend",
    "replicas_for_wait",
    "size_for_slo",
    "slo_status",
    "stabilize",
    "update_itl_fit",
    "wait_quantile",
]
