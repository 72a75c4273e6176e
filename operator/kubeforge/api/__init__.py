"""kubeforge.api: pydantic models of the kubeforge.io/v1alpha1 resources.

Three kinds: :class:`GPUPool` (cluster-scoped), :class:`TrainingJob` and
:class:`InferenceService` (namespaced). Python attributes are snake_case; the JSON names are
camelCase and both are accepted on input. ``model.to_dict()`` gives the JSON form.

Read an object that the API server or kopf handed over with ``parse_as(TrainingJob, body)``
(any model), or :func:`parse_resource` for any kind chosen by its ``kind``; spec and status models validate
alone as well (``TrainingJobSpec.model_validate(spec)``).

The CRDs in ``crds/`` are generated from these models by :mod:`kubeforge.api.crdgen`.
"""

from .. import API_VERSION, GROUP, VERSION
from ._activation import (
    DEFAULT_ACTIVATION_HOLD_SECONDS,
    DEFAULT_ACTIVATION_QUEUE_LIMIT,
    ENDPOINT_PORT_NAME,
    ENDPOINTS_ACTIVATOR,
    ENDPOINTS_LABEL,
    ENDPOINTS_REPLICAS,
    HOLD_SECONDS_ANNOTATION,
    MAX_ACTIVATION_HOLD_SECONDS,
    MAX_ACTIVATION_QUEUE_LIMIT,
    QUEUE_LIMIT_ANNOTATION,
    Activation,
)
from ._base import MAX_LABEL_LENGTH, KubeModel, name_error, to_plain
from ._core import (
    Condition,
    ConditionStatus,
    LabelSelector,
    LabelSelectorRequirement,
    ObjectMeta,
    SelectorOperator,
    TaintEffect,
    Toleration,
    TolerationOperator,
)
from ._pod_template import PodTemplate
from ._quota import GPUQuota, PoolPreemption, PreemptionPolicy, QuotaUsage
from ._reservations import PoolReservations, ReservationMode
from ._gpupool import (
    DEFAULT_DEVICE_CLASS_NAME,
    DEFAULT_DRA_DRIVER,
    DEFAULT_GPU_RESOURCE_NAME,
    DeviceAllocation,
    DRAConfig,
    CapacityType,
    EffectiveTopologyLevel,
    GPUCounts,
    GPUPool,
    GPUPoolSpec,
    GPUPoolStatus,
    LevelSource,
    NodeCounts,
    PoolWorkload,
    TopologyDomain,
    TopologyLevel,
)
from ._autoscaling import (
    DEFAULT_PROMETHEUS_URL,
    Autoscaling,
    LatencySLO,
    Metric,
    ScaleDownRules,
    ScaleUpRules,
)
from ._inferenceservice import (
    DEFAULT_MAX_GROUP_RESTARTS,
    Engine,
    InferenceService,
    InferenceServiceSpec,
    MultiNode,
    Parallelism,
    StartupPolicy,
    ServingTopology,
)
from ._inferenceservice_status import (
    DrainReason,
    GroupPhase,
    InferenceServiceStatus,
    ReplicaGroup,
    ScaleDirection,
)
from ._serving_start import (
    MAX_START_SAMPLES,
    ForecastStatus,
    GroupStart,
    Predictive,
    PredictiveMode,
    Standby,
    StandbyState,
    StartEstimate,
    StartTimes,
)
from ._parse import (
    RESOURCE_KINDS,
    Resource,
    describe_validation_error,
    parse_as,
    parse_resource,
    spec_error,
)
from ._trainingjob import (
    MAX_JOB_NAME_LENGTH,
    AccessMode,
    Checkpoint,
    DeletionPolicy,
    FailurePolicy,
    TrainingJob,
    TrainingJobSpec,
    TrainingTopology,
)
from ._trainingjob_status import (
    MAX_REPORTED_METRICS,
    STATUS_TOKEN_AUDIENCE,
    LastCheckpoint,
    Placement,
    Progress,
    ReplicaCounts,
    ReportedMetric,
    RestartCounts,
    TrainingJobPhase,
    TrainingJobStatus,
)
from ._workload import TopologyMode

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "KubeModel",
    # names and plain data (shared with the runtime and the object models)
    "MAX_LABEL_LENGTH",
    "name_error",
    "to_plain",
    # core types
    "Condition",
    "ConditionStatus",
    "LabelSelector",
    "LabelSelectorRequirement",
    "ObjectMeta",
    "PodTemplate",
    "SelectorOperator",
    "TaintEffect",
    "Toleration",
    "TolerationOperator",
    # GPUPool
    "DEFAULT_DEVICE_CLASS_NAME",
    "DEFAULT_DRA_DRIVER",
    "DEFAULT_GPU_RESOURCE_NAME",
    "DeviceAllocation",
    "DRAConfig",
    "CapacityType",
    "EffectiveTopologyLevel",
    "GPUCounts",
    "GPUPool",
    "GPUPoolSpec",
    "GPUPoolStatus",
    "GPUQuota",
    "LevelSource",
    "NodeCounts",
    "PoolPreemption",
    "PoolReservations",
    "ReservationMode",
    "PoolWorkload",
    "PreemptionPolicy",
    "QuotaUsage",
    "TopologyDomain",
    "TopologyLevel",
    # TrainingJob
    "MAX_JOB_NAME_LENGTH",
    "AccessMode",
    "Checkpoint",
    "DeletionPolicy",
    "FailurePolicy",
    "LastCheckpoint",
    "MAX_REPORTED_METRICS",
    "STATUS_TOKEN_AUDIENCE",
    "Progress",
    "ReportedMetric",
    "Placement",
    "ReplicaCounts",
    "RestartCounts",
    "TopologyMode",
    "TrainingJob",
    "TrainingJobPhase",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "TrainingTopology",
    # InferenceService
    "DEFAULT_PROMETHEUS_URL",
    "Autoscaling",
    "DEFAULT_MAX_GROUP_RESTARTS",
    "DrainReason",
    "Engine",
    "GroupPhase",
    "InferenceService",
    "InferenceServiceSpec",
    "InferenceServiceStatus",
    "MultiNode",
    "Parallelism",
    "ReplicaGroup",
    "StartupPolicy",
    "LatencySLO",
    "Metric",
    "ScaleDirection",
    "ScaleDownRules",
    "ScaleUpRules",
    "ServingTopology",
    "MAX_START_SAMPLES",
    "ForecastStatus",
    "GroupStart",
    "Predictive",
    "PredictiveMode",
    "Standby",
    "StandbyState",
    "StartEstimate",
    "StartTimes",
    # activation (the activator's contract with the operator)
    "DEFAULT_ACTIVATION_HOLD_SECONDS",
    "DEFAULT_ACTIVATION_QUEUE_LIMIT",
    "ENDPOINT_PORT_NAME",
    "ENDPOINTS_ACTIVATOR",
    "ENDPOINTS_LABEL",
    "ENDPOINTS_REPLICAS",
    "HOLD_SECONDS_ANNOTATION",
    "MAX_ACTIVATION_HOLD_SECONDS",
    "MAX_ACTIVATION_QUEUE_LIMIT",
    "QUEUE_LIMIT_ANNOTATION",
    "Activation",
    # parsing
    "RESOURCE_KINDS",
    "Resource",
    "describe_validation_error",
    "parse_as",
    "parse_resource",
    "spec_error",
]
