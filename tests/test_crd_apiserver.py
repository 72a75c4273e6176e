"""The generated CRDs against a real API server: accepted, explained, validating, defaulting.

Uses the ``cluster`` and ``namespace`` fixtures of tests/conftest.py; the session fixture has
already applied crds/.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

import builders as b
from kubeforge.api import (
    Condition,
    ConditionStatus,
    GPUPool,
    InferenceService,
    TrainingJob,
    TrainingJobPhase,
    TrainingJobStatus,
    parse_as,
)

pytestmark = pytest.mark.cluster

CRDS = ["gpupools.kubeforge.io", "trainingjobs.kubeforge.io", "inferenceservices.kubeforge.io"]
TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}


def training_job(name: str, **spec: Any) -> dict[str, Any]:
    """A TrainingJob of 2 x 8 GPUs in ``pool-a``, no namespace (``apply -n`` gives it), the rest
    (topology, priority...) left to the schema's defaults; ``spec`` (camelCase) over it."""
    return (b.TrainingJob(name).ns(None).without("topology", "priority").pools("pool-a").replicas(2).gpus(8)
            .template(TEMPLATE).spec(**spec).manifest())


def inference_service(name: str, **spec: Any) -> dict[str, Any]:
    """An InferenceService in ``pool-a``, no namespace, all but the template left to the schema's
    defaults (no gpusPerReplica, no topology); ``spec`` (camelCase) over it."""
    return (b.InferenceService(name).ns(None).without("gpusPerReplica", "topology").pools("pool-a")
            .template(TEMPLATE).spec(**spec).manifest())


def apply(cluster: Any, namespace: str, obj: dict[str, Any], check: bool = True) -> Any:
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj),
                           check=check)


def get_json(cluster: Any, *args: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def flat(text: str) -> str:
    """Joins kubectl's wrapped lines so that phrases can be matched."""
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("crd", CRDS)
def test_crd_is_established(cluster: Any, crd: str) -> None:
    established = cluster.kubectl(
        "get", "crd", crd, "-o", 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    ).stdout
    assert established == "True"
    accepted = cluster.kubectl(
        "get", "crd", crd,
        "-o", 'jsonpath={.status.conditions[?(@.type=="NamesAccepted")].status}',
    ).stdout
    assert accepted == "True"


@pytest.mark.parametrize(
    "resource, phrases",
    [
        ("trainingjob.spec", [
            "replicas is the number of worker pods",
            "gpusPerReplica is the number of GPUs each worker pod requests",
            "pools are the names of the GPUPools",
            "failurePolicy says how failures and preemptions are retried",
        ]),
        ("trainingjob.spec.checkpoint.mountPath", ["mountPath is the absolute path"]),
        ("trainingjob.status.restarts", ["preemptions is the number of restarts after preemption"]),
        ("gpupool.spec", ["capacityType says whether the nodes are Spot, OnDemand, or Auto",
                          "pricePerGPUHour is the price of one GPU-hour"]),
        ("inferenceservice.spec.autoscaling", ["targetPerReplica is the queue length",
                                               "activationThreshold", "slo switches the service to SLO mode"]),
        ("inferenceservice.spec.autoscaling.slo", ["timeToFirstTokenSeconds is the time-to-first-token target",
                                                   "interTokenLatencySeconds is the inter-token-latency target"]),
    ],
)
def test_kubectl_explain_teaches_the_fields(cluster: Any, resource: str,
                                           phrases: list[str]) -> None:
    out = flat(cluster.kubectl("explain", resource, "--api-version=kubeforge.io/v1alpha1").stdout)
    for phrase in phrases:
        assert phrase in out, out


@pytest.mark.parametrize(
    "name, spec, fragments",
    [
        ("replicas-zero", {"replicas": 0},
         ["spec.replicas", "should be greater than or equal to 1"]),
        ("gpus-negative", {"gpusPerReplica": -1},
         ["spec.gpusPerReplica", "should be greater than or equal to 1"]),
        ("mode-sideways", {"topology": {"mode": "Sideways"}},
         ["spec.topology.mode", 'Unsupported value: "Sideways"']),
        ("required-without-level", {"topology": {"mode": "Required"}},
         ["spec.topology", "topology.level is required when topology.mode is Required"]),
        ("relative-mount-path", {"checkpoint": {"mountPath": "checkpoints"}},
         ["spec.checkpoint.mountPath",
          "checkpoint.mountPath must be an absolute path (start with /)"]),
        ("no-pools", {"pools": []}, ["spec.pools", "should have at least 1 items"]),
    ],
)
def test_invalid_training_job_is_rejected(cluster: Any, namespace: str, name: str,
                                          spec: dict[str, Any], fragments: list[str]) -> None:
    result = apply(cluster, namespace, training_job(name, **spec), check=False)
    assert result.returncode != 0, result.stdout
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.mark.parametrize(
    "name, spec, fragments",
    [
        ("min-above-max", {"minReplicas": 5, "maxReplicas": 2},
         ["minReplicas must be less than or equal to maxReplicas"]),
        ("min-above-default-max", {"minReplicas": 5},
         ["minReplicas must be less than or equal to maxReplicas"]),
        ("custom-without-query", {"autoscaling": {"metric": "Custom"}},
         ["spec.autoscaling", "autoscaling.query is required when autoscaling.metric is Custom"]),
        ("slo-without-target", {"autoscaling": {"slo": {"percentile": 95}}},
         ["spec.autoscaling.slo", "slo needs timeToFirstTokenSeconds, interTokenLatencySeconds or both"]),
        ("slo-on-sglang", {"autoscaling": {"metric": "SGLangQueue", "slo": {"timeToFirstTokenSeconds": 1}}},
         ["spec.autoscaling", "autoscaling.slo reads vLLM's metrics"]),
        ("slo-zero-ttft", {"autoscaling": {"slo": {"timeToFirstTokenSeconds": 0}}},
         ["spec.autoscaling.slo.timeToFirstTokenSeconds", "should be greater than 0"]),
        ("slo-p100", {"autoscaling": {"slo": {"interTokenLatencySeconds": 0.1, "percentile": 100}}},
         ["spec.autoscaling.slo.percentile", "should be less than or equal to 99"]),
        # issue 32.5: targetPerReplica would be silently ignored beside slo
        ("slo-and-target", {"autoscaling": {"targetPerReplica": 2, "slo": {"timeToFirstTokenSeconds": 1}}},
         ["spec.autoscaling", "with autoscaling.slo the latency targets size the service: set one of them"]),
    ],
)
def test_invalid_inference_service_is_rejected(cluster: Any, namespace: str, name: str,
                                               spec: dict[str, Any],
                                               fragments: list[str]) -> None:
    result = apply(cluster, namespace, inference_service(name, **spec), check=False)
    assert result.returncode != 0, result.stdout
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.mark.parametrize(
    "kind, name, fragments",
    [
        ("TrainingJob", "Llama", ["metadata.name of a TrainingJob must be a DNS-1035 label"]),
        ("TrainingJob", "llama.7b", ["must be a DNS-1035 label"]),
        ("TrainingJob", "7b-llama", ["must be a DNS-1035 label"]),
        ("TrainingJob", "llama-", ["must be a DNS-1035 label"]),
        ("TrainingJob", "a" * 52, ["metadata.name of a TrainingJob must be at most 51 characters",
                                   "<name>-worker-<rank>"]),
        ("InferenceService", "chat.v2", ["metadata.name of a InferenceService must be a DNS-1035 label"]),
        ("InferenceService", "c" * 64, ["must be at most 63 characters"]),
    ],
)
def test_names_the_operator_could_not_build_from_are_refused(cluster: Any, namespace: str, kind: str, name: str,
                                                             fragments: list[str]) -> None:
    obj = training_job(name) if kind == "TrainingJob" else inference_service(name)
    result = apply(cluster, namespace, obj, check=False)
    assert result.returncode != 0, result.stdout
    for fragment in fragments:
        assert fragment in flat(result.stderr), result.stderr


def test_longest_training_job_name_is_accepted(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, training_job("a" * 51))


@pytest.mark.parametrize(
    "template, fragments",
    [
        ({"spec": {"containers": []}}, ["spec.template.spec.containers", "should have at least 1 items"]),
        ({"spec": {}}, ["spec.template.spec.containers", "Required value"]),
        ({"spec": {"containers": [{"name": "main"}]}}, ["spec.template.spec.containers[0].image", "Required value"]),
        ({"spec": {"containers": [{"name": "main", "image": ""}]}}, ["spec.template.spec.containers[0].image"]),
        ({"spec": {"containers": [{"image": "busybox"}]}}, ["spec.template.spec.containers[0].name", "Required value"]),
        ({"spec": {"containers": [{"name": "Main_1", "image": "busybox"}]}}, ["spec.template.spec.containers[0].name"]),
    ],
)
def test_templates_without_a_runnable_container_are_refused(cluster: Any, namespace: str, template: dict,
                                                            fragments: list[str]) -> None:
    for obj in (training_job(f"t-{uuid.uuid4().hex[:6]}", template=template),
                inference_service(f"s-{uuid.uuid4().hex[:6]}", template=template)):
        result = apply(cluster, namespace, obj, check=False)
        assert result.returncode != 0, result.stdout
        for fragment in fragments:
            assert fragment in flat(result.stderr), result.stderr


def test_pool_names_must_be_label_values(cluster: Any) -> None:
    pool = b.GPUPool("p" * 64).manifest()
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(pool), check=False)
    assert result.returncode != 0 and "at most 63 characters" in flat(result.stderr), result.stderr


def test_valid_training_job_is_accepted_and_defaulted(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, training_job("ok"))
    obj = get_json(cluster, "-n", namespace, "trainingjob", "ok")
    spec = obj["spec"]
    assert spec["priority"] == 0
    assert spec["suspend"] is False
    assert spec["topology"] == {"mode": "Preferred"}
    assert spec["checkpoint"] == {"mode": "ClaimPerJob", "size": "10Gi", "accessModes": ["ReadWriteMany"],
                                  "mountPath": "/checkpoints", "deletionPolicy": "Retain"}
    assert spec["failurePolicy"] == {"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600,
                                     "preemptionsBeforeFallback": 2, "maxPreemptions": 100, "maxStartupRetries": 5}
    assert spec["startupTimeoutSeconds"] == 600 and spec["fallbackAfterSeconds"] == 300
    # The template survives untouched (preserve-unknown-fields, no pruning).
    assert spec["template"] == TEMPLATE
    # And the model reads what the API server returns.
    job = parse_as(TrainingJob, obj)
    assert job.metadata.namespace == namespace and job.spec.checkpoint.size == "10Gi"


def test_valid_inference_service_is_accepted_and_defaulted(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, inference_service("ok", autoscaling={"scaleDown": {"maxStep": 2}}))
    obj = get_json(cluster, "-n", namespace, "inferenceservice", "ok")
    spec = obj["spec"]
    # gpusPerReplica has no schema default: it follows spec.parallelism when that is set (1 otherwise)
    assert "gpusPerReplica" not in spec
    assert (spec["port"], spec["minReplicas"], spec["maxReplicas"]) == (8000, 1, 4)
    assert spec["topology"] == {"mode": "Required"}
    auto = spec["autoscaling"]
    assert auto["prometheusURL"] == "http://prometheus-operated.monitoring.svc:9090"
    assert auto["metric"] == "VLLMWaiting"
    assert "targetPerReplica" not in auto  # no schema default: set, it must not meet slo (issue 32.5)
    assert parse_as(InferenceService, obj).spec.autoscaling.queue_target == 4
    assert auto["scaleUp"] == {"stabilizationWindowSeconds": 0, "maxStep": 1, "periodSeconds": 10}
    assert auto["scaleDown"] == {"stabilizationWindowSeconds": 300, "maxStep": 2,
                                 "periodSeconds": 30, "peakHoldSeconds": 0, "peakHoldPercent": 60}  # the hold off
    assert parse_as(InferenceService, obj).spec.autoscaling.scale_down.max_step == 2
    assert "slo" not in auto  # queue-depth mode unless asked


def test_slo_inference_service_is_accepted_and_defaulted(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, inference_service("slo", autoscaling={"slo": {"timeToFirstTokenSeconds": 1.5}}))
    obj = get_json(cluster, "-n", namespace, "inferenceservice", "slo")
    assert obj["spec"]["autoscaling"]["slo"] == {"timeToFirstTokenSeconds": 1.5, "percentile": 90, "windowSeconds": 60}
    slo = parse_as(InferenceService, obj).spec.autoscaling.slo
    assert (slo.time_to_first_token_seconds, slo.inter_token_latency_seconds) == (1.5, None)


def test_slo_beside_a_target_stored_before_the_rule_is_ratcheted_not_refused(cluster: Any, namespace: str) -> None:
    """An object stored with targetPerReplica (as the schema used to default it) may add slo: the
    rule refuses only a targetPerReplica created or changed beside slo, so an upgrade never makes
    a stored object unwritable; the operator then says the target is ignored (ScalingActive)."""
    apply(cluster, namespace, inference_service("old", autoscaling={"targetPerReplica": 4}))
    apply(cluster, namespace, inference_service("old", autoscaling={"targetPerReplica": 4,
                                                                    "slo": {"timeToFirstTokenSeconds": 1}}))
    changed = apply(cluster, namespace, inference_service("old", autoscaling={
        "targetPerReplica": 3, "slo": {"timeToFirstTokenSeconds": 1}}), check=False)
    assert changed.returncode != 0 and "set one of them" in changed.stderr
    obj = get_json(cluster, "-n", namespace, "inferenceservice", "old")
    assert parse_as(InferenceService, obj).spec.autoscaling.ignored_target


def test_valid_gpu_pool_is_accepted_and_defaulted(cluster: Any) -> None:
    name = f"crd-test-{uuid.uuid4().hex[:8]}"
    pool = b.GPUPool(name).tolerations([{"key": "nvidia.com/gpu", "operator": "Exists"}]).manifest()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pool))
    try:
        obj = get_json(cluster, "gpupool", name)
        assert obj["spec"]["gpuResourceName"] == "nvidia.com/gpu"
        assert obj["spec"]["capacityType"] == "Auto"
        assert parse_as(GPUPool, obj).metadata.name == name
        bad = b.GPUPool(name).tolerations([{"key": "a", "operator": "Exists", "value": "b"}]).manifest()
        result = cluster.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
        assert result.returncode != 0
        assert "value must be empty when operator is Exists" in result.stderr
    finally:
        cluster.kubectl("delete", "gpupool", name, "--wait=false", check=False)


def test_status_written_from_the_model_is_accepted(cluster: Any, namespace: str) -> None:
    """The status subresource takes what the models serialize (date-times, conditions)."""
    from datetime import datetime, timezone

    apply(cluster, namespace, training_job("status"))
    now = datetime(2025, 5, 1, 10, 0, 0, tzinfo=timezone.utc)
    status = TrainingJobStatus(
        observed_generation=1,
        phase=TrainingJobPhase.PENDING,
        conditions=[Condition(type="Admitted", status=ConditionStatus.FALSE, reason="NoCapacity",
                              message="waiting for 16 GPUs", last_transition_time=now)],
        start_time=now,
    )
    patched = cluster.kubectl(
        "patch", "-n", namespace, "trainingjob", "status", "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": status.to_dict()}), "-o", "json",
    ).stdout
    job = parse_as(TrainingJob, json.loads(patched))
    assert job.status is not None
    assert job.status.phase is TrainingJobPhase.PENDING
    assert job.status.conditions[0].last_transition_time == now
    assert job.status.start_time == now
    # The printer columns read the status.
    table = cluster.kubectl("get", "-n", namespace, "tj", "status").stdout
    assert table.split()[:11] == ["NAME", "PHASE", "POOL", "DOMAIN", "REPLICAS", "GPUS/REPLICA",
                                  "PROGRESS", "ETA", "PREEMPTIONS", "FAILURES", "AGE"]
