"""What the serving placement benchmark sees: pods grouped into replica groups and gangs, from a
pod watch on this side of the API server, the same way for every phase.

A *group* is what one phase calls one replica (or one training gang): its pods are told apart
by the phase's ``classify(pod)`` (labels), so the figures never depend on what a controller
reports about itself. For each group the observer keeps its pods (node, GPUs, Ready), when it
was first fully bound and first Ready, and its *partial episodes*: spans during which some but
not all of its pods are bound and none is being deleted; the GPUs those bound pods hold are
integrated over time, exactly, at every watch event (GPU-seconds).

Replica asks: :meth:`Observer.ask` records the step's replica count per service; each group of
that service that becomes Ready takes the oldest pending ask (FIFO): create -> Ready is the time
from the ask to that watch event. A scale-down drops the newest pending asks beyond what the
new count still needs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from e2e.bench.lib.timing import epoch

__all__ = ["PARTIAL_GRACE_S", "Group", "Observer", "PodInfo"]

PARTIAL_GRACE_S = 5.0
"""A group partial for longer than this counts as *left partial* (the issue's "partial for more
than 5 s"); shorter episodes are the moment between kube-scheduler binding one pod of a group
and the next (it binds one pod at a time)."""


@dataclass(frozen=True)
class PodInfo:
    """How a phase classifies a pod: its group, the group's owner (service or gang), kind
    (``serving`` / ``training``), the pods a whole group has, and the pod's GPUs."""

    group: str
    owner: str
    kind: str
    size: int
    gpus: int


@dataclass
class Group:
    """One replica group or gang as the pod watch saw it (times: ``time.monotonic()``)."""

    key: str
    owner: str
    kind: str
    size: int
    first_seen: float
    pods: dict[str, tuple[str | None, int, bool]] = field(default_factory=dict)  # pod -> (node, gpus, ready)
    retiring: float | None = None  # first time one of its pods was being deleted
    bound_at: float | None = None  # first time every pod was bound
    ready_at: float | None = None  # first time every pod was Ready
    nodes: tuple[str, ...] = ()  # nodes when first fully bound
    partial_since: float | None = None
    partial_gpus: int = 0
    last_t: float = 0.0
    episodes: list[tuple[float, float, float]] = field(default_factory=list)  # (start, duration s, GPU-s)
    ep_gpu_s: float = 0.0
    created_ts: float | None = None  # earliest pod creationTimestamp, epoch s (API server, 1 s resolution)
    ask_at: float | None = None  # the ask this group served (serving groups)
    uids: set = field(default_factory=set)  # uids of the pods seen in it
    is_ready: bool = False  # Ready at the last event

    def bound(self) -> int:
        """Pods of the group bound to a node now."""
        return sum(1 for n, _, _ in self.pods.values() if n)

    def ready(self) -> bool:
        """Every pod of the group bound and Ready, none being deleted."""
        return self.retiring is None and len(self.pods) == self.size and \
            all(n and r for n, _, r in self.pods.values())


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class Observer:
    """Groups, partial episodes, asks and Ready latencies of one phase.

    Args:
        classify: ``pod dict -> PodInfo`` or None for a pod that is not the bench's.
        node_clique: node name -> its NVLink domain (``nvidia.com/gpu.clique``).
        node_gpus: node name -> allocatable GPUs (to spot over-commit).
    """

    def __init__(self, classify: Callable[[dict], PodInfo | None], node_clique: dict[str, str],
                 node_gpus: dict[str, int]) -> None:
        self.classify, self.node_clique, self.node_gpus = classify, node_clique, node_gpus
        self.lock = threading.Lock()
        self.groups: dict[str, Group] = {}
        self.uid_group: dict[str, Group] = {}
        self.asked: dict[str, int] = {}  # owner -> replicas asked now (serving) / 1 (gang present)
        self.pending: dict[str, list[float]] = {}  # owner -> ask times not yet served (FIFO)
        self.ready_lat: dict[str, list[float]] = {"serving": [], "training": []}
        self.gang_created: dict[str, float] = {}
        self.asks = {"made": 0, "cancelled": 0, "down": 0}  # asks made; dropped by a later scale-down; decreases
        # Ready groups that stopped being Ready: deleted (a scale-down or a recreation) / still there
        self.lost = {"deleted": {"serving": 0, "training": 0}, "unready": {"serving": 0, "training": 0}}
        self.samples: list[dict] = []
        self.overcommit: list[tuple[float, str, int]] = []
        self.t0 = time.monotonic()
        self.wall = time.time() - time.monotonic()  # epoch seconds = monotonic + wall
        self.end: float | None = None

    # --- the bench's asks --------------------------------------------------------------------

    def ask(self, owner: str, replicas: int, now: float) -> None:
        """The step asks ``owner`` (a service) for ``replicas`` replicas at ``now``."""
        with self.lock:
            old = self.asked.get(owner, 0)
            q = self.pending.setdefault(owner, [])
            if replicas > old:
                q.extend([now] * (replicas - old))
                self.asks["made"] += replicas - old
            elif replicas < old:
                ready = sum(1 for g in self.groups.values() if g.owner == owner and g.ready())
                keep = max(0, min(len(q), replicas - ready))
                self.asks["cancelled"] += len(q) - keep
                self.asks["down"] += old - replicas
                del q[keep:]
            self.asked[owner] = replicas

    def gang(self, name: str, present: bool, now: float) -> None:
        """A training gang was created (``present``) or deleted at ``now``."""
        with self.lock:
            self.asked[name] = 1 if present else 0
            if present:
                self.gang_created[name] = now

    # --- the pod watch -------------------------------------------------------------------------

    def event(self, kind: str, pod: dict, now: float) -> None:
        """One pod watch event (``ADDED`` / ``MODIFIED`` / ``DELETED``) received at ``now``."""
        md = pod.get("metadata") or {}
        name = md.get("name")
        if not name or (self.end is not None and now > self.end):
            return
        info = self.classify(pod)
        if info is None:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        uid = md.get("uid")
        gone = kind == "DELETED" or md.get("deletionTimestamp") or \
            (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        with self.lock:
            g = self.uid_group.get(uid) or self.groups.get(info.group)  # a pod stays in the group it joined
            if g is not None and g.retiring is not None and not gone and uid not in g.uids:
                # A new pod under the name of a group being deleted: the controller made that
                # group again (kubeforge reuses a group's index after a scale-down): a new group.
                self._flush(g, now)
                self._update(g, now)
                g.key = f"{g.key}#{sum(1 for k in self.groups if k.startswith(info.group + '#'))}"
                self.groups[g.key] = g
                g = None
            if g is None:
                g = self.groups[info.group] = Group(info.group, info.owner, info.kind, info.size, now, last_t=now)
            self._flush(g, now)
            g.uids.add(uid)
            self.uid_group[uid] = g
            if gone:
                if g.retiring is None:
                    g.retiring = now
                    if g.is_ready:
                        self.lost["deleted"][g.kind] += 1
                if kind == "DELETED":
                    g.pods.pop(name, None)
                else:
                    g.pods[name] = (node, info.gpus, False)
            else:
                g.pods[name] = (node, info.gpus, _ready(pod))
            created = epoch(md.get("creationTimestamp"))
            if created is not None and (g.created_ts is None or created < g.created_ts):
                g.created_ts = created
            self._update(g, now)

    def _flush(self, g: Group, now: float) -> None:
        if g.partial_since is not None:
            g.ep_gpu_s += g.partial_gpus * (now - g.last_t)
        g.last_t = now

    def _update(self, g: Group, now: float) -> None:
        bound = g.bound()
        if g.bound_at is None and g.retiring is None and bound == g.size and len(g.pods) == g.size:
            g.bound_at = now
            g.nodes = tuple(sorted(n for n, _, _ in g.pods.values() if n))
        partial = g.retiring is None and 0 < bound < g.size
        if partial and g.partial_since is None:
            g.partial_since, g.ep_gpu_s = now, 0.0
        elif not partial and g.partial_since is not None:
            g.episodes.append((g.partial_since, now - g.partial_since, g.ep_gpu_s))
            g.partial_since = None
        g.partial_gpus = sum(gp for n, gp, _ in g.pods.values() if n) if partial else 0
        ready = g.ready()
        if g.is_ready and not ready and g.retiring is None:
            self.lost["unready"][g.kind] += 1
        g.is_ready = ready
        if g.ready_at is None and g.ready():
            g.ready_at = now
            if g.kind == "serving":
                q = self.pending.get(g.owner)
                if q:
                    g.ask_at = q.pop(0)
                    self.ready_lat["serving"].append(now - g.ask_at)
            elif g.owner in self.gang_created:
                self.ready_lat["training"].append(now - self.gang_created[g.owner])

    # --- timeline ------------------------------------------------------------------------------

    def sample(self, now: float) -> None:
        """One timeline row: asks, groups Ready / fully bound, partial groups and their GPUs,
        groups waiting (asked, not fully bound), groups short (asked, not Ready; per service),
        over-committed nodes."""
        with self.lock:
            row = {"t": now - self.t0, "asked": {"serving": 0, "training": 0}, "ready": {"serving": 0, "training": 0},
                   "partial": 0, "partial_gpus": 0, "waiting": {"serving": 0, "training": 0}, "short": 0}
            live: dict[str, list[Group]] = {}
            per_node: dict[str, int] = {}
            for g in self.groups.values():
                self._flush(g, now)
                if g.retiring is None:
                    live.setdefault(g.owner, []).append(g)
                    if g.partial_since is not None:
                        row["partial"] += 1
                        row["partial_gpus"] += g.partial_gpus
                for n, gp, _ in g.pods.values():
                    if n:
                        per_node[n] = per_node.get(n, 0) + gp
            kinds = {g.owner: g.kind for g in self.groups.values()}
            for owner, n in self.asked.items():
                kind = kinds.get(owner) or ("training" if owner.startswith("train-") else "serving")
                gs = live.get(owner, [])
                row["asked"][kind] += n
                row["ready"][kind] += sum(1 for g in gs if g.ready())
                row["waiting"][kind] += max(0, n - sum(1 for g in gs if g.bound_at is not None))
                if kind == "serving":
                    row["short"] += max(0, n - sum(1 for g in gs if g.ready()))
            for n, used in per_node.items():
                cap = self.node_gpus.get(n)
                if cap is not None and used > cap:
                    self.overcommit.append((now - self.t0, n, used - cap))
            self.samples.append(row)

    def close(self, now: float) -> None:
        """End the phase at ``now``: later events are ignored, open partial episodes are closed."""
        with self.lock:
            self.end = now
            for g in self.groups.values():
                self._flush(g, now)
                if g.partial_since is not None:
                    g.episodes.append((g.partial_since, now - g.partial_since, g.ep_gpu_s))
                    g.partial_since = None
