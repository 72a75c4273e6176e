"""ModelCacheNode: one node's model cache (KServe's LocalModelNode), cluster-scoped, named after
its node. Two writers, one field each: the operator writes ``spec`` (the copies the node should
hold and why), the node agent (``kubeforge cache-agent``) writes ``status`` (each copy's state:
Pending, Downloading n %, Ready, Failed with a reason). A small kind of its own rather than
GPUPool status: one object a node keeps every agent's writes to its own object (no conflicts
between 64 agents on one pool status), and its size bounded by one node's models."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field

from .. import API_VERSION
from ._base import DNS_SUBDOMAIN_PATTERN, MAX_LABEL_LENGTH, MAX_NAME_LENGTH, KubeModel
from ._core import Condition, ObjectMeta, conditions_field
from ._model_cache import DEFAULT_CACHE_HOST_PATH, DIGEST_PATTERN

MAX_NODE_MODELS = 64


class WantReason(str, Enum):
    """WantReason says why the operator wants a copy on a node."""

    PLACED = "Placed"
    KEEP_WARM = "KeepWarm"
    FORECAST = "Forecast"


class SecretRef(KubeModel):
    """SecretRef names a Secret by namespace and name."""

    namespace: str = Field(max_length=MAX_LABEL_LENGTH, description="namespace of the Secret.")
    name: str = Field(max_length=MAX_NAME_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN, description="name of the Secret.")


class WantedModel(KubeModel):
    """WantedModel is one copy the operator wants on the node."""

    key: str = Field(max_length=MAX_LABEL_LENGTH, description="key names the copy: its directory under hostPath.")
    uri: str = Field(max_length=2048, description="uri is the source (spec.model.uri).")
    revision: Optional[str] = Field(default=None, max_length=255, description="revision pins an hf:// source.")
    digest: Optional[str] = Field(default=None, max_length=71, pattern=DIGEST_PATTERN, description="digest pins the source.")
    size_bytes: Optional[int] = Field(default=None, ge=1, description="sizeBytes is the expected size.")
    credentials: Optional[SecretRef] = Field(default=None, description="credentials is the Secret the agent reads.")
    reasons: list[WantReason] = Field(default_factory=list, max_length=3,
                                      description="reasons are Placed (a replica is on the node), KeepWarm "
                                      "(the pool's spec.modelCache.keepWarm) and Forecast (warmAhead).")


class ModelCacheNodeSpec(KubeModel):
    """ModelCacheNodeSpec is what the operator wants the node to hold."""

    pool: str = Field(default="", max_length=MAX_LABEL_LENGTH, description="pool is the node's GPUPool.")
    host_path: str = Field(default=DEFAULT_CACHE_HOST_PATH, max_length=1024,
                           description="hostPath is the pool's spec.modelCache.hostPath.")
    capacity_bytes: Optional[int] = Field(default=None, ge=1, description="capacityBytes is the pool's limit.")
    models: list[WantedModel] = Field(default_factory=list, max_length=MAX_NODE_MODELS,
                                      description="models are the copies wanted, in the order to fetch them.")


class CopyPhase(str, Enum):
    """CopyPhase is where one copy on the node is."""

    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    READY = "Ready"
    FAILED = "Failed"


class NodeCopy(KubeModel):
    """NodeCopy is one copy on the node (wanted, or kept since: evicted least recently used first)."""

    key: str = Field(max_length=MAX_LABEL_LENGTH, description="key names the copy (its directory).")
    uri: str = Field(default="", max_length=2048, description="uri is its source.")
    phase: CopyPhase = Field(default=CopyPhase.PENDING, description="phase is Pending, Downloading, Ready or Failed.")
    progress_percent: int = Field(default=0, ge=0, le=100, description="progressPercent of the download.")
    bytes: int = Field(default=0, ge=0, description="bytes on the node's disk (done so far while Downloading).")
    size_bytes: Optional[int] = Field(default=None, ge=0, description="sizeBytes expected (spec, or the source's listing).")
    digest: Optional[str] = Field(default=None, max_length=80, description="digest verified (oci, s3, gs) or the hf commit.")
    reason: Optional[str] = Field(default=None, max_length=64, description="reason of a Failed copy (CamelCase).")
    message: Optional[str] = Field(default=None, max_length=1024, description="message says why, never a secret.")
    ready_at: Optional[datetime] = Field(default=None, description="readyAt is when it was verified.")
    last_used: Optional[datetime] = Field(default=None, description="lastUsed is when the spec last wanted it (LRU).")


class ModelCacheNodeStatus(KubeModel):
    """ModelCacheNodeStatus is what the agent holds on the node."""

    observed_generation: Optional[int] = Field(default=None, ge=0, description="observedGeneration of the spec acted on.")
    models: list[NodeCopy] = Field(default_factory=list, max_length=MAX_NODE_MODELS, description="models are the copies.")
    used_bytes: int = Field(default=0, ge=0, description="usedBytes is what the copies take.")
    ready: int = Field(default=0, ge=0, description="ready counts the Ready copies.")
    agent: Optional[str] = Field(default=None, max_length=MAX_NAME_LENGTH, description="agent is the agent that wrote it.")
    heartbeat: Optional[datetime] = Field(default=None, description="heartbeat is the agent's last write.")
    conditions: list[Condition] = conditions_field("Ready: False with DiskFull when a wanted copy cannot fit")


class ModelCacheNode(KubeModel):
    """ModelCacheNode is one GPU node's model cache: the copies the operator wants there (spec)
    and the ones the node agent holds (status)."""

    KIND: ClassVar[str] = "ModelCacheNode"
    PLURAL: ClassVar[str] = "modelcachenodes"
    SINGULAR: ClassVar[str] = "modelcachenode"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("mcn",)
    CATEGORIES: ClassVar[tuple[str, ...]] = ("kubeforge",)
    NAMESPACED: ClassVar[bool] = False
    PRINTER_COLUMNS: ClassVar[tuple[dict[str, Any], ...]] = (
        {"name": "Pool", "type": "string", "jsonPath": ".spec.pool"},
        {"name": "Ready", "type": "integer", "jsonPath": ".status.ready"},
        {"name": "Used", "type": "integer", "jsonPath": ".status.usedBytes"},
        {"name": "Heartbeat", "type": "date", "jsonPath": ".status.heartbeat"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    )

    api_version: Literal["kubeforge.io/v1alpha1"] = Field(default=API_VERSION, description="apiVersion is kubeforge.io/v1alpha1.")
    kind: Literal["ModelCacheNode"] = Field(default="ModelCacheNode", description="kind is ModelCacheNode.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="metadata is the object's metadata.")
    spec: ModelCacheNodeSpec = Field(default_factory=ModelCacheNodeSpec, description="spec is written by the operator.")
    status: Optional[ModelCacheNodeStatus] = Field(default=None, description="status is written by the node agent.")
