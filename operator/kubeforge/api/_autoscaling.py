"""InferenceService autoscaling: the metric, the queue-depth target or the latency SLO, the scale-up
and scale-down rules, and where Prometheus is (``spec.autoscaling``)."""

from __future__ import annotations

from enum import Enum
from typing import Optional

from pydantic import ConfigDict, Field, model_validator

from ._base import KubeModel, schema_default
from ._serving_start import Predictive

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"


class Metric(str, Enum):
    """Metric is the queue metric that drives autoscaling in queue-depth mode (no slo)."""

    VLLM_WAITING = "VLLMWaiting"
    SGLANG_QUEUE = "SGLangQueue"
    CUSTOM = "Custom"


class ScaleUpRules(KubeModel):
    """ScaleUpRules limit how fast replicas are added."""

    stabilization_window_seconds: int = Field(
        default=0,
        ge=0,
        le=3600,
        description="stabilizationWindowSeconds: the service scales up to the lowest "
        "recommendation of this window, so short spikes do not add replicas (0 reacts at once).",
    )
    max_step: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="maxStep is the most replicas added in one periodSeconds (the Kubernetes "
        "HPA's Pods scale-up policy), in queue-depth mode. The default, 1 per 10 s, paces the "
        "ramp to how long a GPU replica takes to start: replicas asked for a burst that drains "
        "before they are Ready only cost money. A queue above 8 times what the current "
        "replicas carry at targetPerReplica lifts the limit (panic mode, after Knative's). "
        "With slo set it does not apply: the queue model computes the replicas needed and "
        "scale-up goes there in one step (bounded by maxReplicas and the pool).",
    )
    period_seconds: int = Field(
        default=10,
        ge=1,
        le=1800,
        description="periodSeconds is the period that maxStep applies to (queue-depth mode).",
    )


class ScaleDownRules(KubeModel):
    """ScaleDownRules limit how fast replicas are removed."""

    stabilization_window_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="stabilizationWindowSeconds: the service scales down to the highest "
        "recommendation of this window, so a short lull does not remove replicas. The "
        "default, 300, is the Kubernetes HPA's: bursts that recur within 5 minutes find the "
        "replicas still there instead of scaling down and back up. It applies in both modes; "
        "with slo it is what holds the replicas through a day's noise.",
    )
    max_step: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="maxStep is the most replicas removed in one periodSeconds (both modes; "
        "each removed replica is drained first).",
    )
    period_seconds: int = Field(
        default=30,
        ge=1,
        le=1800,
        description="periodSeconds is the period that maxStep applies to.",
    )
    peak_hold_seconds: int = Field(
        default=0,
        ge=0,
        le=86400,
        description="peakHoldSeconds: for this long after a recommendation, the service keeps "
        "at least peakHoldPercent of it (rounded up), under the stabilization window, so that "
        "bursts which recur within the hold find most of their replicas still there when a "
        "replica takes minutes to start (both modes). 0 (the default) turns it off. On the "
        "autoscaling bench's day (5-minute starts) 7200 at 60 percent reached 99% of requests "
        "within the TTFT target without a minReplicas floor, for less than any scale-down "
        "window or floor did; it costs replicas after one-off bursts.",
    )
    peak_hold_percent: int = Field(
        default=60,
        ge=1,
        le=100,
        description="peakHoldPercent is the share of the highest recommendation of the last "
        "peakHoldSeconds that is kept, in percent. The default, 60, is the cheapest share that "
        "reached 99% on the autoscaling bench's day (50 did not).",
    )


class LatencySLO(KubeModel):
    """LatencySLO is the latency the service is sized for, measured from vLLM's histograms.

    The names are vLLM's metric names (vllm:time_to_first_token_seconds,
    vllm:inter_token_latency_seconds) in the unit they are exported in, so a target reads
    directly against histogram_quantile over them; llm-d and NVIDIA Dynamo call the same
    quantities TTFT and ITL."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.timeToFirstTokenSeconds) || has(self.interTokenLatencySeconds)",
                    "message": "slo needs timeToFirstTokenSeconds, interTokenLatencySeconds or both",
                }
            ]
        }
    )

    time_to_first_token_seconds: Optional[float] = Field(
        default=None,
        gt=0,
        le=600,
        description="timeToFirstTokenSeconds is the time-to-first-token target at percentile, "
        "in seconds: queue wait plus prefill, as vllm:time_to_first_token_seconds measures it "
        "(an interactive chat often takes 0.5 to 2). It cannot be below the prefill time of "
        "the prompts: SLOMet then says PrefillAboveTarget.",
    )
    inter_token_latency_seconds: Optional[float] = Field(
        default=None,
        gt=0,
        le=60,
        description="interTokenLatencySeconds is the inter-token-latency target at percentile, "
        "in seconds between two output tokens (vllm:inter_token_latency_seconds; reading "
        "speed is about 0.1 to 0.2). More requests per replica raise it, so it bounds how "
        "many requests each replica may run.",
    )
    percentile: int = Field(
        default=90,
        ge=50,
        le=99,
        description="percentile is the percentile both targets are for: 90 means 90 in 100 "
        "requests (tokens, for ITL) within the target. 90, the default, leaves the slowest "
        "tenth (the longest prompts, the first seconds of a burst) out; 99 keeps headroom "
        "against bursts, at the cost of more replicas.",
    )
    window_seconds: int = Field(
        default=60,
        ge=10,
        le=900,
        description="windowSeconds is the window of the measured rates and percentiles "
        "(Prometheus rate and histogram_quantile range); at least 4 scrape intervals. "
        "Shorter reacts sooner and measures noisier.",
    )


DEFAULT_TARGET_PER_REPLICA = 4.0
"""Queue length per replica of queue-depth mode when targetPerReplica is left out (vLLM's
waiting requests; KServe's KEDA examples target a few waiting requests per replica)."""


class Autoscaling(KubeModel):
    """Autoscaling sizes the service from metrics read from Prometheus. Without slo
    (queue-depth mode, the default): desired = ceil(metric / targetPerReplica). With slo:
    the replicas a queue model needs to meet the latency targets. Always within minReplicas
    and maxReplicas."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.metric != 'Custom' || (has(self.query) && self.query != '')",
                    "message": "autoscaling.query is required when autoscaling.metric is Custom",
                },
                {
                    # Refused when created or changed; an object stored before this rule (whose
                    # targetPerReplica the schema defaulted) is ratcheted, and ScalingActive says
                    # the field is ignored.
                    "rule": "!has(self.slo) || !has(self.targetPerReplica) || (oldSelf.hasValue() && "
                    "has(oldSelf.value().targetPerReplica) && oldSelf.value().targetPerReplica == self.targetPerReplica)",
                    "optionalOldSelf": True,
                    "message": "autoscaling.targetPerReplica is queue-depth mode's target; with autoscaling.slo the "
                    "latency targets size the service: set one of them",
                },
                {
                    "rule": "!has(self.slo) || self.metric == 'VLLMWaiting'",
                    "message": "autoscaling.slo reads vLLM's metrics: leave autoscaling.metric at "
                    "VLLMWaiting (the default) when slo is set",
                },
                {
                    "rule": "!has(self.predictive) || self.predictive.mode == 'Off' || self.metric == 'VLLMWaiting'",
                    "message": "autoscaling.predictive forecasts vLLM's admission rate: leave autoscaling.metric at "
                    "VLLMWaiting (the default) when predictive.mode is not Off",
                },
            ]
        }
    )

    prometheus_url: str = Field(
        default=DEFAULT_PROMETHEUS_URL,
        alias="prometheusURL",
        min_length=1,
        max_length=2048,
        pattern=r"^https?://",
        description="prometheusURL is the base URL of the Prometheus HTTP API to query. The "
        "operator may restrict it to a list of allowed prefixes (chart value "
        "prometheus.allowedURLs); a failed query is reported by status code and a fixed "
        "message, never with the response's content.",
    )
    metric: Metric = Field(
        default=Metric.VLLM_WAITING,
        description="metric is the queue of queue-depth mode: VLLMWaiting (sum of "
        "vllm:num_requests_waiting over the service's pods), SGLangQueue (sum of "
        "sglang:num_queue_reqs) or Custom (query). Whatever the metric, the requests the "
        "activator holds while the service has no ready replica "
        "(kubeforge_activator_queue_length) are added to it, so a service at zero replicas "
        "comes back when requests arrive. With slo set it must stay VLLMWaiting.",
    )
    query: Optional[str] = Field(
        default=None,
        max_length=4096,
        description="query is a PromQL expression returning one number: the queue length of "
        "the whole service. Required when metric is Custom, ignored otherwise. The "
        "placeholders {namespace} and {name} are replaced by the service's namespace and name. "
        "While no replica is ready the activator's held requests are added to it, unless the "
        "query reads kubeforge_activator_queue_length itself.",
    )
    target_per_replica: Optional[float] = Field(
        default=None,
        gt=0,
        description="targetPerReplica is the queue length that one replica should carry "
        "(queue-depth mode). Default 4. Not allowed with slo, which sizes the service from "
        "latency targets instead; an object stored with both before that rule keeps working, "
        "slo wins, and the ScalingActive condition says targetPerReplica is ignored.",
    )
    tolerance: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="tolerance is the relative change (metric per replica against target) "
        "below which the replica count is left alone (queue-depth mode).",
    )
    activation_threshold: float = Field(
        default=0.0,
        ge=0,
        description="activationThreshold: a service at zero replicas is scaled up only when "
        "the metric is above this value (as KEDA's activation threshold). With slo, the metric "
        "is the requests in the service: waiting, held by the activator and running.",
    )
    scale_to_zero_after_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description="scaleToZeroAfterSeconds is how long the metric must stay at or below "
        "activationThreshold before a service with minReplicas 0 is scaled to zero.",
    )
    polling_interval_seconds: int = Field(
        default=5,
        ge=1,
        le=300,
        description="pollingIntervalSeconds is how often the metric is read.",
    )
    scale_up: ScaleUpRules = Field(
        default_factory=ScaleUpRules,
        description="scaleUp limits how fast replicas are added.",
        json_schema_extra=schema_default(ScaleUpRules),
    )
    scale_down: ScaleDownRules = Field(
        default_factory=ScaleDownRules,
        description="scaleDown limits how fast replicas are removed.",
        json_schema_extra=schema_default(ScaleDownRules),
    )
    slo: Optional[LatencySLO] = Field(
        default=None,
        description="slo switches the service to SLO mode: from the measured arrival rate, "
        "time a request runs and what one replica holds, an M/M/c queue model computes the "
        "replicas that keep the time-to-first-token percentile at its target (and a linear "
        "model of ITL against running requests, the inter-token latency), and scale-up goes "
        "there at once. Left out, the service scales on queue depth (metric).",
    )
    predictive: Predictive = Field(
        default_factory=Predictive,
        description="predictive asks for replicas one start ahead of the forecast demand (never fewer).",
        json_schema_extra=schema_default(Predictive),
    )

    @property
    def queue_target(self) -> float:
        """The queue length per replica of queue-depth mode: targetPerReplica, else
        :data:`DEFAULT_TARGET_PER_REPLICA`."""
        return DEFAULT_TARGET_PER_REPLICA if self.target_per_replica is None else self.target_per_replica

    @property
    def ignored_target(self) -> bool:
        """Whether targetPerReplica is set beside slo (only on an object stored before the rule
        that refuses it): slo wins and the field is ignored."""
        return self.slo is not None and self.target_per_replica is not None

    @model_validator(mode="after")
    def _custom_needs_query(self) -> "Autoscaling":
        if self.metric == Metric.CUSTOM and not self.query:
            raise ValueError("autoscaling.query is required when autoscaling.metric is Custom")
        if self.slo is not None and self.metric != Metric.VLLM_WAITING:
            raise ValueError("autoscaling.slo reads vLLM's metrics: leave autoscaling.metric at "
                             "VLLMWaiting (the default) when slo is set")
        if self.predictive.mode.value != "Off" and self.metric != Metric.VLLM_WAITING:
            raise ValueError("autoscaling.predictive forecasts vLLM's admission rate: leave autoscaling.metric at "
                             "VLLMWaiting (the default) when predictive.mode is not Off")
        return self
