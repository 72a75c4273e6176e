"""The two payloads a worker may send, as strict, size-bounded pydantic models.

- kubeforge's own (``POST /apis/kubeforge.io/v1alpha1/namespaces/{ns}/trainingjobs/{name}/status``)::

      {"step": 1200, "totalSteps": 10000,
       "checkpoint": {"step": 1200, "path": "/checkpoints/step-1200", "time": "2026-01-02T03:04:05Z"},
       "metrics": {"loss": 0.231, "tokens_per_second": 51234.5}}

- Kubeflow Trainer's (KEP-2779, ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status``),
  accepted unchanged so Hugging Face's ``KubeflowTrainerCallback`` and Kubeflow SDK scripts report
  to kubeforge without a code change::

      {"trainerStatus": {"progressPercentage": 45, "estimatedRemainingSeconds": 795,
                         "metrics": [{"name": "loss", "value": "0.2347"}],
                         "lastUpdatedTime": "2026-01-23T10:30:45Z"}}

Strict: unknown fields, wrong types (a string for a number, a boolean for an integer), NaN and
infinities are refused, every string and list is bounded. The whole body is bounded by
:data:`MAX_BODY_BYTES` before it is parsed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, field_validator
from pydantic.alias_generators import to_camel

from kubeforge.api import MAX_REPORTED_METRICS

MAX_BODY_BYTES = 16 * 1024
"""The largest report body accepted (413 beyond): a report is a handful of numbers, and 16 KiB
leaves room for 16 metrics and a long checkpoint path many times over."""
MAX_STEP = 2**53
"""Steps and seconds above this are refused: JSON numbers beyond it lose precision."""
METRIC_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_./-]*$"
"""A metric name (the same rule as ``status.progress.metrics[].name``)."""

MetricName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=METRIC_NAME_PATTERN)]


def _rfc3339_text(value: object) -> object:
    """Times come as RFC 3339 strings only (not numbers, which pydantic would read as unix
    seconds), at most 64 characters."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError("must be an RFC 3339 time string such as 2026-01-02T03:04:05Z")
    return value


Rfc3339 = Annotated[datetime, BeforeValidator(_rfc3339_text)]


class _Strict(BaseModel):
    """Base of the payload models: camelCase JSON names, unknown fields refused, strict types,
    no NaN or infinity."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=False, extra="forbid", strict=True,
                              allow_inf_nan=False, frozen=True)


class CheckpointPayload(_Strict):
    """A checkpoint the worker has finished writing (every rank past the save)."""

    step: int = Field(ge=0, le=MAX_STEP, description="step is the training step the checkpoint holds.")
    path: str = Field(min_length=1, max_length=4096, description="path of the checkpoint (in the checkpoint volume).")
    time: Optional[Rfc3339] = Field(default=None, strict=False, description="time the checkpoint was written (RFC 3339); "
                                     "default: when the report is accepted.")

    @field_validator("time")
    @classmethod
    def _aware(cls, v: Optional[datetime]) -> Optional[datetime]:
        if v is not None and v.tzinfo is None:
            raise ValueError("must carry a time zone (e.g. 2026-01-02T03:04:05Z)")
        return v


class KubeforgeReport(_Strict):
    """kubeforge's own report: where the training is, its last checkpoint, a few metrics. At least
    one of step, checkpoint or metrics."""

    step: Optional[int] = Field(default=None, ge=0, le=MAX_STEP, description="step reached (optimizer steps).")
    total_steps: Optional[int] = Field(default=None, ge=1, le=MAX_STEP, description="the step training ends at.")
    checkpoint: Optional[CheckpointPayload] = Field(default=None, description="the newest complete checkpoint.")
    metrics: dict[MetricName, float] = Field(default_factory=dict, max_length=MAX_REPORTED_METRICS,
                                             description="latest values by name (loss, tokens_per_second...).")

    def is_empty(self) -> bool:
        """Whether the report says nothing (no step, checkpoint or metric)."""
        return self.step is None and self.checkpoint is None and not self.metrics


class KubeflowMetric(_Strict):
    """One entry of Kubeflow Trainer's ``trainerStatus.metrics``: a name and its value as a string."""

    name: MetricName
    value: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class TrainerStatus(_Strict):
    """Kubeflow Trainer's ``TrainJobTrainerStatus`` (KEP-2779). ``progressPercentage`` is an
    integer there; a number with a fraction is accepted as well."""

    progress_percentage: Optional[float] = Field(default=None, ge=0, le=100)
    estimated_remaining_seconds: Optional[int] = Field(default=None, ge=0, le=MAX_STEP)
    metrics: list[KubeflowMetric] = Field(default_factory=list, max_length=MAX_REPORTED_METRICS)
    last_updated_time: Optional[Rfc3339] = Field(default=None, strict=False)

    def is_empty(self) -> bool:
        """Whether it says nothing kubeforge keeps (a bare ``lastUpdatedTime`` is nothing)."""
        return self.progress_percentage is None and self.estimated_remaining_seconds is None and not self.metrics


class KubeflowReport(_Strict):
    """Kubeflow Trainer's ``ProgressStatus`` body: ``{"trainerStatus": {...}}``."""

    trainer_status: TrainerStatus
