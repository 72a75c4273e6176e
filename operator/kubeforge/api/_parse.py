"""Reading whole objects (as the API server or kopf hands them over) into models."""

from __future__ import annotations

from typing import Any, Mapping, TypeVar, Union

from pydantic import ValidationError

from ._base import KubeModel, to_plain
from ._gpupool import GPUPool
from ._inferenceservice import InferenceService
from ._model_cache_node import ModelCacheNode
from ._trainingjob import TrainingJob

Resource = Union[GPUPool, TrainingJob, InferenceService, ModelCacheNode]
RESOURCE_KINDS: tuple[type[KubeModel], ...] = (GPUPool, TrainingJob, InferenceService, ModelCacheNode)
_BY_KIND: dict[str, type[KubeModel]] = {cls.KIND: cls for cls in RESOURCE_KINDS}  # type: ignore[attr-defined]

M = TypeVar("M", bound=KubeModel)


def parse_as(model: type[M], body: Mapping[str, Any]) -> M:
    """Validates a whole object (or a spec or status mapping) into ``model``.

    Accepts plain dicts and kopf's Body/Spec/Status views. Raises pydantic's
    ``ValidationError``; ``describe_validation_error`` turns it into one line.
    """
    return model.model_validate(to_plain(body))


def parse_resource(body: Mapping[str, Any]) -> Resource:
    """Validates a whole object of any kubeforge kind, chosen by its ``kind``.

    Raises ValueError when the kind is not one of GPUPool, TrainingJob, InferenceService.
    """
    kind = body.get("kind")
    model = _BY_KIND.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ValueError(f"kind {kind!r} is not a kubeforge kind (one of {', '.join(_BY_KIND)})")
    return parse_as(model, body)  # type: ignore[return-value]


def describe_validation_error(error: ValidationError, prefix: str = "") -> str:
    """Returns the errors of a ValidationError on one line: ``spec.replicas: Input should
    be greater than or equal to 1; ...`` (for events and condition messages). ``prefix`` is
    put before every location (``"spec"`` when a spec was validated alone)."""
    parts = []
    for item in error.errors(include_url=False):
        loc = ".".join(str(p) for p in ([prefix] if prefix else []) + list(item["loc"]))
        parts.append(f"{loc}: {item['msg']}" if loc else item["msg"])
    return "; ".join(parts)


def spec_error(body: Mapping[str, Any]) -> str | None:
    """None when ``body`` (a whole object of a kubeforge kind) is valid, else its errors on one
    line, for a status condition and an Event. The API server's schema catches most mistakes;
    this catches what only the models know (and objects written before a schema change)."""
    try:
        parse_resource(body)
        return None
    except ValidationError as e:
        return describe_validation_error(e)
