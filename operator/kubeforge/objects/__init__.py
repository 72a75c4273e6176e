"""kubeforge.objects: the pure vocabulary every layer shares.

One node model (:class:`Node`) with the one interruption predicate
(:func:`interruption_reason`), one pod model (:class:`Pod`) with the one definition of a
terminal pod (:func:`is_terminal`) and the scheduler's request rule (:func:`pod_requests`),
conditions (:func:`set_condition`) and timestamps (:func:`rfc3339`, :func:`parse_time`), the
names and labels of the objects made for jobs and services (``_names``: :func:`worker_pod_name`...),
why a placed pod does not start, as a gang and a serving group both read it (``_refusals``:
:func:`rejected_by_kubelet`, :data:`SCHEDULE_TIMEOUT`...),
the phases of a replica's start (:class:`PodStart`, :class:`GroupStart`),
records of kubeforge's own objects with their specs parsed once into the API models
(:class:`Record`), and the one definition of a job's current attempt
(:func:`current_attempt`), and the status vocabulary (``_reasons``: TrainingJob phases, condition
types and every condition and Event reason, one constant each). No I/O, no clock.
"""

from kubeforge.objects._labels import (
    ADMISSION_GATE, ASSIGNED_NODE, GANG_GATE, GROUP_INDEX, GROUP_ROLE, JOB_NAME, LEADER_ROLE, MANAGED_BY, MANAGER,
    POOL_LABEL, REPLICA_INDEX, RESTART_ATTEMPT, ROLE_LABEL, SERVICE_NAME, TEMPLATE_HASH, VOLUME_GATE, WORKER_INDEX,
    WORKER_ROLE,
)
from kubeforge.objects import _reasons
from kubeforge.objects._conditions import MAX_CONDITION_MESSAGE, conditions_equal, set_condition
from kubeforge.objects._timestamps import loose_time, parse_time, rfc3339
from kubeforge.objects._names import (
    MAX_HOSTNAME, WORKERS_SERVICE, channel_template_name, checkpoint_claim_name, checkpoint_path, checkpoint_uri,
    compute_domain_name, gpu_claim_template_name, group_hostname, group_pod_name, job_labels, leader_address,
    master_address, owns_checkpoint_claim, pvc_name, service_labels, slice_name, worker_hostname, worker_pod_name,
)
from kubeforge.objects._reasons import *  # noqa: F401,F403  (the status vocabulary: phases, condition types, reasons)
from kubeforge.objects._node import (
    BLOCKING_EFFECTS, DEFAULT_NOT_READY_GRACE, INTERRUPTION_TAINT_PREFIXES, NATIVE_RESOURCES, Node, Taint,
    interruption_reason, is_interrupted, node_from_k8s, not_ready_wait, parse_quantity_count, quantity_value,
    tolerates,
)
from kubeforge.objects._start import GroupStart, PodStart, group_start, pod_start_from_k8s
from kubeforge.objects._pod import (
    MAIN_CONTAINER_NAMES, STUCK_WAITING_REASONS, TERMINAL_PHASES, Pod, gpu_request_conflict, is_terminal,
    main_container, pod_from_k8s, pod_requests, replica_requests, set_main_gpus,
)
# NVIDIA's names, where callers first found them; their home is kubeforge.accelerators.nvidia
from kubeforge.accelerators.nvidia import (
    CLIQUE_LABEL, COMPUTE_DOMAIN_API_VERSION, COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_VERSION,
)
from kubeforge.objects._dra import (
    EMPTY_INVENTORY, ClaimView, ComputeDomainView, DeviceInventory, SliceView, claim_from_k8s, compute_domain_from_k8s,
    dra_key, inventory, is_dra_key, slice_from_k8s, with_devices,
)
from kubeforge.objects._refusals import (
    KUBELET_REJECTIONS, SCHEDULE_TIMEOUT, SCHEDULER_OWN_CONSTRAINT_REASONS, own_constraint_cause, rejected_by_kubelet,
    waits_for_volume,
)
from kubeforge.objects._records import (
    DeploymentState, GroupRecord, InferenceServiceRecord, Key, PlacementRecord, PoolRecord, Record, TrainingJobRecord, condition,
    condition_time, current_attempt, deployment_from_k8s, groups_of, parse_spec, placement_of, rank_gpus, rank_requests,
    record_from_k8s, status_time,
)

__all__ = [
    "GroupStart", "PodStart", "group_start", "pod_start_from_k8s",
    "MAX_CONDITION_MESSAGE", "conditions_equal", "loose_time", "parse_time", "rfc3339", "set_condition",
    "MAX_HOSTNAME", "WORKERS_SERVICE", "channel_template_name", "checkpoint_claim_name", "checkpoint_path",
    "checkpoint_uri", "compute_domain_name", "gpu_claim_template_name", "owns_checkpoint_claim",
    "group_hostname", "group_pod_name", "job_labels", "leader_address", "master_address", "pvc_name", "service_labels",
    "slice_name", "worker_hostname", "worker_pod_name",
    "KUBELET_REJECTIONS", "SCHEDULE_TIMEOUT", "SCHEDULER_OWN_CONSTRAINT_REASONS", "own_constraint_cause",
    "rejected_by_kubelet", "waits_for_volume",
    "CLIQUE_LABEL", "COMPUTE_DOMAIN_API_VERSION", "COMPUTE_DOMAIN_GROUP", "COMPUTE_DOMAIN_VERSION", "EMPTY_INVENTORY",
    "ClaimView", "ComputeDomainView", "DeviceInventory", "SliceView", "claim_from_k8s", "compute_domain_from_k8s",
    "dra_key", "inventory", "is_dra_key", "slice_from_k8s", "with_devices",
    "ADMISSION_GATE", "ASSIGNED_NODE", "BLOCKING_EFFECTS", "DEFAULT_NOT_READY_GRACE", "GANG_GATE",
    "INTERRUPTION_TAINT_PREFIXES", "JOB_NAME", "NATIVE_RESOURCES", "MAIN_CONTAINER_NAMES", "MANAGED_BY", "MANAGER",
    "POOL_LABEL", "REPLICA_INDEX", "RESTART_ATTEMPT", "ROLE_LABEL", "SERVICE_NAME",
    "STUCK_WAITING_REASONS", "TEMPLATE_HASH", "TERMINAL_PHASES", "WORKER_ROLE",
    "DeploymentState", "VOLUME_GATE", "GROUP_INDEX", "GROUP_ROLE", "GroupRecord", "LEADER_ROLE", "WORKER_INDEX", "groups_of", "InferenceServiceRecord", "Key", "Node", "PlacementRecord", "Pod", "PoolRecord", "Record", "Taint",
    "TrainingJobRecord", "condition", "gpu_request_conflict", "quantity_value", "rank_gpus", "rank_requests",
    "replica_requests", "set_main_gpus", "condition_time", "current_attempt", "deployment_from_k8s", "interruption_reason",
    "is_interrupted", "is_terminal", "main_container", "node_from_k8s", "not_ready_wait",
    "parse_quantity_count", "parse_spec", "placement_of", "pod_from_k8s", "pod_requests",
    "record_from_k8s", "status_time", "tolerates",
]
__all__ += _reasons.__all__
