"""Records of kubeforge's own objects as the operator holds them: the spec parsed once into the
API model (defaults applied there and only there), the status as the API server returned it.

Also the one definition of a job's current attempt and of its placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from kubeforge.api import (
    DrainReason, GPUPoolSpec, GroupPhase, InferenceServiceSpec, StandbyState, TrainingJobSpec, describe_validation_error,
)
from kubeforge.api import to_plain
from kubeforge.objects._labels import TEMPLATE_HASH
from kubeforge.objects._timestamps import loose_time
from kubeforge.objects._pod import replica_requests
from kubeforge.objects._start import GroupStart

Key = tuple[str, str]
"""(namespace, name) of a namespaced object."""

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Record(Generic[S]):
    """One kubeforge object: identity, the parsed spec (or why it does not parse) and status.

    Attributes:
        namespace: Empty for GPUPools.
        name: ``metadata.name``.
        uid: ``metadata.uid``.
        generation: ``metadata.generation`` (moves on every spec change).
        resource_version: ``metadata.resourceVersion`` as the watch last delivered it.
        created: ``metadata.creationTimestamp`` in unix seconds (0 if unknown).
        deleting: ``metadata.deletionTimestamp`` is set.
        spec: The spec parsed into its API model, or None when it does not validate.
        spec_error: The validation errors on one line when ``spec`` is None.
        status: ``.status`` as a plain dict (may be empty).
    """

    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    created: float
    deleting: bool
    spec: S | None
    spec_error: str | None
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


TrainingJobRecord = Record[TrainingJobSpec]
InferenceServiceRecord = Record[InferenceServiceSpec]
PoolRecord = Record[GPUPoolSpec]

_PARSED: dict[tuple[type, str, int], tuple[Any, str | None]] = {}
_PARSED_MAX = 50_000


def parse_spec(model: type[S], uid: str, generation: int, spec: Mapping[str, Any]) -> tuple[S | None, str | None]:
    """``spec`` validated into ``model``, once per (uid, generation): watch events that only
    change status (most of them) reuse the parsed spec. Returns ``(spec, None)`` or
    ``(None, "spec.replicas: Input should be ...")``. The cache is bounded."""
    k = (model, uid, generation)
    hit = _PARSED.get(k)
    if hit is not None and uid:
        return hit
    try:
        out: tuple[Any, str | None] = (model.model_validate(to_plain(spec)), None)
    except ValidationError as e:
        out = (None, describe_validation_error(e, prefix="spec"))
    if uid:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[k] = out
    return out


def record_from_k8s(model: type[S], body: Mapping[str, Any]) -> Record[S]:
    """A :class:`Record` from a kubeforge object (dict or kopf body view)."""
    md = body.get("metadata") or {}
    uid = md.get("uid") or ""
    gen = int(md.get("generation") or 0)
    spec, err = parse_spec(model, uid, gen, body.get("spec") or {})
    return Record(
        namespace=md.get("namespace") or "",
        name=md.get("name") or "",
        uid=uid,
        generation=gen,
        resource_version=str(md.get("resourceVersion") or ""),
        created=loose_time(md.get("creationTimestamp")) or 0.0,
        deleting=bool(md.get("deletionTimestamp")),
        spec=spec,
        spec_error=err,
        status=to_plain(body.get("status") or {}),
    )


_RANK: dict[tuple[str, int, str, int | None], Mapping[str, int]] = {}


def rank_requests(rec: Record, resource: str, gpus: int | None = None) -> Mapping[str, int]:
    """What one pod of ``rec`` holds when its pool counts ``resource``: a TrainingJob's rank, or
    a serving pod: :func:`~kubeforge.objects.replica_requests` of its template with ``gpus``
    (default ``gpusPerReplica``) on the main container (every resource; ``resource`` is the
    GPUs). Worked out once per (uid, generation, resource, gpus): the admission round asks for
    every placed job every round. Empty when the spec does not parse."""
    spec = rec.spec
    if spec is None:
        return {}
    gpus = gpus if gpus is not None else spec.gpus_per_replica  # type: ignore[attr-defined]
    key = (rec.uid, rec.generation, resource, gpus)
    hit = _RANK.get(key) if rec.uid else None
    if hit is not None:
        return hit
    out = replica_requests(spec.template.spec, gpus, resource)  # type: ignore[attr-defined]
    if rec.uid:
        if len(_RANK) >= _PARSED_MAX:
            _RANK.clear()
        _RANK[key] = out
    return out


def rank_gpus(rec: Record, resource: str) -> int:
    """GPUs of ``resource`` one rank of ``rec`` holds (:func:`rank_requests`): at least
    ``gpusPerReplica``, more when sidecars or init containers request GPUs too."""
    return int(rank_requests(rec, resource).get(resource, 0))


def current_attempt(status: Mapping[str, Any] | None) -> int:
    """The gang's current attempt: ``status.attempt``, the one definition used by the ledger,
    the lifecycle and the pod builder.

    It moves by one every time the whole gang is stopped (failure, preemption, suspend,
    startup timeout, lost placement, a refused create), so pods of an earlier run never count
    as the current gang. Pods carry it in the ``kubeforge.io/restart-attempt`` label. Statuses
    written before the field existed: failures + preemptions.
    """
    st = status or {}
    if st.get("attempt") is not None:
        return int(st["attempt"])
    r = st.get("restarts") or {}
    return int(r.get("failures", 0)) + int(r.get("preemptions", 0))


@dataclass(frozen=True, slots=True)
class PlacementRecord:
    """A gang's placement as kept in ``status.placement``: rank i runs on ``nodes[i]``."""

    pool: str
    nodes: tuple[str, ...]
    level: str | None = None
    domain: str | None = None
    reason: str = ""

    def to_status(self, admitted_at: str, spec_hash: str) -> dict[str, Any]:
        """``status.placement`` for this placement, made at ``admitted_at`` (RFC 3339) for the
        spec of ``spec_hash`` (what :func:`placement_of` reads back)."""
        return {"pool": self.pool, "level": self.level, "domain": self.domain, "nodes": list(self.nodes),
                "reason": self.reason, "admittedAt": admitted_at, "specHash": spec_hash}


def placement_of(status: Mapping[str, Any] | None) -> PlacementRecord | None:
    """The placement in ``status.placement``, or None when the job holds none."""
    pl = (status or {}).get("placement") or None
    if not pl or not pl.get("nodes"):
        return None
    return PlacementRecord(pl.get("pool") or "", tuple(pl["nodes"]), pl.get("level"), pl.get("domain"),
                           pl.get("reason") or "")


def condition(status: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    """The status condition of ``type_``, or None."""
    return next((c for c in (status or {}).get("conditions") or [] if c.get("type") == type_), None)


def condition_time(status: Mapping[str, Any] | None, type_: str) -> float | None:
    """``lastTransitionTime`` of a condition, in unix seconds, or None."""
    c = condition(status, type_)
    return loose_time(c.get("lastTransitionTime")) if c else None


def status_time(status: Mapping[str, Any] | None, field_name: str) -> float | None:
    """A timestamp field of ``status`` in unix seconds, or None."""
    return loose_time((status or {}).get(field_name))


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One replica group of an InferenceService as kept in ``status.groups[]``: its pods run on
    ``nodes`` (worker ``w`` on ``nodes[w]``, the leader first), each holding ``gpus_per_pod``.

    Attributes:
        index: The group's index (``kubeforge.io/group-index``).
        attempt: Its current attempt (``kubeforge.io/restart-attempt`` of its live pods).
        phase: ``Starting``, ``Ready``, ``Draining`` or ``Failed``.
        pool: Its GPUPool.
        nodes: Node per worker; empty once the group holds nothing (failed).
        gpus_per_pod: GPUs each pod holds (the scheduler's count, sidecars included).
        level: Topology level whose one domain holds it, or None.
        domain: That domain.
        template_hash: What its pods were made from.
        admitted_at: When it got its nodes (unix seconds), or None.
        ready_since: When it became Ready, or None.
        draining_since: When it left the Service to be deleted, or None.
        restarts: Recreations after a lost pod or node.
        startup_failures: Placements that did not start.
        drain_for: ``ScaleDown`` or ``Rollout`` while draining, else None.
        message: What it waits for, or why it failed.
        start: How long its start took, phase by phase (:class:`~kubeforge.objects.GroupStart`), or None.
        standby: ``Pending``, ``Asleep`` or ``Waking`` for a standby replica (``spec.standby``),
            None for a serving one.
        standby_since: When it fell asleep or was asked to wake (unix seconds), or None.
    """

    index: int
    attempt: int = 0
    phase: str = GroupPhase.STARTING.value
    pool: str = ""
    nodes: tuple[str, ...] = ()
    gpus_per_pod: int = 0
    level: str | None = None
    domain: str | None = None
    template_hash: str | None = None
    admitted_at: float | None = None
    ready_since: float | None = None
    draining_since: float | None = None
    restarts: int = 0
    startup_failures: int = 0
    drain_for: str | None = None
    message: str | None = None
    start: GroupStart | None = None
    standby: str | None = None
    standby_since: float | None = None

    @property
    def holds(self) -> bool:
        """Whether the group holds GPUs (it has nodes and has not failed)."""
        return bool(self.nodes) and self.phase != GroupPhase.FAILED.value

    @property
    def leaving(self) -> bool:
        """Whether the group is on its way out: draining for a scale-down. A group draining for a
        rollout is not: it comes back from the new template, so it still counts as one of the
        service's replicas (for the scale-down, admission and the next group's index)."""
        return self.draining_since is not None and self.drain_for != DrainReason.ROLLOUT.value


def _int_of(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _group_phase(g: Mapping[str, Any]) -> str:
    """A group's phase as the decisions keep it: ``Draining`` is written for a group that left the
    Service (``drainingSince``), so ``kubectl`` shows the same count as ``readyReplicas``; only a
    Ready group is ever drained, so it is read back as Ready with ``draining_since`` set. ``Standby``
    (a Ready standby replica, out of the Service) is read back as Ready with its ``standby`` state."""
    phase = str(g.get("phase") or GroupPhase.STARTING.value)
    return GroupPhase.READY.value if phase in (GroupPhase.DRAINING.value, GroupPhase.STANDBY.value) else phase


_STANDBY_STATES = tuple(s.value for s in StandbyState)


def groups_of(status: Mapping[str, Any] | None) -> list[GroupRecord]:
    """The groups in ``status.groups``, by index (malformed entries are skipped: a status the
    schema let through must not stop the ledger)."""
    out = []
    for g in (status or {}).get("groups") or []:
        if not isinstance(g, Mapping) or g.get("index") is None:
            continue
        out.append(GroupRecord(
            index=_int_of(g.get("index")), attempt=_int_of(g.get("attempt")), phase=_group_phase(g),
            pool=str(g.get("pool") or ""), nodes=tuple(str(n) for n in g.get("nodes") or ()),
            gpus_per_pod=_int_of(g.get("gpusPerPod")), level=g.get("level"), domain=g.get("domain"),
            template_hash=g.get("templateHash"), admitted_at=loose_time(g.get("admittedAt")),
            ready_since=loose_time(g.get("readySince")), draining_since=loose_time(g.get("drainingSince")),
            restarts=_int_of(g.get("restarts")), startup_failures=_int_of(g.get("startupFailures")),
            drain_for=g.get("drainFor"), message=g.get("message"), start=GroupStart.from_status(g.get("start")),
            standby=g.get("standby") if g.get("standby") in _STANDBY_STATES else None,
            standby_since=loose_time(g.get("standbySince")),
        ))
    return sorted(out, key=lambda g: g.index)


@dataclass(frozen=True, slots=True)
class DeploymentState:
    """What kubeforge reads of an InferenceService's Deployment.

    Attributes:
        name: ``metadata.name``.
        replicas: ``spec.replicas`` (what the autoscaler last set).
        current: ``status.replicas``.
        ready: ``status.readyReplicas``.
        template_hash: Our ``kubeforge.io/template-hash`` annotation (the template last written).
    """

    name: str
    replicas: int
    current: int
    ready: int
    template_hash: str | None


def deployment_from_k8s(body: Mapping[str, Any]) -> DeploymentState:
    """A :class:`DeploymentState` from a Deployment (dict or kopf body view)."""
    md = body.get("metadata") or {}
    st = body.get("status") or {}
    return DeploymentState(
        name=md.get("name") or "",
        replicas=int((body.get("spec") or {}).get("replicas") or 0),
        current=int(st.get("replicas") or 0),
        ready=int(st.get("readyReplicas") or 0),
        template_hash=(md.get("annotations") or {}).get(TEMPLATE_HASH),
    )
