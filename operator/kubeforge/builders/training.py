"""Manifests of a TrainingJob's children: worker Pods, the checkpoint PVC (built in
:mod:`kubeforge.builders.checkpoint` with the rest of the checkpoint storage), and the headless
Service that gives workers their DNS names.

Pure functions of (job record, placement, attempt): the lifecycle decides, these only build.
Every value that has a default comes from the parsed API model (defaults live only in
:mod:`kubeforge.api`).

Environment given to every worker (the torchrun / Kubeflow PyTorchJob conventions):

- ``PET_NNODES`` = replicas, ``PET_NPROC_PER_NODE`` = gpusPerReplica, ``PET_NODE_RANK`` = rank,
  ``PET_MASTER_ADDR`` / ``PET_MASTER_PORT``: torchrun reads ``PET_*`` as its flags.
- ``WORLD_SIZE`` = replicas, ``RANK`` = rank, ``MASTER_ADDR``, ``MASTER_PORT``: the pod-level
  values Kubeflow's PyTorchJob sets; torchrun overrides them for its worker processes.
- the checkpoint storage's (:func:`kubeforge.builders.checkpoint.checkpoint_env`):
  ``KUBEFORGE_CHECKPOINT_DIR`` (where the checkpoint volume, or the job's directory of a shared
  claim, is mounted), ``KUBEFORGE_CHECKPOINT_URI`` (mode ObjectStore: the job's prefix) and
  ``KUBEFORGE_LOCAL_CHECKPOINT_DIR`` (the node-local fast tier).
- ``KUBEFORGE_RESTART_ATTEMPT``: 0 for the first run, +1 per gang restart.
- ``KUBEFORGE_LAST_CHECKPOINT_PATH`` / ``_STEP``: the last checkpoint the workload reported.

Rendezvous: rank 0's stable DNS name ``<job>-worker-0.kubeforge-workers.<ns>.svc``, from the
pod's ``hostname`` + ``subdomain`` and one headless Service per namespace
(``kubeforge-workers``) that selects every kubeforge worker there: one object per namespace,
created once, instead of one Service write per job (JobSet and Kubeflow make one per job).

Workers are created already placed: node affinity pins rank ``r`` to ``placement.nodes[r]``
(ANDed into the template's own required node affinity), with no scheduling gate but the volume
gate while the gang's own claim binds (:func:`kubeforge.lifecycle.claim_wait`). The
ledger reserved those GPUs when the gang was admitted, so the whole gang binds as soon as its
pods exist; kube-scheduler still does the binding, with all its checks (taints, volumes,
resources, the template's own constraints).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Mapping, Sequence

from kubeforge.accelerators import nvidia
from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME
from kubeforge.builders.checkpoint import (  # noqa: F401  (build_pvc, checkpoint_claim: re-exported, as before)
    build_pvc, checkpoint_claim, checkpoint_env, mount_checkpoint,
)
from kubeforge.builders.common import owner_reference
from kubeforge.builders.reporting import ReportingConfig, add_reporting
from kubeforge.objects import (
    ASSIGNED_NODE, MANAGED_BY, MANAGER, POOL_LABEL, REPLICA_INDEX, RESTART_ATTEMPT, ROLE_LABEL, WORKER_ROLE,
    WORKERS_SERVICE, PlacementRecord, TrainingJobRecord, channel_template_name, compute_domain_name,
    gpu_claim_template_name, job_labels, main_container, master_address, set_main_gpus, worker_hostname,
    worker_pod_name,
)
from kubeforge.placement import Placement, TopologyLevel, node_affinity

MASTER_PORT = 29500  # torch.distributed's default MASTER_PORT
KIND = "TrainingJob"


_HASHES: dict[tuple[str, int], str] = {}


def spec_hash(job: TrainingJobRecord) -> str:
    """A short hash of what a gang's pods are made from: replicas, gpusPerReplica, topology,
    pools and the template. A placement remembers it (``status.placement.specHash``); when
    the spec no longer matches, the gang restarts with the new spec. Computed once per
    (uid, generation): the spec only changes with the generation."""
    spec = job.spec
    assert spec is not None
    key = (job.uid, job.generation)
    if job.uid and key in _HASHES:
        return _HASHES[key]
    data = spec.model_dump(mode="json", by_alias=True,
                           include={"replicas", "gpus_per_replica", "topology", "pools", "template"})
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    if job.uid:
        if len(_HASHES) > 50_000:
            _HASHES.clear()
        _HASHES[key] = digest
    return digest


def build_workers_service(namespace: str) -> dict[str, Any]:
    """The headless Service that gives every worker of the namespace a DNS name
    (``publishNotReadyAddresses`` so rank 0 resolves before it is Ready, as rendezvous needs).

    It has no owner: it serves every job of the namespace and holds nothing (no GPUs, no
    data). It carries ``app.kubernetes.io/managed-by: kubeforge``.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": WORKERS_SERVICE,
            "namespace": namespace,
            "labels": {MANAGED_BY: MANAGER},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {MANAGED_BY: MANAGER, ROLE_LABEL: WORKER_ROLE},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


GPU_CLAIM = "gpus"
"""The pod's ``spec.resourceClaims`` entry (and the main container's ``resources.claims``) for its
GPUs in a DRA pool."""
CHANNEL_CLAIM = "compute-domain"
"""The pod's claim entry for its ComputeDomain's IMEX channel."""
COMPUTE_DOMAIN_FINALIZER = "kubeforge.io/compute-domain"
"""kubeforge's finalizer on the ComputeDomains it makes: the domain is not torn down (by the
garbage collector, when its job is deleted) while the gang's pods may still use its IMEX channel;
kubeforge removes it first, once they are gone, then deletes the domain."""
CLIQUES_ANNOTATION = "kubeforge.io/cliques"
"""Annotation on a ComputeDomain: the NVLink cliques (comma-separated) it was made for."""


def build_gpu_claim_template(job: TrainingJobRecord, device_class: str, count: int) -> dict[str, Any]:
    """The ResourceClaimTemplate (``resource.k8s.io/v1``) every worker of ``job`` gets its GPUs
    from in a DRA pool: one request of exactly ``count`` devices of ``device_class``. Owned by the
    job (garbage-collected with it); the claims made from it are owned by their pods."""
    name = gpu_claim_template_name(job.name, device_class, count)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": job.namespace, "labels": job_labels(job.name),
                     "ownerReferences": [owner_reference(KIND, job.name, job.uid)]},
        "spec": {
            "metadata": {"labels": job_labels(job.name)},
            "spec": {"devices": {"requests": [{"name": GPU_CLAIM, "exactly": {
                "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}},
        },
    }


def build_compute_domain(job: TrainingJobRecord, cliques: Sequence[str]) -> dict[str, Any]:
    """The ComputeDomain (NVIDIA DRA driver; its spec is immutable) of a gang on ``cliques``: the
    spec :func:`kubeforge.accelerators.nvidia.compute_domain_spec` makes, one channel per worker
    from ``<domain>-channel``. Owned by the job, with kubeforge's finalizer
    (:data:`COMPUTE_DOMAIN_FINALIZER`)."""
    name = compute_domain_name(job.name, cliques)
    return {
        "apiVersion": nvidia.COMPUTE_DOMAIN_API_VERSION,
        "kind": nvidia.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name, "namespace": job.namespace, "labels": job_labels(job.name),
                     "annotations": {CLIQUES_ANNOTATION: ",".join(sorted(cliques))},
                     "finalizers": [COMPUTE_DOMAIN_FINALIZER],
                     "ownerReferences": [owner_reference(KIND, job.name, job.uid)]},
        "spec": nvidia.compute_domain_spec(channel_template_name(name)),
    }


def _claim_devices(pod_spec: dict[str, Any], gpu_template: str, channel_template: str | None) -> None:
    """Give the pod its GPUs through DRA: ``spec.resourceClaims`` from the templates and the main
    container's ``resources.claims`` (instead of GPU limits)."""
    claims = [{"name": GPU_CLAIM, "resourceClaimTemplateName": gpu_template}]
    if channel_template:
        claims.append({"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template})
    own = {c["name"] for c in claims}
    pod_spec["resourceClaims"] = [c for c in pod_spec.get("resourceClaims") or [] if c.get("name") not in own] + claims
    containers = pod_spec["containers"]
    name = main_container([c.get("name") for c in containers])
    main = next(c for c in containers if c.get("name") == name)
    res = main.setdefault("resources", {})
    res["claims"] = [c for c in res.get("claims") or [] if c.get("name") not in own] + [{"name": n} for n in own]


def _worker_env(job: TrainingJobRecord, rank: int, attempt: int,
               last_checkpoint: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The environment every container of rank ``rank`` gets: torchrun's (``PET_NNODES``,
    ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``), the
    torch.distributed defaults (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), the
    checkpoint storage's (:func:`kubeforge.builders.checkpoint.checkpoint_env`), the attempt, and
    the last checkpoint's path and step when known (a path in the durable tier: the volume or the
    object store, never the local tier)."""
    spec = job.spec
    assert spec is not None
    master = master_address(job.name, job.namespace)
    env = {
        "PET_NNODES": str(spec.replicas),
        "PET_NPROC_PER_NODE": str(spec.gpus_per_replica),
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(spec.replicas),
        "RANK": str(rank),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(MASTER_PORT),
        **checkpoint_env(job),
        "KUBEFORGE_RESTART_ATTEMPT": str(attempt),
    }
    if last_checkpoint:
        if last_checkpoint.get("path"):
            env["KUBEFORGE_LAST_CHECKPOINT_PATH"] = str(last_checkpoint["path"])
        if last_checkpoint.get("step") is not None:
            env["KUBEFORGE_LAST_CHECKPOINT_STEP"] = str(last_checkpoint["step"])
    return env


def _pin(pod_spec: dict[str, Any], placement: PlacementRecord, rank: int, levels: Sequence[TopologyLevel],
         tolerations: Sequence[Mapping[str, Any]], scheduling_gates: Sequence[str]) -> None:
    """Pin rank ``rank`` to its node and domain (node affinity; a level the pool no longer has is
    left out), add the pool's tolerations after the template's, and kubeforge's scheduling gates."""
    known = placement.level in {lv.name for lv in levels}  # a pool edit may have dropped the level
    pinned = Placement(placement.level if known else None, placement.domain if known else None,
                       placement.nodes, {}, placement.reason)
    affinity = dict(pod_spec.get("affinity") or {})
    affinity["nodeAffinity"] = node_affinity(pinned, rank, levels, affinity.get("nodeAffinity"))
    pod_spec["affinity"] = affinity
    pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + [dict(t) for t in tolerations]
    if scheduling_gates:
        own = [g for g in pod_spec.get("schedulingGates") or [] if g.get("name") not in scheduling_gates]
        pod_spec["schedulingGates"] = own + [{"name": g} for g in scheduling_gates]


def _worker_metadata(job: TrainingJobRecord, rank: int, attempt: int, placement: PlacementRecord) -> dict[str, Any]:
    """A worker pod's metadata: its name, the template's labels and annotations with the job's,
    the rank's, the attempt's and the pool's labels, the node it is assigned, and the job as owner."""
    assert job.spec is not None
    tmd = copy.deepcopy(job.spec.template.metadata)
    labels = {**(tmd.get("labels") or {}), **job_labels(job.name), ROLE_LABEL: WORKER_ROLE,
              REPLICA_INDEX: str(rank), RESTART_ATTEMPT: str(attempt), POOL_LABEL: placement.pool}
    annotations = {**(tmd.get("annotations") or {}), ASSIGNED_NODE: placement.nodes[rank]}
    return {
        "name": worker_pod_name(job.name, rank, attempt),
        "namespace": job.namespace,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [owner_reference(KIND, job.name, job.uid)],
    }


def build_worker_pod(
    job: TrainingJobRecord,
    *,
    rank: int,
    attempt: int,
    placement: PlacementRecord,
    levels: Sequence[TopologyLevel] = (),
    gpu_resource: str = DEFAULT_GPU_RESOURCE_NAME,
    tolerations: Sequence[Mapping[str, Any]] = (),
    last_checkpoint: Mapping[str, Any] | None = None,
    gpu_claim_template: str | None = None,
    channel_claim_template: str | None = None,
    scheduling_gates: Sequence[str] = (),
    reporting: ReportingConfig | None = None,
) -> dict[str, Any]:
    """One worker pod of a gang, already placed.

    Args:
        job: The TrainingJob (its spec parsed, defaults applied).
        rank: 0..replicas-1; rank ``r`` is pinned to ``placement.nodes[r]``.
        attempt: The gang's current attempt (0 first).
        placement: Where the gang runs.
        levels: The pool's topology levels (to pin the domain label as well).
        gpu_resource: The pool's device-plugin resource, e.g. ``nvidia.com/gpu``.
        tolerations: The pool's tolerations, appended to the template's.
        last_checkpoint: ``status.lastCheckpoint`` to hand to the workload, if any.
        gpu_claim_template: In a DRA pool, the job's ResourceClaimTemplate: the pod gets its GPUs
            as a claim from it (:func:`build_gpu_claim_template`) instead of ``gpu_resource`` limits.
        channel_claim_template: The IMEX channel template of the gang's ComputeDomain, if any.
        scheduling_gates: kubeforge's gates to create the pod behind (e.g. the volume gate
            while the gang's claim binds), appended to the template's own.
        reporting: Where the workers report their progress (:mod:`kubeforge.builders.reporting`:
            the token and CA volume, ``KUBEFORGE_STATUS_*`` and ``KUBEFLOW_TRAINER_STATUS_*``);
            None: reporting is off.

    Returns:
        A Pod manifest. ``restartPolicy`` is ``Never``: the operator restarts whole gangs.

    Raises:
        IndexError: ``rank`` outside the placement.
    """
    spec = job.spec
    assert spec is not None
    pod_spec = copy.deepcopy(spec.template.spec)
    if gpu_claim_template:
        _claim_devices(pod_spec, gpu_claim_template, channel_claim_template)
    else:
        set_main_gpus(pod_spec, spec.gpus_per_replica, gpu_resource)
    mount_checkpoint(pod_spec, job, _worker_env(job, rank, attempt, last_checkpoint))
    add_reporting(pod_spec, job, reporting)
    pod_spec["restartPolicy"] = "Never"
    pod_spec["hostname"] = worker_hostname(job.name, rank)
    pod_spec["subdomain"] = WORKERS_SERVICE
    _pin(pod_spec, placement, rank, levels, tolerations, scheduling_gates)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _worker_metadata(job, rank, attempt, placement),
            "spec": pod_spec}
