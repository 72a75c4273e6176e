"""Manifests of a TrainingJob's children: worker Pods, the headless Service, the checkpoint PVC.

Pure functions of (job body, placement, attempt): the handler decides, these only build.

Environment given to every worker (the torchrun / Kubeflow PyTorchJob conventions):

- ``PET_NNODES`` = replicas, ``PET_NPROC_PER_NODE`` = gpusPerReplica, ``PET_NODE_RANK`` = rank,
  ``PET_MASTER_ADDR`` / ``PET_MASTER_PORT``: torchrun reads ``PET_*`` as its flags.
- ``WORLD_SIZE`` = replicas, ``RANK`` = rank, ``MASTER_ADDR``, ``MASTER_PORT``: the pod-level
  values Kubeflow's PyTorchJob sets; torchrun overrides them for its worker processes.
- ``KUBEFORGE_CHECKPOINT_DIR``: where the checkpoint volume is mounted.
- ``KUBEFORGE_RESTART_ATTEMPT``: 0 for the first run, +1 per gang restart.
- ``KUBEFORGE_LAST_CHECKPOINT_PATH`` / ``_STEP``: the last checkpoint the workload reported.

The rendezvous address is rank 0's stable DNS name, ``<job>-worker-0.<job>.<ns>.svc``,
from the pod's ``hostname`` + ``subdomain`` and the headless Service.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

from kubeforge.builders.common import (
    ASSIGNED_NODE, GANG_GATE, JOB_NAME, MANAGED_BY, MANAGER, POOL_LABEL, REPLICA_INDEX,
    RESTART_ATTEMPT, owner_reference,
)

MASTER_PORT = 29500  # torch.distributed's default MASTER_PORT
GPU_CONTAINER_NAMES = ("trainer", "pytorch")  # Kubeflow names its container "pytorch"


def service_name(job_name: str) -> str:
    """The headless Service (and pod subdomain) of a job: the job's own name."""
    return job_name


def pvc_name(job_name: str) -> str:
    """The checkpoint PVC the operator creates for a job: ``<job>-checkpoint``."""
    return f"{job_name}-checkpoint"


def worker_hostname(job_name: str, rank: int) -> str:
    """The stable hostname of rank ``rank``: ``<job>-worker-<rank>`` (kept across restarts)."""
    return f"{job_name}-worker-{rank}"


def pod_name(job_name: str, rank: int, attempt: int) -> str:
    """Pod name: ``<job>-worker-<rank>-<attempt>``; a restart makes new pods, never reuses names."""
    return f"{job_name}-worker-{rank}-{attempt}"


def job_labels(job_name: str) -> dict[str, str]:
    """Labels every child of a job carries (selectors use the job-name one)."""
    return {MANAGED_BY: MANAGER, JOB_NAME: job_name}


def build_service(job: Mapping[str, Any]) -> dict[str, Any]:
    """The headless Service that gives each worker a DNS name (``publishNotReadyAddresses``
    so rank 0 resolves before it is Ready, as rendezvous needs)."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(name),
            "namespace": job["metadata"]["namespace"],
            "labels": job_labels(name),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME: name},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def build_pvc(job: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint PVC from ``spec.checkpoint``.

    With ``deletionPolicy: Delete`` it is owned by the job (garbage-collected with it); with
    ``Retain`` (the default) it has no owner reference, so it outlives the job.
    """
    name = job["metadata"]["name"]
    ck = job["spec"].get("checkpoint") or {}
    md: dict[str, Any] = {
        "name": pvc_name(name),
        "namespace": job["metadata"]["namespace"],
        "labels": job_labels(name),
    }
    if ck.get("deletionPolicy", "Retain") == "Delete":
        md["ownerReferences"] = [owner_reference(job)]
    spec: dict[str, Any] = {
        "accessModes": list(ck.get("accessModes") or ["ReadWriteMany"]),
        "resources": {"requests": {"storage": str(ck.get("size", "10Gi"))}},
    }
    if ck.get("storageClassName"):
        spec["storageClassName"] = ck["storageClassName"]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": md, "spec": spec}


def checkpoint_claim(job: Mapping[str, Any]) -> str:
    """The PVC the workers mount: ``spec.checkpoint.existingClaimName`` or ours."""
    ck = job["spec"].get("checkpoint") or {}
    return ck.get("existingClaimName") or pvc_name(job["metadata"]["name"])


def _gpu_container(containers: list[dict[str, Any]]) -> dict[str, Any]:
    for c in containers:
        if c.get("name") in GPU_CONTAINER_NAMES:
            return c
    return containers[0]


def _set_env(container: dict[str, Any], env: Mapping[str, str]) -> None:
    existing = [e for e in container.get("env") or [] if e.get("name") not in env]
    container["env"] = existing + [{"name": k, "value": v} for k, v in env.items()]


def build_worker_pod(
    job: Mapping[str, Any],
    *,
    rank: int,
    attempt: int,
    nodes: Sequence[str],
    affinity: Mapping[str, Any],
    gpu_resource: str = "nvidia.com/gpu",
    tolerations: Sequence[Mapping[str, Any]] = (),
    pool: str | None = None,
    last_checkpoint: Mapping[str, Any] | None = None,
    gated: bool = True,
) -> dict[str, Any]:
    """One worker pod of a gang.

    Args:
        job: the TrainingJob body (defaults applied by the API server).
        rank: 0..replicas-1; rank ``r`` is pinned to ``nodes[r]`` by ``affinity``.
        attempt: the gang's restart attempt (0 first).
        nodes: the placement, one node name per rank (rank order).
        affinity: the ``affinity`` dict for this rank (see ``placement.node_affinity``).
        gpu_resource: the pool's device-plugin resource, e.g. ``nvidia.com/gpu``.
        tolerations: the pool's tolerations, appended to the template's.
        pool: the pool name (a label, for humans and selectors).
        last_checkpoint: ``status.lastCheckpoint`` to hand to the workload, if any.
        gated: create with our scheduling gate (``kubeforge.io/gang``); the handler lifts it
            from all ranks together once every pod of the gang exists.

    Returns:
        A Pod manifest. ``restartPolicy`` is ``Never``: the operator restarts whole gangs.
    """
    md = job["metadata"]
    spec = job["spec"]
    name, ns = md["name"], md["namespace"]
    replicas = int(spec["replicas"])
    gpus = int(spec["gpusPerReplica"])
    template = copy.deepcopy(spec.get("template") or {})
    tmd = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    containers = pod_spec.get("containers") or [{"name": "trainer", "image": "busybox"}]
    pod_spec["containers"] = containers

    main = _gpu_container(containers)
    res = main.setdefault("resources", {})
    res.setdefault("limits", {})[gpu_resource] = str(gpus)
    res.setdefault("requests", {})[gpu_resource] = str(gpus)

    master = f"{worker_hostname(name, 0)}.{service_name(name)}.{ns}.svc"
    ck = spec.get("checkpoint") or {}
    mount_path = ck.get("mountPath", "/checkpoints")
    env = {
        "PET_NNODES": str(replicas),
        "PET_NPROC_PER_NODE": str(gpus),
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(replicas),
        "RANK": str(rank),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(MASTER_PORT),
        "KUBEFORGE_CHECKPOINT_DIR": mount_path,
        "KUBEFORGE_RESTART_ATTEMPT": str(attempt),
    }
    if last_checkpoint:
        if last_checkpoint.get("path"):
            env["KUBEFORGE_LAST_CHECKPOINT_PATH"] = str(last_checkpoint["path"])
        if last_checkpoint.get("step") is not None:
            env["KUBEFORGE_LAST_CHECKPOINT_STEP"] = str(last_checkpoint["step"])
    for c in containers:
        _set_env(c, env)
        mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") != "checkpoint"]
        c["volumeMounts"] = mounts + [{"name": "checkpoint", "mountPath": mount_path}]
        # The workload reports its last checkpoint as JSON in its termination message.
        c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")

    volumes = [v for v in pod_spec.get("volumes") or [] if v.get("name") != "checkpoint"]
    pod_spec["volumes"] = volumes + [
        {"name": "checkpoint", "persistentVolumeClaim": {"claimName": checkpoint_claim(job)}}
    ]
    pod_spec["restartPolicy"] = "Never"
    pod_spec["hostname"] = worker_hostname(name, rank)
    pod_spec["subdomain"] = service_name(name)
    pod_spec["affinity"] = {**(pod_spec.get("affinity") or {}), **copy.deepcopy(dict(affinity))}
    pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + [dict(t) for t in tolerations]
    if gated:
        pod_spec["schedulingGates"] = [{"name": GANG_GATE}]

    labels = {**(tmd.get("labels") or {}), **job_labels(name), REPLICA_INDEX: str(rank), RESTART_ATTEMPT: str(attempt)}
    if pool:
        labels[POOL_LABEL] = pool
    annotations = {**(tmd.get("annotations") or {}), ASSIGNED_NODE: nodes[rank]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, rank, attempt),
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_spec,
    }
