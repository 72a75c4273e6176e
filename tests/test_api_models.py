"""The kubeforge.io/v1alpha1 models: defaults, parsing real bodies, clear errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from kubeforge.api import (
    AccessMode,
    CapacityType,
    ConditionStatus,
    DeletionPolicy,
    GPUPool,
    GPUPoolSpec,
    GPUPoolStatus,
    InferenceService,
    InferenceServiceSpec,
    Metric,
    TopologyMode,
    TrainingJob,
    TrainingJobPhase,
    TrainingJobSpec,
    TrainingJobStatus,
    describe_validation_error,
    parse_resource,
    parse_as,
)

TEMPLATE = {
    "metadata": {"labels": {"team": "llm"}},
    "spec": {
        "containers": [
            {"name": "trainer", "image": "ghcr.io/example/train:1.0", "command": ["torchrun"]}
        ],
        "restartPolicy": "Never",
    },
}

# What the API server hands over: server-set metadata, unknown keys included.
TRAINING_JOB = {
    "apiVersion": "kubeforge.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {
        "name": "llama-pretrain",
        "namespace": "research",
        "uid": "0b9d7c1e-5f5a-4a8e-9d38-0b6f1c1f2d11",
        "generation": 3,
        "resourceVersion": "48213",
        "creationTimestamp": "2025-05-01T10:00:00Z",
        "labels": {"app": "llama"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        "finalizers": ["kubeforge.io/checkpoint"],
        "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        "somethingNew": {"x": 1},
    },
    "spec": {
        "pools": ["h100-spot", "h100-ondemand"],
        "replicas": 4,
        "gpusPerReplica": 8,
        "priority": 10,
        "template": TEMPLATE,
        "topology": {"mode": "Required", "level": "nvlink"},
        "checkpoint": {"size": "200Gi", "storageClassName": "fast", "mountPath": "/ckpt"},
        "failurePolicy": {"maxRestarts": 5},
    },
    "status": {
        "observedGeneration": 3,
        "phase": "Running",
        "conditions": [
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Placed",
                "message": "4 replicas in nvlink domain clique-a",
                "lastTransitionTime": "2025-05-01T10:00:05Z",
                "observedGeneration": 3,
            }
        ],
        "placement": {
            "pool": "h100-spot",
            "level": "nvlink",
            "domain": "clique-a",
            "nodes": ["n1", "n2", "n3", "n4"],
            "reason": "narrowest domain with 32 free GPUs",
        },
        "restarts": {"failures": 1, "preemptions": 2},
        "lastCheckpoint": {"step": 1200, "path": "/ckpt/step-1200", "time": "2025-05-01T11:00:00Z"},
        "startTime": "2025-05-01T10:00:10Z",
        "gpuHours": 12.5,
        "cost": 25.0,
        "replicas": {"active": 4, "ready": 4},
    },
}

GPU_POOL = {
    "apiVersion": "kubeforge.io/v1alpha1",
    "kind": "GPUPool",
    "metadata": {"name": "h100-spot", "generation": 1, "uid": "u-1"},
    "spec": {
        "nodeSelector": {
            "matchLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "matchExpressions": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
            ],
        },
        "topologyLevels": [
            {"name": "nvlink", "nodeLabel": "nvidia.com/gpu.clique"},
            {"name": "block", "nodeLabel": "cloud.google.com/gce-topology-block"},
        ],
        "capacityType": "Spot",
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute",
             "tolerationSeconds": 30},
        ],
        "pricePerGPUHour": 2.0,
    },
    "status": {
        "observedGeneration": 1,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "NodesReady",
             "lastTransitionTime": "2025-05-01T09:00:00Z"}
        ],
        "topologyLevels": [
            {"name": "nvlink", "nodeLabel": "nvidia.com/gpu.clique", "source": "Spec"}
        ],
        "nodes": {"total": 4, "ready": 4, "spot": 4, "onDemand": 0},
        "gpus": {"capacity": 32, "allocatable": 32, "allocated": 8, "free": 24},
        "spotGPUs": {"capacity": 32, "allocatable": 32, "allocated": 8, "free": 24},
        "onDemandGPUs": {},
        "domains": [
            {"level": "nvlink", "name": "clique-a", "nodes": 4,
             "gpus": {"capacity": 32, "allocatable": 32, "allocated": 8, "free": 24}}
        ],
        "workloads": [{"kind": "TrainingJob", "namespace": "research", "name": "j", "gpus": 8}],
    },
}

INFERENCE_SERVICE = {
    "apiVersion": "kubeforge.io/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": "llama-chat", "namespace": "serving"},
    "spec": {
        "pools": ["l4"],
        "gpusPerReplica": 2,
        "template": TEMPLATE,
        "minReplicas": 0,
        "maxReplicas": 8,
        "autoscaling": {"targetPerReplica": 2.5, "scaleDown": {"maxStep": 2}},
    },
    "status": {"replicas": 2, "readyReplicas": 1, "desiredReplicas": 2,
               "lastMetricValue": 4.0, "lastScaleDirection": "Up",
               "url": "http://llama-chat.serving.svc:8000"},
}


def with_spec(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """Returns a deep copy of body with spec keys replaced (None deletes a key)."""
    body = copy.deepcopy(body)
    for key, value in changes.items():
        if value is None:
            body["spec"].pop(key, None)
        else:
            body["spec"][key] = value
    return body


# ---------------------------------------------------------------------------------------------
# Parsing realistic bodies


def test_training_job_parses_a_full_body() -> None:
    job = parse_as(TrainingJob, TRAINING_JOB)
    assert job.metadata.name == "llama-pretrain"
    assert job.metadata.generation == 3
    assert job.spec.pools == ["h100-spot", "h100-ondemand"]
    assert job.spec.gpus_per_replica == 8
    assert job.spec.topology.mode is TopologyMode.REQUIRED
    assert job.spec.topology.level == "nvlink"
    assert job.spec.checkpoint.size == "200Gi"
    assert job.spec.checkpoint.mount_path == "/ckpt"
    assert job.spec.failure_policy.max_restarts == 5
    assert job.spec.template.spec["containers"][0]["image"] == "ghcr.io/example/train:1.0"
    assert job.status is not None
    assert job.status.phase is TrainingJobPhase.RUNNING
    assert job.status.placement is not None and job.status.placement.nodes[0] == "n1"
    assert job.status.restarts.preemptions == 2
    assert job.status.last_checkpoint is not None and job.status.last_checkpoint.step == 1200
    admitted = next((c for c in job.status.conditions if c.type == "Admitted"), None)
    assert admitted is not None and admitted.status is ConditionStatus.TRUE
    assert admitted.last_transition_time.tzinfo is not None


def test_training_job_round_trips_through_to_dict() -> None:
    job = parse_as(TrainingJob, TRAINING_JOB)
    again = parse_as(TrainingJob, job.to_dict())
    assert again == job
    out = job.to_dict()
    assert out["spec"]["gpusPerReplica"] == 8
    assert out["spec"]["failurePolicy"]["preemptionsBeforeFallback"] == 2
    assert out["status"]["startTime"] == "2025-05-01T10:00:10Z"
    assert "managedFields" not in out["metadata"]


def test_gpu_pool_parses_a_full_body() -> None:
    pool = parse_as(GPUPool, GPU_POOL)
    assert pool.metadata.namespace is None
    assert pool.spec.capacity_type is CapacityType.SPOT
    assert pool.spec.price_per_gpu_hour == 2.0
    assert [lvl.node_label for lvl in pool.spec.topology_levels] == [
        "nvidia.com/gpu.clique",
        "cloud.google.com/gce-topology-block",
    ]
    assert pool.spec.node_selector.match_expressions[0].values == ["spot"]
    assert pool.spec.tolerations[1].toleration_seconds == 30
    assert pool.status is not None
    assert pool.status.spot_gpus.free == 24
    assert pool.status.on_demand_gpus.capacity == 0
    assert pool.status.domains[0].gpus.allocated == 8
    assert pool.to_dict()["spec"]["pricePerGPUHour"] == 2.0
    assert "spotGPUs" in pool.to_dict()["status"]


def test_inference_service_parses_a_full_body() -> None:
    svc = parse_as(InferenceService, INFERENCE_SERVICE)
    assert svc.spec.min_replicas == 0
    assert svc.spec.autoscaling.target_per_replica == 2.5
    assert svc.spec.autoscaling.scale_down.max_step == 2
    assert svc.spec.autoscaling.scale_down.stabilization_window_seconds == 300  # the API default
    assert svc.status is not None and svc.status.ready_replicas == 1
    assert svc.service_url() == "http://llama-chat.serving.svc:8000"


def test_parse_resource_dispatches_on_kind() -> None:
    assert isinstance(parse_resource(TRAINING_JOB), TrainingJob)
    assert isinstance(parse_resource(GPU_POOL), GPUPool)
    assert isinstance(parse_resource(INFERENCE_SERVICE), InferenceService)
    with pytest.raises(ValueError, match="not a kubeforge kind"):
        parse_resource({"kind": "Pod"})


def test_parse_accepts_read_only_mappings() -> None:
    """kopf hands over Body/Spec views (Mappings, not dicts)."""
    from types import MappingProxyType

    def freeze(value: Any) -> Any:
        if isinstance(value, dict):
            return MappingProxyType({k: freeze(v) for k, v in value.items()})
        if isinstance(value, list):
            return tuple(freeze(v) for v in value)
        return value

    job = parse_as(TrainingJob, freeze(TRAINING_JOB))
    assert job.spec.replicas == 4


def test_wrong_kind_is_an_error() -> None:
    body = dict(TRAINING_JOB, kind="InferenceService")
    with pytest.raises(ValidationError) as err:
        parse_as(TrainingJob, body)
    assert "kind" in describe_validation_error(err.value)


def test_status_is_optional() -> None:
    body = copy.deepcopy(TRAINING_JOB)
    del body["status"]
    assert parse_as(TrainingJob, body).status is None
    body["status"] = {}
    status = parse_as(TrainingJob, body).status
    assert status == TrainingJobStatus()


def test_snake_case_names_are_accepted() -> None:
    spec = TrainingJobSpec(
        pools=["a"], replicas=1, gpus_per_replica=1, template=TEMPLATE
    )
    assert spec.to_dict()["gpusPerReplica"] == 1


# ---------------------------------------------------------------------------------------------
# Defaults


def test_training_job_defaults() -> None:
    spec = TrainingJobSpec.model_validate(
        {"pools": ["p"], "replicas": 2, "gpusPerReplica": 1, "template": TEMPLATE}
    )
    assert spec.priority == 0
    assert spec.suspend is False
    assert spec.topology.mode is TopologyMode.PREFERRED and spec.topology.level is None
    assert spec.checkpoint.size == "10Gi"
    assert spec.checkpoint.access_modes == [AccessMode.READ_WRITE_MANY]
    assert spec.checkpoint.mount_path == "/checkpoints"
    assert spec.checkpoint.deletion_policy is DeletionPolicy.RETAIN
    assert spec.checkpoint.existing_claim_name is None
    fp = spec.failure_policy
    assert (fp.max_restarts, fp.backoff_seconds, fp.max_backoff_seconds,
            fp.preemptions_before_fallback, fp.max_preemptions, fp.max_startup_retries) == (3, 10, 600, 2, 100, 5)
    assert (spec.startup_timeout_seconds, spec.fallback_after_seconds) == (600, 300)


def test_default_lists_are_not_shared() -> None:
    a = TrainingJobSpec(pools=["p"], replicas=1, gpus_per_replica=1, template=TEMPLATE)
    b = TrainingJobSpec(pools=["p"], replicas=1, gpus_per_replica=1, template=TEMPLATE)
    a.checkpoint.access_modes.append(AccessMode.READ_WRITE_ONCE)
    assert b.checkpoint.access_modes == [AccessMode.READ_WRITE_MANY]


def test_gpu_pool_defaults() -> None:
    spec = GPUPoolSpec()
    assert spec.gpu_resource_name == "nvidia.com/gpu"
    assert spec.capacity_type is CapacityType.AUTO
    assert spec.topology_levels == [] and spec.tolerations == []
    assert spec.node_selector.match_labels == {}
    assert spec.price_per_gpu_hour is None
    pool = parse_as(GPUPool, {"apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool",
                           "metadata": {"name": "all"}})
    assert pool.spec == GPUPoolSpec()
    assert GPUPoolStatus().gpus.free == 0


def test_inference_service_defaults() -> None:
    spec = InferenceServiceSpec.model_validate({"pools": ["p"], "template": TEMPLATE})
    assert (spec.replica_gpus, spec.port, spec.min_replicas, spec.max_replicas) == (1, 8000, 1, 4)
    assert spec.gpus_per_replica is None and spec.parallelism is None and spec.engine.value == "vllm"
    assert spec.topology.mode is TopologyMode.REQUIRED and spec.topology.level is None
    a = spec.autoscaling
    assert a.prometheus_url == "http://prometheus-operated.monitoring.svc:9090"
    assert a.metric is Metric.VLLM_WAITING and a.query is None
    assert (a.target_per_replica, a.queue_target, a.tolerance, a.activation_threshold) == (None, 4.0, 0.1, 0.0)
    assert (a.scale_to_zero_after_seconds, a.polling_interval_seconds) == (300, 5)
    assert (a.scale_up.stabilization_window_seconds, a.scale_up.max_step,
            a.scale_up.period_seconds) == (0, 1, 10)
    assert (a.scale_down.stabilization_window_seconds, a.scale_down.max_step,
            a.scale_down.period_seconds) == (300, 1, 30)


@pytest.mark.parametrize("template, message", [
    ({}, "Field required"),
    ({"spec": {}}, "at least one container"),
    ({"spec": {"containers": [{"name": "main"}]}}, "needs an image"),
    ({"spec": {"containers": [{"image": "busybox"}]}}, "needs a name"),
])
def test_templates_without_a_runnable_container_are_refused_by_the_model(template, message) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainingJobSpec.model_validate({"pools": ["p"], "replicas": 1, "gpusPerReplica": 1, "template": template})


C = [{"name": "main", "image": "busybox"}]


@pytest.mark.parametrize("spec, message", [
    ({"containers": C, "affinity": "zone-a"}, "affinity must be an object"),
    ({"containers": C, "nodeSelector": ["a"]}, "nodeSelector must be a map"),
    ({"containers": C, "tolerations": "all"}, "tolerations must be a list"),
    ({"containers": C, "volumes": [{"name": "Data_1"}]}, "must be a DNS label"),
    ({"containers": C, "nodeName": "n1"}, "nodeName must be empty"),
    ({"containers": [{**C[0], "env": "A=1"}]}, "env must be a list"),
    ({"containers": [{**C[0], "resources": "4 GPUs"}]}, "resources must be an object"),
    ({"containers": [{**C[0], "resources": {"limits": "8"}}]}, "resources.limits must be a map"),
])
def test_templates_the_operator_could_not_read_are_refused_by_the_model(spec, message) -> None:
    # A string where a map is expected once crashed admission for every job in the cluster
    # (found by the hostile corpus, e2e/hostile/): the model refuses it, the job says InvalidSpec.
    with pytest.raises(ValidationError, match=message):
        TrainingJobSpec.model_validate({"pools": ["p"], "replicas": 1, "gpusPerReplica": 1, "template": {"spec": spec}})


def test_integer_quantity_is_kept_as_string() -> None:
    body = with_spec(TRAINING_JOB, checkpoint={"size": 1073741824})
    assert parse_as(TrainingJob, body).spec.checkpoint.size == "1073741824"


# ---------------------------------------------------------------------------------------------
# Invalid values give clear errors: (name, body, location, message fragment)

INVALID = [
    ("replicas zero", with_spec(TRAINING_JOB, replicas=0), "spec.replicas",
     "greater than or equal to 1"),
    ("replicas too many", with_spec(TRAINING_JOB, replicas=1025), "spec.replicas",
     "less than or equal to 1024"),
    ("replicas missing", with_spec(TRAINING_JOB, replicas=None), "spec.replicas", "Field required"),
    ("gpus negative", with_spec(TRAINING_JOB, gpusPerReplica=-1), "spec.gpusPerReplica",
     "greater than or equal to 1"),
    ("no pools", with_spec(TRAINING_JOB, pools=[]), "spec.pools", "at least 1 item"),
    ("nine pools", with_spec(TRAINING_JOB, pools=[f"p{i}" for i in range(9)]), "spec.pools",
     "at most 8 items"),
    ("duplicate pools", with_spec(TRAINING_JOB, pools=["a", "a"]), "spec.pools", "twice"),
    ("bad pool name", with_spec(TRAINING_JOB, pools=["Bad_Name"]), "spec.pools.0",
     "should match pattern"),
    ("topology mode", with_spec(TRAINING_JOB, topology={"mode": "Sideways"}),
     "spec.topology.mode", "'Required', 'Preferred' or 'None'"),
    ("required without level", with_spec(TRAINING_JOB, topology={"mode": "Required"}),
     "spec.topology", "topology.level is required when topology.mode is Required"),
    ("relative mountPath", with_spec(TRAINING_JOB, checkpoint={"mountPath": "ckpt"}),
     "spec.checkpoint.mountPath", "absolute path"),
    ("bad quantity", with_spec(TRAINING_JOB, checkpoint={"size": "ten gigs"}),
     "spec.checkpoint.size", "not a quantity"),
    ("bad access mode", with_spec(TRAINING_JOB, checkpoint={"accessModes": ["Sometimes"]}),
     "spec.checkpoint.accessModes.0", "ReadWriteOnce"),
    ("bad deletion policy", with_spec(TRAINING_JOB, checkpoint={"deletionPolicy": "Shred"}),
     "spec.checkpoint.deletionPolicy", "'Retain' or 'Delete'"),
    ("too many restarts", with_spec(TRAINING_JOB, failurePolicy={"maxRestarts": 101}),
     "spec.failurePolicy.maxRestarts", "less than or equal to 100"),
    ("backoff above cap", with_spec(TRAINING_JOB, failurePolicy={"backoffSeconds": 700}),
     "spec.failurePolicy", "must not exceed"),
    ("template not an object", with_spec(TRAINING_JOB, template="pod.yaml"), "spec.template",
     "valid dictionary"),
    ("min above max", with_spec(INFERENCE_SERVICE, minReplicas=5, maxReplicas=2), "spec",
     "minReplicas must be less than or equal to maxReplicas"),
    ("port zero", with_spec(INFERENCE_SERVICE, port=0), "spec.port", "greater than or equal to 1"),
    ("port too big", with_spec(INFERENCE_SERVICE, port=70000), "spec.port",
     "less than or equal to 65535"),
    ("custom without query", with_spec(INFERENCE_SERVICE, autoscaling={"metric": "Custom"}),
     "spec.autoscaling", "autoscaling.query is required when autoscaling.metric is Custom"),
    ("bad metric", with_spec(INFERENCE_SERVICE, autoscaling={"metric": "QPS"}),
     "spec.autoscaling.metric", "'VLLMWaiting', 'SGLangQueue' or 'Custom'"),
    ("target zero", with_spec(INFERENCE_SERVICE, autoscaling={"targetPerReplica": 0}),
     "spec.autoscaling.targetPerReplica", "greater than 0"),
    ("tolerance above one", with_spec(INFERENCE_SERVICE, autoscaling={"tolerance": 1.5}),
     "spec.autoscaling.tolerance", "less than or equal to 1"),
    ("polling zero", with_spec(INFERENCE_SERVICE, autoscaling={"pollingIntervalSeconds": 0}),
     "spec.autoscaling.pollingIntervalSeconds", "greater than or equal to 1"),
    ("capacity type", with_spec(GPU_POOL, capacityType="Cheap"), "spec.capacityType",
     "'Auto', 'Spot' or 'OnDemand'"),
    ("negative price", with_spec(GPU_POOL, pricePerGPUHour=-1), "spec.pricePerGPUHour",
     "greater than or equal to 0"),
    ("duplicate level", with_spec(GPU_POOL, topologyLevels=[
        {"name": "a", "nodeLabel": "x"}, {"name": "a", "nodeLabel": "y"}]),
     "spec.topologyLevels", "unique"),
    ("nine levels", with_spec(GPU_POOL, topologyLevels=[
        {"name": f"l{i}", "nodeLabel": "x"} for i in range(9)]),
     "spec.topologyLevels", "at most 8 items"),
    ("bad level label", with_spec(GPU_POOL, topologyLevels=[{"name": "a", "nodeLabel": "a b"}]),
     "spec.topologyLevels.0.nodeLabel", "should match pattern"),
    ("selector operator", with_spec(GPU_POOL, nodeSelector={
        "matchExpressions": [{"key": "a", "operator": "Near"}]}),
     "spec.nodeSelector.matchExpressions.0.operator", "'In', 'NotIn', 'Exists' or 'DoesNotExist'"),
    ("In without values", with_spec(GPU_POOL, nodeSelector={
        "matchExpressions": [{"key": "a", "operator": "In"}]}),
     "spec.nodeSelector.matchExpressions.0", "values must be non-empty"),
    ("toleration effect", with_spec(GPU_POOL, tolerations=[{"key": "a", "effect": "Never"}]),
     "spec.tolerations.0.effect", "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'"),
    ("Exists with value", with_spec(GPU_POOL, tolerations=[
        {"key": "a", "operator": "Exists", "value": "b"}]),
     "spec.tolerations.0", "value must be empty when operator is Exists"),
]


@pytest.mark.parametrize(
    "body, location, message", [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
def test_invalid_values_give_clear_errors(body: dict, location: str, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_resource(body)
    text = describe_validation_error(err.value)
    assert f"{location}: " in text, text
    assert message in text, text


def test_invalid_condition_status() -> None:
    body = copy.deepcopy(TRAINING_JOB)
    body["status"]["conditions"][0]["status"] = "Maybe"
    with pytest.raises(ValidationError) as err:
        parse_as(TrainingJob, body)
    assert "status.conditions.0.status" in describe_validation_error(err.value)


def test_invalid_phase() -> None:
    body = copy.deepcopy(TRAINING_JOB)
    body["status"]["phase"] = "Exploded"
    with pytest.raises(ValidationError, match="status.phase"):
        parse_as(TrainingJob, body)


@pytest.mark.parametrize("level", [None, "nvlink"])
@pytest.mark.parametrize("mode", ["Required", "Preferred", "None"])
def test_serving_topology_level_is_optional(mode: str, level: str | None) -> None:
    topology: dict[str, Any] = {"mode": mode}
    if level:
        topology["level"] = level
    svc = parse_as(InferenceService, with_spec(INFERENCE_SERVICE, topology=topology))
    assert svc.spec.topology.mode.value == mode
