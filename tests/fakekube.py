"""An in-memory API server, scheduler and kubelet for driving the REAL runtime (issue 17).

The property tests in tests/test_runtime_properties.py and tests/test_ledger_properties.py (and
a few tests of tests/test_admission.py, through :func:`settle`) run
``runtime.training.reconcile_job``, ``runtime.admission.admission_round`` and
``runtime.inference.reconcile_service`` exactly as the operator runs them, with:

- :class:`FakeClient` in place of :class:`kubeforge.runtime.client.KubeClient`: objects with
  resourceVersions, ``409`` on a stale write, merge / JSON patches, server-side apply, owner
  references garbage-collected, and injectable failures (a transient error on a write, a lost
  answer after the write was applied, a write slower than ASSUME_TTL, the process dying before
  a pod call: see :attr:`FakeKube.fail_next`);
- the real index handlers of :mod:`kubeforge.runtime.indexes` fed on every write, into
  stores shaped like kopf's (key -> one value per object), so the Cache reads what it reads in
  production; a deleted pod or node calls its ``*_gone`` hook, as the informer does. By
  default inside the write itself; with :attr:`FakeKube.lagging` set, the watch events queue
  instead and :meth:`FakeKube.deliver` hands them to the handlers later, a prefix of each
  watch stream at a time (a real watch lags behind the write's answer);
- a scheduler and kubelet: a pod pinned to a node (``metadata.name`` in its node affinity) binds
  there when the node is Ready, not cordoned, its NoSchedule / NoExecute taints are tolerated
  and its bound pods leave room for every extended resource the pod requests (else it is
  ``Unschedulable``), then runs and is Ready; a deleted pod goes once its grace period has
  passed on the clock (at once when terminal); the garbage collector deletes a deleted owner's
  pods gracefully; a provisioner binds every claim; pods of nobody's are bound by
  :meth:`FakeKube.bind_anywhere`;
- a clock: ``now`` moves only when a test moves it; :meth:`FakeKube.clock` is a ``time`` module
  reading it, which :meth:`FakeKube.use_clock` installs in the runtime's modules.

No network, no threads: one asyncio loop, deterministic given the events. The operator's side
(:class:`FakeClient`, the queues and Events it records, Kubernetes' request, toleration and
merge rules) lives in tests/fakekube_client.py and is re-exported here.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from kubeforge.runtime import indexes as ix
from kubeforge.runtime.informer import IndexStore
from kubeforge.runtime.client import RESOURCES, ApiError
from kubeforge.runtime.state import Runtime
from records import NOW, NS, node_body, pool_body
from fakekube_client import Crashed, FakeClient, FakeEvents, FakeQueue, merge, pinned_node, requests, tolerated

KIND_OF = {"pods": "Pod", "nodes": "Node", "trainingjobs": "TrainingJob", "inferenceservices": "InferenceService",
           "gpupools": "GPUPool", "persistentvolumeclaims": "PersistentVolumeClaim",
           "modelcachenodes": "ModelCacheNode"}
HANDLERS = {"Pod": ("kf_pods", ix.kf_pods), "Node": ("kf_nodes", ix.kf_nodes), "TrainingJob": ("kf_jobs", ix.kf_jobs),
            "InferenceService": ("kf_services", ix.kf_services), "GPUPool": ("kf_pools", ix.kf_pools),
            "PersistentVolumeClaim": ("kf_claims", ix.kf_claims), "StorageClass": ("kf_storage_classes", ix.kf_storage_classes),
            "Namespace": ("kf_namespaces", ix.kf_namespaces),
            "ModelCacheNode": ("kf_model_caches", ix.kf_model_caches)}
INDEX_NAMES = [name for name, _ in HANDLERS.values()] + ["kf_deployments"]
GONE = {"Pod": ix.kf_pods_gone, "Node": ix.kf_nodes_gone, "PersistentVolumeClaim": ix.kf_claims_gone}
"""What the operator's informer calls with a deleted object's last entries (kopf's indexes drop
theirs silently)."""


_UIDS = itertools.count(1)
"""One counter for every fake cluster of the process: specs are parsed once per (uid, generation)
(objects.parse_spec), so a uid must never name two objects, as in a real cluster."""


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store(IndexStore):
    """One index as the operator keeps it (:class:`kubeforge.runtime.informer.IndexStore`, the
    shape of a kopf index too): key -> the values of every object that put one there."""


class Memo:
    def __init__(self, rt: Runtime):
        self.rt = rt


class FakeKube:
    """The cluster: objects by (kind, namespace, name), the index stores, a clock.

    ``grace`` is the grace period of a pod deletion that names none (the pods'
    ``terminationGracePeriodSeconds``), in seconds of :attr:`now`."""

    def __init__(self, now: float, grace: float = 0.0):
        self.now = now
        self.grace = grace
        self.gone_at: dict[tuple[str, str, str], float] = {}
        """When each pod being deleted gracefully is gone (its deletion time plus its grace)."""
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = itertools.count(1)
        self.uids = _UIDS
        self.stores = {name: Store() for name in INDEX_NAMES}
        self.fail_next: list[str] = []
        """Faults of the next writes: "create" (the next pod create gets no answer and is not
        applied: the reconcile is cut between its status write and its pods), "lost" (the next
        status write is applied but its answer never comes back), "slow" (the next status write
        that carries a placement takes longer than the Cache's ASSUME_TTL, and an admission round
        runs meanwhile, as another task of the operator would), "read" (the next GET gets no
        answer: with "lost", a status write whose read-back fails too) and "crash" (the operator process
        dies at its next pod or claim create, delete or patch, i.e. between a status write and the
        pod calls that follow it: nothing of the call is applied, the process's memory is lost
        and a fresh one starts on the re-listed indexes; the dying reconcile raises
        :class:`Crashed`)."""
        self.writes = 0
        """Objects written or removed so far: a fixed point is a round that moves it not."""
        self.skew = 0.0
        """Seconds added to the Cache's monotonic clock (see :meth:`clock`)."""
        self.during_slow_write: Any = None
        """A coroutine function run while a "slow" write is in flight (what the world does meanwhile)."""
        self.lagging = False
        """Opt-in lagging watch: when set, a write queues its watch event in :attr:`backlog` instead
        of feeding the index handlers; :meth:`deliver` feeds them later."""
        self.backlog: list[tuple[str, tuple[str, str, str], dict[str, Any] | None]] = []
        """Watch events not delivered yet, in the order written: (kind, object key, the body as
        written, or None for a deletion)."""
        self.rt = self.new_runtime()

    def clock(self) -> Any:
        """A stand-in for the ``time`` module: ``time()`` is :attr:`now` and ``monotonic()``
        runs with it, ``skew`` seconds ahead (install it with monkeypatch, or
        :meth:`use_clock`)."""
        kube = self

        class _Time:
            @staticmethod
            def time() -> float:
                return kube.now

            @staticmethod
            def monotonic() -> float:
                return kube.now + kube.skew

            def __getattr__(self, name: str) -> Any:
                import time as real
                return getattr(real, name)
        return _Time()

    def use_clock(self, monkeypatch: Any) -> None:
        """Make the runtime read :meth:`clock`: the reconciles' ``time.time()``, the Cache's
        TTLs (assumed placements, expectations, the status overlay) and the admission loop's."""
        import kubeforge.runtime.admission as admission
        import kubeforge.runtime.cache as cache
        import kubeforge.runtime.inference as inference
        import kubeforge.runtime.training as training

        clock = self.clock()
        for mod in (admission, cache, inference, training):
            monkeypatch.setattr(mod, "time", clock)

    def new_runtime(self) -> Runtime:
        """A fresh operator process (memory lost, as after a SIGKILL) on the same cluster."""
        rt = Runtime()
        rt.client = FakeClient(self)  # type: ignore[assignment]
        rt.cache.attach(self.stores)
        rt.jobs, rt.services, rt.events = FakeQueue(), FakeQueue(), FakeEvents()  # type: ignore[assignment]
        rt.ready.set()
        rt.leading.set()
        self.rt = rt
        return rt

    # --- storage -------------------------------------------------------------------------------

    def get(self, kind: str, ns: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, ns or "", name))

    def items(self, kind: str) -> list[dict[str, Any]]:
        return [o for _, o in sorted((key, o) for key, o in self.objects.items() if key[0] == kind)]

    async def put(self, kind: str, body: dict[str, Any], *, new: bool = False) -> dict[str, Any]:
        md = body.setdefault("metadata", {})
        if new:
            md.setdefault("uid", f"uid-{next(self.uids)}")
            md.setdefault("creationTimestamp", stamp(self.now))
            md.setdefault("generation", 1)
        md["resourceVersion"] = str(next(self.rv))
        self.writes += 1
        key = (kind, md.get("namespace") or "", md["name"])
        self.objects[key] = body
        if self.lagging:
            if kind in HANDLERS:  # the body as written: the fake edits its objects in place later
                self.backlog.append((kind, key, copy.deepcopy(body)))
            return body
        await self.index(kind, body)
        return body

    async def client_create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """A user creates an object (kubectl apply): never subject to injected faults."""
        body = copy.deepcopy(body)
        body.setdefault("status", {})
        return await self.put(kind, body, new=True)

    async def remove(self, kind: str, ns: str | None, name: str) -> None:
        body = self.objects.pop((kind, ns or "", name), None)
        self.gone_at.pop((kind, ns or "", name), None)
        if body is None:
            return
        self.writes += 1
        if kind in HANDLERS:
            if self.lagging:
                self.backlog.append((kind, (kind, ns or "", name), None))
            else:
                self.unindex(kind, (kind, ns or "", name))
        uid = body["metadata"].get("uid")
        for key, o in list(self.objects.items()):  # the garbage collector
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []):
                if key[0] == "Pod":
                    await self.delete_pod(key[1], key[2])  # gracefully, as the collector does
                else:
                    await self.remove(*key)

    async def delete_pod(self, ns: str, name: str, grace: float | None = None) -> bool:
        """A graceful pod deletion: ``deletionTimestamp`` set now; the kubelet removes the pod
        once ``grace`` (default :attr:`grace`) has passed, or at once when it is terminal. A
        second deletion changes nothing. False when there is no such pod."""
        body = self.get("Pod", ns, name)
        if body is None:
            return False
        md = body["metadata"]
        if md.get("deletionTimestamp"):
            return True
        grace = self.grace if grace is None else grace
        md["deletionTimestamp"] = stamp(self.now)
        md["deletionGracePeriodSeconds"] = int(grace)
        self.gone_at[("Pod", ns, name)] = self.now + grace
        await self.put("Pod", body)
        return True

    async def index(self, kind: str, body: dict[str, Any]) -> None:
        if kind not in HANDLERS:
            return
        name, handler = HANDLERS[kind]
        md = body.get("metadata") or {}
        out = await handler(body=body, name=md.get("name"), namespace=md.get("namespace"), spec=body.get("spec") or {},
                            status=body.get("status") or {}, labels=md.get("labels") or {}, memo=Memo(self.rt))
        self.stores[name].put((kind, md.get("namespace") or "", md.get("name")), out or {})

    def unindex(self, kind: str, key: tuple[str, str, str]) -> None:
        """A deletion reaches the index: the object's entries go, its ``*_gone`` hook runs."""
        old = self.stores[HANDLERS[kind][0]].drop(key)
        if old and kind in GONE:
            GONE[kind](old, Memo(self.rt))

    async def reindex(self) -> None:
        """kopf re-lists after a restart: every index handler runs again (and, lagging, the
        backlog is moot: the list shows what is, objects gone included)."""
        if self.lagging:
            self.backlog.clear()
            for store in self.stores.values():
                for obj in store.objects():
                    if obj not in self.objects:
                        store.drop(obj)
        for (kind, _, _), body in list(self.objects.items()):
            await self.index(kind, body)

    async def deliver(self, rng: Any = None, per: str = "kind") -> int:
        """Hand queued watch events (:attr:`lagging`) to the index handlers; returns how many.

        ``rng`` None: all of them. Else a random prefix (``rng.randint``) of each stream, in the
        order written: ``per="kind"`` one stream per resource type (a real watch's order),
        ``"object"`` one per object (the weakest order a watch keeps), ``"all"`` one for all."""
        if rng is None:
            ready, self.backlog = self.backlog, []
        else:
            streams: dict[Any, list[int]] = {}
            for i, (kind, key, _) in enumerate(self.backlog):
                streams.setdefault(kind if per == "kind" else key if per == "object" else "", []).append(i)
            chosen = {i for idx in streams.values() for i in idx[:rng.randint(0, len(idx))]}
            ready = [e for i, e in enumerate(self.backlog) if i in chosen]
            self.backlog = [e for i, e in enumerate(self.backlog) if i not in chosen]
        for kind, key, body in ready:
            if body is None:
                self.unindex(kind, key)
            else:
                await self.index(kind, body)
        return len(ready)

    # --- kube-scheduler, the kubelet -----------------------------------------------------------

    def bound(self, node: str) -> dict[str, int]:
        held: dict[str, int] = {}
        for p in self.items("Pod"):
            if p["spec"].get("nodeName") == node and p["status"].get("phase") not in ("Succeeded", "Failed"):
                for r, v in requests(p["spec"]).items():
                    held[r] = held.get(r, 0) + v
        return held

    def fits(self, node: str, spec: Mapping[str, Any]) -> bool:
        """kube-scheduler's verdict for a pod on a node: the node is Ready and not cordoned, the
        pod tolerates its NoSchedule and NoExecute taints, and its bound pods leave room for
        every extended resource the pod requests."""
        nb = self.get("Node", None, node)
        if nb is None or nb["spec"].get("unschedulable"):
            return False
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in nb["status"].get("conditions") or []):
            return False
        tolerations = spec.get("tolerations") or []
        for taint in nb["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(tolerated(t, taint) for t in tolerations):
                return False
        held = self.bound(node)
        alloc = {k: int(v) for k, v in nb["status"]["allocatable"].items() if "/" in k}
        return all(held.get(r, 0) + v <= alloc.get(r, 0) for r, v in requests(spec).items())

    async def bind_anywhere(self, body: dict[str, Any], prefer: list[str] = ()) -> str | None:  # type: ignore[assignment]
        """A pod of nobody's, created and bound by kube-scheduler to the first node (of ``prefer``,
        then by name) where it fits; left Pending (holding nothing) when none does. Returns
        the node."""
        names = sorted(md["metadata"]["name"] for md in self.items("Node"))
        target = next((n for n in list(prefer) + [n for n in names if n not in prefer] if self.fits(n, body["spec"])),
                      None)
        body = copy.deepcopy(body)
        if target is not None:
            body["spec"]["nodeName"] = target
        body["status"] = {"phase": "Running" if target else "Pending"}
        await self.put("Pod", body, new=True)
        return target

    async def kubelet(self) -> None:
        """The provisioner binds claims; finish deletions whose grace has passed; bind pinned
        pods where they fit (else Unschedulable), run them."""
        for c in list(self.items("PersistentVolumeClaim")):
            if c.get("status", {}).get("phase") != "Bound":
                c["status"] = {"phase": "Bound"}
                await self.put("PersistentVolumeClaim", c)
        for p in list(self.items("Pod")):
            md = p["metadata"]
            key = ("Pod", md["namespace"], md["name"])
            if md.get("deletionTimestamp") and (p["status"].get("phase") in ("Succeeded", "Failed")
                                                or self.now >= self.gone_at.get(key, self.now)):
                await self.remove(*key)
        for p in list(self.items("Pod")):
            md, spec, st = p["metadata"], p["spec"], p["status"]
            if spec.get("nodeName") or spec.get("schedulingGates") or md.get("deletionTimestamp"):
                continue
            node = pinned_node(spec)
            if node is None or self.get("Node", None, node) is None:
                continue
            if self.fits(node, spec):
                spec["nodeName"] = node
                st.update(phase="Running", podIP=f"10.1.{next(self.uids) % 250}.{next(self.uids) % 250}",
                          conditions=[{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
            elif not any(c.get("type") == "PodScheduled" for c in st.get("conditions") or []):
                st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu",
                                     "lastTransitionTime": stamp(self.now)}]
            else:
                continue
            await self.put("Pod", p)


async def small_cluster(nodes: int = 2) -> FakeKube:
    """A FakeKube at ``records.NOW``: namespace ``records.NS`` (Active), ``nodes`` 8-GPU nodes
    ``n0``, ``n1``, ... and GPUPool ``p`` over them."""
    kube = FakeKube(NOW)
    await kube.put("Namespace", {"metadata": {"name": NS}, "status": {"phase": "Active"}}, new=True)
    for i in range(nodes):
        await kube.put("Node", node_body(f"n{i}", 8), new=True)
    await kube.put("GPUPool", pool_body("p"), new=True)
    return kube


async def settle(kube: FakeKube, rounds: int = 25) -> None:
    """The operator to a fixed point, level-based: an admission round at :attr:`FakeKube.now`,
    every job's and every service's reconcile (and whatever their queues hold), the scheduler
    and the kubelet, until no object changes. A reconcile that fails with a transient error is
    retried by the next round, as by the work queue."""
    from kubeforge.runtime.admission import admission_round
    from kubeforge.runtime.inference import reconcile_service
    from kubeforge.runtime.training import reconcile_job

    async def one(coro: Any) -> None:
        try:
            await coro
        except ApiError as e:
            if not e.transient:
                raise

    for _ in range(rounds):
        before = kube.writes
        await admission_round(kube.rt, kube.now)
        for kind, queue, reconcile in (("TrainingJob", kube.rt.jobs, reconcile_job),
                                       ("InferenceService", kube.rt.services, reconcile_service)):
            keys = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in kube.items(kind)}
            for key in sorted(keys | set(queue.take())):
                await one(reconcile(kube.rt, key))
        await kube.kubelet()
        if kube.writes == before:
            return
    raise AssertionError(f"no fixed point after {rounds} rounds")


__all__ = ["Crashed", "FakeKube", "FakeClient", "FakeEvents", "FakeQueue", "RESOURCES", "asyncio", "merge", "pinned_node",
           "requests", "tolerated"]
