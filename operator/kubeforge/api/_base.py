"""Shared building blocks: the base model, patterns and small reusable types."""

from __future__ import annotations

import re
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

# A DNS-1123 label: lower case alphanumerics and '-', at most 63 characters.
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A DNS-1123 subdomain (object names), at most 253 characters.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A qualified label key: an optional DNS subdomain prefix and '/', then a name.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
# A label value: empty, or alphanumerics with '-', '_' and '.' inside.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# A resource.Quantity, as Kubernetes spells it in its own CRDs.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_RE = re.compile(QUANTITY_PATTERN)

# A DNS-1035 label (Service names): lower case alphanumerics and '-', starting with a letter.
DNS_1035_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

MAX_NAME_LENGTH = 253
MAX_LABEL_LENGTH = 63
MAX_LABEL_KEY_LENGTH = 317


class KubeModel(BaseModel):
    """Base of every kubeforge API model.

    Python attributes are snake_case; the JSON names are camelCase aliases. Both are accepted
    on input. Unknown keys are ignored (the API server prunes them anyway), so the models
    read objects written by newer versions of the CRDs.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        validate_default=False,
    )

    def to_dict(self) -> dict[str, Any]:
        """Returns the JSON form (camelCase keys, no unset optional fields)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def quantity(value: Any) -> str:
    """Validates a Kubernetes quantity (``10Gi``, ``500M``, ``1``) and returns it as a string."""
    if isinstance(value, bool):
        raise ValueError("must be a quantity such as 10Gi, not a boolean")
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str) or not _QUANTITY_RE.match(value):
        raise ValueError(f"{value!r} is not a quantity (examples: 10Gi, 500Mi, 1T)")
    return value


def to_plain(value: Any) -> Any:
    """Deep-copies mappings and sequences (kopf's Body views included) into dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def _prune_empty(value: Any) -> Any:
    if isinstance(value, dict):
        pruned = {k: _prune_empty(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ({}, [])}
    return value


def schema_default(model: type[KubeModel]) -> dict[str, Any]:
    """Returns ``json_schema_extra`` giving an object field its model's defaults, spelled out.

    The API server checks a default against the CEL rules of its object *before* filling in
    nested defaults, so ``default: {}`` fails a rule such as ``self.mode != 'Required'``;
    the fully written default passes, and `kubectl explain` shows it.
    """
    return {"default": _prune_empty(model().to_dict())}


_NAME_FORMS = {
    "DNS-1035 label": (DNS_1035_PATTERN, "lower case letters, digits and '-', starting with a "
                       "letter and ending with a letter or digit"),
    "DNS subdomain": (DNS_SUBDOMAIN_PATTERN, "lower case letters, digits, '-' and '.'"),
}


def name_rules(kind: str, max_length: int, why: str, form: str = "DNS-1035 label") -> list[dict[str, str]]:
    """CEL rules on ``metadata.name`` for the root of a CRD schema (the only metadata CEL may
    read): a name of the given ``form`` (``"DNS-1035 label"`` or ``"DNS subdomain"``) of at
    most ``max_length`` characters, so that every name the operator derives from it
    (hostnames, Services, label values) is valid and the API server refuses the object up
    front instead of the operator failing later."""
    pattern, words = _NAME_FORMS[form]
    cel_pattern = pattern.replace("\\", "\\\\")  # a backslash inside a CEL string literal
    return [
        {
            "rule": f"self.metadata.name.matches('{cel_pattern}')",
            "message": f"metadata.name of a {kind} must be a {form}: {words} ({why})",
        },
        {
            "rule": f"size(self.metadata.name) <= {max_length}",
            "message": f"metadata.name of a {kind} must be at most {max_length} characters ({why})",
        },
    ]


def name_error(kind: str, name: str, max_length: int, form: str = "DNS-1035 label") -> str | None:
    """The same check as :func:`name_rules`, for objects made before the rules existed:
    None when ``name`` is fine, else a message."""
    if not re.match(_NAME_FORMS[form][0], name or ""):
        return f"metadata.name {name!r} of a {kind} is not a {form}"
    if len(name or "") > max_length:
        return f"metadata.name {name!r} of a {kind} is longer than {max_length} characters"
    return None
