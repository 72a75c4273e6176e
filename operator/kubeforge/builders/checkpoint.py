"""A TrainingJob's checkpoint storage in its worker pods, per ``spec.checkpoint.mode`` (pure):
the volumes, the mounts, the environment, and the claim of mode ClaimPerJob.

========================  ==============================  =========================================
mode                      volume ``checkpoint``            environment
========================  ==============================  =========================================
ClaimPerJob (default)     the claim ``<job>-checkpoint``  ``KUBEFORGE_CHECKPOINT_DIR`` = mountPath
                          (or ``existingClaimName``)
SharedClaim               ``sharedClaim.claimName``,      ``KUBEFORGE_CHECKPOINT_DIR`` = mountPath
                          mounted with ``subPath`` =
                          the job's directory
ObjectStore               none                            ``KUBEFORGE_CHECKPOINT_URI`` =
                                                          ``<uri>/<the job's prefix>``, and the
                                                          Secret's keys (``envFrom`` or
                                                          ``secretKeyRef``)
========================  ==============================  =========================================

``localTier`` (any mode) adds the volume ``checkpoint-local`` (an ``emptyDir`` with
``sizeLimit``, or a generic ephemeral volume of ``storageClassName``) at its mountPath and
``KUBEFORGE_LOCAL_CHECKPOINT_DIR``. A job in mode ClaimPerJob without a local tier gets exactly
the pods kubeforge 0.1 made (same volume, mount and variables, in the same order), so an upgrade
changes nothing in a running job's pods.

The credentials are referenced, never read: the pod names the Secret and the kubelet resolves it.
"""

from __future__ import annotations

from typing import Any, Mapping

from kubeforge.api import CheckpointMode
from kubeforge.builders.common import owner_reference
from kubeforge.objects import (
    TrainingJobRecord, checkpoint_claim_name, checkpoint_path, checkpoint_uri, job_labels, pvc_name,
)

KIND = "TrainingJob"
VOLUME = "checkpoint"
"""The pod volume (and every container's mount) of the durable tier in the volume modes."""
LOCAL_VOLUME = "checkpoint-local"
"""The pod volume (and every container's mount) of the node-local fast tier."""
DIR_ENV = "KUBEFORGE_CHECKPOINT_DIR"
"""Where the durable volume (the job's directory of it) is mounted: modes ClaimPerJob, SharedClaim."""
URI_ENV = "KUBEFORGE_CHECKPOINT_URI"
"""The job's own prefix in the object store (mode ObjectStore)."""
LOCAL_DIR_ENV = "KUBEFORGE_LOCAL_CHECKPOINT_DIR"
"""Where the node-local fast tier is mounted (``localTier``)."""


def build_pvc(job: TrainingJobRecord) -> dict[str, Any]:
    """The checkpoint PVC of mode ClaimPerJob from ``spec.checkpoint``.

    With ``deletionPolicy: Delete`` it is owned by the job (garbage-collected with it); with
    ``Retain`` (the default) it has no owner reference, so it outlives the job.
    """
    assert job.spec is not None
    ck = job.spec.checkpoint
    md: dict[str, Any] = {
        "name": pvc_name(job.name),
        "namespace": job.namespace,
        "labels": job_labels(job.name),
    }
    if ck.deletion_policy.value == "Delete":
        md["ownerReferences"] = [owner_reference(KIND, job.name, job.uid)]
    spec: dict[str, Any] = {
        "accessModes": [m.value for m in ck.access_modes],
        "resources": {"requests": {"storage": str(ck.size)}},
    }
    if ck.storage_class_name:
        spec["storageClassName"] = ck.storage_class_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": md, "spec": spec}


def checkpoint_claim(job: TrainingJobRecord) -> str | None:
    """The PVC the workers mount (:func:`kubeforge.objects.checkpoint_claim_name`): ours,
    ``existingClaimName``, the shared claim, or None in mode ObjectStore."""
    assert job.spec is not None
    return checkpoint_claim_name(job.name, job.spec.checkpoint)


def checkpoint_env(job: TrainingJobRecord) -> dict[str, str]:
    """The checkpoint variables every worker container gets (values only; the credentials are
    references, added by :func:`mount_checkpoint`): ``KUBEFORGE_CHECKPOINT_DIR`` in the volume
    modes, ``KUBEFORGE_CHECKPOINT_URI`` in mode ObjectStore, ``KUBEFORGE_LOCAL_CHECKPOINT_DIR``
    with a local tier."""
    assert job.spec is not None
    ck = job.spec.checkpoint
    env: dict[str, str] = {}
    if ck.mode == CheckpointMode.OBJECT_STORE:
        store = ck.object_store
        assert store is not None
        env[URI_ENV] = checkpoint_uri(store.uri, checkpoint_path(store.path_template, job.namespace, job.name, job.uid))
    else:
        env[DIR_ENV] = ck.mount_path
    if ck.local_tier is not None:
        env[LOCAL_DIR_ENV] = ck.local_tier.mount_path
    return env


def _volumes(job: TrainingJobRecord) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(pod volume, container mount)`` of each checkpoint tier the job has."""
    assert job.spec is not None
    ck = job.spec.checkpoint
    out = []
    claim = checkpoint_claim(job)
    if claim is not None:
        mount: dict[str, Any] = {"name": VOLUME, "mountPath": ck.mount_path}
        if ck.mode == CheckpointMode.SHARED_CLAIM:
            assert ck.shared_claim is not None
            mount["subPath"] = checkpoint_path(ck.shared_claim.sub_path_template, job.namespace, job.name, job.uid)
        out.append(({"name": VOLUME, "persistentVolumeClaim": {"claimName": claim}}, mount))
    tier = ck.local_tier
    if tier is not None:
        if tier.storage_class_name:
            source: dict[str, Any] = {"ephemeral": {"volumeClaimTemplate": {
                "metadata": {"labels": job_labels(job.name)},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": tier.storage_class_name,
                         "resources": {"requests": {"storage": str(tier.size_limit)}}},
            }}}
        else:
            source = {"emptyDir": {"sizeLimit": str(tier.size_limit)}}
        out.append(({"name": LOCAL_VOLUME, **source}, {"name": LOCAL_VOLUME, "mountPath": tier.mount_path}))
    return out


def _credentials(job: TrainingJobRecord) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(env, envFrom)`` entries that hand the object store's Secret to a container: one
    ``secretKeyRef`` per ``secretKeys`` entry, else the whole Secret as ``envFrom``. Not
    optional: a Secret that is missing stops the container (``CreateContainerConfigError``)
    instead of running it without credentials."""
    assert job.spec is not None
    store = job.spec.checkpoint.object_store
    if store is None or not store.secret_name:
        return [], []
    if store.secret_keys:
        return [{"name": k.env or k.key, "valueFrom": {"secretKeyRef": {"name": store.secret_name, "key": k.key}}}
                for k in store.secret_keys], []
    return [], [{"secretRef": {"name": store.secret_name}}]


def set_env(container: dict[str, Any], env: Mapping[str, str]) -> None:
    """Put ``env`` (values) in the container's ``env``, replacing entries of the same names."""
    existing = [e for e in container.get("env") or [] if e.get("name") not in env]
    container["env"] = existing + [{"name": k, "value": v} for k, v in env.items()]


def mount_checkpoint(pod_spec: dict[str, Any], job: TrainingJobRecord, env: Mapping[str, str]) -> None:
    """Every container gets ``env``, the checkpoint tiers' mounts, the object store's credentials
    (references) and a termination message that falls back to its logs (the workload reports its
    last checkpoint as JSON there); the pod gets the tiers' volumes (:data:`VOLUME`,
    :data:`LOCAL_VOLUME`), replacing the template's volumes of those names."""
    volumes = _volumes(job)
    names = {v["name"] for v, _ in volumes}
    secret_env, secret_from = _credentials(job)
    for c in pod_spec["containers"]:
        set_env(c, env)
        if secret_env:
            own = {e["name"] for e in secret_env}
            c["env"] = [e for e in c["env"] if e.get("name") not in own] + [dict(e) for e in secret_env]
        if secret_from:
            c["envFrom"] = [e for e in c.get("envFrom") or [] if e not in secret_from] + [dict(e) for e in secret_from]
        if volumes:
            mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") not in names]
            c["volumeMounts"] = mounts + [dict(m) for _, m in volumes]
        # The workload reports its last checkpoint as JSON in its termination message.
        c.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    if volumes:
        kept = [v for v in pod_spec.get("volumes") or [] if v.get("name") not in names]
        pod_spec["volumes"] = kept + [v for v, _ in volumes]
