"""Informer-style list + watch for pods, nodes and PersistentVolumeClaims, feeding the cache
without kopf (issue 16, item 4).

kopf turns every watch event into causes, a handler registry lookup, body views and a handler
call; for pods (2-3 events per pod, every pod) that was about a quarter of the operator's CPU
for handlers that only fill an index. Here one task per watched collection lists it (paginated,
with the list's ``resourceVersion``), then watches from there (``allowWatchBookmarks``, a
server-side timeout, resumed from the last version seen), and calls the SAME index handler
(:func:`kubeforge.runtime.indexes.kf_pods`, ``kf_nodes``) per object, storing what it returns
in an :class:`IndexStore`: the mapping the :class:`~kubeforge.runtime.cache.Cache` reads
(key -> the values every object put there), as a kopf index is.

Unlike a kopf index, a deleted object is not dropped silently: its entries go and ``on_gone``
(the handler module's ``*_gone``) queues what they named (a job, a service, the admission
round). Objects missing from a re-list are treated the same way.

Failures: 410 Gone (the version is too old) re-lists at once; any other error or a broken
stream re-lists after a bounded backoff, with one log line per failure streak. The tasks are
cancelled with the runtime's other tasks at kopf's cleanup.

An *optional* collection (NVIDIA's ComputeDomains: a CRD the DRA driver installs, maybe after
kubeforge) answers 404 while its kind is not served: the informer counts as synced with nothing
in it, logs that once, and lists again every :data:`ABSENT_SECONDS`, so a CRD installed after the
operator started is picked up within that time (kopf resolves the kinds it watches at start and
missed such a CRD, see docs/install.md). If the CRD goes, the next list's 404 forgets its objects.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from typing import Any, Awaitable, Callable, Hashable, Iterator, Mapping

import orjson

from kubeforge.runtime.client import ApiError, KubeClient

log = logging.getLogger("kubeforge.informer")

LIST_LIMIT = 500
"""Objects per page of the initial list (and of every re-list)."""
WATCH_TIMEOUT = 300
"""Seconds the API server keeps one watch open (``timeoutSeconds``); then it resumes."""
READ_TIMEOUT = WATCH_TIMEOUT + 30.0
"""Seconds without a byte on the stream (bookmarks come about every minute) before it is
taken as dead."""
BACKOFF_MIN = 0.5
BACKOFF_MAX = 30.0
ABSENT_SECONDS = 10.0
"""Seconds between lists of an optional collection whose kind the API server does not serve
(404): how soon a CRD installed after the operator started is seen."""

_PLAIN_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""A namespace name (RFC 1123 label), not a kopf pattern."""

ObjKey = tuple[str, str]
"""(namespace or "", name) of a watched object."""


class IndexStore(Mapping):
    """A kopf-index-shaped store: key -> tuple of the values every object put under it; each
    object's entries are replaced as a whole on each of its events and dropped with it.

    Per object only the keys it put are kept (a tuple; the values live once, under their
    keys): at 20,000 pods a dict per object was about 4 MiB of the operator's memory."""

    def __init__(self) -> None:
        self._by_object: dict[ObjKey, tuple[Hashable, ...]] = {}
        self._by_key: dict[Hashable, dict[ObjKey, Any]] = {}

    def put(self, obj: ObjKey, entries: Mapping[Hashable, Any]) -> None:
        """Replace ``obj``'s entries."""
        self._remove(obj, None)
        if entries:
            self._by_object[obj] = tuple(entries)
            for key, value in entries.items():
                self._by_key.setdefault(key, {})[obj] = value

    def drop(self, obj: ObjKey) -> dict[Hashable, Any] | None:
        """Remove ``obj``; returns the entries it had (None when it had none)."""
        old: dict[Hashable, Any] = {}
        self._remove(obj, old)
        return old or None

    def _remove(self, obj: ObjKey, into: dict[Hashable, Any] | None) -> None:
        keys = self._by_object.pop(obj, None)
        for key in keys or ():
            held = self._by_key.get(key)
            if held is not None and obj in held:
                value = held.pop(obj)
                if into is not None:
                    into[key] = value
                if not held:
                    del self._by_key[key]

    def objects(self) -> list[ObjKey]:
        """The objects that hold entries now."""
        return list(self._by_object)

    def __getitem__(self, key: Hashable) -> tuple[Any, ...]:
        return tuple(self._by_key[key].values())

    def get(self, key: Hashable, default: Any = None) -> Any:
        held = self._by_key.get(key)
        return tuple(held.values()) if held else default

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)


Handler = Callable[..., Awaitable[Mapping[Hashable, Any]]]
OnGone = Callable[[Mapping[Hashable, Any], Any], None]


class Informer:
    """List + watch one collection (``path``: ``/api/v1/pods``, ``/api/v1/namespaces/x/pods``,
    ``/api/v1/nodes``) into ``store`` through ``handler`` (an index handler: ``body``,
    ``name``, ``namespace``, ``memo`` -> entries). ``namespace`` is the one the path is limited
    to (None: all), so a re-list only forgets objects of its own scope. ``selector`` is a label
    selector for the list and the watch (``kubeforge.io/job-name``: those that have the label);
    ``optional`` makes a 404 mean "not served yet" (see the module docstring)."""

    def __init__(self, client: KubeClient, path: str, resource: str, handler: Handler, store: IndexStore, memo: Any,
                 on_gone: OnGone | None = None, namespace: str | None = None, selector: str | None = None,
                 optional: bool = False) -> None:
        self.client = client
        self.path = path
        self.resource = resource
        self.handler = handler
        self.store = store
        self.memo = memo
        self.on_gone = on_gone
        self.namespace = namespace
        self.selector = selector
        self.optional = optional
        self.synced = asyncio.Event()
        self.relists = 0
        self._handler_failing: set[ObjKey] = set()

    def __repr__(self) -> str:
        return f"Informer({self.path})"

    async def run(self) -> None:
        """Forever: list, then watch and resume; re-list on 410 or after a failure."""
        rv: str | None = None
        failing = 0
        absent = False
        while True:
            try:
                if rv is None:
                    rv = await self._list()
                    self.synced.set()  # a kind not served has no objects: nothing to wait for either
                    if rv is None:
                        if not absent:
                            log.info("%s: not served (no CRD yet); listing again every %.0fs", self.path,
                                     ABSENT_SECONDS)
                        absent = True
                        await asyncio.sleep(ABSENT_SECONDS)
                        continue
                    if absent:
                        log.info("%s: served now, watching", self.path)
                    absent = False
                rv = await self._watch(rv)
                if failing:
                    log.info("%s: watching again after %d failed tries", self.path, failing)
                failing = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:  # ApiError, a broken stream, a bad line: one line per streak
                if isinstance(e, ApiError) and e.code == 410:
                    # Gone (an ERROR event, or the watch request's own status): the version is
                    # too old, normal after a long outage or a compaction: list again, at once.
                    rv = None
                    continue
                if failing == 0:
                    what = str(e) if isinstance(e, ApiError) else f"{type(e).__name__}: {str(e)[:300]}"
                    log.warning("%s: list/watch failed, listing again with backoff: %s", self.path, what)
                failing += 1
                rv = None
                delay = min(BACKOFF_MAX, BACKOFF_MIN * 2 ** min(failing, 8))
                await asyncio.sleep(delay * (0.5 + random.random() / 2))

    async def _list(self) -> str | None:
        """List the collection (every page), apply each object, forget those it no longer has;
        returns the list's resourceVersion, or None for an optional kind not served (404), whose
        objects are all forgotten."""
        try:
            return await self._list_pages()
        except ApiError as e:
            if not (self.optional and e.code == 404):
                raise
            self._forget_unseen(set())
            return None

    async def _list_pages(self) -> str:
        self.relists += 1
        seen: set[ObjKey] = set()
        cont: str | None = None
        while True:
            query: dict[str, Any] = {"limit": str(LIST_LIMIT)}
            if self.selector:
                query["labelSelector"] = self.selector
            if cont:
                query["continue"] = cont
            body = await self.client.request("GET", self.path, query=query, read=True, resource=self.resource,
                                             timeout=60.0) or {}
            for item in body.get("items") or ():
                seen.add(await self._apply(item))
            md = body.get("metadata") or {}
            cont = md.get("continue")
            if not cont:
                rv = md.get("resourceVersion")
                if not rv:
                    raise ApiError(0, "NoResourceVersion", f"list of {self.path} had no resourceVersion")
                break
        self._forget_unseen(seen)
        return rv

    def _forget_unseen(self, seen: set[ObjKey]) -> None:
        """Objects of this informer's scope that a complete list did not show are gone."""
        for obj in self.store.objects():
            if obj not in seen and (self.namespace is None or obj[0] == self.namespace):
                self._gone(obj)

    async def _watch(self, rv: str) -> str:
        query = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(WATCH_TIMEOUT)}
        if self.selector:
            query["labelSelector"] = self.selector
        resp = await self.client.stream(self.path, query, resource=self.resource, read_timeout=READ_TIMEOUT)
        try:
            buf = bytearray()
            async for chunk in resp.content.iter_any():
                buf += chunk
                start = 0
                while True:
                    end = buf.find(b"\n", start)
                    if end < 0:
                        break
                    if end > start:
                        rv = await self._event(bytes(buf[start:end]), rv)
                    start = end + 1
                if start:
                    del buf[:start]
            if buf.strip():
                rv = await self._event(bytes(buf), rv)
        finally:
            resp.release()
        return rv

    async def _event(self, line: bytes, rv: str) -> str:
        ev = orjson.loads(line)
        kind = ev.get("type")
        obj = ev.get("object") or {}
        if kind == "ERROR":
            raise ApiError(obj.get("code") or 0, str(obj.get("reason") or "Error"), str(obj.get("message") or "")[:500])
        md = obj.get("metadata") or {}
        if kind == "DELETED":
            self._gone((md.get("namespace") or "", md.get("name") or ""))
        elif kind in ("ADDED", "MODIFIED"):
            await self._apply(obj)
        return md.get("resourceVersion") or rv  # BOOKMARK: only this

    async def _apply(self, obj: Mapping[str, Any]) -> ObjKey:
        md = obj.get("metadata") or {}
        key = (md.get("namespace") or "", md.get("name") or "")
        try:
            entries = await self.handler(body=obj, name=key[1], namespace=md.get("namespace"), memo=self.memo)
        except Exception:
            # A body the handler cannot read: logged once per object; its old entries stay (as
            # kopf does when an index handler fails), and the informer goes on.
            if key not in self._handler_failing:
                self._handler_failing.add(key)
                log.exception("%s: index handler failed for %s/%s", self.path, *key)
            return key
        self._handler_failing.discard(key)
        self.store.put(key, entries or {})
        return key

    def _gone(self, key: ObjKey) -> None:
        self._handler_failing.discard(key)
        old = self.store.drop(key)
        if old and self.on_gone is not None:
            self.on_gone(old, self.memo)


def informers(client: KubeClient, memo: Any, namespaces: tuple[str, ...] = ()) -> tuple[dict[str, IndexStore], list[Informer]]:
    """The stores (index name -> store, for :meth:`Cache.attach`) and informers of pods,
    PersistentVolumeClaims and the ComputeDomains kubeforge made (all namespaces, or each of
    ``namespaces`` when every one is a plain name), and of nodes.

    kopf takes globs and negations in ``--namespace`` (``team-*``, ``!kube-system``): with any
    of those the pods are watched cluster-wide (the operator's ClusterRole lists them), which
    the ledger only gains from (a GPU pod in a namespace kubeforge does not serve still holds
    its GPUs). ComputeDomains are optional (NVIDIA's DRA driver's CRD, maybe installed later)
    and only those with kubeforge's ``kubeforge.io/job-name`` label are watched."""
    from kubeforge.accelerators.nvidia import COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_PLURAL, COMPUTE_DOMAIN_VERSION
    from kubeforge.objects import JOB_NAME
    from kubeforge.runtime import indexes as ix

    pods, nodes, domains, claims = IndexStore(), IndexStore(), IndexStore(), IndexStore()
    cd = f"/apis/{COMPUTE_DOMAIN_GROUP}/{COMPUTE_DOMAIN_VERSION}"
    out = [Informer(client, "/api/v1/nodes", "nodes", ix.kf_nodes, nodes, memo, ix.kf_nodes_gone)]
    if namespaces and all(_PLAIN_NAMESPACE.fullmatch(ns) for ns in namespaces):
        scopes: list[tuple[str, str | None]] = [(f"/namespaces/{ns}", ns) for ns in namespaces]
    else:
        scopes = [("", None)]
    for prefix, ns in scopes:
        out.append(Informer(client, f"/api/v1{prefix}/pods", "pods", ix.kf_pods, pods, memo, ix.kf_pods_gone,
                            namespace=ns))
        out.append(Informer(client, f"/api/v1{prefix}/persistentvolumeclaims", "persistentvolumeclaims", ix.kf_claims,
                            claims, memo, ix.kf_claims_gone, namespace=ns))
        out.append(Informer(client, f"{cd}{prefix}/{COMPUTE_DOMAIN_PLURAL}", COMPUTE_DOMAIN_PLURAL, ix.kf_compute_domains,
                            domains, memo, ix.kf_compute_domains_gone, namespace=ns, selector=JOB_NAME, optional=True))
    return {"kf_pods": pods, "kf_nodes": nodes, "kf_compute_domains": domains, "kf_claims": claims}, out
