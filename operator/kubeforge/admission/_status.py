"""The GPUPool status, from its view and the ledger. Pure."""

from __future__ import annotations

from typing import Any

from kubeforge.admission._ledger import Ledger
from kubeforge.admission._pools import PoolView
from kubeforge.builders.common import set_condition
from kubeforge.placement import GpuCounts, summarize_pool

MAX_WORKLOADS = 4096  # the CRD's bound on status.workloads


def _counts(c: GpuCounts) -> dict[str, int]:
    return {"capacity": c.capacity, "allocatable": c.allocatable, "allocated": c.allocated,
            "free": c.free, "unavailable": c.unavailable}


def pool_status(view: PoolView, ledger: Ledger, now: float, quotas: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``.status`` of one GPUPool: nodes, GPUs (in total, spot and on-demand, per topology
    domain), the workloads holding GPUs on its nodes, the effective topology levels and the
    ``Ready`` condition (True when at least one node is usable).

    Args:
        view: The pool, its nodes carrying the ledger's allocations.
        ledger: The ledger of the pool's GPU resource (for the workloads).
        now: Unix seconds (condition transition times).
        quotas: Each team's use of its quota (:meth:`QuotaBook.usage`), when the pool has quotas.
    """
    s = summarize_pool(view.nodes, view.levels)
    rec = view.record
    old = rec.status or {}
    gen = rec.generation
    if rec.spec is None:  # say what is wrong, not "matches no node" (an invalid selector selects nothing)
        conds = set_condition(old.get("conditions"), "Ready", False, "InvalidSpec", rec.spec_error or "invalid spec", now, gen)
    elif not view.nodes:
        conds = set_condition(old.get("conditions"), "Ready", False, "NoNodes", "nodeSelector matches no node", now, gen)
    else:
        conds = set_condition(old.get("conditions"), "Ready", s.nodes_usable > 0,
                              "NodesReady" if s.nodes_usable else "NoUsableNodes",
                              f"{s.nodes_usable} of {s.nodes_total} nodes usable; {s.gpus.free} GPUs free", now, gen)
    names = {n.name for n in view.nodes}
    workloads = []
    for (kind, ns, name), per_node in sorted(ledger.per_workload.items()):
        gpus = sum(g for n, g in per_node.items() if n in names)
        if gpus:
            workloads.append({"kind": kind, "namespace": ns, "name": name, "gpus": gpus})
    return {
        "observedGeneration": gen,
        "conditions": conds,
        "topologyLevels": [{"name": lv.name, "nodeLabel": lv.node_label, "source": view.levels_source} for lv in view.levels],
        "nodes": {"total": s.nodes_total, "ready": s.nodes_ready, "spot": s.nodes_spot, "onDemand": s.nodes_on_demand},
        "gpus": _counts(s.gpus),
        "spotGPUs": _counts(s.gpus_spot),
        "onDemandGPUs": _counts(s.gpus_on_demand),
        "domains": [{"level": d.level, "name": d.name, "nodes": d.nodes, "gpus": _counts(d.gpus)} for d in s.domains],
        "workloads": workloads[:MAX_WORKLOADS],
        "quotas": list(quotas or []),
    }
