"""Serving replica groups in the admission round: which of an InferenceService's groups want
nodes, and placing them whole from what the round's gangs left (the LeaderWorkerSet way: one
group, one domain). Pure; called by :func:`kubeforge.admission.plan_admission` after the gangs.
A service with ``spec.model`` is placed on nodes that hold its weights first when they fit
(:func:`kubeforge.modelcache.place_preferring_cache`: prefer, never require).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from kubeforge.admission._ordering import service_order
from kubeforge.admission._pools import PoolView, missing_gpus
from kubeforge.admission._request import group_request, group_shape
from kubeforge.admission._snapshot import Snapshot
from kubeforge.objects import FAILED, UNSCHEDULABLE, WAITING_FOR_CAPACITY, InferenceServiceRecord, Key, groups_of
from kubeforge.modelcache import cache_key, place_preferring_cache, ready_nodes
from kubeforge.placement import Placement, place_gang


@dataclass(frozen=True)
class PlaceGroup:
    """An InferenceService replica group given nodes: ``placement`` in ``pool`` (worker w on
    ``placement.nodes[w]``, the leader first), each pod holding ``gpus_per_pod``; ``cached``:
    every node held a verified copy of the service's ``spec.model`` when it was placed (None:
    the service names no cached model)."""

    key: Key
    index: int
    pool: str
    placement: Placement
    gpus_per_pod: int
    cached: bool | None = None


def _groups_wanted(svc: InferenceServiceRecord, snapshot: Snapshot) -> list[int]:
    """The indices of ``svc``'s groups that want nodes now: groups released to be placed again
    (in index order), then new indices up to ``status.desiredReplicas`` plus the standby replicas
    (``spec.standby.replicas``: started and kept asleep, they hold GPUs too; failed groups keep
    their index and count; a group draining for a rollout counts, one draining for a scale-down is
    on its way out: :attr:`~kubeforge.objects.GroupRecord.leaving`)."""
    groups = groups_of(svc.status)
    assumed = {i for (k, i) in snapshot.assumed_groups if k == svc.key}
    waiting = [g.index for g in groups if not g.nodes and g.phase != FAILED and g.index not in assumed]
    active = sum(1 for g in groups if not g.leaving) + len(assumed - {g.index for g in groups})
    standby = svc.spec.standby.replicas if svc.spec is not None else 0
    want = max(0, int(svc.status.get("desiredReplicas") or 0) + standby - active)
    used = {g.index for g in groups} | assumed
    fresh, i = [], 0
    while len(fresh) < want:
        if i not in used:
            fresh.append(i)
        i += 1
    return waiting + fresh


def _caches_model(svc: InferenceServiceRecord) -> bool:
    model = svc.spec.model if svc.spec is not None else None
    return model is not None and model.cached


def _model_ready(svc: InferenceServiceRecord, snapshot: Snapshot) -> frozenset[str]:
    """The nodes holding a verified copy of the service's ``spec.model`` (none without one)."""
    model = svc.spec.model if svc.spec is not None else None
    if model is None or not model.cached or not snapshot.model_caches:
        return frozenset()
    return ready_nodes(snapshot.model_caches, cache_key(model, svc.namespace))


def place_groups(snapshot: Snapshot, views: Mapping[str, PoolView],
                 taken: dict[str, dict[str, int]]) -> tuple[list[PlaceGroup], dict[Key, tuple[str, str]]]:
    """Give serving replica groups nodes from what the gangs left, oldest service first
    (:func:`~kubeforge.admission._ordering.service_order`), whole groups only (one domain of the
    level for a group of several pods).

    Args:
        snapshot: The round's snapshot (services with their effective status, assumed groups).
        views: Each pool's view the round placed against.
        taken: GPUs per node already promised this round, by resource; each group placed here
            is added to it.

    Returns:
        (the groups placed, ``service key -> (reason, message)`` for services whose next group
        found no room: ``Unschedulable`` when no capacity change can help, else
        ``WaitingForCapacity``).
    """
    placed_groups: list[PlaceGroup] = []
    waits: dict[Key, tuple[str, str]] = {}
    for svc in service_order(snapshot.services.values()):
        if svc.deleting or svc.spec is None or svc.namespace in snapshot.terminating:
            continue
        wanted = _groups_wanted(svc, snapshot)
        if not wanted:
            continue
        notes: list[str] = []
        permanent = True
        for index in wanted:
            placed = False
            for pool in svc.spec.pools:
                view = views.get(pool)
                if view is None:
                    notes.append(f"GPUPool {pool!r} does not exist")
                    continue
                shape = group_shape(svc, view)
                if isinstance(shape, str):
                    notes.append(shape)
                    continue
                if view.unavailable is not None:
                    permanent = False
                    notes.append(view.unavailable[1])
                    continue
                preferred = place_preferring_cache(place_gang, group_request(svc, view, shape), view.nodes,
                                                   view.levels, taken[view.resource], _model_ready(svc, snapshot))
                result = preferred.result
                if isinstance(result, Placement):
                    for node, gpus in result.gpus_by_node.items():
                        taken[view.resource][node] = taken[view.resource].get(node, 0) + gpus
                    cached = preferred.all_cached if _caches_model(svc) else None
                    placed_groups.append(PlaceGroup(svc.key, index, pool, result, shape.held, cached))
                    placed = True
                    break
                permanent = permanent and result.permanent
                why = missing_gpus(view) or result.reason
                notes.append(f"pool {pool}: {why}" if len(svc.spec.pools) > 1 else why)
            if not placed:
                reason = UNSCHEDULABLE if permanent else WAITING_FOR_CAPACITY
                waits[svc.key] = (reason, "; ".join(dict.fromkeys(notes)))
                break  # the next group of this service would not fit either
    return placed_groups, waits
