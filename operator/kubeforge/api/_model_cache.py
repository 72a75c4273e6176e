"""Model weights cached on the GPU nodes (issue 29): the model an InferenceService serves
(:class:`ModelSource`, ``spec.model``) and the cache policy of a GPUPool (:class:`ModelCachePolicy`,
``spec.modelCache``), with the pool's per-model counts (:class:`PoolModel`).

KServe's words: a LocalModelCache declares ``sourceModelUri`` and ``modelSize`` on a node group;
here the model is declared where it is served (the service's ``spec.model``, namespaced) and the
cache's size, path and warm list where the disks are (the pool, cluster-scoped). The per-node
state is the small kind :class:`~kubeforge.api.ModelCacheNode` (KServe's LocalModelNode).

**Pinning.** A node copy is shared by every replica that names the same source, so the source
must not move under it: ``hf://`` needs ``revision`` as a 40-hex commit (a branch moves),
``oci://`` needs a digest (``@sha256:...`` in the URI or ``digest``; tags are refused, as the
gpustack operator refuses them); ``s3://`` and ``gs://`` may give ``digest`` (the SHA-256 of
the object listing, see :func:`kubeforge.modelcache.listing_digest`), checked after download;
``pvc://`` is mounted directly and never cached. Defaults live here only.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Optional

from pydantic import ConfigDict, Field, model_validator

from ._base import DNS_SUBDOMAIN_PATTERN, MAX_LABEL_LENGTH, MAX_NAME_LENGTH, KubeModel

DEFAULT_MODEL_MOUNT_PATH = "/mnt/models"
"""Where the serving containers see the model (KServe's mount path for storage URIs)."""
DEFAULT_CACHE_HOST_PATH = "/var/lib/kubeforge/models"
"""The directory on each node that holds the node's copies, one sub-directory per model."""
SCHEMES = ("hf", "s3", "gs", "pvc", "oci")
URI_PATTERN = r"^(hf|s3|gs|pvc|oci)://[^/\s][^\s]*$"
COMMIT_PATTERN = r"^[0-9a-f]{40}$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
MAX_KEEP_WARM = 32
_URI = re.compile(URI_PATTERN)


class ModelSource(KubeModel):
    """ModelSource is where a model's weights come from, pinned, and how large they are."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "!self.uri.startsWith('hf://') || (has(self.revision) && self.revision.matches('^[0-9a-f]{40}$'))",
         "message": "an hf:// model is pinned by revision, a 40-hex commit (a branch or tag moves)"},
        {"rule": "!self.uri.startsWith('oci://') || self.uri.contains('@sha256:') || has(self.digest)",
         "message": "an oci:// model is pinned by digest (@sha256:... or digest); tags are refused"},
    ]})

    uri: str = Field(
        min_length=6, max_length=2048, pattern=URI_PATTERN,
        description="uri is the model's source: hf://ORG/REPO (Hugging Face Hub, or HF_ENDPOINT's), "
        "s3://BUCKET/PREFIX, gs://BUCKET/PREFIX (the S3-compatible XML API with HMAC keys), "
        "pvc://CLAIM/PATH (mounted directly, never cached) or oci://REGISTRY/REPO@sha256:DIGEST "
        "(an OCI artifact, pulled with ORAS).")
    revision: Optional[str] = Field(
        default=None, min_length=1, max_length=255,
        description="revision pins an hf:// model: the repository's commit (40 hex digits).")
    digest: Optional[str] = Field(
        default=None, max_length=71, pattern=DIGEST_PATTERN,
        description="digest pins an oci:// model (its manifest's digest) or an s3:// / gs:// one (sha256 "
        "of its object listing: one line 'KEY SIZE ETAG' per object, sorted); checked after download.")
    size_bytes: Optional[int] = Field(
        default=None, ge=1,
        description="sizeBytes is the weights' total size (KServe's modelSize): checked after download, "
        "booked against the node cache's capacity before it, and the start-time estimate's input.")
    credentials_secret: Optional[str] = Field(
        default=None, max_length=MAX_NAME_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN,
        description="credentialsSecret names a Secret in the service's namespace (in the pool's "
        "keepWarm entry: in its namespace) that the node agent reads for the download: HF_TOKEN for "
        "hf://, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL, AWS_REGION) for s3:// "
        "and gs://, username / password for oci://. Never logged. A copy fetched with a Secret is "
        "shared only within that namespace; a public model's copy is shared by the whole cluster.")
    mount_path: str = Field(
        default=DEFAULT_MODEL_MOUNT_PATH, min_length=1, max_length=1024, pattern=r"^/",
        description="mountPath is where the serving containers see the weights, read-only; the "
        "operator points vLLM there (--model PATH) unless the command names --model already.")

    @model_validator(mode="after")
    def _pinned(self) -> "ModelSource":
        why = pin_error(self.uri, self.revision, self.digest)
        if why:
            raise ValueError(why)
        return self

    @property
    def scheme(self) -> str:
        """``hf``, ``s3``, ``gs``, ``pvc`` or ``oci``."""
        return self.uri.split("://", 1)[0]

    @property
    def cached(self) -> bool:
        """Whether nodes cache it (every scheme but ``pvc://``, which is mounted directly)."""
        return self.scheme != "pvc"


def pin_error(uri: str, revision: str | None, digest: str | None) -> str | None:
    """Why ``uri`` is not pinned enough to be shared by a node copy, or None (see the module)."""
    if not _URI.match(uri or ""):
        return f"model uri {uri!r} must be hf://, s3://, gs://, pvc:// or oci:// followed by a path"
    if uri.startswith("hf://") and not (revision and re.match(COMMIT_PATTERN, revision)):
        return "an hf:// model is pinned by revision, a 40-hex commit (a branch or tag moves)"
    if uri.startswith("oci://") and "@sha256:" not in uri and not digest:
        return "an oci:// model is pinned by digest (@sha256:... or digest); tags are refused"
    return None


class EvictionPolicy(str, Enum):
    """EvictionPolicy is how a node's cache makes room."""

    LRU = "LRU"


class KeepWarm(KubeModel):
    """KeepWarm is a model the pool keeps on some of its nodes whether or not a replica uses it."""

    model: ModelSource = Field(description="model is the source to keep (pinned as a service's spec.model).")
    namespace: Optional[str] = Field(
        default=None, max_length=MAX_LABEL_LENGTH,
        description="namespace holds model.credentialsSecret, and the copy is shared within it only; "
        "empty for a public model.")
    nodes: Optional[int] = Field(
        default=None, ge=1, le=100000,
        description="nodes is on how many of the pool's nodes to keep it (spread over the widest "
        "topology level's domains, emptiest nodes first); empty: every node.")


class ModelCachePolicy(KubeModel):
    """ModelCachePolicy is how the pool's nodes cache model weights for InferenceServices whose
    spec.model names them (one copy a node, fetched by the node agent)."""

    host_path: str = Field(
        default=DEFAULT_CACHE_HOST_PATH, min_length=2, max_length=1024, pattern=r"^/",
        description="hostPath is the directory on each node that holds the copies; the serving pods "
        "mount their model's sub-directory of it read-only (hostPath, no PersistentVolume to bind).")
    capacity_bytes: Optional[int] = Field(
        default=None, ge=1,
        description="capacityBytes is the most the copies may take on one node; past it the least "
        "recently used copy no replica, warm list or forecast wants is evicted. Empty: the disk's "
        "free space is the limit.")
    eviction: EvictionPolicy = Field(default=EvictionPolicy.LRU, description="eviction is LRU.")
    keep_warm: list[KeepWarm] = Field(
        default_factory=list, max_length=MAX_KEEP_WARM,
        description="keepWarm are models kept on the pool's nodes before any replica asks.")
    warm_ahead: bool = Field(
        default=True,
        description="warmAhead copies a service's model to the domain its next replica would use "
        "when predictive scale-up forecasts more replicas (status.forecast) than it runs.")


class PoolModel(KubeModel):
    """PoolModel counts the pool's nodes by the state of their copy of one model."""

    name: str = Field(max_length=MAX_NAME_LENGTH, description="name is the model's short name (its URI's last part).")
    uri: str = Field(max_length=2048, description="uri is the model's source.")
    key: str = Field(max_length=MAX_LABEL_LENGTH, description="key names the copy on every node (its directory).")
    ready: int = Field(default=0, ge=0, description="ready is the nodes holding a verified copy.")
    downloading: int = Field(default=0, ge=0, description="downloading is the nodes fetching it now.")
    failed: int = Field(default=0, ge=0, description="failed is the nodes whose last fetch failed.")
