"""Generates the apiextensions.k8s.io/v1 CustomResourceDefinitions from the pydantic models.

Each model's JSON schema goes through :func:`~kubeforge.api._structural.structural_schema`
(the fix-up into a CRD structural schema: ``$ref`` inlined, ``Optional[X]`` as ``X``, OpenAPI
v3.0's forms); a keyword the API server would not accept raises :class:`SchemaError` instead of
reaching a CRD.

Two outputs, one source: the plain CRDs (``--out``, ``crds/``: ``kubectl apply`` and GitOps) and
the Helm chart's templates (``--chart-out``, ``charts/kubeforge/templates/crds/``): the same YAML
behind ``crds.install``, with the release's labels and, behind ``crds.keep``,
``helm.sh/resource-policy: keep``. Helm never upgrades a chart's ``crds/`` directory; templates it
does, as Kueue's chart does with its generated ``templates/crd/`` (kubernetes-sigs/kueue,
``hack/processing-plan.yaml``).

Usage::

    python -m kubeforge.api.crdgen --out crds --chart-out charts/kubeforge/templates/crds
    python -m kubeforge.api.crdgen --out crds --chart-out charts/kubeforge/templates/crds --check
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
from ._structural import SchemaError, structural_schema

__all__ = ["CHART_OUT", "SchemaError", "build_crd", "chart_template", "check", "file_name", "main", "render_all",
           "render_chart_all", "render_crd", "root_schema", "structural_schema", "write"]

CHART_OUT = Path("charts/kubeforge/templates/crds")
"""Where the chart reads its CRD templates, relative to the repository root."""

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


_CHART_HEADER = (
    "{{- /* Generated by `kubeforge crds` (python -m kubeforge.api.crdgen) from operator/kubeforge/api:\n"
    "DO NOT EDIT; change the models and regenerate. crds/ holds the same CRD without the templating. */}}\n"
)
_CHART_METADATA = (
    '    {{- include "kubeforge.crdLabels" . | nindent 4 }}\n'
    "  {{- if .Values.crds.keep }}\n"
    "  annotations:\n"
    "    helm.sh/resource-policy: keep\n"
    "  {{- end }}\n"
)


def chart_template(crd_text: str) -> str:
    """Returns the chart's template of one CRD from its plain YAML (:func:`render_crd`'s text).

    The same document behind ``{{- if .Values.crds.install }}``, with the release's labels added
    (``kubeforge.crdLabels``) and, behind ``crds.keep``, the annotation
    ``helm.sh/resource-policy: keep`` (``helm uninstall`` then leaves the CRD, and every object
    of its kind). A pure function of the text, so the chart's copy can never say anything else.

    Raises:
        SchemaError: the text holds ``{{`` or ``}}`` (Helm would read them as template actions),
            or its metadata is not the block :func:`build_crd` writes (labels last, then ``spec:``).
    """
    if "{{" in crd_text or "}}" in crd_text:
        raise SchemaError("a CRD holds '{{' or '}}': Helm would read it as a template action")
    body = crd_text[crd_text.index("---\n") + 4:] if "---\n" in crd_text else crd_text
    head, sep, rest = body.partition("\nspec:\n")
    if not sep or "\n  labels:\n" not in head or "annotations:" in head:
        raise SchemaError("a CRD's metadata is not 'name, labels' followed by 'spec:'")
    return f"{_CHART_HEADER}{{{{- if .Values.crds.install }}}}\n{head}\n{_CHART_METADATA}spec:\n{rest}{{{{- end }}}}\n"


def render_chart_all() -> dict[str, str]:
    """Returns {file name: Helm template text} for every kubeforge CRD (the chart's copy)."""
    return {name: chart_template(text) for name, text in render_all().items()}


def _outputs(out_dirs: Iterable[Path], chart_dirs: Iterable[Path]) -> list[tuple[Path, dict[str, str]]]:
    plain, chart = list(out_dirs), list(chart_dirs)
    files = render_all() if plain or chart else {}
    templates = {name: chart_template(text) for name, text in files.items()} if chart else {}
    return [(d, files) for d in plain] + [(d, templates) for d in chart]


def write(out_dirs: Iterable[Path], chart_dirs: Iterable[Path] = ()) -> list[Path]:
    """Writes every CRD into each directory, and its chart template into each of ``chart_dirs``;
    returns the files written."""
    written = []
    for out, files in _outputs(out_dirs, chart_dirs):
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = out / name
            path.write_text(text)
            written.append(path)
    return written


def check(out_dirs: Iterable[Path], chart_dirs: Iterable[Path] = ()) -> list[str]:
    """Returns one diff message per file that differs from fresh output (empty: up to date):
    the plain CRDs in ``out_dirs``, the chart's templates in ``chart_dirs``."""
    problems = []
    for out, files in _outputs(out_dirs, chart_dirs):
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
        help="directory to write the plain CRDs into (repeatable; default: crds, unless only "
        "--chart-out is given)",
    )
    parser.add_argument(
        "--chart-out",
        action="append",
        type=Path,
        help=f"directory to write the Helm chart's CRD templates into (repeatable; e.g. {CHART_OUT})",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff if the files differ from fresh output",
    )
    args = parser.parse_args(argv)
    chart_dirs = args.chart_out or []
    out_dirs = args.out or ([] if chart_dirs else [Path("crds")])
    if args.check:
        problems = check(out_dirs, chart_dirs)
        if problems:
            sys.stderr.write("".join(problems))
            sys.stderr.write(
                "CRDs are out of date: run `python -m kubeforge.api.crdgen "
                + " ".join([f"--out {d}" for d in out_dirs] + [f"--chart-out {d}" for d in chart_dirs])
                + "`\n"
            )
            return 1
        print(f"CRDs up to date in {', '.join(str(d) for d in [*out_dirs, *chart_dirs])}")
        return 0
    for path in write(out_dirs, chart_dirs):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
