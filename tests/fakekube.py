"""An in-memory API server, scheduler and kubelet for driving the REAL runtime (issue 17).

The property tests in tests/test_runtime_properties.py run ``runtime.training.reconcile_job``,
``runtime.admission.admission_round`` and ``runtime.inference.reconcile_service`` exactly as the
operator runs them, with:

- :class:`FakeClient` in place of :class:`kubeforge.runtime.client.KubeClient`: objects with
  resourceVersions, ``409`` on a stale write, merge / JSON patches, server-side apply, owner
  references garbage-collected, and injectable failures (a transient error on a write, a lost
  answer after the write was applied);
- the real index handlers of :mod:`kubeforge.runtime.indexes` fed on every write, into
  stores shaped like kopf's (key -> one value per object), so the Cache reads what it reads in
  production; a deleted pod or node calls its ``*_gone`` hook, as the informer does;
- a scheduler and kubelet: a pod pinned to a node (``metadata.name`` in its node affinity) binds
  there when the node's bound pods leave room for every extended resource it requests (else it
  is ``Unschedulable``), then runs and is Ready; a deleted pod goes after its grace period.

No network, no threads: one asyncio loop, deterministic given the events.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Iterator

from kubeforge.objects import pod_requests
from kubeforge.runtime import indexes as ix
from kubeforge.runtime.client import RESOURCES, ApiError
from kubeforge.runtime.state import Runtime

KIND_OF = {"pods": "Pod", "nodes": "Node", "trainingjobs": "TrainingJob", "inferenceservices": "InferenceService",
           "gpupools": "GPUPool", "persistentvolumeclaims": "PersistentVolumeClaim"}
HANDLERS = {"Pod": ("kf_pods", ix.kf_pods), "Node": ("kf_nodes", ix.kf_nodes), "TrainingJob": ("kf_jobs", ix.kf_jobs),
            "InferenceService": ("kf_services", ix.kf_services), "GPUPool": ("kf_pools", ix.kf_pools),
            "PersistentVolumeClaim": ("kf_claims", ix.kf_claims), "StorageClass": ("kf_storage_classes", ix.kf_storage_classes),
            "Namespace": ("kf_namespaces", ix.kf_namespaces)}
INDEX_NAMES = [name for name, _ in HANDLERS.values()] + ["kf_deployments"]
GONE = {"Pod": ix.kf_pods_gone, "Node": ix.kf_nodes_gone}
"""What the operator's informer calls with a deleted object's last entries (kopf's indexes drop
theirs silently)."""


_UIDS = itertools.count(1)
"""One counter for every fake cluster of the process: specs are parsed once per (uid, generation)
(objects.parse_spec), so a uid must never name two objects, as in a real cluster."""


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store(Mapping):
    """One kopf index: key -> the values of every object that put one there."""

    def __init__(self) -> None:
        self.by_object: dict[Any, dict[Any, Any]] = {}

    def put(self, obj: Any, entries: dict[Any, Any]) -> None:
        self.by_object[obj] = dict(entries)

    def drop(self, obj: Any) -> dict[Any, Any] | None:
        return self.by_object.pop(obj, None)

    def __getitem__(self, key: Any) -> list[Any]:
        out = [e[key] for e in self.by_object.values() if key in e]
        if not out:
            raise KeyError(key)
        return out

    def __iter__(self) -> Iterator[Any]:
        return iter({k for e in self.by_object.values() for k in e})

    def __len__(self) -> int:
        return len(set(self))


class FakeQueue:
    """What the runtime's work queues are asked to do, remembered (the driver runs them)."""

    def __init__(self) -> None:
        self.keys: set = set()

    def add(self, key: Any) -> None:
        self.keys.add(key)

    def forget(self, key: Any) -> None:
        self.keys.discard(key)

    def take(self) -> list:
        out, self.keys = sorted(self.keys), set()
        return out


class FakeEvents:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str]] = []

    def post(self, ref: Any, type_: str, reason: str, message: str, now: float | None = None) -> None:
        self.posted.append((ref.name, type_, reason, message))


class Memo:
    def __init__(self, rt: Runtime):
        self.rt = rt


class FakeKube:
    """The cluster: objects by (kind, namespace, name), the index stores, a clock."""

    def __init__(self, now: float):
        self.now = now
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = itertools.count(1)
        self.uids = _UIDS
        self.stores = {name: Store() for name in INDEX_NAMES}
        self.fail_next: list[str] = []
        """Faults of the next writes: "create" (the next pod create gets no answer and is not
        applied: the reconcile is cut between its status write and its pods), "lost" (the next
        status write is applied but its answer never comes back) and "slow" (the next status write
        that carries a placement takes longer than the Cache's ASSUME_TTL, and an admission round
        runs meanwhile, as another task of the operator would)."""
        self.skew = 0.0
        """Seconds added to the Cache's monotonic clock (see :meth:`clock`)."""
        self.during_slow_write: Any = None
        """A coroutine function run while a "slow" write is in flight (what the world does meanwhile)."""
        self.rt = self.new_runtime()

    def clock(self) -> Any:
        """A stand-in for the ``time`` module of :mod:`kubeforge.runtime.cache` whose monotonic
        clock runs ``skew`` seconds ahead (install it with monkeypatch)."""
        kube = self

        class _Time:
            @staticmethod
            def monotonic() -> float:
                import time as real
                return real.monotonic() + kube.skew

            def __getattr__(self, name: str) -> Any:
                import time as real
                return getattr(real, name)
        return _Time()

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
        return [o for (k, _, _), o in sorted(self.objects.items()) if k == kind]

    async def put(self, kind: str, body: dict[str, Any], *, new: bool = False) -> dict[str, Any]:
        md = body.setdefault("metadata", {})
        if new:
            md.setdefault("uid", f"uid-{next(self.uids)}")
            md.setdefault("creationTimestamp", stamp(self.now))
            md.setdefault("generation", 1)
        md["resourceVersion"] = str(next(self.rv))
        self.objects[(kind, md.get("namespace") or "", md["name"])] = body
        await self.index(kind, body)
        return body

    async def client_create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """A user creates an object (kubectl apply): never subject to injected faults."""
        body = copy.deepcopy(body)
        body.setdefault("status", {})
        return await self.put(kind, body, new=True)

    async def remove(self, kind: str, ns: str | None, name: str) -> None:
        body = self.objects.pop((kind, ns or "", name), None)
        if body is None:
            return
        if kind in HANDLERS:
            old = self.stores[HANDLERS[kind][0]].drop((kind, ns or "", name))
            if old and kind in GONE:
                GONE[kind](old, Memo(self.rt))
        uid = body["metadata"].get("uid")
        for key, o in list(self.objects.items()):  # the garbage collector
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or []):
                await self.remove(*key)

    async def index(self, kind: str, body: dict[str, Any]) -> None:
        if kind not in HANDLERS:
            return
        name, handler = HANDLERS[kind]
        md = body.get("metadata") or {}
        out = await handler(body=body, name=md.get("name"), namespace=md.get("namespace"), spec=body.get("spec") or {},
                            status=body.get("status") or {}, labels=md.get("labels") or {}, memo=Memo(self.rt))
        self.stores[name].put((kind, md.get("namespace") or "", md.get("name")), out or {})

    async def reindex(self) -> None:
        """kopf re-lists after a restart: every index handler runs again."""
        for (kind, _, _), body in list(self.objects.items()):
            await self.index(kind, body)

    # --- kube-scheduler, the kubelet -----------------------------------------------------------

    def bound(self, node: str) -> dict[str, int]:
        held: dict[str, int] = {}
        for p in self.items("Pod"):
            if p["spec"].get("nodeName") == node and p["status"].get("phase") not in ("Succeeded", "Failed"):
                for r, v in pod_requests(p["spec"]).items():
                    held[r] = held.get(r, 0) + v
        return held

    async def kubelet(self) -> None:
        """Finish deletions, bind pinned pods where they fit (else Unschedulable), run them."""
        for p in list(self.items("Pod")):
            md = p["metadata"]
            if md.get("deletionTimestamp"):
                await self.remove("Pod", md["namespace"], md["name"])
        for p in list(self.items("Pod")):
            md, spec, st = p["metadata"], p["spec"], p["status"]
            if spec.get("nodeName") or spec.get("schedulingGates"):
                continue
            node = pinned_node(spec)
            nb = self.get("Node", None, node) if node else None
            if nb is None:
                continue
            held = self.bound(node)
            alloc = {k: int(v) for k, v in nb["status"]["allocatable"].items() if "/" in k}
            if all(held.get(r, 0) + v <= alloc.get(r, 0) for r, v in pod_requests(spec).items()):
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


def pinned_node(spec: Mapping[str, Any]) -> str | None:
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    for t in terms:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return f["values"][0]
    return None


def merge(into: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch."""
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)
    return into


class FakeClient:
    """:class:`kubeforge.runtime.client.KubeClient`'s verbs against :class:`FakeKube`."""

    def __init__(self, kube: FakeKube):
        self.kube = kube

    def _suffer(self, fault: str) -> bool:
        if fault in self.kube.fail_next:
            self.kube.fail_next.remove(fault)
            return True
        return False

    async def create(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> bool:
        body = copy.deepcopy(dict(body))
        if self.kube.get(kind, namespace, body["metadata"]["name"]) is not None:
            return False
        if kind == "Pod" and self._suffer("create"):
            raise ApiError(0, "NoResponse", "injected: no answer")
        body["metadata"].setdefault("namespace", namespace)
        body.setdefault("status", {"phase": "Pending"} if kind == "Pod" else {})
        await self.kube.put(kind, body, new=True)
        return True

    async def delete(self, kind: str, namespace: str | None, name: str, grace_seconds: int | None = None) -> bool:
        body = self.kube.get(kind, namespace, name)
        if body is None:
            return False
        if kind == "Pod":
            body["metadata"]["deletionTimestamp"] = stamp(self.kube.now)
            await self.kube.put(kind, body)
        else:
            await self.kube.remove(kind, namespace, name)
        return True

    async def get(self, kind: str, namespace: str | None, name: str | None = None, **query: Any) -> dict | None:
        if name is None:
            return {"items": [copy.deepcopy(o) for o in self.kube.items(kind)
                              if namespace is None or o["metadata"].get("namespace") == namespace]}
        o = self.kube.get(kind, namespace, name)
        return copy.deepcopy(o) if o is not None else None

    async def patch(self, kind: str, namespace: str | None, name: str, body: Any, *, sub: str | None = None,
                    patch_type: str = "merge", read: bool = False) -> dict | None:
        o = self.kube.get(kind, namespace, name)
        if o is None:
            raise ApiError(404, "NotFound", f"{kind} {name} not found")
        if patch_type == "json":
            for op in body:
                if op["op"] == "remove" and op["path"] == "/spec/schedulingGates":
                    o["spec"].pop("schedulingGates", None)
        else:
            merge(o, body)
        await self.kube.put(kind, o)
        return copy.deepcopy(o) if read else None

    async def apply(self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]) -> None:
        old = self.kube.get(kind, namespace, name)
        new = copy.deepcopy(dict(body))
        if old is not None:
            new["metadata"] = {**old["metadata"], **new["metadata"]}
        await self.kube.put(kind, new, new=old is None)

    async def patch_status(self, kind: str, namespace: str | None, name: str, status: Mapping[str, Any],
                           resource_version: str | None = None) -> dict | None:
        o = self.kube.get(kind, namespace, name)
        if o is None:
            return None
        if resource_version and o["metadata"]["resourceVersion"] != resource_version:
            raise ApiError(409, "Conflict", "the object has been modified")
        if status.get("placement") and self._suffer("slow"):
            from kubeforge.runtime.admission import admission_round
            from kubeforge.runtime.cache import ASSUME_TTL
            self.kube.skew += ASSUME_TTL + 1  # the write takes longer than an assumption lives...
            if self.kube.during_slow_write is not None:
                await self.kube.during_slow_write()
            await admission_round(self.kube.rt, self.kube.now)  # ...and a round runs meanwhile
        o.setdefault("status", {})
        merge(o["status"], status)
        await self.kube.put(kind, o)
        if self._suffer("lost"):  # applied, but the answer never came back
            raise ApiError(0, "NoResponse", "injected: answer lost")
        return copy.deepcopy(o)

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return {"resources": []}


__all__ = ["FakeKube", "FakeClient", "RESOURCES", "asyncio"]
