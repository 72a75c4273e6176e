"""The operator's side of the fake cluster of tests/fakekube.py: :class:`FakeClient` (the
verbs of :class:`kubeforge.runtime.client.KubeClient` against a ``FakeKube``, with its injected
faults), :class:`FakeQueue` and :class:`FakeEvents` (what the runtime's work queues and Event
recorder are asked, remembered for the driver), and the pieces of Kubernetes' own rules the fake scheduler and client apply, written out
apart from the operator's (a pod's extended-resource requests, toleration matching, the node a
pod is pinned to, RFC 7386 merge patches). Split from tests/fakekube.py, which re-exports them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kubeforge.runtime.client import ApiError


class FakeQueue:
    """What the runtime's work queues are asked to do, remembered (the driver runs them)."""

    def __init__(self) -> None:
        self.keys: set = set()
        self.urgent: set = set()
        self.follow_up: set = set()
        self.batched: set = set()  # keys asked for with add_after (their runs come within seconds)

    def add(self, key: Any, urgent: bool = False, follow_up: bool = False) -> None:
        self.keys.add(key)
        if urgent:
            self.urgent.add(key)
        elif follow_up:
            self.follow_up.add(key)

    def add_after(self, key: Any, seconds: float) -> None:
        self.keys.add(key)
        self.batched.add(key)

    def forget(self, key: Any) -> None:
        self.keys.discard(key)
        self.urgent.discard(key)
        self.follow_up.discard(key)
        self.batched.discard(key)

    def urgent_waiting(self, besides: Any = None) -> int:
        """Keys other than ``besides`` waiting in the urgent lane (not yet taken), as
        WorkQueue.urgent_waiting."""
        return len(self.urgent - {besides})

    def take(self) -> list:
        """The queued keys, the urgent lane's first, then the follow-up lane's (as the real queue
        takes them), each lane sorted."""
        follow = self.follow_up - self.urgent
        out = sorted(self.urgent) + sorted(follow) + sorted(self.keys - self.urgent - follow)
        self.keys, self.urgent, self.follow_up, self.batched = set(), set(), set(), set()
        return out


class FakeEvents:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str]] = []

    def post(self, ref: Any, type_: str, reason: str, message: str, now: float | None = None) -> None:
        self.posted.append((ref.name, type_, reason, message))


class Crashed(Exception):
    """The operator process died in the middle of a call (the "crash" fault): nothing of the
    call was applied, and every later call of that process fails the same way."""


def requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What kube-scheduler counts for a pod: its extended resources (names with a ``/``, whole
    counts) by ``AggregateContainerRequests`` (KEP-753): app containers and restartable init
    containers add up; every other init container needs its own request plus the sidecars
    started before it, and the pod at least the largest of those. Written out here, apart from
    the operator's ``pod_requests``, so that the fake scheduler books what Kubernetes would even
    where the operator's rule is wrong."""
    def own(c: Mapping[str, Any]) -> dict[str, int]:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: int(str(v)) for k, v in merged.items() if "/" in k}

    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in own(c).items():
            total[k] = total.get(k, 0) + v
    sidecars: dict[str, int] = {}
    floor: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        mine = own(c)
        if c.get("restartPolicy") == "Always":
            for k, v in mine.items():
                total[k] = total.get(k, 0) + v
                sidecars[k] = sidecars.get(k, 0) + v
            need = sidecars
        else:
            need = {k: mine.get(k, 0) + sidecars.get(k, 0) for k in set(mine) | set(sidecars)}
        for k, v in need.items():
            floor[k] = max(floor.get(k, 0), v)
    return {k: v for k in set(total) | set(floor) if (v := max(total.get(k, 0), floor.get(k, 0))) > 0}


def tolerated(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1 ``Toleration.ToleratesTaint``, written out here so that the fake scheduler does not
    share the operator's own matcher."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return op == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    return op == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


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

    def __init__(self, kube: Any):  # a fakekube.FakeKube
        self.kube = kube
        self.dead = False

    def _suffer(self, fault: str) -> bool:
        if self.dead:
            raise Crashed("this operator process is dead")
        if fault in self.kube.fail_next:
            self.kube.fail_next.remove(fault)
            return True
        return False

    async def _crash(self, kind: str) -> None:
        """The "crash" fault, at a pod or claim call: the process dies before the call."""
        if self._suffer("crash" if kind in ("Pod", "PersistentVolumeClaim") else "-"):
            self.dead = True
            self.kube.new_runtime()
            await self.kube.reindex()
            raise Crashed(f"injected: the operator died before this {kind} call")

    async def create(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> bool:
        await self._crash(kind)
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
        await self._crash(kind)
        if kind == "Pod":
            return await self.kube.delete_pod(namespace or "", name, grace_seconds)
        if self.kube.get(kind, namespace, name) is None:
            return False
        await self.kube.remove(kind, namespace, name)
        return True

    async def get(self, kind: str, namespace: str | None, name: str | None = None, **query: Any) -> dict | None:
        if self._suffer("read"):
            raise ApiError(0, "NoResponse", "injected: no answer to the read")
        if name is None:
            return {"items": [copy.deepcopy(o) for o in self.kube.items(kind)
                              if namespace is None or o["metadata"].get("namespace") == namespace]}
        o = self.kube.get(kind, namespace, name)
        return copy.deepcopy(o) if o is not None else None

    async def patch(self, kind: str, namespace: str | None, name: str, body: Any, *, sub: str | None = None,
                    patch_type: str = "merge", read: bool = False) -> dict | None:
        await self._crash(kind)
        o = self.kube.get(kind, namespace, name)
        if o is None:
            raise ApiError(404, "NotFound", f"{kind} {name} not found")
        if patch_type == "json":
            for op in body:
                if op["op"] == "remove" and op["path"] == "/spec/schedulingGates":
                    o["spec"].pop("schedulingGates", None)
                elif op["op"] == "replace" and op["path"] == "/spec":
                    o["spec"] = copy.deepcopy(op["value"])
        else:
            merge(o, body)
        await self.kube.put(kind, o)
        return copy.deepcopy(o) if read else None

    async def apply(self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]) -> None:
        self._suffer("-")
        old = self.kube.get(kind, namespace, name)
        new = copy.deepcopy(dict(body))
        if old is not None:
            new["metadata"] = {**old["metadata"], **new["metadata"]}
        await self.kube.put(kind, new, new=old is None)

    async def patch_status(self, kind: str, namespace: str | None, name: str, status: Mapping[str, Any],
                           resource_version: str | None = None) -> dict | None:
        if status.get("placement") and self._suffer("slow"):
            from kubeforge.runtime.admission import admission_round
            from kubeforge.runtime.cache import ASSUME_TTL
            self.kube.skew += ASSUME_TTL + 1  # the write takes longer than an assumption lives...
            if self.kube.during_slow_write is not None:
                await self.kube.during_slow_write()
            await admission_round(self.kube.rt, self.kube.now)  # ...and a round runs meanwhile
        # the write arrives now: the object as it is now (deleted, changed meanwhile) decides
        self._suffer("-")
        o = self.kube.get(kind, namespace, name)
        if o is None:
            return None
        if resource_version and o["metadata"]["resourceVersion"] != resource_version:
            raise ApiError(409, "Conflict", "the object has been modified")
        o.setdefault("status", {})
        merge(o["status"], status)
        await self.kube.put(kind, o)
        if self._suffer("lost"):  # applied, but the answer never came back
            raise ApiError(0, "NoResponse", "injected: answer lost")
        return copy.deepcopy(o)

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        self._suffer("-")
        return {"resources": []}
