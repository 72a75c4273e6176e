"""The GPUPool status, from its view and the ledger. Pure."""

from __future__ import annotations

from typing import Any

from kubeforge.admission._ledger import Ledger
from kubeforge.admission._pools import PoolView, missing_gpus
from kubeforge.objects import set_condition
from kubeforge.api import LevelSource
from kubeforge.objects import (
    INVALID_SPEC, LEVEL_LABEL_MISSING, LEVELS_DETECTED, LEVELS_FOUND, NO_NODES, NO_USABLE_NODES, NODES_READY, READY,
    TOPOLOGY_READY,
)
from kubeforge.placement import GpuCounts, detect_levels, summarize_pool

MAX_WORKLOADS = 4096  # the CRD's bound on status.workloads


def _ready(view: PoolView, nodes_usable: int, nodes_total: int, free: int) -> tuple[bool, str, str]:
    rec = view.record
    if rec.spec is None:  # say what is wrong, not "matches no node" (an invalid selector selects nothing)
        return False, INVALID_SPEC, rec.spec_error or "invalid spec"
    if view.unavailable is not None:
        return (False, *view.unavailable)
    if not view.nodes:
        return False, NO_NODES, "nodeSelector matches no node"
    absent = missing_gpus(view)
    if absent is not None:
        return False, NO_NODES, absent
    return (nodes_usable > 0, NODES_READY if nodes_usable else NO_USABLE_NODES,
            f"{nodes_usable} of {nodes_total} nodes usable; {free} GPUs free")


def _topology(view: PoolView) -> tuple[bool, str, str]:
    if view.levels_source != LevelSource.SPEC.value:
        names = ", ".join(f"{lv.name} ({lv.node_label})" for lv in view.levels) or "none"
        return True, LEVELS_DETECTED, f"levels detected from node labels: {names}"
    missing = [lv for lv in view.levels if not any(lv.node_label in n.labels for n in view.nodes)]
    if not missing or not view.nodes:
        return True, LEVELS_FOUND, "every level of spec.topologyLevels is on the pool's nodes"
    detected = ", ".join(f"{lv.name} ({lv.node_label})" for lv in detect_levels(view.nodes)) or "none"
    what = "; ".join(f"level {lv.name}: no node of the pool carries label {lv.node_label}" for lv in missing)
    return False, LEVEL_LABEL_MISSING, (
        f"{what}; gangs that ask for it cannot be placed. spec.topologyLevels replaces the detected "
        f"levels, which would be: {detected}")


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
    ok, reason, message = _ready(view, s.nodes_usable, s.nodes_total, s.gpus.free)
    conds = set_condition(old.get("conditions"), READY, ok, reason, message, now, gen)
    ok, reason, message = _topology(view)
    conds = set_condition(conds, TOPOLOGY_READY, ok, reason, message, now, gen)
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
