"""The pod/node informer (kubeforge.runtime.informer) against a scripted API: list pages, watch
streams split at odd places, bookmarks, DELETED, 410 Gone and a broken stream, without a cluster."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from kubeforge.runtime import informer as inf
from kubeforge.runtime.client import ApiError


@pytest.fixture(autouse=True)
def _backoff(monkeypatch):
    """Keep the module's backoff as shipped for other tests (run() shortens it)."""
    monkeypatch.setattr(inf, "BACKOFF_MIN", inf.BACKOFF_MIN)


def pod(name: str, rv: str, ns: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}


class Resp:
    def __init__(self, lines: list[dict[str, Any]], broken: bool = False):
        raw = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        self.chunks = [raw[i:i + 7] for i in range(0, len(raw), 7)]  # lines split across chunks
        self.broken = broken
        self.released = False
        self.content = self

    async def iter_any(self):
        for c in self.chunks:
            yield c
        if self.broken:
            raise ConnectionResetError("stream broke")

    def release(self) -> None:
        self.released = True


class Client:
    """Lists and watch streams handed out in order; the test ends when they run out."""

    def __init__(self, lists: list[list[dict]], streams: list[Any]):
        self.lists, self.streams = lists, streams
        self.queries: list[dict] = []
        self.done = asyncio.Event()

    async def request(self, method, path, *, query=None, read=False, resource="", timeout=0.0):
        pages = self.lists.pop(0)
        if isinstance(pages, Exception):
            raise pages
        page = pages  # one page: items + resourceVersion
        return page

    async def stream(self, path, query, *, resource="", read_timeout=0.0):
        self.queries.append(dict(query))
        if not self.streams:
            self.done.set()
            await asyncio.sleep(3600)
        s = self.streams.pop(0)
        if isinstance(s, Exception):
            raise s
        return s


def entries_of(body, name, **_):
    return {("job", body["metadata"]["namespace"], name.split("-")[0]): name} if not name.startswith("x") else {}


async def run(client: Client, namespace=None) -> tuple[inf.IndexStore, list, inf.Informer]:
    store = inf.IndexStore()
    gone: list = []

    async def handler(body, name, namespace, memo):
        return entries_of(body, name)

    i = inf.Informer(client, "/api/v1/pods", "pods", handler, store, SimpleNamespace(),
                     lambda e, memo: gone.append(dict(e)), namespace=namespace)
    inf.BACKOFF_MIN = 0.001  # restored by the autouse fixture below
    task = asyncio.create_task(i.run())
    await asyncio.wait_for(client.done.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return store, gone, i


def test_store_replaces_entries_per_object_and_drops_them():
    s = inf.IndexStore()
    s.put(("ns", "a"), {("job", "ns", "j"): 1, ("node", "n1"): 1})
    s.put(("ns", "b"), {("job", "ns", "j"): 2})
    assert sorted(s[("job", "ns", "j")]) == [1, 2] and s.get(("node", "n1")) == (1,)
    s.put(("ns", "a"), {("job", "ns", "j"): 3})
    assert sorted(s[("job", "ns", "j")]) == [2, 3] and s.get(("node", "n1")) is None
    assert ("node", "n1") not in s and len(s) == 1
    assert s.drop(("ns", "b")) == {("job", "ns", "j"): 2}
    assert list(s.get(("job", "ns", "j"))) == [3] and s.objects() == [("ns", "a")]


def test_list_then_watch_resumes_from_bookmarks_and_deletions_are_reported():
    c = Client(
        lists=[{"items": [pod("j-0", "5"), pod("x-1", "6")], "metadata": {"resourceVersion": "10"}}],
        streams=[
            Resp([{"type": "ADDED", "object": pod("j-1", "11")},
                  {"type": "MODIFIED", "object": pod("k-0", "12")},
                  {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}]),
            Resp([{"type": "DELETED", "object": pod("j-0", "21")}]),
        ])
    store, gone, i = asyncio.run(run(c))
    assert [q["resourceVersion"] for q in c.queries] == ["10", "20", "21"]
    assert all(q["allowWatchBookmarks"] == "true" and q["watch"] == "true" for q in c.queries)
    assert sorted(store[("job", "ns", "j")]) == ["j-1"] and store[("job", "ns", "k")] == ("k-0",)
    assert gone == [{("job", "ns", "j"): "j-0"}]
    assert i.synced.is_set() and i.relists == 1


def test_gone_410_relists_and_forgets_what_vanished_in_between():
    c = Client(
        lists=[{"items": [pod("j-0", "5"), pod("k-0", "6")], "metadata": {"resourceVersion": "10"}},
               {"items": [pod("k-0", "30")], "metadata": {"resourceVersion": "40"}}],
        streams=[Resp([{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}])])
    store, gone, i = asyncio.run(run(c))
    assert i.relists == 2 and [q["resourceVersion"] for q in c.queries] == ["10", "40"]
    assert gone == [{("job", "ns", "j"): "j-0"}] and ("job", "ns", "j") not in store


def test_a_relist_of_one_namespace_forgets_nothing_of_another():
    s_lists = [{"items": [pod("j-0", "5")], "metadata": {"resourceVersion": "10"}},
               {"items": [], "metadata": {"resourceVersion": "40"}}]
    c = Client(lists=s_lists, streams=[Resp([{"type": "ERROR", "object": {"code": 410}}])])

    async def main():
        store = inf.IndexStore()
        store.put(("other", "j-9"), {("job", "other", "j"): "j-9"})
        gone: list = []

        async def handler(body, name, namespace, memo):
            return entries_of(body, name)

        i = inf.Informer(c, "/api/v1/namespaces/ns/pods", "pods", handler, store, None,
                         lambda e, m: gone.append(dict(e)), namespace="ns")
        t = asyncio.create_task(i.run())
        await asyncio.wait_for(c.done.wait(), 5)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        return store, gone

    store, gone = asyncio.run(main())
    assert gone == [{("job", "ns", "j"): "j-0"}] and store[("job", "other", "j")] == ("j-9",)


def test_failures_back_off_log_once_per_streak_and_relist(caplog):
    c = Client(
        lists=[{"items": [pod("j-0", "5")], "metadata": {"resourceVersion": "10"}},
               ApiError(0, "NoResponse", "down"), ApiError(0, "NoResponse", "down"),
               {"items": [pod("j-0", "5")], "metadata": {"resourceVersion": "50"}}],
        streams=[Resp([{"type": "ADDED", "object": pod("j-1", "11")}], broken=True)])
    with caplog.at_level("INFO", logger="kubeforge.informer"):
        store, gone, i = asyncio.run(run(c))
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "stream broke" in warnings[0].getMessage()
    assert i.relists == 4 and c.queries[-1]["resourceVersion"] == "50"
    assert gone == [{("job", "ns", "j"): "j-1"}] and store[("job", "ns", "j")] == ("j-0",)


def test_a_failing_handler_keeps_the_informer_going(caplog):
    c = Client(lists=[{"items": [pod("bad", "5"), pod("j-0", "6")], "metadata": {"resourceVersion": "10"}}],
               streams=[Resp([{"type": "MODIFIED", "object": pod("bad", "11")}])])

    async def main():
        store = inf.IndexStore()

        async def handler(body, name, namespace, memo):
            if name == "bad":
                raise KeyError("spec")
            return entries_of(body, name)

        i = inf.Informer(c, "/api/v1/pods", "pods", handler, store, None)
        t = asyncio.create_task(i.run())
        await asyncio.wait_for(c.done.wait(), 5)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        return store

    with caplog.at_level("ERROR", logger="kubeforge.informer"):
        store = asyncio.run(main())
    assert store[("job", "ns", "j")] == ("j-0",) and len(caplog.records) == 1


def test_a_410_answer_to_the_watch_request_relists_at_once_without_a_warning(caplog):
    c = Client(
        lists=[{"items": [pod("j-0", "5")], "metadata": {"resourceVersion": "10"}},
               {"items": [pod("j-0", "5")], "metadata": {"resourceVersion": "60"}}],
        streams=[ApiError(410, "Expired", "too old resource version: 10 (55)")])
    with caplog.at_level("WARNING", logger="kubeforge.informer"):
        store, gone, i = asyncio.run(run(c))
    assert i.relists == 2 and c.queries[-1]["resourceVersion"] == "60"
    assert not caplog.records and gone == [] and store[("job", "ns", "j")] == ("j-0",)


CD = "/apis/resource.nvidia.com/v1beta1"


PVC = "persistentvolumeclaims"


@pytest.mark.parametrize("namespaces, paths", [
    ((), ["/api/v1/nodes", "/api/v1/pods", f"/api/v1/{PVC}", f"{CD}/computedomains"]),
    (("team-a", "team-b"), ["/api/v1/nodes", "/api/v1/namespaces/team-a/pods", f"/api/v1/namespaces/team-a/{PVC}",
                            f"{CD}/namespaces/team-a/computedomains", "/api/v1/namespaces/team-b/pods",
                            f"/api/v1/namespaces/team-b/{PVC}", f"{CD}/namespaces/team-b/computedomains"]),
    (("team-*",), ["/api/v1/nodes", "/api/v1/pods", f"/api/v1/{PVC}", f"{CD}/computedomains"]),  # a kopf glob: cluster-wide
    (("team-a", "!kube-system"), ["/api/v1/nodes", "/api/v1/pods", f"/api/v1/{PVC}", f"{CD}/computedomains"]),
])
def test_pods_claims_and_domains_are_watched_per_namespace_only_for_plain_names(namespaces, paths):
    stores, out = inf.informers(None, None, namespaces)  # type: ignore[arg-type]
    assert [i.path for i in out] == paths
    assert set(stores) == {"kf_pods", "kf_nodes", "kf_compute_domains", "kf_claims"}
    domains = [i for i in out if i.resource == "computedomains"]
    assert all(i.optional and i.selector == "kubeforge.io/job-name" for i in domains)
    assert not any(i.optional for i in out if i.resource != "computedomains")


def test_an_optional_kind_not_served_counts_as_synced_and_is_picked_up_once_served(monkeypatch, caplog):
    """NVIDIA's ComputeDomain CRD installed after the operator started: lists answer 404 (the
    informer is synced, empty, logs once at info), then the kind is served and its objects
    arrive; when the CRD goes again, a 404 forgets them."""
    monkeypatch.setattr(inf, "ABSENT_SECONDS", 0.001)
    not_served = ApiError(404, "NotFound", "the server could not find the requested resource")
    c = Client([not_served, not_served, {"items": [pod("j-0", "5")], "metadata": {"resourceVersion": "5"}},
                not_served, {"items": [], "metadata": {"resourceVersion": "9"}}],
               [Resp([{"type": "ERROR", "object": {"code": 500, "reason": "InternalError", "message": "x"}}])])
    store = inf.IndexStore()
    gone: list = []
    seen: list = []

    async def handler(body, name, namespace, memo):
        return entries_of(body, name)

    async def go():
        i = inf.Informer(c, "/apis/g/v1/things", "things", handler, store, SimpleNamespace(),
                         lambda e, memo: gone.append(dict(e)), selector="kubeforge.io/job-name", optional=True)
        inf.BACKOFF_MIN = 0.001
        real = c.request

        async def request(method, path, *, query=None, read=False, resource="", timeout=0.0):
            seen.append((i.synced.is_set(), dict(store), dict(query or {})))
            return await real(method, path, query=query, read=read, resource=resource, timeout=timeout)

        c.request = request
        task = asyncio.create_task(i.run())
        await asyncio.wait_for(c.done.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return i

    with caplog.at_level("INFO", logger="kubeforge.informer"):
        i = asyncio.run(go())
    assert [s[0] for s in seen] == [False, True, True, True, True]  # synced after the first 404
    assert seen[3][1] == {("job", "ns", "j"): ("j-0",)}  # served: the object arrived
    assert all(q["labelSelector"] == "kubeforge.io/job-name" for _, _, q in seen)
    assert c.queries and c.queries[0]["labelSelector"] == "kubeforge.io/job-name"
    assert gone == [{("job", "ns", "j"): "j-0"}]  # the CRD went: its objects are forgotten
    infos = [r.getMessage() for r in caplog.records]
    assert sum("not served" in m for m in infos) == 2 and sum("served now" in m for m in infos) == 2, infos
    assert i.synced.is_set()


def test_a_404_of_a_kind_that_is_not_optional_is_a_failure(caplog):
    c = Client([ApiError(404, "NotFound", "no"), {"items": [], "metadata": {"resourceVersion": "1"}}], [])
    with caplog.at_level("WARNING", logger="kubeforge.informer"):
        asyncio.run(run(c))
    assert len(caplog.records) == 1 and "NotFound" in caplog.records[0].getMessage()
