"""One pod model: what the ledger, the lifecycle and the serving admission read of a Pod.

Also the one definition of a terminal pod and the scheduler's rule for what a pod requests.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from kubeforge.api import to_plain
from kubeforge.objects._labels import (
    ADMISSION_GATE, ASSIGNED_NODE, GROUP_INDEX, JOB_NAME, POOL_LABEL, REPLICA_INDEX, RESTART_ATTEMPT, SERVICE_NAME,
    WORKER_INDEX,
)
from kubeforge.objects._node import NATIVE_RESOURCES, parse_quantity_count, quantity_value
from kubeforge.objects._start import PodStart, pod_start_from_k8s
from kubeforge.objects._timestamps import loose_time

TERMINAL_PHASES = ("Succeeded", "Failed")

MAIN_CONTAINER_NAMES = ("trainer", "pytorch", "vllm", "sglang", "server", "model-server", "triton")
"""Containers that get the GPUs and whose exit code and termination message count, in this
order (Kubeflow names its container ``pytorch``); otherwise the first container."""

STUCK_WAITING_REASONS = (
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
    "CreateContainerError", "RunContainerError", "CrashLoopBackOff",
)
"""Container ``waiting`` reasons that mean the pod will not start on its own soon; reported
when a gang does not start within its startup timeout."""


@dataclass(frozen=True, slots=True)
class Pod:
    """What kubeforge knows about one pod.

    Attributes:
        namespace: ``metadata.namespace``.
        name: ``metadata.name``.
        node: ``spec.nodeName`` (bound), or None.
        assigned: The node kubeforge chose for it (annotation ``kubeforge.io/assigned-node``),
            which holds the GPUs in the ledger before the pod is bound.
        phase: ``status.phase`` (``Pending`` when absent).
        deleting: ``metadata.deletionTimestamp`` is set.
        gated: The pod has scheduling gates.
        gates: The gate names.
        requests: Extended-resource requests (names with a ``/``), by the scheduler's rule
            (:func:`pod_requests`).
        job: The TrainingJob it belongs to (label ``kubeforge.io/job-name``), or None.
        rank: ``kubeforge.io/replica-index`` (0 when absent).
        attempt: ``kubeforge.io/restart-attempt`` (0 when absent).
        service: The InferenceService it belongs to (label), or None.
        pool: The GPUPool label, or None.
        ready: The ``Ready`` condition is True.
        disruption: The reason of a ``DisruptionTarget=True`` condition, or None.
        exit_code: The main container's exit code once terminated.
        message: The main container's termination message (may carry checkpoint JSON).
        waiting: ``"<reason>: <message>"`` of a container stuck waiting
            (:data:`STUCK_WAITING_REASONS`), or None.
        unschedulable_since: When ``PodScheduled=False/Unschedulable`` was set, or None.
        unschedulable_message: The scheduler's message with it.
        reason: ``status.reason`` (e.g. ``Evicted``, or a kubelet admission rejection such as
            ``OutOfnvidia.com/gpu`` or ``NodeAffinity``), or None.
        created: ``metadata.creationTimestamp`` (unix seconds), 0 if unknown.
        affinity: ``spec.affinity`` of a pod waiting behind the admission gate (kept only for
            those: the admission round narrows it), else None.
        annotated: The pod has annotations (a JSON patch adds to them or creates them).
        group: ``kubeforge.io/group-index`` of an InferenceService's pod, or None.
        worker: ``kubeforge.io/worker-index`` (0, the leader, when absent).
        ip: ``status.podIP``, or None.
        container_restarts: Sum of its containers' ``restartCount``.
        claims: Names of its ``spec.resourceClaims`` entries (Dynamic Resource Allocation): the
            devices they hold are counted from the ResourceClaims themselves.
        start: The phases of its start (:class:`~kubeforge.objects.PodStart`), read only for an
            InferenceService's pod (``group`` set), else None.
    """

    namespace: str
    name: str
    node: str | None = None
    assigned: str | None = None
    phase: str = "Pending"
    deleting: bool = False
    gates: tuple[str, ...] = ()
    requests: Mapping[str, int] = field(default_factory=dict)
    job: str | None = None
    rank: int = 0
    attempt: int = 0
    service: str | None = None
    pool: str | None = None
    ready: bool = False
    disruption: str | None = None
    exit_code: int | None = None
    message: str | None = None
    waiting: str | None = None
    unschedulable_since: float | None = None
    unschedulable_message: str | None = None
    reason: str | None = None
    created: float = 0.0
    affinity: Mapping[str, Any] | None = None
    annotated: bool = False
    group: int | None = None
    worker: int = 0
    ip: str | None = None
    container_restarts: int = 0
    claims: tuple[str, ...] = ()
    start: PodStart | None = None

    @property
    def gated(self) -> bool:
        return bool(self.gates)

    @property
    def where(self) -> str | None:
        """The node that holds this pod's resources: bound, else assigned by kubeforge."""
        return self.node or self.assigned

    @property
    def terminal(self) -> bool:
        """See :func:`is_terminal`."""
        return self.phase in TERMINAL_PHASES

    @property
    def waiting_reason(self) -> str | None:
        """The container's own reason in :attr:`waiting` (``ErrImagePull``...), or None."""
        return self.waiting.split(":")[0] if self.waiting else None


def is_terminal(pod: Pod) -> bool:
    """The one definition of a terminal pod: phase ``Succeeded`` or ``Failed``.

    A terminal pod holds no resources (the scheduler and the kubelet release them). A pod
    that is being deleted but not yet terminal still holds its GPUs: the scheduler keeps
    counting it until it is gone, and so does the ledger.
    """
    return pod.phase in TERMINAL_PHASES


def _own(container: Mapping[str, Any], extended_only: bool = True) -> dict[str, int]:
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        return {}
    # Requests default to limits when left out (API defaulting; always so for extended resources).
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: quantity_value(k, v) for k, v in merged.items()
            if "/" in k or k.startswith("dra:") or (not extended_only and k in NATIVE_RESOURCES)}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def pod_requests(spec: Mapping[str, Any], extended_only: bool = True) -> dict[str, int]:
    """Resource requests of a pod spec, by kube-scheduler's rule.

    Kubernetes ``resourcehelper.AggregateContainerRequests`` (KEP-753 sidecars): the sum over
    app containers plus restartable init containers (sidecars, ``restartPolicy: Always``),
    and at least, for every other init container, its own request plus the sidecars started
    before it (init containers run one at a time, so the maximum counts, not the sum).
    By default only names with a ``/`` are kept (``nvidia.com/gpu``, ``amd.com/gpu``, ...);
    ``extended_only=False`` keeps :data:`NATIVE_RESOURCES` too (cpu in millicores, memory in
    bytes). Pod overhead never carries extended resources, so it is left out.
    """
    reqs: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(reqs, _own(c, extended_only))
    sidecars: dict[str, int] = {}
    init: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        own = _own(c, extended_only)
        if c.get("restartPolicy") == "Always":
            _add(reqs, own)
            _add(sidecars, own)
            _max(init, sidecars)
        else:
            tmp = dict(own)
            _add(tmp, sidecars)
            _max(init, tmp)
    _max(reqs, init)
    return {k: v for k, v in reqs.items() if v > 0}


def set_main_gpus(pod_spec: dict[str, Any], gpus: int, resource: str) -> dict[str, Any]:
    """Give the main container (:func:`main_container`) ``gpus`` of ``resource`` as its request
    and limit, in place; returns that container. What every builder does to a template, so
    that :func:`replica_requests` books exactly the pod the builder makes.

    Raises:
        KeyError: the spec has no containers (the API models refuse such templates).
    """
    containers = pod_spec["containers"]
    name = main_container([c.get("name") for c in containers])
    main = next(c for c in containers if c.get("name") == name)
    res = main.setdefault("resources", {})
    res.setdefault("limits", {})[resource] = str(gpus)
    res.setdefault("requests", {})[resource] = str(gpus)
    return main


def replica_requests(pod_spec: Mapping[str, Any], gpus: int, resource: str) -> dict[str, int]:
    """What one replica's pod holds once built from ``pod_spec`` with ``gpus`` of ``resource``
    on its main container: :func:`pod_requests` (every resource: cpu millicores, memory bytes,
    extended counts) of that pod. Sidecars and init containers that request the resource count
    by the scheduler's rule, so a rank of ``gpusPerReplica: 8`` with a 1-GPU sidecar holds 9.
    This is the one number the placement fits and the ledger, the pool status and the quotas
    book. Pure; the template is not modified.
    """
    containers = list(pod_spec.get("containers") or [])
    if not containers:
        return {}
    spec = dict(pod_spec)
    name = main_container([c.get("name") for c in containers])
    at = next(i for i, c in enumerate(containers) if c.get("name") == name)
    main = dict(containers[at])
    res = dict(main.get("resources") or {}) if isinstance(main.get("resources"), Mapping) else {}
    res["limits"] = {**(res.get("limits") or {}), resource: gpus}
    res["requests"] = {**(res.get("requests") or {}), resource: gpus}
    main["resources"] = res
    containers[at] = main
    spec["containers"] = containers
    return pod_requests(spec, extended_only=False)


def gpu_request_conflict(pod_spec: Mapping[str, Any], gpus: int, resource: str) -> str | None:
    """Why a template's own GPU request disagrees with ``gpusPerReplica``, or None.

    ``gpusPerReplica`` is the one place a replica's GPUs are given: the builder writes it on
    the main container. A request or limit of ``resource`` that the user wrote on that
    container with another value would be overwritten in silence, so it is refused instead
    (the same value is accepted). Other containers may request GPUs; they are booked
    (:func:`replica_requests`).
    """
    containers = list(pod_spec.get("containers") or [])
    name = main_container([c.get("name") for c in containers])
    main = next((c for c in containers if c.get("name") == name), None)
    res = (main or {}).get("resources") or {}
    if not isinstance(res, Mapping):
        return None
    for part in ("requests", "limits"):
        value = (res.get(part) or {}).get(resource)
        if value is not None and parse_quantity_count(value) != gpus:
            return (f"container {name!r} sets resources.{part}[{resource}] to {value} but gpusPerReplica is "
                    f"{gpus}: the operator gives the main container gpusPerReplica GPUs; remove the "
                    f"{part} entry or make it equal")
    return None


def main_container(names: Sequence[str]) -> str | None:
    """The container whose exit code counts: the first of :data:`MAIN_CONTAINER_NAMES`
    present, else the first container."""
    return next((n for n in MAIN_CONTAINER_NAMES if n in names), names[0] if names else None)


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


_SHARED_REQUESTS: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}
_SHARED_REQUESTS_MAX = 4096


def _shared(text: Any) -> Any:
    """``text`` interned (one copy of a namespace, node, job or phase string however many pods
    name it: at 20,000 pods, about 6 MiB of the operator's memory); anything else unchanged."""
    return sys.intern(text) if type(text) is str else text


def _shared_requests(reqs: dict[str, int]) -> dict[str, int]:
    """One dict per distinct request (``{"nvidia.com/gpu": 8}``) shared by every pod that asks
    the same: records are read-only. Bounded: past :data:`_SHARED_REQUESTS_MAX` distinct
    requests the table starts again."""
    key = tuple(reqs.items())
    hit = _SHARED_REQUESTS.get(key)
    if hit is None:
        if len(_SHARED_REQUESTS) >= _SHARED_REQUESTS_MAX:
            _SHARED_REQUESTS.clear()
        hit = _SHARED_REQUESTS[key] = {sys.intern(k): v for k, v in reqs.items()}
    return hit


def pod_from_k8s(body: Mapping[str, Any]) -> Pod:
    """Build a :class:`Pod` from a Kubernetes Pod (a dict or kopf's body view); never raises
    on odd content (a malformed label counts as 0)."""
    md = body.get("metadata") or {}
    spec = body.get("spec") or {}
    st = body.get("status") or {}
    labels = md.get("labels") or {}
    conds = st.get("conditions") or []
    disruption = next((c.get("reason") or "DisruptionTarget" for c in conds
                       if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    gates = tuple(g.get("name") or "" for g in spec.get("schedulingGates") or [])
    unsched = next((c for c in conds if c.get("type") == "PodScheduled" and c.get("status") == "False"
                    and c.get("reason") == "Unschedulable"), None)
    main = main_container([c.get("name") for c in spec.get("containers") or []])
    exit_code = message = waiting = None
    for cs in list(st.get("initContainerStatuses") or []) + list(st.get("containerStatuses") or []):
        state = cs.get("state") or {}
        w = state.get("waiting") or {}
        if waiting is None and w.get("reason") in STUCK_WAITING_REASONS:
            waiting = f"{w['reason']}: {(w.get('message') or '')[:512]}".rstrip(": ")
        if cs.get("name") == main and cs in (st.get("containerStatuses") or []):
            term = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if term:
                exit_code = term.get("exitCode")
                message = term.get("message")
    return Pod(
        namespace=_shared(md.get("namespace") or ""),
        name=md.get("name") or "",
        node=_shared(spec.get("nodeName") or None),
        assigned=_shared((md.get("annotations") or {}).get(ASSIGNED_NODE) or None),
        phase=_shared(st.get("phase") or "Pending"),
        deleting=bool(md.get("deletionTimestamp")),
        gates=gates,
        requests=_shared_requests(pod_requests(spec)),
        job=_shared(labels.get(JOB_NAME)),
        rank=_int(labels.get(REPLICA_INDEX)),
        attempt=_int(labels.get(RESTART_ATTEMPT)),
        service=_shared(labels.get(SERVICE_NAME)),
        pool=_shared(labels.get(POOL_LABEL)),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds),
        disruption=disruption,
        exit_code=exit_code,
        message=message,
        waiting=waiting,
        unschedulable_since=loose_time(unsched.get("lastTransitionTime")) if unsched else None,
        unschedulable_message=unsched.get("message") if unsched else None,
        reason=st.get("reason") or None,
        created=loose_time(md.get("creationTimestamp")) or 0.0,
        affinity=to_plain(spec.get("affinity") or {}) if ADMISSION_GATE in gates else None,
        annotated=bool(md.get("annotations")),
        group=_int(labels.get(GROUP_INDEX), -1) if labels.get(GROUP_INDEX) is not None else None,
        worker=_int(labels.get(WORKER_INDEX)),
        ip=st.get("podIP") or None,
        container_restarts=sum(_int(cs.get("restartCount")) for cs in st.get("containerStatuses") or []),
        claims=tuple(str(c.get("name") or "") for c in spec.get("resourceClaims") or [] if isinstance(c, Mapping)),
        start=pod_start_from_k8s(st) if labels.get(GROUP_INDEX) is not None else None,
    )
