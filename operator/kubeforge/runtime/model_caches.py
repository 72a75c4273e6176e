"""The node model caches, applied (issue 29): the ModelCacheNode specs the pure plan
(:func:`kubeforge.admission.plan_node_caches`) asks for, written by the pool status loop every
2 s while this process leads, and only when they change.

The operator writes ``spec`` (create, or a JSON patch that replaces it whole) and deletes the
object of a node that is gone; the node agent writes ``status``. Only with ``--model-cache``
(the chart's ``cacheAgent.enabled``): without agents on the nodes nothing would fetch a copy,
and a pod waiting for one would hold its GPUs for nothing.

A refusal that will not change by itself (422 Invalid, 403 Forbidden: the CRD is older than
this operator, or its ClusterRole lacks ``modelcachenodes``) is logged once per node and spec,
not retried every 2 s with a traceback; a transient one is tried again on the next pass.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

from kubeforge import API_VERSION
from kubeforge.admission import PoolView, Snapshot, plan_node_caches
from kubeforge.api import ModelCacheNode
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.state import Runtime
from kubeforge.runtime.training import gather_bounded

log = logging.getLogger("kubeforge.modelcache")
KIND = ModelCacheNode.KIND
ModelRows = dict[str, tuple[list[dict[str, Any]], "str | None"]]


def _body(node: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": node, "labels": {"kubeforge.io/pool": spec.get("pool") or ""}},
            "spec": dict(spec)}


async def _write(rt: Runtime, node: str, spec: Mapping[str, Any], exists: bool) -> None:
    if exists:
        await rt.client.patch(KIND, None, node, [{"op": "replace", "path": "/spec", "value": dict(spec)}],
                              patch_type="json")
    elif not await rt.client.create(KIND, None, _body(node, spec)):
        await rt.client.patch(KIND, None, node, [{"op": "replace", "path": "/spec", "value": dict(spec)}],
                              patch_type="json")  # made meanwhile (an earlier answer lost)


def _permanent(e: BaseException) -> bool:
    return isinstance(e, ApiError) and not e.transient


async def write_node_caches(rt: Runtime, snap: Snapshot, views: Mapping[str, PoolView],
                            refused: dict[str, str]) -> ModelRows:
    """Write the ModelCacheNode specs that differ from the plan, delete those of gone nodes, and
    return each pool's ``(status.models, status.modelsSummary)``.

    Args:
        rt: The runtime (``options.model_cache`` off: nothing is written and ``{}`` returned).
        snap: The snapshot the pools' statuses are made from.
        views: The pools' views, by name.
        refused: node -> the spec (JSON) the API server refused for good: not sent again while
            the plan asks for the same (updated).

    Raises:
        ApiError: A transient failure of a write (the loop logs it once per streak).
    """
    if not rt.options.model_cache:
        return {}
    existing = rt.cache.model_cache_specs()
    plan = plan_node_caches(snap, views, existing)
    todo = [(n, s) for n, s in sorted(plan.writes.items()) if refused.get(n) != json.dumps(s, sort_keys=True)]
    results = await gather_bounded([_write(rt, n, s, n in existing) for n, s in todo])
    transient = None
    for (node, spec), r in zip(todo, results):
        if _permanent(r):
            refused[node] = json.dumps(spec, sort_keys=True)
            log.error("ModelCacheNode %s: the API server refused its spec (HTTP %s %s): %s", node, r.code,  # type: ignore
                      r.reason, r.message)  # type: ignore[union-attr]
        elif isinstance(r, BaseException):
            transient = r
        else:
            refused.pop(node, None)
    gone = await gather_bounded([rt.client.delete(KIND, None, n) for n in plan.deletes])
    for node, r in zip(plan.deletes, gone):
        refused.pop(node, None)
        if isinstance(r, BaseException) and not _permanent(r):
            transient = r
    if transient is not None:
        raise transient
    return plan.models
