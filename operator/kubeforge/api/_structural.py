"""A pydantic model's JSON schema as a CRD structural schema.

Raw pydantic JSON schema is not a valid CRD structural schema, so it goes through a fix-up
step (:func:`structural_schema`): every ``$ref`` is inlined, ``title``, ``$defs``,
``uniqueItems`` and ``default: null`` are dropped, ``const`` becomes a one-value ``enum``,
``Optional[X]`` (``anyOf`` with ``type: null``) becomes plain ``X``, ``additionalProperties``
is dropped beside ``properties`` (and when boolean), and a numeric ``exclusiveMinimum`` becomes
OpenAPI v3.0's ``minimum`` + ``exclusiveMinimum: true``. Any keyword the API server would not
accept raises :class:`SchemaError` instead of reaching a CRD.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

from ._base import KubeModel

__all__ = ["SchemaError", "structural_node", "structural_schema"]

# Keywords a CRD structural schema may carry (besides x-kubernetes-*).
_ALLOWED = {
    "type",
    "description",
    "properties",
    "items",
    "required",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "enum",
    "pattern",
    "format",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "additionalProperties",
    "nullable",
    "anyOf",  # only the x-kubernetes-int-or-string form survives
}
_DROPPED = {
    "title",
    "$defs",
    "uniqueItems",
    "propertyNames",  # key constraints of dict[...]: validated by the models only
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
}

class SchemaError(ValueError):
    """Raised when a model's JSON schema cannot be turned into a structural schema."""


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise SchemaError(f"unsupported constant {value!r}")


def _resolve(ref: str, defs: dict[str, Any]) -> dict[str, Any]:
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix):] not in defs:
        raise SchemaError(f"cannot resolve $ref {ref!r}")
    return copy.deepcopy(defs[ref[len(prefix):]])


def structural_node(node: dict[str, Any], defs: dict[str, Any], path: str, depth: int = 0) -> dict[str, Any]:
    """One node of a pydantic JSON schema (and, recursively, its children) as a CRD structural
    schema node, keys sorted.

    The steps, in order: inline ``$ref`` (:func:`_inline`, then here), collapse ``anyOf``
    (:func:`_collapse_any_of`), settle on one ``type`` (:func:`_one_type`), drop and convert
    what OpenAPI v3.0 spells otherwise (:func:`_to_openapi`), refuse unknown keywords
    (:func:`_check_keywords`), fix the children (:func:`_fix_children`), and check the result's
    shape (:func:`_check_shape`).

    Args:
        node: The JSON schema node (left unchanged).
        defs: The schema's ``$defs``, for ``$ref``.
        path: Where the node is (``Model.spec.field``, ``[]`` for items, ``{}`` for values), for errors.
        depth: The nesting so far; past 64 the model is taken for recursive.

    Raises:
        SchemaError: If the node has no structural form or a keyword a CRD may not carry.
    """
    if depth > 64:
        raise SchemaError(f"{path}: schema nests too deep (recursive model?)")
    node = _inline(dict(node), path)
    if "$ref" in node:
        target = _resolve(node.pop("$ref"), defs)
        return structural_node({**target, **node}, defs, path, depth + 1)
    node = _collapse_any_of(node, defs, path, depth)
    _one_type(node, path)
    _to_openapi(node)
    _check_keywords(node, path)
    _fix_children(node, defs, path, depth)
    _check_shape(node, path)
    return {key: node[key] for key in sorted(node)}


def _inline(node: dict[str, Any], path: str) -> dict[str, Any]:
    """Unwrap pydantic's older ``allOf: [{$ref}]``; the referring node's own keys (description,
    default) win over the referenced definition's, as they do for the ``$ref`` that
    :func:`structural_node` then inlines."""
    if "allOf" in node:
        all_of = node.pop("allOf")
        if len(all_of) != 1:
            raise SchemaError(f"{path}: allOf with {len(all_of)} members is not supported")
        node = {**all_of[0], **node}
    return node


def _collapse_any_of(node: dict[str, Any], defs: dict[str, Any], path: str, depth: int) -> dict[str, Any]:
    """``Optional[X]`` becomes ``X`` (fixed, the node's own keys winning); ``int | str`` becomes
    ``x-kubernetes-int-or-string``; any other ``anyOf`` is a :class:`SchemaError`."""
    if "anyOf" in node:
        members = [m for m in node.pop("anyOf") if m.get("type") != "null"]
        if len(members) == 1:
            node = {**structural_node(members[0], defs, path, depth + 1), **node}
        elif node.get("x-kubernetes-int-or-string") or {
            m.get("type") for m in members
        } == {"integer", "string"}:
            node["x-kubernetes-int-or-string"] = True
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            node.pop("type", None)
        else:
            raise SchemaError(f"{path}: anyOf {members!r} has no structural form")
    return node


def _one_type(node: dict[str, Any], path: str) -> None:
    """In place: a ``type`` list less ``null`` must leave one type; ``type: null`` has no
    structural form; ``const`` becomes a one-value ``enum`` of the constant's type."""
    if isinstance(node.get("type"), list):
        types = [t for t in node["type"] if t != "null"]
        if len(types) != 1:
            raise SchemaError(f"{path}: type {node['type']!r} has no structural form")
        node["type"] = types[0]
    if node.get("type") == "null":
        raise SchemaError(f"{path}: type null has no structural form")
    if "const" in node:
        value = node.pop("const")
        node["enum"] = [value]
        node.setdefault("type", _json_type(value))


def _to_openapi(node: dict[str, Any]) -> None:
    """In place: drop :data:`_DROPPED` keywords, ``default: null`` and ``additionalProperties``
    beside ``properties`` (or boolean); JSON Schema 2020-12 numeric exclusive bounds become
    OpenAPI v3.0's boolean form; a description's whitespace is folded to single spaces."""
    for key in _DROPPED:
        node.pop(key, None)
    if "default" in node and node["default"] is None:
        del node["default"]
    if "additionalProperties" in node and (
        "properties" in node or isinstance(node["additionalProperties"], bool)
    ):
        del node["additionalProperties"]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(bound)
        if value is not None and not isinstance(value, bool):
            node[plain] = value
            node[bound] = True
    if isinstance(node.get("description"), str):
        node["description"] = " ".join(node["description"].split())


def _check_keywords(node: dict[str, Any], path: str) -> None:
    """Refuse any keyword outside :data:`_ALLOWED` and ``x-kubernetes-*``."""
    unknown = [k for k in node if k not in _ALLOWED and not k.startswith("x-kubernetes-")]
    if unknown:
        raise SchemaError(f"{path}: keywords {sorted(unknown)} are not allowed in a CRD schema")


def _fix_children(node: dict[str, Any], defs: dict[str, Any], path: str, depth: int) -> None:
    """In place: fix ``properties`` (sorted by name; the node becomes an object, ``required``
    sorted or dropped when empty), ``items`` and a schema ``additionalProperties``."""
    if "properties" in node:
        node["type"] = "object"
        node["properties"] = {
            name: structural_node(sub, defs, f"{path}.{name}", depth + 1)
            for name, sub in sorted(node["properties"].items())
        }
        if node.get("required"):
            node["required"] = sorted(node["required"])
        else:
            node.pop("required", None)
    if isinstance(node.get("items"), dict):
        node["items"] = structural_node(node["items"], defs, f"{path}[]", depth + 1)
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = structural_node(
            node["additionalProperties"], defs, f"{path}{{}}", depth + 1
        )


def _check_shape(node: dict[str, Any], path: str) -> None:
    """A free-form object must say so (``x-kubernetes-preserve-unknown-fields``), or the API
    server prunes everything inside it; every node but int-or-string has a type."""
    if node.get("type") == "object" and "properties" not in node and (
        "additionalProperties" not in node
    ):
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            raise SchemaError(f"{path}: object without properties must preserve unknown fields")
    if node.get("type") is None and not node.get("x-kubernetes-int-or-string"):
        raise SchemaError(f"{path}: schema has no type")


def structural_schema(
    model: type[KubeModel], skip: Iterable[str] = ()
) -> dict[str, Any]:
    """Returns the model's JSON schema (by alias) fixed up into a CRD structural schema,
    leaving out the top-level properties named in ``skip``."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    for name in skip:
        raw.get("properties", {}).pop(name, None)
    return structural_node(raw, defs, model.__name__)
