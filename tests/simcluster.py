"""Test helpers for the pure admission core: small builders, and a pure cluster simulator.

Builders (:func:`mk_node`, :func:`mk_pool`, :func:`mk_job`, :func:`mk_service`,
:func:`worker_pod`, :func:`foreign_pod`) make the records the admission
core reads, through the same parsers the operator uses (``record_from_k8s``, ``pod_from_k8s``,
``build_worker_pod``), so a test states its inputs in the shapes the API server holds.

:class:`SimCluster` is a pure, deterministic stand-in for the API server, kube-scheduler, the
kubelet and kubeforge's runtime. It keeps nodes, pools, jobs (spec and status), pods, services
and a clock; :meth:`SimCluster.settle` runs the operator's loop to a fixed point the way
``kubeforge.runtime`` applies the pure plans:

* the admission round: :func:`kubeforge.admission.plan_admission` over a snapshot built the
  way ``runtime.cache.Cache.snapshot`` builds it; admitted gangs become *assumed* placements,
  waiting reasons are handed to the job reconciles, serving replica groups admission placed are
  written to their service's ``status.groups`` and their pods created pinned (``build_group_pod``);
* every job's reconcile: :func:`kubeforge.lifecycle.plan_training`, applied as
  ``runtime.training`` applies it: the status merge patch first, then deletes (pods are marked
  deleting), then creates (pods from ``build_worker_pod``, pinned to ``placement.nodes[rank]``);
* kube-scheduler and the kubelet: a pinned pod binds to its node when the node's bound pods
  leave room for it and the node's NoSchedule taints are tolerated (a pod that does not fit
  stays Pending, ``PodScheduled=False/Unschedulable``); a bound pod runs; a deleted pod is gone
  once its grace period has passed on the clock (time moves only through :meth:`advance`).

Nothing here prints. Checks that fail raise :class:`SimError` with the events so far.
"""

from __future__ import annotations

import copy
import itertools
import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from kubeforge.admission import (
    AdmissionMemo, JobView, Snapshot, build_ledger, group_shape, plan_admission, pool_resource,
)
from kubeforge.api import GPUPoolSpec, InferenceServiceSpec, TrainingJobSpec
from kubeforge.builders.serving import build_group_pod
from kubeforge.builders.training import build_worker_pod, pvc_name, spec_hash
from kubeforge.lifecycle import TrainingContext, claim_wait, plan_training
from kubeforge.lifecycle._volume import OUR_GATES
from kubeforge.objects import (
    Key, Node, PlacementRecord, Pod, Taint, TrainingJobRecord, groups_of, placement_of,
    pod_from_k8s, record_from_k8s, tolerates,
)
from kubeforge.objects._labels import VOLUME_GATE

from records import (  # noqa: F401  (re-exported while the simulator lives)
    BLOCK, CLIQUE, GPU, NOW, NS, SPOT, _uids, foreign_pod, iso, job_body, mk_job, mk_node, mk_pool, mk_service,
    placed, service_body, snapshot, view, worker_manifest, worker_pod,
)


# --------------------------------------------------------------------------------- simulator


class SimError(AssertionError):
    """An invariant of the simulated cluster does not hold."""


@dataclass
class SimPod:
    """A pod as the simulated API server holds it: the operator's view plus what the simulated
    kube-scheduler needs (the node it is pinned to, its tolerations) and its deletion."""

    pod: Pod
    pinned: str | None = None
    tolerations: tuple = ()
    grace: float = 0.0
    deleted_at: float | None = None
    foreign: bool = False


@dataclass
class SimJob:
    """A job as the simulated API server holds it. ``status`` is replaced, never changed in
    place, so records built from it can share it."""

    body: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    last_wait_write: float = 0.0
    _base: Any = None

    def record(self) -> TrainingJobRecord:
        gen = self.body["metadata"]["generation"]
        if self._base is None or self._base.generation != gen:
            b = dict(self.body)
            b["status"] = {}
            self._base = record_from_k8s(TrainingJobSpec, b)
            assert self._base.spec is not None, self._base.spec_error
        return replace(self._base, status=self.status)


def crd_status_defaults(status: dict[str, Any]) -> dict[str, Any]:
    """What the API server's structural defaulting adds to a written TrainingJob status
    (the defaults in ``crds/``): ``attempt: 0``, ``gpuHours: 0.0``, and zeros inside
    ``restarts`` and ``replicas`` when those objects exist."""
    if status:
        status.setdefault("attempt", 0)
        status.setdefault("gpuHours", 0.0)
        for k in ("failures", "preemptions", "startupFailures"):
            if isinstance(status.get("restarts"), dict):
                status["restarts"].setdefault(k, 0)
        for k in ("active", "ready", "succeeded", "failed"):
            if isinstance(status.get("replicas"), dict):
                status["replicas"].setdefault(k, 0)
    return status


def _pinned_node(manifest: Mapping[str, Any]) -> str | None:
    """The node a pod's required node affinity pins it to (``matchFields metadata.name In``):
    the intersection over every term (each term must pin the same single node)."""
    aff = ((manifest.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    pins = set()
    for t in terms:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                pins.add(tuple(f.get("values") or ()))
    if not pins:
        return None
    if len(pins) != 1 or len(next(iter(pins))) != 1:
        raise SimError(f"pod pinned ambiguously: {pins}")
    return next(iter(pins))[0]


class SimCluster:
    """See the module docstring. ``log`` lists the events applied, for failure messages.

    ``grace`` is the grace period of every deletion (seconds on the simulated clock);
    ``interleave`` the chance that another admission round runs between two job reconciles
    (the runtime's admission loop and work queue run concurrently, so a round may see an
    assumed placement that no status shows yet); ``rng`` draws those chances. With
    ``crash_pending`` set, the next reconcile that would delete or create pods writes its
    status and then "crashes": its deletes and creates are lost with the process's memory
    (assumed placements, waiting reasons), as when the operator restarts, or a pod call fails,
    between the status write and the pod calls. ``race`` = ``("suspend" | "delete", i)``: right
    after the next admission round that admits gangs, the i-th of them (modulo) is suspended or
    deleted by its user before its reconcile has written the placement (the assumed placement
    is then dropped without ever being written). The admission rounds carry an
    :class:`~kubeforge.admission.AdmissionMemo` from round to round, as the runtime does.
    """

    MAX_ROUNDS = 40

    def __init__(self, nodes: Iterable[Node], pools: Iterable[Any], services: Iterable[Any] = (),
                 storage_classes: Iterable[str] = ("standard",), now: float = NOW):
        self.now = now
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.pools = {p.name: p for p in pools}
        self.services = {s.key: {"metadata": {"name": s.name, "namespace": s.namespace, "uid": s.uid,
                                              "generation": s.generation, "creationTimestamp": iso(s.created)},
                                 "spec": s.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
                                 "status": dict(s.status)} for s in services}
        self.storage_classes = frozenset(storage_classes)
        self.claims: dict[Key, str] = {}
        self.jobs: dict[Key, SimJob] = {}
        self.pods: dict[Key, SimPod] = {}
        self.assumed: dict[Key, PlacementRecord] = {}
        self.waiting: dict[Key, tuple[str, str]] = {}
        self.log: list[str] = []
        self.grace = 0.0
        self.interleave = 0.0
        self.crash_pending = False
        self.crashes = 0
        self.race: tuple[str, int] | None = None
        self.memo = AdmissionMemo()
        self.rng = random.Random(0)
        self._seq = itertools.count()

    # ------------------------------------------------------------------ reading

    def fail(self, message: str) -> None:
        steps = "\n".join(f"  {i:3d}. {e}" for i, e in enumerate(self.log))
        raise SimError(f"{message}\nevents (t={self.now - NOW:.0f}s):\n{steps}")

    def pod_views(self) -> list[Pod]:
        return [sp.pod for sp in self.pods.values()]

    def job_pods(self, key: Key) -> list[Pod]:
        return [sp.pod for sp in self.pods.values() if sp.pod.job == key[1] and sp.pod.namespace == key[0]]

    def service_records(self) -> dict[Key, Any]:
        return {k: record_from_k8s(InferenceServiceSpec, b) for k, b in self.services.items()}

    def snapshot(self) -> Snapshot:
        """As ``Cache.snapshot``: non-terminal pods with a node (bound or assigned) that request
        an extended resource."""
        pods = [p for p in self.pod_views()
                if p.requests and p.where is not None and not p.terminal]
        jobs = {}
        for key, sj in self.jobs.items():
            rec = sj.record()
            assumed = None if placement_of(rec.status) else self.assumed.get(key)
            jobs[key] = JobView(rec, rec.status, assumed)
        return Snapshot(pools=dict(self.pools), nodes=dict(self.nodes), pods=pods, jobs=jobs,
                        services=self.service_records(), storage_classes=self.storage_classes,
                        claims=dict(self.claims))

    def bound_gpus(self, node: str, resource: str = GPU, *, foreign_only: bool = False) -> int:
        """What kube-scheduler counts on a node: requests of the non-terminal pods bound there."""
        return sum(sp.pod.requests.get(resource, 0) for sp in self.pods.values()
                   if sp.pod.node == node and not sp.pod.terminal and (sp.foreign or not foreign_only))

    def held_gpus(self, node: str, resource: str = GPU) -> int:
        """Requests of the non-terminal pods bound or assigned to a node."""
        return sum(sp.pod.requests.get(resource, 0) for sp in self.pods.values()
                   if sp.pod.where == node and not sp.pod.terminal)

    # ------------------------------------------------------------------ the world's actions

    def add_job(self, body: dict[str, Any]) -> Key:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        self.jobs[key] = SimJob(copy.deepcopy(body), copy.deepcopy(body.get("status") or {}))
        return key

    def edit_spec(self, key: Key, **changes: Any) -> None:
        sj = self.jobs[key]
        sj.body["spec"].update(changes)
        sj.body["metadata"]["generation"] += 1

    def delete_job(self, key: Key) -> None:
        """The job is gone; the garbage collector deletes its pods (owner references)."""
        del self.jobs[key]
        self.assumed.pop(key, None)
        self.waiting.pop(key, None)
        for k, sp in self.pods.items():
            if sp.pod.job == key[1] and sp.pod.namespace == key[0]:
                self.delete_pod(k)

    def delete_pod(self, key: Key, grace: float | None = None) -> None:
        sp = self.pods.get(key)
        if sp is None or sp.pod.deleting:
            return
        sp.pod = replace(sp.pod, deleting=True)
        sp.deleted_at = self.now
        sp.grace = self.grace if grace is None else grace

    def set_pod(self, key: Key, **changes: Any) -> None:
        sp = self.pods[key]
        sp.pod = replace(sp.pod, **changes)

    def add_foreign_pod(self, name: str, gpus: int, *, ns: str = "other", resource: str = GPU,
                        prefer: Iterable[str] = ()) -> str | None:
        """A pod of nobody's, bound by kube-scheduler to the first node (of ``prefer``, then by
        name) where its request fits next to the bound pods; None when none fits (it stays
        Pending and holds nothing)."""
        order = list(prefer) + sorted(n for n in self.nodes if n not in set(prefer))
        target = None
        for n in order:
            node = self.nodes[n]
            if self._schedulable(node, ()) and \
                    self.bound_gpus(n, resource) + gpus <= node.allocatable.get(resource, 0):
                target = n
                break
        pod = foreign_pod(name, target, gpus, ns=ns, resource=resource, phase="Running" if target else "Pending")
        self.pods[(ns, name)] = SimPod(pod, foreign=True)
        return target

    def scale_service(self, svc_key: Key, delta: int) -> None:
        """A service's autoscaler asks for ``delta`` more (or fewer) replicas. A scale-down
        removes the highest group at once (its pods deleted, its entry gone), as
        ``plan_serving`` does for a group that serves nothing; draining is tested apart."""
        body = self.services[svc_key]
        st = body["status"]
        want = max(0, int(st.get("desiredReplicas", 0)) + delta)
        st["desiredReplicas"] = want
        groups = sorted(st.get("groups") or [], key=lambda g: g["index"])
        while len(groups) > want:
            gone = groups.pop()
            for k, sp in self.pods.items():
                if sp.pod.service == svc_key[1] and sp.pod.group == gone["index"]:
                    self.delete_pod(k)
        st["groups"] = groups

    def taint(self, node: str, key: str, effect: str = "NoSchedule") -> None:
        n = self.nodes[node]
        self.nodes[node] = replace(n, taints=n.taints + (Taint(key, "", effect),))

    def untaint(self, node: str) -> None:
        self.nodes[node] = replace(self.nodes[node], taints=())

    def advance(self, seconds: float) -> None:
        self.now += seconds

    # ------------------------------------------------------------------ the operator's loop

    def admission_round(self) -> Any:
        plan = plan_admission(self.snapshot(), self.now, self.memo)
        self.check_ledger_fits(plan.ledgers, "after the admission round")
        for a in plan.admit:
            if a.key in self.assumed or a.key not in self.jobs:
                self.fail(f"admitted {a.key} twice or unknown")
            pl = a.placement
            self.assumed[a.key] = PlacementRecord(a.pool, pl.nodes, pl.level, pl.domain, pl.reason)
            self.waiting.pop(a.key, None)
        self.waiting = {w.key: (w.reason, w.message) for w in plan.wait}
        for g in plan.groups:
            # the service's reconcile: the group's nodes on record, then its pods, pinned
            body = self.services[g.key]
            groups = [x for x in body["status"].get("groups") or [] if x["index"] != g.index]
            pl = g.placement
            entry = {"index": g.index, "attempt": 0, "phase": "Starting", "pool": g.pool, "nodes": list(pl.nodes),
                     "gpusPerPod": g.gpus_per_pod, "level": pl.level, "domain": pl.domain}
            body["status"]["groups"] = sorted(groups + [entry], key=lambda x: x["index"])
            rec = record_from_k8s(InferenceServiceSpec, body)
            view = plan.views[g.pool]
            shape = group_shape(rec, view)
            group = groups_of(body["status"])[[x["index"] for x in body["status"]["groups"]].index(g.index)]
            for w in range(len(pl.nodes)):
                m = build_group_pod(rec, group=group, worker=w, pods=len(pl.nodes), gpus_per_pod=shape.gpus,
                                    template_hash="h", levels=view.levels, gpu_resource=view.resource,
                                    tolerations=view.tolerations)
                m["metadata"].update(creationTimestamp=iso(self.now), uid=f"pod-{next(_uids)}")
                self.pods[(g.key[0], m["metadata"]["name"])] = SimPod(
                    pod_from_k8s(m), pl.nodes[w], tuple(m["spec"].get("tolerations") or ()))
        if self.race is not None and plan.admit:
            what, i = self.race
            self.race = None
            key = sorted(a.key for a in plan.admit)[i % len(plan.admit)]
            if what == "suspend":
                self.edit_spec(key, suspend=True)
            else:
                self.delete_job(key)
            self.log.append(f"   ({key[1]} {what}d by its user right after it was admitted)")
        return plan

    def reconcile(self, key: Key) -> None:
        sj = self.jobs[key]
        rec = sj.record()
        pods = self.job_pods(key)
        pl = placement_of(rec.status)
        assumed = None if pl else self.assumed.get(key)
        held = pl or assumed
        names = set(held.nodes if held else ()) | {p.node for p in pods if p.node}
        phase = self.claims.get((key[0], pvc_name(key[1])))
        ctx = TrainingContext(
            claim_wait=claim_wait(rec, (phase, "standard") if phase else None, "Immediate"), now=self.now, pods=pods, nodes={n: self.nodes[n] for n in names if n in self.nodes}, assumed=assumed,
            waiting=self.waiting.get(key), last_wait_write=sj.last_wait_write,
            pool_prices={n: (p.spec.price_per_gpu_hour if p.spec else None) for n, p in self.pools.items()},
            spec_hash=spec_hash(rec),
        )
        plan = plan_training(rec, ctx)
        if plan.status is not None:
            status = copy.deepcopy(sj.status)
            for k, v in plan.status.items():
                if v is None:
                    status.pop(k, None)
                else:
                    status[k] = copy.deepcopy(v)
            status["observedGeneration"] = rec.generation
            sj.status = crd_status_defaults(status)
            if plan.wrote_wait:
                sj.last_wait_write = self.now
        if plan.forget_assumed:
            self.assumed.pop(key, None)
        if self.crash_pending and (plan.delete_pods or plan.create_ranks or plan.ungate):
            self.crash_pending = False
            self.crashes += 1
            self.assumed.clear()
            self.waiting.clear()
            self.memo = AdmissionMemo()
            self.log.append(f"   (operator restarted after writing {key[1]}'s status, before its pod calls)")
            return
        for name in plan.delete_pods:
            if (key[0], name) not in self.pods:
                self.fail(f"{key}: asked to delete pod {name} that does not exist")
            self.delete_pod((key[0], name))
        for name in plan.ungate:
            sp = self.pods[(key[0], name)]
            sp.pod = replace(sp.pod, gates=tuple(g for g in sp.pod.gates if g not in OUR_GATES))
        status = sj.status
        placement = placement_of(status)
        if placement is None:
            return
        if plan.ensure_claim and (key[0], pvc_name(key[1])) not in self.claims:
            self.claims[(key[0], pvc_name(key[1]))] = "Pending"  # the provisioner binds it in the kubelet pass
        if not plan.create_ranks:
            return
        attempt = int(status.get("attempt") or 0)
        pool = self.pools.get(placement.pool)
        fresh = sj.record()
        for r in plan.create_ranks:
            m = worker_manifest(fresh, r, attempt, placement, resource=pool_resource(pool), created=self.now,
                                gates=(VOLUME_GATE,) if plan.volume_gate else ())
            name = m["metadata"]["name"]
            if (key[0], name) in self.pods:
                self.fail(f"{key}: created pod {name} twice")
            pin = _pinned_node(m)
            if pin != placement.nodes[r] or m["metadata"]["annotations"].get("kubeforge.io/assigned-node") != pin:
                self.fail(f"{key}: rank {r} pinned to {pin}, placement says {placement.nodes[r]}")
            tol = tuple(m["spec"].get("tolerations") or ())
            self.pods[(key[0], name)] = SimPod(pod_from_k8s(m), pin, tol)

    @staticmethod
    def _schedulable(node: Node, tolerations: Iterable[Mapping[str, Any]]) -> bool:
        tol = list(tolerations)
        return node.ready and not node.unschedulable and all(
            tolerates(tol, t) for t in node.taints if t.effect in ("NoSchedule", "NoExecute"))

    def kubelet(self) -> None:
        """kube-scheduler and the kubelet, one pass: finish deletions whose grace has passed,
        bind the pods pinned to a node where they fit, start bound pods; the provisioner binds
        pending claims."""
        for k, phase in self.claims.items():
            if phase == "Pending":
                self.claims[k] = "Bound"
        for key in sorted(self.pods):
            sp = self.pods[key]
            if sp.pod.deleting and (sp.pod.terminal or self.now >= (sp.deleted_at or 0) + sp.grace):
                del self.pods[key]
        for key in sorted(self.pods, key=lambda k: (self.pods[k].pod.created, k)):
            sp = self.pods[key]
            p = sp.pod
            if p.node is not None or p.gated or p.deleting or p.terminal or sp.pinned is None:
                continue
            node = self.nodes.get(sp.pinned)
            fits = node is not None and self._schedulable(node, sp.tolerations) and all(
                self.bound_gpus(sp.pinned, r) + g <= node.allocatable.get(r, 0) for r, g in p.requests.items())
            if fits:
                sp.pod = replace(p, node=sp.pinned, phase="Running", ready=True,
                                 unschedulable_since=None, unschedulable_message=None)
            elif p.unschedulable_since is None:
                sp.pod = replace(p, unschedulable_since=self.now,
                                 unschedulable_message=f"0/{len(self.nodes)} nodes are available: Insufficient GPUs")

    def _fingerprint(self) -> Any:
        return (repr(sorted((k, repr(j.status)) for k, j in self.jobs.items())),
                repr(sorted((k, sp.pod, sp.pinned) for k, sp in self.pods.items())),
                repr(sorted(self.assumed.items())), repr(sorted(self.waiting.items())), repr(sorted(self.claims.items())), self.crashes, self.race)

    def settle(self) -> None:
        """Run admission rounds, every job's reconcile and the kubelet until nothing changes."""
        for _ in range(self.MAX_ROUNDS):
            before = self._fingerprint()
            self.admission_round()
            for key in sorted(self.jobs):
                if key not in self.jobs:
                    continue
                self.reconcile(key)
                if self.interleave and self.rng.random() < self.interleave:
                    self.admission_round()
                self.check_ledger_fits({r: build_ledger(self.snapshot(), r) for r in self.resources()},
                                       f"after reconciling {key}")
            self.kubelet()
            if self._fingerprint() == before:
                return
        self.fail(f"no fixed point after {self.MAX_ROUNDS} rounds")

    # ------------------------------------------------------------------ invariants

    def resources(self) -> list[str]:
        return sorted({pool_resource(p) for p in self.pools.values()} | {GPU})

    def check_ledger_fits(self, ledgers: Mapping[str, Any], when: str) -> None:
        """(b) The ledger never promises a node more GPUs than it has, unless pods that are not
        kubeforge's already over-commit it."""
        for res, led in ledgers.items():
            for name, held in led.per_node.items():
                node = self.nodes.get(name)
                alloc = node.allocatable.get(res, 0) if node else 0
                if held > alloc and self.bound_gpus(name, res, foreign_only=True) <= alloc:
                    self.fail(f"{when}: ledger holds {held} {res} on node {name}, which has {alloc}; "
                              f"holders: {({w: n[name] for w, n in led.per_workload.items() if name in n})}")

    def check_settled(self) -> None:
        """The invariants of a settled cluster: (a) ledger == pods, (b) no over-commit, (c) one
        pod per rank of the current attempt, nothing of an older attempt left running, (d)
        suspended and finished jobs hold nothing."""
        if self.assumed:
            self.fail(f"settled with assumed placements in flight: {sorted(self.assumed)}")
        snap = self.snapshot()
        fresh = plan_admission(snap, self.now)  # no memo: every gang placed from scratch
        if fresh.admit or fresh.groups:
            self.fail(f"(f) settled, yet a round from scratch admits {[(a.key[1], a.placement.nodes) for a in fresh.admit]}"
                      f" and places groups {[(g.key[1], g.index) for g in fresh.groups]}: the waiting reasons were "
                      f"{ {k[1]: w[0] for k, w in self.waiting.items()} }")
        for res in self.resources():
            led = build_ledger(snap, res)
            for name, node in self.nodes.items():
                want = self.held_gpus(name, res)
                got = led.per_node.get(name, 0)
                if got != want:
                    holders = {w: n[name] for w, n in led.per_workload.items() if name in n}
                    pods = sorted((sp.pod.name, sp.pod.requests.get(res, 0), sp.pod.phase, sp.pod.deleting)
                                  for sp in self.pods.values() if sp.pod.where == name and not sp.pod.terminal)
                    self.fail(f"(a) ledger holds {got} {res} on {name} but its pods hold {want}: "
                              f"ledger {holders}, pods {pods}")
                alloc = node.allocatable.get(res, 0)
                bound = self.bound_gpus(name, res)
                if bound > alloc and self.bound_gpus(name, res, foreign_only=True) <= alloc:
                    self.fail(f"(b) node {name} over-committed: {bound} {res} bound of {alloc}")
            self.check_ledger_fits({res: led}, "(b) settled")
        for key, sj in self.jobs.items():
            rec = sj.record()
            st = rec.status
            pl = placement_of(st)
            attempt = int(st.get("attempt") or 0)
            pods = self.job_pods(key)
            live = [p for p in pods if not p.terminal and not p.deleting]
            for p in live:
                if p.attempt != attempt:
                    self.fail(f"(c) {key}: pod {p.name} of attempt {p.attempt} left running, current attempt {attempt}")
            if pl is None:
                if live:
                    self.fail(f"(c) {key}: no placement (phase {st.get('phase')}) but pods {[p.name for p in live]} live")
                continue
            if st.get("phase") in ("Succeeded", "Failed", "Suspended") or rec.spec.suspend:
                self.fail(f"(d) {key}: phase {st.get('phase')} (suspend={rec.spec.suspend}) holds placement {pl}")
            by_rank: dict[int, list[Pod]] = {}
            for p in live:
                by_rank.setdefault(p.rank, []).append(p)
            for r in range(rec.spec.replicas):
                mine = by_rank.get(r, [])
                if len(mine) != 1:
                    self.fail(f"(c) {key}: rank {r} has {len(mine)} live pods of attempt {attempt}: "
                              f"{[p.name for p in mine]}")
                if mine[0].node != pl.nodes[r]:
                    self.fail(f"(c) {key}: rank {r} pod {mine[0].name} on {mine[0].node}, placement says {pl.nodes[r]}"
                              f" (unschedulable: {mine[0].unschedulable_message})")
            if set(by_rank) - set(range(rec.spec.replicas)):
                self.fail(f"(c) {key}: pods for ranks {sorted(by_rank)} of {rec.spec.replicas} replicas")
            if st.get("phase") != "Running":
                self.fail(f"(c) {key}: every rank bound and running but phase {st.get('phase')}")
        for key, sp in self.pods.items():
            p = sp.pod
            if p.job is None and p.service is None:
                continue
            if not p.gated and not p.terminal and not p.deleting and p.node is None:
                self.fail(f"(b) pod {key} pinned to {sp.pinned} never bound: {p.unschedulable_message}"
                          " (GPUs promised twice?)")
            if p.job is not None and (p.namespace, p.job) not in self.jobs and not p.deleting and not p.terminal:
                self.fail(f"(c) pod {key} of deleted job {p.job} still live")
