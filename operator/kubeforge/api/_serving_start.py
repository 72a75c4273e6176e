"""Replicas that take minutes to start (issue 28): the InferenceService's spec for predictive
scale-up and warm standby, and the status that measures starts.

**Starts.** Every replica group's start is measured from what the cluster shows of its pods
(:class:`GroupStart`): ``PodScheduled``, ``Initialized``, the containers' ``state.running.startedAt``
and ``Ready``, each in seconds after the group got its nodes (``admittedAt``). Kubernetes keeps
no image-pulled time in a pod's status (the kubelet's ``Pulled`` Event says it, as a best-effort
Event); a container starts as soon as its image is there, so ``startedSeconds`` bounds the pull.
vLLM exports no start-time series on ``/metrics`` (its load and engine-init times are log lines
only: ``Model loading took ... seconds``), so ``readySeconds`` (the readiness probe, ``/health``)
is the engine's own Ready. The service keeps the last :data:`MAX_START_SAMPLES` starts and wakes
in ``status.startTime`` (:class:`StartTimes`), so an operator restart loses none of them.

**Predictive scale-up** (:class:`Predictive`) and **warm standby** (:class:`Standby`): see their
fields. Defaults live here only.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Optional

from pydantic import Field

from ._base import KubeModel

MAX_START_SAMPLES = 20
"""Starts (and wakes) a service keeps in ``status.startTime``: enough for a p90 that moves with
the last day's starts, bounded so the status stays small."""
DEFAULT_TREND_WINDOW_SECONDS = 600
"""The recent window the trend is fitted over (10 minutes: about two cold starts of a large
model, long enough that one burst does not make a trend)."""
MAX_STANDBY_REPLICAS = 100


class PredictiveMode(str, Enum):
    """PredictiveMode is how the demand one start ahead is forecast."""

    OFF = "Off"
    TREND = "Trend"
    SEASONAL = "Seasonal"


class Predictive(KubeModel):
    """Predictive asks for replicas one start ahead of the demand: the forecast demand at now +
    the lead time (the service's measured p90 start, ``status.startTime.cold.p90Seconds``) sets
    a floor under the replica count. It only adds or keeps replicas, never removes one: the
    reactive autoscaler alone scales down (as AWS EC2 predictive scaling raises only the
    group's minimum capacity)."""

    mode: PredictiveMode = Field(
        default=PredictiveMode.OFF,
        description="mode is Off (the default), Trend (a least-squares line through the admission "
        "rate of the last trendWindowSeconds, extended one lead time ahead, as PromQL's "
        "predict_linear does) or Seasonal (today's level times the growth the service saw one lead "
        "time ahead at the same time yesterday, or last week, where it stands out of that day's "
        "scatter; Trend where less than a day of history exists). The demand is vLLM's admission rate "
        "(rate of vllm:time_to_first_token_seconds_count) read from prometheusURL.",
    )
    forecast_only: bool = Field(
        default=False,
        description="forecastOnly computes the forecast and shows it in status.forecast without "
        "acting on it (AWS predictive scaling's ForecastOnly), to judge it before trusting it.",
    )
    lead_seconds: Optional[int] = Field(
        default=None,
        ge=1,
        le=7200,
        description="leadSeconds is how far ahead to forecast. Left out: the p90 of the service's "
        "measured starts (status.startTime.cold.p90Seconds); until a start was measured the "
        "forecast waits.",
    )
    trend_window_seconds: int = Field(
        default=DEFAULT_TREND_WINDOW_SECONDS,
        ge=60,
        le=7200,
        description="trendWindowSeconds is the recent history the trend is fitted over (and "
        "today's level measured on), in seconds.",
    )


class Standby(KubeModel):
    """Standby keeps replicas started but asleep (vLLM sleep mode level 1: weights in host
    memory, KV cache freed), out of the Service, so that a scale-up wakes one in seconds
    instead of starting one in minutes. A standby replica holds its GPUs: the service's
    status.standbyGPUs and its GPUPool's status.standbyGPUs show what the insurance costs."""

    replicas: int = Field(
        default=0,
        ge=0,
        le=MAX_STANDBY_REPLICAS,
        description="replicas is how many replicas to keep asleep besides the serving ones "
        "(maxReplicas bounds the serving ones only; standby ones are kept whatever the count, "
        "at zero too). A scale-up wakes a standby replica first, then a new one is started to "
        "refill the count. Needs engine vllm: the operator adds --enable-sleep-mode and "
        "VLLM_SERVER_DEV_MODE=1 (which serves /sleep, /wake_up and /is_sleeping) to the leader; "
        "turning it on or off rolls the replicas out once. The pod needs host memory for the "
        "weights.",
    )


class StandbyState(str, Enum):
    """StandbyState is where a standby replica is: Pending (starting, or told to sleep and not
    asleep yet), Asleep, or Waking (taken into service, not awake yet)."""

    PENDING = "Pending"
    ASLEEP = "Asleep"
    WAKING = "Waking"


def _seconds(name: str, what: str) -> Optional[float]:
    return Field(default=None, ge=0, description=f"{name} is {what}, in seconds after admittedAt.")


class GroupStart(KubeModel):
    """GroupStart is how long the group's start took, phase by phase, from the pods' status
    (the last pod of the group to reach each phase): absent until every pod reached it."""

    scheduled_seconds: Optional[float] = _seconds("scheduledSeconds", "when every pod was bound (PodScheduled)")
    initialized_seconds: Optional[float] = _seconds(
        "initializedSeconds", "when every pod's init containers were done (Initialized: model downloads there)")
    started_seconds: Optional[float] = _seconds(
        "startedSeconds", "when every container was running (state.running.startedAt): images pulled")
    ready_seconds: Optional[float] = _seconds(
        "readySeconds", "when every pod was Ready (the engine loaded the model and serves)")


class StartEstimate(KubeModel):
    """StartEstimate is a few recent durations and their percentiles."""

    samples: list[float] = Field(
        default_factory=list, max_length=MAX_START_SAMPLES,
        description="samples are the latest durations in seconds, oldest first (at most 20).")
    p50_seconds: Optional[float] = Field(default=None, ge=0, description="p50Seconds is their median.")
    p90_seconds: Optional[float] = Field(default=None, ge=0, description="p90Seconds is their 90th percentile "
                                         "(nearest rank).")


class StartTimes(KubeModel):
    """StartTimes are the service's measured starts: cold ones (admittedAt to every pod Ready)
    and wakes of standby replicas (wake asked to awake)."""

    cold: StartEstimate = Field(default_factory=StartEstimate, description="cold are the replicas' starts; "
                                "its p90Seconds is predictive scale-up's lead time.")
    wake: StartEstimate = Field(default_factory=StartEstimate, description="wake are the standby replicas' wakes.")


class ForecastStatus(KubeModel):
    """ForecastStatus is the last forecast of predictive scale-up."""

    method: str = Field(max_length=64, description="method is Trend, Seasonal1d or Seasonal7d (what the "
                        "forecast was made from).")
    lead_seconds: float = Field(ge=0, description="leadSeconds is how far ahead it looks.")
    current_rate: float = Field(ge=0, description="currentRate is the admission rate now, requests/s.")
    forecast_rate: float = Field(ge=0, description="forecastRate is the admission rate forecast one lead "
                                 "time ahead, requests/s.")
    replicas: int = Field(ge=0, description="replicas is what that rate needs (the floor it sets, unless "
                          "forecastOnly).")
    time: Optional[datetime] = Field(default=None, description="time is when it was made.")
    message: Optional[str] = Field(default=None, max_length=1024, description="message says how.")
