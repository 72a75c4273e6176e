"""The EndpointSlice watch (kubernetes_asyncio): list, then watch from the list's
resourceVersion, cluster-wide, filtered by the API server on the label
``kubeforge.io/inference-service`` (no other slice reaches the activator).

Every call is bounded: lists page by :data:`PAGE` slices with a client timeout, watches end
server-side after :data:`WATCH_SECONDS` (then resume from the last resourceVersion, bookmarks
included) and client-side a little later. A ``410 Gone`` (the resourceVersion was compacted)
relists at once; any other error relists after a backoff doubling from 1 s to
:data:`MAX_BACKOFF` seconds, reset by a successful list.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio import watch as kwatch
from kubernetes_asyncio.client.exceptions import ApiException

from ._slices import SERVICE_LABEL

log = logging.getLogger("kubeforge.activator.watch")

PAGE = 500
"""Slices per list page."""
WATCH_SECONDS = 300
"""Server-side timeout of one watch call (the API server's default minimum is 300 s too)."""
LIST_TIMEOUT = 30.0
"""Client-side seconds for one list page."""
MAX_BACKOFF = 30.0
"""Longest wait between failed attempts, seconds."""


class SliceSink(Protocol):
    """What the watch feeds (the :class:`~kubeforge.activator._server.Activator`)."""

    def on_list(self, objs: list[dict[str, Any]]) -> None: ...

    def on_event(self, kind: str, obj: dict[str, Any]) -> None: ...


async def api_client(kubeconfig: str | None) -> kclient.ApiClient:
    """A kubernetes_asyncio client: ``kubeconfig`` when given; else the in-cluster
    ServiceAccount when running in a pod (``KUBERNETES_SERVICE_HOST`` set, no ``KUBECONFIG``);
    else ``$KUBECONFIG`` / ``~/.kube/config``.

    Raises:
        kubernetes_asyncio.config.ConfigException: no usable configuration.
    """
    cfg = kclient.Configuration()
    if kubeconfig:
        await kconfig.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        kconfig.load_incluster_config(client_configuration=cfg)
    else:
        await kconfig.load_kube_config(client_configuration=cfg)
    return kclient.ApiClient(cfg)


async def list_slices(api: kclient.ApiClient) -> tuple[list[dict[str, Any]], str]:
    """Every slice labelled ``kubeforge.io/inference-service``, page by page.

    Returns:
        (the slices as JSON dicts, the list's resourceVersion to watch from).
    """
    disco = kclient.DiscoveryV1Api(api)
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"label_selector": SERVICE_LABEL, "limit": PAGE, "_preload_content": False,
                                  "_request_timeout": LIST_TIMEOUT}
        if token:
            kwargs["_continue"] = token
        resp = await disco.list_endpoint_slice_for_all_namespaces(**kwargs)
        try:
            page = json.loads(await resp.read())
        finally:
            resp.release()
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items, str((page.get("metadata") or {}).get("resourceVersion") or "")


async def watch_once(api: kclient.ApiClient, sink: SliceSink, rv: str) -> str:
    """One watch call from ``rv`` until the server ends it; returns the last resourceVersion
    seen. Raises ApiException (410 included) and connection errors."""
    disco = kclient.DiscoveryV1Api(api)
    w = kwatch.Watch(return_type="object")  # raw dicts: the activator reads JSON, not models
    async with w:
        async for ev in w.stream(disco.list_endpoint_slice_for_all_namespaces, label_selector=SERVICE_LABEL,
                                 resource_version=rv, timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True,
                                 _request_timeout=WATCH_SECONDS + 30):
            obj = ev.get("raw_object") or {}
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if ev.get("type") != "BOOKMARK":
                sink.on_event(str(ev.get("type")), obj)
    return rv


async def watch_slices(api: kclient.ApiClient, sink: SliceSink, sleep=asyncio.sleep) -> None:
    """List, then watch, forever (cancel the task to stop). See the module docstring."""
    backoff, quick_relist = 1.0, True
    while True:
        try:
            objs, rv = await list_slices(api)
            sink.on_list(objs)
            backoff = 1.0
            while True:
                rv = await watch_once(api, sink, rv)
                quick_relist = True  # a whole watch went well: the next 410 relists at once
        except ApiException as e:
            if e.status == 410 and quick_relist:
                log.info("EndpointSlice watch expired (410 Gone); relisting")
                quick_relist = False  # a second 410 before a watch completes backs off
                continue
            log.warning("EndpointSlice list/watch failed: %s %s; retrying in %.0fs", e.status, e.reason, backoff)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
            log.warning("EndpointSlice list/watch failed: %s: %s; retrying in %.0fs", type(e).__name__, e, backoff)
        await sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF)
