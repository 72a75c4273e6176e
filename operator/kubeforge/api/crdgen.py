"""Generates the apiextensions.k8s.io/v1 CustomResourceDefinitions from the pydantic models.

Raw pydantic JSON schema is not a valid CRD structural schema, so it goes through a fix-up
step (:func:`structural_schema`): every ``$ref`` is inlined, ``title``, ``$defs``,
``uniqueItems`` and ``default: null`` are dropped, ``const`` becomes a one-value ``enum``,
``Optional[X]`` (``anyOf`` with ``type: null``) becomes plain ``X``, ``additionalProperties``
is dropped beside ``properties`` (and when boolean), and a numeric ``exclusiveMinimum`` becomes
OpenAPI v3.0's ``minimum`` + ``exclusiveMinimum: true``. Any keyword the API server would not
accept raises :class:`SchemaError` instead of reaching a CRD.

Usage::

    python -m kubeforge.api.crdgen --out crds --out charts/kubeforge/crds
    python -m kubeforge.api.crdgen --out crds --out charts/kubeforge/crds --check
"""

from __future__ import annotations

import argparse
import copy
import difflib
import sys
from pathlib import Path
from typing import Any, Iterable

import yaml

from .. import GROUP, VERSION
from ._base import KubeModel
from ._parse import RESOURCE_KINDS

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

_ROOT_PROPERTIES = {
    "apiVersion": {
        "type": "string",
        "description": "apiVersion defines the versioned schema of this representation of an "
        "object. Servers should convert recognized schemas to the latest internal value, and "
        "may reject unrecognized values. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
        "#resources",
    },
    "kind": {
        "type": "string",
        "description": "kind is a string value representing the REST resource this object "
        "represents. Servers may infer this from the endpoint the client submits requests to. "
        "Cannot be updated. In CamelCase. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
        "#types-kinds",
    },
    # The API server allows nothing else here (not even a description).
    "metadata": {"type": "object"},
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


def _fix(node: dict[str, Any], defs: dict[str, Any], path: str, depth: int = 0) -> dict[str, Any]:
    if depth > 64:
        raise SchemaError(f"{path}: schema nests too deep (recursive model?)")
    node = dict(node)

    # Inline $ref (and pydantic's older allOf: [{$ref}] wrapping); the referring node's own
    # keys (description, default) win over the referenced definition's.
    if "allOf" in node:
        all_of = node.pop("allOf")
        if len(all_of) != 1:
            raise SchemaError(f"{path}: allOf with {len(all_of)} members is not supported")
        node = {**all_of[0], **node}
    if "$ref" in node:
        target = _resolve(node.pop("$ref"), defs)
        node = {**target, **node}
        return _fix(node, defs, path, depth + 1)

    # Optional[X] -> X; int | str -> x-kubernetes-int-or-string.
    if "anyOf" in node:
        members = [m for m in node.pop("anyOf") if m.get("type") != "null"]
        if len(members) == 1:
            node = {**_fix(members[0], defs, path, depth + 1), **node}
        elif node.get("x-kubernetes-int-or-string") or {
            m.get("type") for m in members
        } == {"integer", "string"}:
            node["x-kubernetes-int-or-string"] = True
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            node.pop("type", None)
        else:
            raise SchemaError(f"{path}: anyOf {members!r} has no structural form")

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

    for key in _DROPPED:
        node.pop(key, None)
    if "default" in node and node["default"] is None:
        del node["default"]
    if "additionalProperties" in node and (
        "properties" in node or isinstance(node["additionalProperties"], bool)
    ):
        del node["additionalProperties"]

    # JSON Schema 2020-12 numeric exclusive bounds -> OpenAPI v3.0 boolean form.
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(bound)
        if value is not None and not isinstance(value, bool):
            node[plain] = value
            node[bound] = True

    if isinstance(node.get("description"), str):
        node["description"] = " ".join(node["description"].split())

    unknown = [k for k in node if k not in _ALLOWED and not k.startswith("x-kubernetes-")]
    if unknown:
        raise SchemaError(f"{path}: keywords {sorted(unknown)} are not allowed in a CRD schema")

    if "properties" in node:
        node["type"] = "object"
        node["properties"] = {
            name: _fix(sub, defs, f"{path}.{name}", depth + 1)
            for name, sub in sorted(node["properties"].items())
        }
        if node.get("required"):
            node["required"] = sorted(node["required"])
        else:
            node.pop("required", None)
    if isinstance(node.get("items"), dict):
        node["items"] = _fix(node["items"], defs, f"{path}[]", depth + 1)
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _fix(
            node["additionalProperties"], defs, f"{path}{{}}", depth + 1
        )
    if node.get("type") == "object" and "properties" not in node and (
        "additionalProperties" not in node
    ):
        # A free-form object must say so, or the API server prunes everything inside it.
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            raise SchemaError(f"{path}: object without properties must preserve unknown fields")
    if node.get("type") is None and not node.get("x-kubernetes-int-or-string"):
        raise SchemaError(f"{path}: schema has no type")
    return {key: node[key] for key in sorted(node)}


def structural_schema(
    model: type[KubeModel], skip: Iterable[str] = ()
) -> dict[str, Any]:
    """Returns the model's JSON schema (by alias) fixed up into a CRD structural schema,
    leaving out the top-level properties named in ``skip``."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    for name in skip:
        raw.get("properties", {}).pop(name, None)
    return _fix(raw, defs, model.__name__)


def _description(model: type[KubeModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def root_schema(model: type[KubeModel]) -> dict[str, Any]:
    """Returns the openAPIV3Schema of a resource model (standard apiVersion/kind/metadata)."""
    schema = structural_schema(model, skip=_ROOT_PROPERTIES)
    properties = dict(schema["properties"])
    properties.update(copy.deepcopy(_ROOT_PROPERTIES))
    schema["properties"] = {key: properties[key] for key in sorted(properties)}
    schema["description"] = _description(model)
    schema["required"] = sorted(set(schema.get("required", [])) & {"spec"})
    if not schema["required"]:
        del schema["required"]
    return {key: schema[key] for key in sorted(schema)}


def build_crd(model: type[KubeModel]) -> dict[str, Any]:
    """Returns the CustomResourceDefinition of one resource model, as a dict."""
    kind = model.KIND  # type: ignore[attr-defined]
    plural = model.PLURAL  # type: ignore[attr-defined]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "kubeforge"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": model.SINGULAR,  # type: ignore[attr-defined]
                "shortNames": list(model.SHORT_NAMES),  # type: ignore[attr-defined]
                "categories": list(model.CATEGORIES),  # type: ignore[attr-defined]
            },
            "scope": "Namespaced" if model.NAMESPACED else "Cluster",  # type: ignore[attr-defined]
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        dict(column) for column in model.PRINTER_COLUMNS  # type: ignore[attr-defined]
                    ],
                    "schema": {"openAPIV3Schema": root_schema(model)},
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block-style YAML; multi-line strings as literal blocks."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def render_crd(model: type[KubeModel]) -> str:
    """Returns the CRD of one model as YAML text."""
    header = (
        "# Generated by `python -m kubeforge.api.crdgen` from operator/kubeforge/api.\n"
        "# DO NOT EDIT: change the models and regenerate.\n"
    )
    body = yaml.dump(
        build_crd(model), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )
    return header + "---\n" + body


def file_name(model: type[KubeModel]) -> str:
    """Returns the CRD file name of a model, ``<group>_<plural>.yaml``."""
    return f"{GROUP}_{model.PLURAL}.yaml"  # type: ignore[attr-defined]


def render_all() -> dict[str, str]:
    """Returns {file name: YAML text} for every kubeforge CRD."""
    return {file_name(model): render_crd(model) for model in RESOURCE_KINDS}


def write(out_dirs: Iterable[Path]) -> list[Path]:
    """Writes every CRD into each directory; returns the files written."""
    written = []
    files = render_all()
    for out in out_dirs:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = out / name
            path.write_text(text)
            written.append(path)
    return written


def check(out_dirs: Iterable[Path]) -> list[str]:
    """Returns one diff message per file that differs from fresh output (empty: up to date)."""
    problems = []
    files = render_all()
    for out in out_dirs:
        for name, text in files.items():
            path = out / name
            current = path.read_text() if path.exists() else ""
            if current != text:
                diff = "".join(
                    difflib.unified_diff(
                        current.splitlines(keepends=True),
                        text.splitlines(keepends=True),
                        fromfile=f"{path} (on disk)",
                        tofile=f"{path} (generated)",
                    )
                )
                problems.append(diff if path.exists() else f"{path} is missing\n")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kubeforge.api.crdgen",
        description="Generate the kubeforge CRDs from the pydantic models.",
    )
    parser.add_argument(
        "--out",
        action="append",
        type=Path,
        help="directory to write the CRDs into (repeatable; default: crds)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff if the files differ from fresh output",
    )
    args = parser.parse_args(argv)
    out_dirs = args.out or [Path("crds")]
    if args.check:
        problems = check(out_dirs)
        if problems:
            sys.stderr.write("".join(problems))
            sys.stderr.write(
                "CRDs are out of date: run `python -m kubeforge.api.crdgen "
                + " ".join(f"--out {d}" for d in out_dirs)
                + "`\n"
            )
            return 1
        print(f"CRDs up to date in {', '.join(str(d) for d in out_dirs)}")
        return 0
    for path in write(out_dirs):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
