"""The generated CRDs: up to date, structural, documented, with their CEL rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from kubeforge.api import GPUPool, InferenceService, ModelCacheNode, TrainingJob
from kubeforge.api import _structural, crdgen

ROOT = Path(__file__).resolve().parent.parent
CHART_DIR = ROOT / crdgen.CHART_OUT
FILES = {
    "GPUPool": "kubeforge.io_gpupools.yaml",
    "TrainingJob": "kubeforge.io_trainingjobs.yaml",
    "InferenceService": "kubeforge.io_inferenceservices.yaml",
    "ModelCacheNode": "kubeforge.io_modelcachenodes.yaml",
}
MODELS = {"GPUPool": GPUPool, "TrainingJob": TrainingJob, "InferenceService": InferenceService,
          "ModelCacheNode": ModelCacheNode}

FORBIDDEN = {"$ref", "$defs", "title", "const", "uniqueItems", "allOf", "oneOf", "not",
             "propertyNames", "examples"}


def load(kind: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "crds" / FILES[kind]).read_text())


def schema_of(kind: str) -> dict[str, Any]:
    return load(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Yields (path, schema node) for every schema node."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def properties(kind: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yields (path, JSON name, schema) of every property."""
    for path, node in walk(schema_of(kind)):
        for name, sub in node.get("properties", {}).items():
            yield f"{path}.{name}", name, sub


def rules(kind: str) -> dict[str, list[tuple[str, str]]]:
    """Returns {path: [(rule, message)]} of every x-kubernetes-validations."""
    found = {}
    for path, node in walk(schema_of(kind)):
        if "x-kubernetes-validations" in node:
            found[path] = [(v["rule"], v["message"]) for v in node["x-kubernetes-validations"]]
    return found


# ---------------------------------------------------------------------------------------------


def test_committed_crds_equal_fresh_output() -> None:
    problems = crdgen.check([ROOT / "crds"])
    assert not problems, "CRDs are stale; run `kubeforge crds`\n" + "".join(problems)


def test_committed_chart_templates_equal_fresh_output() -> None:
    problems = crdgen.check([], [CHART_DIR])
    assert not problems, "the chart's CRD templates are stale; run `kubeforge crds`\n" + "".join(problems)
    assert sorted(p.name for p in CHART_DIR.iterdir()) == sorted(FILES.values())  # nothing else in there
    assert not (ROOT / "charts" / "kubeforge" / "crds").exists()  # Helm would create those unmanaged


def test_the_chart_template_is_the_plain_crd_behind_the_switches() -> None:
    plain = crdgen.render_all()[FILES["TrainingJob"]]
    text = crdgen.chart_template(plain)
    lines = text.splitlines()
    assert lines[2] == "{{- if .Values.crds.install }}" and lines[-1] == "{{- end }}"
    assert "{{- if .Values.crds.keep }}\n  annotations:\n    helm.sh/resource-policy: keep\n  {{- end }}\nspec:\n" in text
    assert '    app.kubernetes.io/part-of: kubeforge\n    {{- include "kubeforge.crdLabels" . | nindent 4 }}\n' in text
    # every line of the plain document is there, in order; only template lines were added
    body = plain[plain.index("---\n") + 4:].splitlines()
    kept = [line for line in lines[2:] if "{{" not in line and line not in ("  annotations:", "    helm.sh/resource-policy: keep")]
    assert kept == body


@pytest.mark.parametrize("text", ["---\nkind: X\nmetadata:\n  name: a\n  labels:\n    a: '{{ b }}'\nspec:\n  c: 1\n",
                                  "---\nkind: X\nmetadata:\n  name: a\nspec:\n  c: 1\n"])
def test_the_chart_template_refuses_template_actions_and_unknown_metadata(text: str) -> None:
    with pytest.raises(crdgen.SchemaError):
        crdgen.chart_template(text)


def test_check_cli_checks_the_chart_templates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain, chart = tmp_path / "crds", tmp_path / "templates"
    assert crdgen.main(["--out", str(plain), "--chart-out", str(chart)]) == 0
    assert crdgen.main(["--out", str(plain), "--chart-out", str(chart), "--check"]) == 0
    target = chart / FILES["GPUPool"]
    target.write_text(target.read_text().replace("helm.sh/resource-policy: keep", "helm.sh/resource-policy: delete"))
    capsys.readouterr()
    assert crdgen.main(["--out", str(plain), "--chart-out", str(chart), "--check"]) == 1
    err = capsys.readouterr().err
    assert "+    helm.sh/resource-policy: keep" in err and f"--chart-out {chart}" in err


def test_check_cli_reports_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 0
    target = tmp_path / FILES["TrainingJob"]
    target.write_text(target.read_text().replace("maximum: 1024", "maximum: 1000"))
    capsys.readouterr()
    assert crdgen.main(["--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "-                maximum: 1000" in err and "+                maximum: 1024" in err
    assert "out of date" in err


def test_generation_is_deterministic() -> None:
    assert crdgen.render_all() == crdgen.render_all()


@pytest.mark.parametrize(
    "kind, plural, scope, short_names",
    [
        ("GPUPool", "gpupools", "Cluster", ["gpool"]),
        ("TrainingJob", "trainingjobs", "Namespaced", ["tj", "tjob"]),
        ("InferenceService", "inferenceservices", "Namespaced", ["infsvc", "kfis"]),
    ],
)
def test_names_scope_and_status_subresource(
    kind: str, plural: str, scope: str, short_names: list[str]
) -> None:
    crd = load(kind)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{plural}.kubeforge.io"
    spec = crd["spec"]
    assert spec["group"] == "kubeforge.io"
    assert spec["scope"] == scope
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"]["shortNames"] == short_names
    assert "isvc" not in spec["names"]["shortNames"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    "kind, columns",
    [
        ("GPUPool", ["Nodes", "GPUs", "Free", "Allocated", "Spot GPUs", "Ready", "Models", "Age"]),
        ("TrainingJob", ["Phase", "Pool", "Domain", "Replicas", "GPUs/Replica", "Progress", "ETA", "Preemptions",
                         "Failures", "Age"]),
        ("InferenceService", ["Ready", "Desired", "Nodes/Replica", "Min", "Max", "Queue", "URL", "Standby", "Start-P90",
                              "Age"]),
    ],
)
def test_printer_columns(kind: str, columns: list[str]) -> None:
    version = load(kind)["spec"]["versions"][0]
    printed = version["additionalPrinterColumns"]
    assert [c["name"] for c in printed] == columns
    schema = version["schema"]["openAPIV3Schema"]
    for column in printed:
        if column["jsonPath"].startswith(".metadata"):
            continue
        # Every column points at a field that exists in the schema.
        node = schema
        for part in column["jsonPath"].split("[")[0].strip(".").split("."):
            node = node["properties"][part]
        if column["jsonPath"].endswith("].status"):
            node = node["items"]["properties"]["status"]
        expected = {"integer": {"integer"}, "number": {"number"}, "string": {"string"}}
        assert node["type"] in expected[column["type"]], column


@pytest.mark.parametrize("kind", list(FILES))
def test_schema_is_structural(kind: str) -> None:
    for path, node in walk(schema_of(kind)):
        assert not FORBIDDEN & set(node), (path, FORBIDDEN & set(node))
        if "anyOf" in node:  # only the int-or-string form
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert node.get("type") in {"object", "array", "string", "integer", "number",
                                        "boolean"}, path
        assert "default" not in node or node["default"] is not None, path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert not isinstance(node.get("additionalProperties"), bool), path
        assert not isinstance(node.get("exclusiveMinimum"), (int, float)) or isinstance(
            node.get("exclusiveMinimum"), bool), path
        if node.get("type") == "object" and "properties" not in node and path != ".metadata":
            assert node.get("additionalProperties") or node.get(
                "x-kubernetes-preserve-unknown-fields"), path
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path}: every list needs maxItems (CEL cost)"
            assert isinstance(node.get("items"), dict), path


@pytest.mark.parametrize("kind", list(FILES))
def test_metadata_is_a_plain_object(kind: str) -> None:
    schema = schema_of(kind)
    assert schema["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", list(FILES))
def test_every_property_is_described_starting_with_its_name(kind: str) -> None:
    schema = schema_of(kind)
    assert schema.get("description"), "root description"
    for path, name, sub in properties(kind):
        if path == ".metadata":  # the API server forbids anything but its type
            continue
        description = sub.get("description", "")
        assert description, f"{path} has no description"
        assert description.startswith(name), f"{path}: {description!r}"


@pytest.mark.parametrize("kind", list(FILES))
def test_object_defaults_are_spelled_out(kind: str) -> None:
    """The API server checks a default against its object's CEL rules before filling in
    nested defaults, so ``default: {}`` on an object with rules is rejected."""
    for path, node in walk(schema_of(kind)):
        if node.get("type") == "object" and "x-kubernetes-validations" in node:
            assert node.get("default", None) != {}, path


@pytest.mark.parametrize("kind", list(FILES))
def test_strings_in_cel_rules_are_bounded(kind: str) -> None:
    """Unbounded strings and lists make the API server reject a rule for its cost. Rules at the
    root may only read metadata.name (which the API server bounds itself), so the root's own
    rules are not charged for the strings below it."""
    for path, node in walk(schema_of(kind)):
        if "x-kubernetes-validations" not in node or path == "":
            continue
        for sub_path, sub in walk(node, path):
            if sub.get("type") == "string" and "enum" not in sub:
                assert "maxLength" in sub, f"{sub_path} is used under CEL at {path}"


@pytest.mark.parametrize(
    "kind, path, message",
    [
        ("TrainingJob", ".spec.topology",
         "topology.level is required when topology.mode is Required"),
        ("TrainingJob", ".spec.checkpoint.mountPath",
         "checkpoint.mountPath must be an absolute path (start with /)"),
        ("TrainingJob", ".spec.failurePolicy",
         "failurePolicy.backoffSeconds must not exceed failurePolicy.maxBackoffSeconds"),
        ("InferenceService", ".spec",
         "minReplicas must be less than or equal to maxReplicas"),
        ("InferenceService", ".spec.autoscaling",
         "autoscaling.query is required when autoscaling.metric is Custom"),
        ("GPUPool", ".spec.topologyLevels", "topologyLevels names must be unique"),
        ("GPUPool", ".spec.tolerations[]", "value must be empty when operator is Exists"),
    ],
)
def test_cel_rules_are_present(kind: str, path: str, message: str) -> None:
    assert message in [m for _, m in rules(kind).get(path, [])], rules(kind)


@pytest.mark.parametrize(
    "kind, path, expected",
    [
        ("TrainingJob", "spec.replicas", {"minimum": 1, "maximum": 1024}),
        ("TrainingJob", "spec.gpusPerReplica", {"minimum": 1, "maximum": 64}),
        ("TrainingJob", "spec.pools", {"minItems": 1, "maxItems": 8,
                                       "x-kubernetes-list-type": "set"}),
        ("TrainingJob", "spec.priority", {"default": 0}),
        ("TrainingJob", "spec.suspend", {"default": False}),
        ("TrainingJob", "spec.topology", {"default": {"mode": "Preferred"}}),
        ("TrainingJob", "spec.failurePolicy", {"default": {
            "maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600,
            "preemptionsBeforeFallback": 2, "maxPreemptions": 100, "maxStartupRetries": 5}}),
        ("TrainingJob", "spec.startupTimeoutSeconds", {"default": 600, "minimum": 10, "maximum": 86400}),
        ("TrainingJob", "spec.fallbackAfterSeconds", {"default": 300, "minimum": 0}),
        ("TrainingJob", "spec.topology.mode", {"default": "Preferred",
                                               "enum": ["Required", "Preferred", "None"]}),
        ("TrainingJob", "spec.checkpoint.size", {"default": "10Gi",
                                                 "x-kubernetes-int-or-string": True}),
        ("TrainingJob", "spec.checkpoint.accessModes", {"default": ["ReadWriteMany"]}),
        ("TrainingJob", "spec.checkpoint.mountPath", {"default": "/checkpoints"}),
        ("TrainingJob", "spec.checkpoint.deletionPolicy", {"default": "Retain",
                                                           "enum": ["Retain", "Delete"]}),
        ("TrainingJob", "spec.failurePolicy.maxRestarts", {"default": 3, "maximum": 100}),
        ("TrainingJob", "spec.failurePolicy.backoffSeconds", {"default": 10, "maximum": 3600}),
        ("TrainingJob", "spec.failurePolicy.maxBackoffSeconds", {"default": 600}),
        ("TrainingJob", "spec.failurePolicy.preemptionsBeforeFallback", {"default": 2}),
        ("TrainingJob", "spec.template", {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": True}),
        ("TrainingJob", "spec.template.spec", {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}),
        ("TrainingJob", "status.placement.nodes", {"maxItems": 1024}),
        ("TrainingJob", "status.conditions", {"x-kubernetes-list-type": "map",
                                              "x-kubernetes-list-map-keys": ["type"]}),
        ("TrainingJob", "status.startTime", {"type": "string", "format": "date-time"}),
        ("GPUPool", "spec.gpuResourceName", {"default": "nvidia.com/gpu"}),
        ("GPUPool", "spec.capacityType", {"default": "Auto",
                                          "enum": ["Auto", "Spot", "OnDemand"]}),
        ("GPUPool", "spec.topologyLevels", {"maxItems": 8}),
        ("GPUPool", "spec.tolerations", {"maxItems": 32}),
        ("GPUPool", "spec.pricePerGPUHour", {"type": "number", "minimum": 0}),
        ("GPUPool", "status.domains", {"maxItems": 4096}),
        ("GPUPool", "status.workloads", {"maxItems": 4096}),
        ("GPUPool", "status.topologyLevels.source", {"enum": ["Spec", "Detected"]}),
        # no schema default: it is tensor x pipeline when parallelism is set, else 1 (api/ says so)
        ("InferenceService", "spec.gpusPerReplica", {"minimum": 1, "maximum": 64}),
        ("InferenceService", "spec.parallelism.tensor", {"default": 1, "minimum": 1, "maximum": 64}),
        ("InferenceService", "spec.multiNode.maxGroupRestarts", {"default": 5, "minimum": 0}),
        ("InferenceService", "spec.drainSeconds", {"default": 120, "minimum": 0, "maximum": 3600}),
        ("InferenceService", "spec.port", {"default": 8000, "minimum": 1, "maximum": 65535}),
        ("InferenceService", "spec.minReplicas", {"default": 1, "minimum": 0, "maximum": 1000}),
        ("InferenceService", "spec.maxReplicas", {"default": 4, "minimum": 1, "maximum": 1000}),
        ("InferenceService", "spec.topology.mode", {"default": "Required"}),
        ("InferenceService", "spec.autoscaling.prometheusURL", {
            "default": "http://prometheus-operated.monitoring.svc:9090"}),
        ("InferenceService", "spec.autoscaling.metric", {
            "default": "VLLMWaiting", "enum": ["VLLMWaiting", "SGLangQueue", "Custom"]}),
        # no schema default: a stored default would meet slo's rule (issue 32.5); the model's is 4
        ("InferenceService", "spec.autoscaling.targetPerReplica", {
            "default": None, "minimum": 0, "exclusiveMinimum": True}),
        ("InferenceService", "spec.autoscaling.tolerance", {"default": 0.1, "minimum": 0,
                                                            "maximum": 1}),
        ("InferenceService", "spec.autoscaling.pollingIntervalSeconds", {
            "default": 5, "minimum": 1, "maximum": 300}),
        ("InferenceService", "spec.autoscaling.scaleUp.maxStep", {"default": 1}),
        ("InferenceService", "spec.autoscaling.scaleDown.stabilizationWindowSeconds", {
            "default": 300}),
        ("InferenceService", "status.lastScaleDirection", {"enum": ["Up", "Down"]}),
    ],
)
def test_field_constraints(kind: str, path: str, expected: dict[str, Any]) -> None:
    node = schema_of(kind)
    for part in path.split("."):
        if node.get("type") == "array":
            node = node["items"]
        node = node["properties"][part]
    assert {key: node.get(key) for key in expected} == expected


@pytest.mark.parametrize("kind, required", [
    ("TrainingJob", ["gpusPerReplica", "pools", "replicas", "template"]),
    ("InferenceService", ["pools", "template"]),
])
def test_required_spec_fields(kind: str, required: list[str]) -> None:
    schema = schema_of(kind)
    assert schema["required"] == ["spec"]
    assert schema["properties"]["spec"]["required"] == required


def test_gpu_pool_spec_may_be_left_out() -> None:
    schema = schema_of("GPUPool")
    assert "required" not in schema
    assert schema["properties"]["spec"]["default"] == {
        "gpuResourceName": "nvidia.com/gpu", "capacityType": "Auto", "deviceAllocation": "DevicePlugin",
        "dra": {"deviceClassName": "gpu.nvidia.com", "driver": "gpu.nvidia.com", "spareNodesPerClique": 2},
        "preemption": {"withinQuota": "LowerPriority", "withinQuotaWhileBorrowing": "Never", "minRuntimeSeconds": 1800,
                       "reclaimQuota": "Any"},
        "reservations": {"mode": "Enabled", "maxReservations": 1, "graceSeconds": 300},
        "modelCache": {"hostPath": "/var/lib/kubeforge/models", "eviction": "LRU", "warmAhead": True}}


@pytest.mark.parametrize(
    "raw, fixed",
    [
        ({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}], "default": None,
          "description": "x", "title": "X"},
         {"type": "integer", "minimum": 0, "description": "x"}),
        ({"const": "A", "description": "c"}, {"enum": ["A"], "type": "string", "description": "c"}),
        ({"type": "number", "exclusiveMinimum": 0}, {"type": "number", "minimum": 0,
                                                     "exclusiveMinimum": True}),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 2},
         {"type": "array", "items": {"type": "string"}, "maxItems": 2}),
        ({"type": "object", "properties": {"a": {"type": "string"}},
          "additionalProperties": False, "required": []},
         {"type": "object", "properties": {"a": {"type": "string"}}}),
        ({"$ref": "#/$defs/D", "description": "outer", "default": {}},
         {"type": "object", "properties": {"a": {"type": "string"}}, "description": "outer",
          "default": {}}),
    ],
)
def test_fix_up_rules(raw: dict[str, Any], fixed: dict[str, Any]) -> None:
    defs = {"D": {"type": "object", "title": "D", "description": "inner",
                  "properties": {"a": {"type": "string", "title": "A"}}}}
    assert _structural.structural_node(raw, defs, "t") == fixed


@pytest.mark.parametrize("raw", [
    {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
    {"type": "object"},
    {"type": "string", "if": {}},
    {"$ref": "#/$defs/Missing"},
])
def test_fix_up_rejects_what_a_crd_cannot_say(raw: dict[str, Any]) -> None:
    with pytest.raises(crdgen.SchemaError):
        _structural.structural_node(raw, {}, "t")
