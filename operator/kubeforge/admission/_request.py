"""What work asks placement for: a TrainingJob's gang (used by the admission round for every pool
it tries and by the lifecycle when it asks why a worker will not bind) and an InferenceService's
replica group (its shape in a pool: pods, GPUs each, topology). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from dataclasses import replace

from kubeforge.admission._pools import PoolView
from kubeforge.admission._snapshot import is_dra_pool
from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME, TrainingJobSpec
from kubeforge.objects import (
    CLIQUE_LABEL, ROLE_LABEL, WORKER_ROLE, InferenceServiceRecord, Record, job_labels, rank_requests,
)
from kubeforge.placement import HOSTNAME_LABEL, GangRequest, NodeFilter
from kubeforge.selectors import selector_matches


def own_anti_affinity(pod_spec: Mapping[str, Any], own_labels: Mapping[str, str]) -> tuple[bool, tuple[str, ...]]:
    """The template's required pod anti-affinity between a gang's own pods: (one replica per
    node, other topology keys whose domains must hold at most one replica). A term counts when
    its labelSelector matches the labels every pod of the gang carries (``own_labels``) and it
    looks in the pod's own namespace (no ``namespaces`` / ``namespaceSelector`` elsewhere)."""
    terms = ((((pod_spec.get("affinity") or {}).get("podAntiAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution")) or [])
    one, keys = False, []
    for term in terms:
        if not isinstance(term, Mapping) or term.get("namespaces") or term.get("namespaceSelector"):
            continue
        sel = term.get("labelSelector")
        if not isinstance(sel, Mapping) or not selector_matches(sel, own_labels):
            continue
        key = term.get("topologyKey") or ""
        if key == HOSTNAME_LABEL:
            one = True
        elif key and key not in keys:
            keys.append(key)
    return one, tuple(keys)


def gang_request(job: Record, resource: str = DEFAULT_GPU_RESOURCE_NAME) -> GangRequest:
    """The placement request of a job in a pool counting ``resource``: its shape and topology,
    what one rank holds (:func:`kubeforge.objects.rank_requests`: ``gpusPerReplica`` plus what
    sidecars and init containers request, by the scheduler's rule; and the cpu, memory and other
    resources it needs), the template's own tolerations and node constraints, and its own
    anti-affinity (so the nodes chosen are ones kube-scheduler accepts).

    Raises:
        ValueError: The template cannot be read (caught by :func:`plan_admission`).
    """
    spec: TrainingJobSpec = job.spec  # type: ignore[assignment]
    tmpl = spec.template.spec
    mode = spec.topology.mode.value
    needs = dict(rank_requests(job, resource))
    gpus = needs.pop(resource, spec.gpus_per_replica)
    own = {**(spec.template.metadata.get("labels") or {}), **job_labels(job.name), ROLE_LABEL: WORKER_ROLE}
    one, keys = own_anti_affinity(tmpl, own)
    return GangRequest(
        replicas=spec.replicas,
        gpus_per_replica=gpus,
        mode=mode,  # type: ignore[arg-type]
        level=spec.topology.level if mode != "None" else None,
        tolerations=tuple(tmpl.get("tolerations") or ()),
        node_filter=NodeFilter.from_pod_spec(tmpl),
        needs=needs,
        one_per_node=one,
        spread_keys=keys,
    )


@dataclass(frozen=True)
class GroupShape:
    """One replica of a service in a pool.

    Attributes:
        pool: The pool.
        pods: Pods per replica (``nodesPerReplica``), one per node.
        gpus: GPUs given to each pod's main container (``gpusPerReplica / pods``).
        held: What each pod holds by the scheduler's rule (sidecars and init containers
            included): what the ledger books per node.
        needs: What each pod requests besides GPUs (cpu millicores, memory bytes, ...).
        mode: Placement mode of a group: ``Required`` / ``Preferred`` at ``level`` for groups
            of several pods, ``None`` for one pod.
        level: The topology level whose one domain holds a group, or None.
    """

    pool: str
    pods: int
    gpus: int
    held: int
    needs: Mapping[str, int] = field(default_factory=dict)
    mode: str = "None"
    level: str | None = None


def group_shape(svc: InferenceServiceRecord, view: PoolView) -> GroupShape | str:
    """The shape of ``svc``'s replicas in ``view``, or why they cannot have one there.

    A replica of G GPUs (``gpusPerReplica``, else tensor x pipeline) in a pool whose largest node
    has N GPUs is one pod of G GPUs when G <= N, else, when ``parallelism`` is set, G / N pods of
    N GPUs each, which needs N to divide G (a tensor x pipeline split over whole nodes, as vLLM
    and SGLang run it); a plain ``gpusPerReplica`` larger than every node stays one pod that
    placement reports fits no node. A group of
    several pods stays inside one domain of ``topology.level`` (default: the pool's narrowest
    level, its NVLink domain when detected), ``Required`` unless the spec says otherwise.

    A DRA pool (``deviceAllocation: DRA``) gives no shape for now: its GPUs are handed out as
    ResourceClaims, which the serving builders do not make yet, and a ``dra:<driver>`` ledger key
    is no container resource the API server accepts. The message says so (the serving runtime
    reports it as InvalidSpec; admission tries the service's next pool).
    """
    spec = svc.spec
    assert spec is not None
    if is_dra_pool(view.record):
        return (f"GPUPool {view.name} allocates GPUs through DRA: InferenceService replicas run on device-plugin "
                f"pools for now (list one in spec.pools)")
    total = spec.replica_gpus
    per_node = max((n.gpus_allocatable for n in view.nodes), default=0)
    if per_node == 0 or total <= per_node or spec.parallelism is None:
        # one pod; a gpusPerReplica beyond every node without parallelism is not split over
        # nodes behind the user's back (placement says it fits no node)
        pods, gpus = 1, total
    elif total % per_node:
        return (f"a replica needs {total} GPUs (tensor x pipeline), more than the {per_node} GPUs of one node of pool "
                f"{view.name} and not a whole number of such nodes: make tensor x pipeline a multiple of {per_node}")
    else:
        pods, gpus = total // per_node, per_node
    needs = dict(rank_requests(svc, view.resource, gpus))
    held = needs.pop(view.resource, gpus)
    mode, level = spec.topology.mode.value, spec.topology.level
    if pods == 1:
        return GroupShape(view.name, 1, gpus, held, needs, "None", level if mode == "Required" else None)
    known = [lv.name for lv in view.levels]
    if level is None:
        level = known[0] if known else None
    if level is None or mode == "None":
        return GroupShape(view.name, pods, gpus, held, needs, "None", None)
    if level not in known and mode == "Required":
        return f"topology.level {level!r} is not a level of pool {view.name} ({', '.join(known) or 'none'})"
    return GroupShape(view.name, pods, gpus, held, needs, mode, level)


def group_request(svc: InferenceServiceRecord, view: PoolView, shape: GroupShape) -> GangRequest:
    """The placement request of one replica group: its pods as one gang, one pod per node,
    inside one domain of ``shape.level``; a one-pod replica with ``topology.mode: Required`` and
    a level needs a node that belongs to a domain of that level."""
    spec = svc.spec
    assert spec is not None
    tmpl = spec.template.spec
    nf = NodeFilter.from_pod_spec(tmpl)
    if shape.pods == 1 and shape.level is not None:
        label = next((lv.node_label for lv in view.levels if lv.name == shape.level), None)
        if label is not None:
            extra = [{"key": label, "operator": "Exists"}]
            terms = tuple({**t, "matchExpressions": list(t.get("matchExpressions") or []) + extra}
                          for t in (nf.terms if nf and nf.terms else ({},)))
            nf = NodeFilter(nf.node_selector if nf else (), terms)
    return GangRequest(
        replicas=shape.pods,
        gpus_per_replica=shape.held,
        mode=shape.mode,  # type: ignore[arg-type]
        level=shape.level if shape.pods > 1 else None,
        tolerations=tuple(tmpl.get("tolerations") or ()),
        node_filter=nf,
        needs=shape.needs,
        one_per_node=shape.pods > 1,
    )


def clique_level(view: PoolView, request: GangRequest) -> str | None:
    """The level of ``request`` (for ``Preferred`` without one: the narrowest) when its label is
    ``nvidia.com/gpu.clique`` in a DRA pool, else None."""
    if request.mode == "None" or not is_dra_pool(view.record):
        return None
    name = request.level or (view.levels[0].name if view.levels else None)
    level = next((lv for lv in view.levels if lv.name == name), None)
    return level.name if level is not None and level.node_label == CLIQUE_LABEL else None


def multi_node(view: PoolView, request: GangRequest) -> bool:
    """Whether the gang needs more than one node of the pool (its largest node cannot hold it)."""
    largest = max((n.gpus_allocatable for n in view.nodes), default=0)
    per_node = 1 if request.one_per_node else (largest // request.gpus_per_replica if largest else 0)
    return request.replicas > max(1, per_node)


def nvlink_request(request: GangRequest, view: PoolView) -> GangRequest:
    """``request`` as placed in ``view``: a gang that needs more than one node of an NVLink clique
    of a DRA pool takes wholly free nodes of one clique and leaves the pool's
    ``dra.spareNodesPerClique`` free when it can (:func:`kubeforge.placement.place_gang`); it gets a
    ComputeDomain. Other requests are returned unchanged."""
    if request.whole_nodes or clique_level(view, request) is None or not multi_node(view, request):
        return request
    spares = view.record.spec.dra.spare_nodes_per_clique if view.record.spec is not None else 0
    return replace(request, whole_nodes=True, spare_nodes=spares)
