"""What the watches saw of each replica group, on this machine's monotonic clock (pure: events
in, times out; no I/O).

A group is ``(namespace, owner, group index)``: the owner is the InferenceService (pod label
``kubeforge.io/inference-service``, index ``kubeforge.io/group-index``) or the LeaderWorkerSet
(``leaderworkerset.sigs.k8s.io/name``, ``.../group-index``). The bench registers each group with
the time of its create call (:meth:`Tracker.start`); the pod watch then gives, per group, when
its ``size``-th pod was first seen (created), when ``size`` of its pods were bound to nodes, and
when ``size`` of them were Ready at once; the InferenceService watch gives when
``status.groups[].admittedAt`` first appeared for it. Every time is the first one: a pod that
goes and comes back later (a recreated group) does not move a time already taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeforge.objects import GROUP_INDEX, SERVICE_NAME

from e2e.peers.lws import GROUP_INDEX_LABEL as LWS_GROUP_INDEX
from e2e.peers.lws import NAME_LABEL as LWS_NAME

__all__ = ["GroupKey", "GroupTimes", "Tracker", "group_of", "pod_bound", "pod_ready"]

GroupKey = tuple[str, str, int]
"""``(namespace, owner name, group index)``."""

#: (owner label, group-index label) of the two systems' pods.
OWNER_LABELS = ((SERVICE_NAME, GROUP_INDEX), (LWS_NAME, LWS_GROUP_INDEX))


def group_of(pod: dict) -> GroupKey | None:
    """The group a pod belongs to, from its labels (kubeforge's or LWS's); None for any other pod
    or an index that is not a number."""
    md = pod.get("metadata") or {}
    labels = md.get("labels") or {}
    for owner, index in OWNER_LABELS:
        if owner in labels and index in labels:
            try:
                return md.get("namespace", ""), labels[owner], int(labels[index])
            except ValueError:
                return None
    return None


def pod_bound(pod: dict) -> bool:
    """Whether the pod has a node (``spec.nodeName``)."""
    return bool((pod.get("spec") or {}).get("nodeName"))


def pod_ready(pod: dict) -> bool:
    """Whether the pod's ``Ready`` condition is True and it is not being deleted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


@dataclass
class GroupTimes:
    """One group's times, monotonic seconds (None: not seen yet).

    Attributes:
        system: ``kubeforge`` or ``lws``.
        size: pods in the group.
        t0: just before the create call of its owner.
        admitted: ``status.groups[].admittedAt`` first seen (kubeforge only).
        created: the ``size``-th of its pods first seen.
        bound: ``size`` of its pods on nodes at once.
        ready: ``size`` of its pods Ready at once.
        pods: its pods now (name -> (bound, ready)); deleted ones leave.
        seen: the names of every pod of it ever seen.
    """

    system: str
    size: int
    t0: float
    admitted: float | None = None
    created: float | None = None
    bound: float | None = None
    ready: float | None = None
    pods: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)

    def since_create(self, what: str) -> float | None:
        """Seconds from the create call to ``what`` (``admitted``, ``created``, ``bound``,
        ``ready``), or None when not seen."""
        t = getattr(self, what)
        return None if t is None else t - self.t0


class Tracker:
    """Groups registered by the bench (:meth:`start`), updated by the watches' events. The
    watch threads and the bench's thread call it without a lock: each call is a few dict
    updates of one group, and a group is registered before its object is created."""

    def __init__(self) -> None:
        self.groups: dict[GroupKey, GroupTimes] = {}

    def start(self, system: str, namespace: str, owner: str, groups: int, size: int, t0: float) -> None:
        """Register ``groups`` groups (indexes 0..groups-1) of ``owner``, created at ``t0``."""
        for i in range(groups):
            self.groups[(namespace, owner, i)] = GroupTimes(system, size, t0)

    def pod_event(self, kind: str, pod: dict, now: float) -> None:
        """A pod watch event (``ADDED``, ``MODIFIED``, ``DELETED``) that arrived at ``now``."""
        key = group_of(pod)
        g = self.groups.get(key) if key else None
        if g is None:
            return
        name = (pod.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            g.pods.pop(name, None)
            return
        g.seen.add(name)
        g.pods[name] = (pod_bound(pod), pod_ready(pod))
        if g.created is None and len(g.seen) >= g.size:
            g.created = now
        if g.bound is None and sum(b for b, _ in g.pods.values()) >= g.size:
            g.bound = now
        if g.ready is None and sum(r for _, r in g.pods.values()) >= g.size:
            g.ready = now

    def service_event(self, kind: str, isvc: dict, now: float) -> None:
        """An InferenceService watch event: the first ``status.groups[].admittedAt`` of each group."""
        if kind == "DELETED":
            return
        md = isvc.get("metadata") or {}
        for s in (isvc.get("status") or {}).get("groups") or []:
            g = self.groups.get((md.get("namespace", ""), md.get("name", ""), int(s.get("index", -1))))
            if g is not None and g.admitted is None and s.get("admittedAt"):
                g.admitted = now

    def of(self, namespace: str, owner: str) -> list[GroupTimes]:
        """The groups of one owner, by index."""
        return [g for (ns, o, _), g in sorted(self.groups.items()) if ns == namespace and o == owner]

    def all_ready(self, namespace: str, owner: str) -> bool:
        """Whether every group of ``owner`` has been Ready."""
        gs = self.of(namespace, owner)
        return bool(gs) and all(g.ready is not None for g in gs)
