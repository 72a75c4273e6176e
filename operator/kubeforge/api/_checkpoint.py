"""A TrainingJob's checkpoint storage: where its checkpoints live across restarts (issue 31).

Three modes, as a Kubernetes discriminated union (``mode`` and one sub-object per mode):

- ``ClaimPerJob`` (the default, kubeforge 0.1's only mode): a PersistentVolumeClaim per job,
  ``<job>-checkpoint``, from the flat fields ``size``, ``storageClassName``, ``accessModes``
  and ``deletionPolicy`` (or one ``existingClaimName`` every job mounts whole). The flat fields
  stay where 0.1 put them, so manifests written for 0.1 keep working unchanged.
- ``SharedClaim``: one existing claim (a parallel file system: Lustre / FSx, Filestore,
  CephFS, NFS) and a directory per job in it (the mount's ``subPath``). No claim per job.
- ``ObjectStore``: an ``s3://`` or ``gs://`` URI handed to the workload's checkpoint library
  (torch.distributed.checkpoint, Orbax), no volume, credentials from a named Secret.

And, in any mode, an optional node-local fast tier (``localTier``: an ``emptyDir`` or a
generic ephemeral volume on a local-SSD class), never the source of truth on restart.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from ._base import DNS_SUBDOMAIN_PATTERN, MAX_NAME_LENGTH, KubeModel
from ._core import Quantity

PATH_TEMPLATE_PATTERN = (
    r"^([A-Za-z0-9._-]|\{(namespace|name|uid)\})+(/([A-Za-z0-9._-]|\{(namespace|name|uid)\})+)*$"
)
"""A relative path of ``/``-separated segments made of letters, digits, ``.``, ``_``, ``-`` and
the variables ``{namespace}``, ``{name}``, ``{uid}`` (no leading ``/``, no empty segment)."""
DEFAULT_PATH_TEMPLATE = "{namespace}/{name}"
"""A job's own directory (shared claim) or prefix (object store) unless told otherwise."""
OBJECT_STORE_URI_PATTERN = r"^(s3|gs)://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/[^\s]*)?$"
"""``s3://<bucket>[/<prefix>]`` or ``gs://<bucket>[/<prefix>]`` (bucket names as S3 and GCS
spell them: lower case letters, digits, ``.``, ``_``, ``-``; 3 to 222 characters)."""
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
"""A key of a Secret's ``data`` (Kubernetes' ``IsConfigMapKey``)."""
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
"""An environment variable name (Kubernetes' ``IsEnvVarName``)."""
DEFAULT_LOCAL_MOUNT_PATH = "/local-checkpoints"
"""Where the node-local fast tier is mounted unless told otherwise."""

_DOT_SEGMENT = re.compile(r"(^|/)\.{1,2}(/|$)")
_NO_DOT_SEGMENT_RULE = {
    "rule": "!self.matches('(^|/)[.]{1,2}(/|$)')",
    "message": "a path template must not contain '.' or '..' segments",
}


def _absolute_rule(field: str) -> dict:
    return {"rule": "self.startsWith('/')", "message": f"{field} must be an absolute path (start with /)"}


def _relative_template(field: str, value: str) -> str:
    if _DOT_SEGMENT.search(value) or not re.match(PATH_TEMPLATE_PATTERN, value):
        raise ValueError(f"{field} must be a relative path of letters, digits, '.', '_', '-' and the "
                         "variables {namespace}, {name}, {uid}, without '.' or '..' segments")
    return value


class AccessMode(str, Enum):
    """AccessMode is a PersistentVolumeClaim access mode."""

    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"
    READ_ONLY_MANY = "ReadOnlyMany"


class DeletionPolicy(str, Enum):
    """DeletionPolicy says what happens to the checkpoint volume when the job is deleted."""

    RETAIN = "Retain"
    DELETE = "Delete"


class CheckpointMode(str, Enum):
    """CheckpointMode says where a TrainingJob's checkpoints live."""

    CLAIM_PER_JOB = "ClaimPerJob"
    SHARED_CLAIM = "SharedClaim"
    OBJECT_STORE = "ObjectStore"


class SharedClaim(KubeModel):
    """SharedClaim mounts one existing PersistentVolumeClaim (a shared file system) in every
    worker with a directory of the job's own as the mount's subPath."""

    claim_name: str = Field(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="claimName is the PersistentVolumeClaim in the job's namespace that every job "
        "shares (ReadWriteMany: a parallel file system such as Lustre / FSx, Filestore, CephFS or "
        "NFS). It must exist: the job waits for it (Admitted=False, ClaimNotFound) without holding "
        "GPUs. kubeforge creates no claim in this mode and never deletes this one or anything in it.",
    )
    sub_path_template: str = Field(
        default=DEFAULT_PATH_TEMPLATE,
        min_length=1,
        max_length=1024,
        pattern=PATH_TEMPLATE_PATTERN,
        description="subPathTemplate is the job's directory inside the claim, mounted at "
        "checkpoint.mountPath (the volume mount's subPath; the kubelet creates it when missing). "
        "Variables: {namespace}, {name} (the job's) and {uid} (a new directory for a job deleted "
        "and created again under the same name). No leading '/', no '.' or '..' segments. "
        "Default {namespace}/{name}.",
        json_schema_extra={"x-kubernetes-validations": [_NO_DOT_SEGMENT_RULE]},
    )

    @field_validator("sub_path_template")
    @classmethod
    def _template(cls, value: str) -> str:
        return _relative_template("checkpoint.sharedClaim.subPathTemplate", value)


class SecretKey(KubeModel):
    """SecretKey hands one key of the credentials Secret to the workers as one variable."""

    key: str = Field(
        min_length=1, max_length=MAX_NAME_LENGTH, pattern=SECRET_KEY_PATTERN,
        description="key is the key in the Secret's data.",
    )
    env: Optional[str] = Field(
        default=None, min_length=1, max_length=MAX_NAME_LENGTH, pattern=ENV_NAME_PATTERN,
        description="env is the environment variable it becomes (default: the key itself), e.g. "
        "AWS_ACCESS_KEY_ID.",
    )


class ObjectStore(KubeModel):
    """ObjectStore has the workers write checkpoints to an object store through their
    checkpoint library (torch.distributed.checkpoint, Orbax): no volume at all."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "!has(self.secretKeys) || size(self.secretKeys) == 0 || has(self.secretName)",
        "message": "checkpoint.objectStore.secretKeys needs checkpoint.objectStore.secretName",
    }]})

    uri: str = Field(
        min_length=6,
        max_length=2048,
        pattern=OBJECT_STORE_URI_PATTERN,
        description="uri is the bucket and prefix, s3://<bucket>[/<prefix>] or "
        "gs://<bucket>[/<prefix>]. Each job writes under its own prefix below it "
        "(pathTemplate): the workers get <uri>/<that prefix> as KUBEFORGE_CHECKPOINT_URI.",
    )
    path_template: str = Field(
        default=DEFAULT_PATH_TEMPLATE,
        min_length=1,
        max_length=1024,
        pattern=PATH_TEMPLATE_PATTERN,
        description="pathTemplate is the job's own prefix below uri. Variables: {namespace}, "
        "{name}, {uid}. No leading '/', no '.' or '..' segments. Default {namespace}/{name}.",
        json_schema_extra={"x-kubernetes-validations": [_NO_DOT_SEGMENT_RULE]},
    )
    secret_name: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="secretName is a Secret in the job's namespace with the store's credentials "
        "(e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL), given to every "
        "worker container as environment variables: all its keys (envFrom), or only secretKeys. "
        "kubeforge reads only whether it exists, never its data, and never logs or copies it. "
        "Empty: no credentials from kubeforge (workload identity: IRSA, GKE Workload Identity).",
    )
    secret_keys: list[SecretKey] = Field(
        default=[],
        max_length=16,
        description="secretKeys picks keys of the Secret (each as one variable) instead of all of "
        "them.",
    )

    @field_validator("path_template")
    @classmethod
    def _template(cls, value: str) -> str:
        return _relative_template("checkpoint.objectStore.pathTemplate", value)

    @model_validator(mode="after")
    def _keys_need_secret(self) -> "ObjectStore":
        if self.secret_keys and not self.secret_name:
            raise ValueError("checkpoint.objectStore.secretKeys needs checkpoint.objectStore.secretName")
        return self


class LocalTier(KubeModel):
    """LocalTier is a node-local fast tier (NVMe) for checkpoints, size-limited. It is never the
    source of truth: it is empty after every restart (the pods are new), so the workload copies
    each checkpoint from it to the durable tier in the background and resumes from the durable
    tier (KUBEFORGE_LAST_CHECKPOINT_PATH names a checkpoint there)."""

    size_limit: Quantity = Field(
        description="sizeLimit caps the tier per worker (a quantity such as 200Gi): the emptyDir's "
        "sizeLimit (the kubelet evicts a pod beyond it), or the ephemeral claim's request.",
    )
    storage_class_name: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="storageClassName, when set, makes the tier a generic ephemeral volume of this "
        "class (a local-SSD class such as a local static provisioner's, TopoLVM or an LVM CSI "
        "driver; use volumeBindingMode WaitForFirstConsumer): one claim per pod, made and deleted "
        "with it by kube-controller-manager. Empty: an emptyDir on the node's own disk, which "
        "creates no claim at all.",
    )
    mount_path: str = Field(
        default=DEFAULT_LOCAL_MOUNT_PATH,
        min_length=1,
        max_length=1024,
        description="mountPath is where the tier is mounted in every worker, also passed as "
        "KUBEFORGE_LOCAL_CHECKPOINT_DIR.",
        json_schema_extra={"x-kubernetes-validations": [_absolute_rule("checkpoint.localTier.mountPath")]},
    )

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("checkpoint.localTier.mountPath must be an absolute path (start with /)")
        return value


_UNION_RULES = [
    {
        "rule": "has(self.sharedClaim) == (has(self.mode) && self.mode == 'SharedClaim')",
        "message": "checkpoint.sharedClaim is set exactly when checkpoint.mode is SharedClaim",
    },
    {
        "rule": "has(self.objectStore) == (has(self.mode) && self.mode == 'ObjectStore')",
        "message": "checkpoint.objectStore is set exactly when checkpoint.mode is ObjectStore",
    },
    {
        "rule": "!has(self.existingClaimName) || !has(self.mode) || self.mode == 'ClaimPerJob'",
        "message": "checkpoint.existingClaimName belongs to mode ClaimPerJob (with SharedClaim, name "
        "the claim in checkpoint.sharedClaim.claimName)",
    },
    {
        "rule": "!has(self.localTier) || (has(self.mode) && self.mode == 'ObjectStore') || "
        "!has(self.mountPath) || self.localTier.mountPath != self.mountPath",
        "message": "checkpoint.localTier.mountPath must differ from checkpoint.mountPath",
    },
]


class Checkpoint(KubeModel):
    """Checkpoint says where the job's checkpoints live, so that a restarted job resumes from its
    last checkpoint: a claim per job (mode ClaimPerJob, the default), a directory of its own in
    one shared claim (SharedClaim), or an object store (ObjectStore); optionally with a
    node-local fast tier (localTier). docs/checkpoints.md says which to choose when."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _UNION_RULES})

    mode: CheckpointMode = Field(
        default=CheckpointMode.CLAIM_PER_JOB,
        description="mode is ClaimPerJob (a PersistentVolumeClaim <job>-checkpoint per job from size, "
        "storageClassName, accessModes and deletionPolicy, or existingClaimName), SharedClaim (a "
        "directory per job in one existing claim: sharedClaim; no claim per job, so a burst of jobs "
        "never queues behind the PV controller) or ObjectStore (a URI for the workload's checkpoint "
        "library: objectStore; no volume). Set exactly the sub-object of the mode.",
    )
    size: Quantity = Field(
        default="10Gi",
        description="size is the capacity requested for the checkpoint volume (a quantity "
        "such as 10Gi). Mode ClaimPerJob only.",
    )
    storage_class_name: Optional[str] = Field(
        default=None,
        max_length=MAX_NAME_LENGTH,
        description="storageClassName is the StorageClass of the checkpoint volume; empty uses "
        "the cluster's default StorageClass. Mode ClaimPerJob only.",
    )
    access_modes: list[AccessMode] = Field(
        default=[AccessMode.READ_WRITE_MANY],
        min_length=1,
        max_length=4,
        description="accessModes of the checkpoint volume. ReadWriteMany lets workers on "
        "different nodes share it. Mode ClaimPerJob only.",
    )
    mount_path: str = Field(
        default="/checkpoints",
        min_length=1,
        max_length=1024,
        description="mountPath is the absolute path where the volume (with SharedClaim: the job's "
        "directory in it) is mounted in every worker; it is also passed to the workload as "
        "KUBEFORGE_CHECKPOINT_DIR. Unused with ObjectStore.",
        json_schema_extra={"x-kubernetes-validations": [_absolute_rule("checkpoint.mountPath")]},
    )
    deletion_policy: DeletionPolicy = Field(
        default=DeletionPolicy.RETAIN,
        description="deletionPolicy is Retain (keep the volume claim when the job is deleted) "
        "or Delete (delete it with the job). Mode ClaimPerJob only: kubeforge never deletes a "
        "claim it did not create.",
    )
    existing_claim_name: Optional[str] = Field(
        default=None,
        max_length=MAX_NAME_LENGTH,
        description="existingClaimName names a PersistentVolumeClaim in the job's namespace to "
        "mount whole instead of creating one (mode ClaimPerJob). The operator never deletes it; "
        "size, storageClassName, accessModes and deletionPolicy are then ignored. To share one "
        "claim between jobs, prefer mode SharedClaim: each job then gets a directory of its own.",
    )
    shared_claim: Optional[SharedClaim] = Field(
        default=None,
        description="sharedClaim is the shared claim and the job's directory in it; set exactly "
        "when mode is SharedClaim.",
    )
    object_store: Optional[ObjectStore] = Field(
        default=None,
        description="objectStore is the bucket, the job's prefix and the credentials; set exactly "
        "when mode is ObjectStore.",
    )
    local_tier: Optional[LocalTier] = Field(
        default=None,
        description="localTier adds a node-local fast tier (any mode), mounted at "
        "localTier.mountPath and passed as KUBEFORGE_LOCAL_CHECKPOINT_DIR. The durable tier "
        "(the volume or the object store) stays the source of truth: the workload saves to the "
        "fast tier, copies to the durable one in the background, and resumes from the durable one.",
    )

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("checkpoint.mountPath must be an absolute path (start with /)")
        return value

    @model_validator(mode="after")
    def _one_mode(self) -> "Checkpoint":
        mode = self.mode
        if (self.shared_claim is not None) != (mode == CheckpointMode.SHARED_CLAIM):
            raise ValueError("checkpoint.sharedClaim is set exactly when checkpoint.mode is SharedClaim")
        if (self.object_store is not None) != (mode == CheckpointMode.OBJECT_STORE):
            raise ValueError("checkpoint.objectStore is set exactly when checkpoint.mode is ObjectStore")
        if self.existing_claim_name and mode != CheckpointMode.CLAIM_PER_JOB:
            raise ValueError("checkpoint.existingClaimName belongs to mode ClaimPerJob (with SharedClaim, "
                             "name the claim in checkpoint.sharedClaim.claimName)")
        if (self.local_tier is not None and mode != CheckpointMode.OBJECT_STORE
                and self.local_tier.mount_path == self.mount_path):
            raise ValueError("checkpoint.localTier.mountPath must differ from checkpoint.mountPath")
        return self
