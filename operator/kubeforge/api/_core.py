"""Kubernetes core types that the kubeforge resources embed.

Only the parts kubeforge reads are modelled: ObjectMeta (tolerant of every other key),
metav1.Condition, metav1.LabelSelector and core/v1 Toleration; the opaque PodTemplateSpec and
the checks of its shape are in :mod:`._pod_template`.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Optional

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from ._base import (
    LABEL_KEY_PATTERN,
    MAX_LABEL_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    QUANTITY_PATTERN,
    KubeModel,
    quantity,
)

Quantity = Annotated[
    str,
    BeforeValidator(quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A Kubernetes resource quantity (``10Gi``); integers are accepted and kept as strings."""


class ObjectMeta(KubeModel):
    """ObjectMeta is the part of metav1.ObjectMeta that kubeforge reads; other keys are ignored."""

    name: Optional[str] = Field(default=None, description="name is the object's name.")
    namespace: Optional[str] = Field(
        default=None, description="namespace is the object's namespace (empty for GPUPools)."
    )
    uid: Optional[str] = Field(default=None, description="uid is the object's unique id.")
    generation: Optional[int] = Field(
        default=None, description="generation is the sequence number of the desired state."
    )
    resource_version: Optional[str] = Field(
        default=None, description="resourceVersion is the object's opaque version."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="labels of the object.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="annotations of the object."
    )
    finalizers: list[str] = Field(default_factory=list, description="finalizers of the object.")
    owner_references: list[dict[str, Any]] = Field(
        default_factory=list, description="ownerReferences of the object, as plain dicts."
    )
    creation_timestamp: Optional[datetime] = Field(
        default=None, description="creationTimestamp is when the object was created."
    )
    deletion_timestamp: Optional[datetime] = Field(
        default=None, description="deletionTimestamp is set when the object is being deleted."
    )


class ConditionStatus(str, Enum):
    """ConditionStatus is the status of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(KubeModel):
    """Condition is one aspect of the current state of the resource (metav1.Condition)."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="type of the condition, in CamelCase (for example Ready or Admitted).",
    )
    status: ConditionStatus = Field(
        description="status of the condition: True, False or Unknown.",
    )
    observed_generation: Optional[int] = Field(
        default=None,
        ge=0,
        description="observedGeneration is the .metadata.generation that the condition was "
        "set from; a condition older than the current generation is out of date.",
    )
    last_transition_time: datetime = Field(
        description="lastTransitionTime is the last time the condition changed from one "
        "status to another.",
    )
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="reason is a programmatic identifier, in CamelCase, for the last "
        "transition.",
    )
    message: str = Field(
        default="",
        max_length=32768,
        description="message is a human-readable explanation of the last transition.",
    )


class SelectorOperator(str, Enum):
    """SelectorOperator relates a label key to a set of values."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(KubeModel):
    """LabelSelectorRequirement is a selector requirement: a key, an operator and values."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) "
                    ": (!has(self.values) || size(self.values) == 0)",
                    "message": "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
                }
            ]
        }
    )

    key: str = Field(
        max_length=MAX_LABEL_KEY_LENGTH,
        pattern=LABEL_KEY_PATTERN,
        description="key is the label key that the selector applies to.",
    )
    operator: SelectorOperator = Field(
        description="operator relates the key to the values: In, NotIn, Exists or "
        "DoesNotExist.",
    )
    values: list[Annotated[str, Field(max_length=MAX_LABEL_LENGTH)]] = Field(
        default_factory=list,
        max_length=256,
        description="values is the set of label values. It must be non-empty for In and "
        "NotIn, and empty for Exists and DoesNotExist.",
    )

    @model_validator(mode="after")
    def _values_match_operator(self) -> "LabelSelectorRequirement":
        needs_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if needs_values and not self.values:
            raise ValueError(f"values must be non-empty when operator is {self.operator.value}")
        if not needs_values and self.values:
            raise ValueError(f"values must be empty when operator is {self.operator.value}")
        return self


class LabelSelector(KubeModel):
    """LabelSelector selects objects by label (metav1.LabelSelector). The requirements are
    ANDed; an empty selector selects everything."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-map-type": "atomic"},
    )

    match_labels: dict[
        Annotated[str, Field(max_length=MAX_LABEL_KEY_LENGTH)],
        Annotated[str, Field(max_length=MAX_LABEL_LENGTH)],
    ] = Field(
        default_factory=dict,
        description="matchLabels is a map of label key to value; each pair is the same as a "
        "matchExpressions entry with operator In and that one value.",
        json_schema_extra={"maxProperties": 64},
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list,
        max_length=32,
        description="matchExpressions is a list of label selector requirements.",
    )


class TolerationOperator(str, Enum):
    """TolerationOperator relates a toleration's key to its value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(str, Enum):
    """TaintEffect is the effect of a taint."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(KubeModel):
    """Toleration lets a pod be scheduled onto nodes with a matching taint (core/v1)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.operator) || self.operator != 'Exists' || "
                    "!has(self.value) || self.value == ''",
                    "message": "value must be empty when operator is Exists",
                }
            ]
        }
    )

    key: Optional[str] = Field(
        default=None,
        max_length=MAX_LABEL_KEY_LENGTH,
        description="key is the taint key that the toleration applies to; empty matches all "
        "keys (operator must then be Exists).",
    )
    operator: Optional[TolerationOperator] = Field(
        default=None,
        description="operator relates the key to the value: Exists or Equal (the default).",
    )
    value: Optional[str] = Field(
        default=None,
        max_length=MAX_LABEL_LENGTH,
        description="value is the taint value that the toleration matches when operator is "
        "Equal.",
    )
    effect: Optional[TaintEffect] = Field(
        default=None,
        description="effect is the taint effect to match: NoSchedule, PreferNoSchedule or "
        "NoExecute; empty matches all effects.",
    )
    toleration_seconds: Optional[int] = Field(
        default=None,
        description="tolerationSeconds is how long a NoExecute toleration keeps the pod bound "
        "after the taint appears; empty means forever.",
    )

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> "Toleration":
        if self.operator == TolerationOperator.EXISTS and self.value:
            raise ValueError("value must be empty when operator is Exists")
        return self


def conditions_field(types: str) -> Any:
    """Returns the Field of a ``conditions`` list (listType map keyed by type)."""
    return Field(
        default_factory=list,
        max_length=16,
        description=f"conditions are the latest observations of the resource's state, one "
        f"per type ({types}).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )


