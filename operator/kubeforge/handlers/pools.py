"""GPUPool: the pool view (nodes, topology, GPU ledger) and its status loop.

The ledger counts, per node, the GPUs held by (a) every admitted TrainingJob's placement,
whether or not its pods exist or are bound yet, and (b) every other non-terminal pod bound to
the node that requests the GPU resource (other workloads, InferenceService replicas, pods of
an older attempt of a job that are still terminating). (a) is what makes admission safe
while pods are being created and across operator restarts: the placement lives in the
job's status, so the ledger is rebuilt from what exists.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubeforge import metrics
from kubeforge.builders.common import conditions_equal, set_condition
from kubeforge.handlers import kube
from kubeforge.handlers.state import STATE
from kubeforge.placement import (
    NodeInfo, TopologyLevel, detect_levels, node_info_from_k8s, summarize_pool,
)
from kubeforge.selectors import selector_matches

log = logging.getLogger("kubeforge.pools")
POOL_STATUS_INTERVAL = 2.0  # seconds between pool status refreshes (written only on change)


@dataclass
class PoolView:
    """One GPUPool as the loops use it: its nodes (with allocated GPUs) and topology."""

    name: str
    body: dict[str, Any]
    gpu_resource: str
    levels: list[TopologyLevel]
    levels_source: str
    nodes: list[NodeInfo]
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    price: float | None = None


def placement_gpus(job: dict[str, Any], status: dict[str, Any]) -> dict[str, int]:
    """GPUs per node held by a job's placement (``status.placement.nodes`` x gpusPerReplica)."""
    pl = status.get("placement") or {}
    if status.get("phase") in ("Succeeded", "Failed", "Suspended"):
        return {}
    per = int(job["spec"].get("gpusPerReplica", 1))
    out: dict[str, int] = {}
    for n in pl.get("nodes") or []:
        out[n] = out.get(n, 0) + per
    return out


def ledger(gpu_resource: str) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """(GPUs held per node, GPUs held per job key) for one GPU resource name."""
    per_node: dict[str, int] = {}
    per_job: dict[tuple[str, str], int] = {}
    current_attempt: dict[tuple[str, str], int] = {}
    jobs = STATE.index("kf_jobs")
    for key in list(jobs.keys()):
        job = STATE.one("kf_jobs", key)
        if job is None:
            continue
        st = STATE.effective_status(key, job)
        r = st.get("restarts") or {}
        current_attempt[key] = int(r.get("failures", 0)) + int(r.get("preemptions", 0))
        held = placement_gpus(job, st)
        for n, g in held.items():
            per_node[n] = per_node.get(n, 0) + g
        if held:
            per_job[key] = sum(held.values())
    pods = STATE.index("kf_gpu_pods")
    for node in list(pods.keys()):
        for p in STATE.many("kf_gpu_pods", node):
            g = p["gpus"].get(gpu_resource, 0)
            if not g:
                continue
            job = p.get("job")
            if job is not None and job in per_job and p.get("attempt") == current_attempt.get(job):
                continue  # counted through the placement
            per_node[node] = per_node.get(node, 0) + g
    return per_node, per_job


def pool_view(name: str, allocated: dict[str, int] | None = None) -> PoolView | None:
    """Build the view of pool ``name`` from the indexes; None when the pool does not exist."""
    pool = STATE.one("kf_pools", name)
    if pool is None:
        return None
    spec = pool.get("spec") or {}
    res = spec.get("gpuResourceName") or "nvidia.com/gpu"
    if allocated is None:
        allocated, _ = ledger(res)
    tol = list(spec.get("tolerations") or [])
    tolerated = {t.get("key") for t in tol if t.get("key")}
    sel = spec.get("nodeSelector") or {}
    infos: list[NodeInfo] = []
    nodes_idx = STATE.index("kf_nodes")
    for node_name in list(nodes_idx.keys()):
        node = STATE.one("kf_nodes", node_name)
        if node is None or not selector_matches(sel, node["metadata"]["labels"]):
            continue
        try:
            infos.append(node_info_from_k8s(node, res, allocated.get(node_name, 0), tolerated))
        except ValueError as e:
            log.warning("pool %s: node %s skipped: %s", name, node_name, e)
    infos.sort(key=lambda n: n.name)
    if spec.get("topologyLevels"):
        levels = [TopologyLevel(l["name"], l["nodeLabel"]) for l in spec["topologyLevels"]]
        source = "Spec"
    else:
        levels = list(detect_levels(infos))
        source = "Detected"
    price = spec.get("pricePerGPUHour")
    return PoolView(name, pool, res, levels, source, infos, tol, float(price) if price is not None else None)


def pool_status(view: PoolView, per_job: dict[tuple[str, str], int], now: float) -> dict[str, Any]:
    """The GPUPool ``.status`` for ``view`` (pure apart from reading ``view``)."""
    s = summarize_pool(view.nodes, view.levels)

    def counts(c):
        return {"capacity": c.capacity, "allocatable": c.allocatable, "allocated": c.allocated, "free": c.free}

    node_names = {n.name for n in view.nodes}
    workloads = []
    for (ns, name), g in sorted(per_job.items()):
        job = STATE.one("kf_jobs", (ns, name))
        st = STATE.effective_status((ns, name), job)
        if (st.get("placement") or {}).get("pool") == view.name or any(n in node_names for n in (st.get("placement") or {}).get("nodes") or []):
            workloads.append({"kind": "TrainingJob", "namespace": ns, "name": name, "gpus": g})
    old = view.body.get("status") or {}
    gen = view.body["metadata"].get("generation")
    if not view.nodes:
        conds = set_condition(old.get("conditions"), "Ready", False, "NoNodes", "nodeSelector matches no node", now, gen)
    else:
        conds = set_condition(old.get("conditions"), "Ready", s.nodes_usable > 0, "NodesReady" if s.nodes_usable else "NoUsableNodes",
                              f"{s.nodes_usable} of {s.nodes_total} nodes usable; {s.gpus.free} GPUs free", now, gen)
    return {
        "observedGeneration": gen,
        "conditions": conds,
        "topologyLevels": [{"name": l.name, "nodeLabel": l.node_label, "source": view.levels_source} for l in view.levels],
        "nodes": {"total": s.nodes_total, "ready": s.nodes_ready, "spot": s.nodes_spot, "onDemand": s.nodes_on_demand},
        "gpus": counts(s.gpus),
        "spotGPUs": counts(s.gpus_spot),
        "onDemandGPUs": counts(s.gpus_on_demand),
        "domains": [
            {"level": d.level, "name": d.name, "nodes": d.nodes,
             "gpus": {"capacity": d.gpus_allocatable, "allocatable": d.gpus_allocatable, "allocated": d.gpus_allocated, "free": d.gpus_free}}
            for d in s.domains
        ],
        "workloads": workloads[:4096],
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Status equality ignoring condition timestamps."""
    rest = lambda s: {k: v for k, v in s.items() if k != "conditions"}  # noqa: E731
    return rest(a) == rest(b) and conditions_equal(a.get("conditions"), b.get("conditions"))


async def pool_status_loop() -> None:
    """Refresh every pool's status every ``POOL_STATUS_INTERVAL`` s; write only on change."""
    await STATE.ready.wait()
    last: dict[str, dict[str, Any]] = {}
    while True:
        try:
            now = time.time()
            ledgers: dict[str, tuple] = {}
            for name in list(STATE.index("kf_pools").keys()):
                pool = STATE.one("kf_pools", name)
                if pool is None:
                    continue
                res = (pool.get("spec") or {}).get("gpuResourceName") or "nvidia.com/gpu"
                if res not in ledgers:
                    ledgers[res] = ledger(res)
                per_node, per_job = ledgers[res]
                view = pool_view(name, per_node)
                if view is None:
                    continue
                st = pool_status(view, per_job, now)
                for state in ("capacity", "allocatable", "allocated", "free"):
                    metrics.POOL_GPUS.labels(pool=name, state=state).set(st["gpus"][state])
                prev = last.get(name) or (pool.get("status") or {})
                if not _same(st, prev):
                    await kube.patch_status("gpupools", None, name, st)
                    last[name] = st
            for gone in set(last) - set(STATE.index("kf_pools").keys()):
                last.pop(gone, None)
                for state in ("capacity", "allocatable", "allocated", "free"):
                    metrics.POOL_GPUS.remove(gone, state)
            phases: dict[str, int] = {p: 0 for p in ("Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended")}
            for key in list(STATE.index("kf_jobs").keys()):
                job = STATE.one("kf_jobs", key)
                ph = STATE.effective_status(key, job).get("phase") or "Pending"
                phases[ph] = phases.get(ph, 0) + 1
            for ph, n in phases.items():
                metrics.JOBS_BY_PHASE.labels(phase=ph).set(n)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pool status loop")
        await asyncio.sleep(POOL_STATUS_INTERVAL)
