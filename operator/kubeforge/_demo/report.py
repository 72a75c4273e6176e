"""Pure: the lines the demo prints about placements. Inputs are the objects as the API server
returns them (JSON dicts); every node and domain printed comes from the pods' ``nodeName`` and
the nodes' labels, beside what the operator's status says."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from .ledger import Holding

__all__ = ["POOL_ROW", "group_lines", "pool_table", "progress_line", "short_names", "training_lines"]

POOL_ROW = r"^  (?P<level>\S+)\s+(?P<domain>\S+)\s+(?P<nodes>\d+)\s+(?P<allocated>\d+)\s+(?P<free>\d+)\s+(?P<allocatable>\d+)"
"""The regular expression of one row of :func:`pool_table` (the test reads the table back)."""


def _label(pod: Mapping[str, Any], key: str, default: str = "0") -> str:
    return (pod["metadata"].get("labels") or {}).get(key, default)


def training_lines(job: Mapping[str, Any], pods: list[Mapping[str, Any]], node_domain: Mapping[str, str],
                   level: str) -> list[str]:
    """A TrainingJob: phase, domain and why (status), then each rank's pod, node and domain."""
    st = job.get("status") or {}
    pl = st.get("placement") or {}
    out = [f"TrainingJob {job['metadata']['name']}: {job['spec']['replicas']} x {job['spec']['gpusPerReplica']} GPUs, "
           f"phase {st.get('phase')}, {pl.get('level') or 'pool'} domain {pl.get('domain')}"]
    if pl.get("reason"):
        out.append(f"  why: {pl['reason']}")
    for p in sorted(pods, key=lambda p: int(_label(p, "kubeforge.io/replica-index"))):
        node = p["spec"].get("nodeName") or "-"
        out.append(f"  rank {_label(p, 'kubeforge.io/replica-index')}: {p['metadata']['name']:<27} "
                   f"{p['status'].get('phase', '?'):<8} node {node:<12} {level} {node_domain.get(node, '-')}")
    return out


def _seconds(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _span(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def progress_line(status: Mapping[str, Any], now: float) -> str:
    """A job's ``status.progress`` and ``lastCheckpoint`` in one line: step of total, percent,
    ETA (and how far off at ``now``, unix seconds), the metrics, the checkpoint, who reported."""
    p = status.get("progress") or {}
    if not p:
        return "  progress: none reported yet"
    parts = []
    if p.get("step") is not None:
        parts.append(f"step {p['step']:,}" + (f" of {p['totalSteps']:,}" if p.get("totalSteps") else ""))
    if p.get("percent") is not None:
        parts.append(f"{p['percent']:g}%")
    eta = _seconds(p.get("eta")) if p.get("eta") else None
    parts.append(f"ETA {p['eta']} (in {_span(eta - now)})" if eta is not None else "ETA unknown yet")
    parts += [f"{m['name']} {m['value']}" for m in p.get("metrics") or []]
    ck = status.get("lastCheckpoint") or {}
    if ck.get("step") is not None:
        parts.append(f"checkpoint step {ck['step']:,}")
    return f"  progress: {', '.join(parts)} (reported by {p.get('reporter') or '?'})"


def group_lines(svc: Mapping[str, Any], pods: list[Mapping[str, Any]], node_domain: Mapping[str, str],
                level: str) -> list[str]:
    """A multi-node InferenceService: its shape, then per group (status.groups): the domain and
    nodes its pods run on (from the pods), the leader, the phase; a status that names other
    nodes than the pods run on says so."""
    spec, st = svc["spec"], svc.get("status") or {}
    par = spec.get("parallelism") or {}
    groups = sorted(st.get("groups") or [], key=lambda g: g["index"])
    out = [f"InferenceService {svc['metadata']['name']}: tensor {par.get('tensor')} x pipeline {par.get('pipeline')} "
           f"= {st.get('nodesPerReplica')} pods per replica (group), {st.get('readyReplicas', 0)} of "
           f"{st.get('desiredReplicas')} groups Ready"]
    for g in groups:
        mine = sorted((p for p in pods if _label(p, "kubeforge.io/group-index", "") == str(g["index"])),
                      key=lambda p: int(_label(p, "kubeforge.io/worker-index")))
        nodes = [p["spec"].get("nodeName") or "-" for p in mine]
        domains = sorted({node_domain.get(n, "-") for n in nodes})
        out.append(f"  group {g['index']}: {level} {', '.join(domains):<10} nodes {', '.join(nodes):<25} "
                   f"leader {g.get('leader') or '-'} ({g.get('phase')})")
        if nodes != list(g.get("nodes") or []):
            out.append(f"    status says nodes {', '.join(g.get('nodes') or []) or '-'}")
    return out


def short_names(held: list[Holding]) -> dict[tuple[str, str, str], str]:
    """Workload -> the name printed (the name alone; ``kind/name`` when two kinds share it)."""
    names: dict[str, set[str]] = {}
    for h in held:
        names.setdefault(h.workload[2], set()).add(h.workload[0])
    return {h.workload: h.workload[2] if len(names[h.workload[2]]) == 1 else f"{h.workload[0]}/{h.workload[2]}"
            for h in held}


def pool_table(name: str, status: Mapping[str, Any], held: list[Holding],
               node_domains: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The pool's GPUs per topology domain as its status says (allocated, free, allocatable),
    and which workloads' pods hold them (from the pods); the last row (level ``pool``, domain
    ``name``) is the whole pool. Rows match :data:`POOL_ROW`."""
    label = short_names(held)
    out = [f"  {'level':<7} {'domain':<11} {'nodes':>5} {'allocated':>10} {'free':>5} {'of':>4}   held by (the pods)"]
    for d in status.get("domains") or []:
        members = node_domains.get(d["level"], {})
        by: dict[str, int] = {}
        for h in held:
            if members.get(h.node) == d["name"]:
                by[label[h.workload]] = by.get(label[h.workload], 0) + h.gpus
        g = d.get("gpus") or {}
        who = ", ".join(f"{k} {v}" for k, v in sorted(by.items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(f"  {d['level']:<7} {d['name']:<11} {d.get('nodes', 0):>5} {g.get('allocated', 0):>10} "
                   f"{g.get('free', 0):>5} {g.get('allocatable', 0):>4}   {who or '-'}")
    g = status.get("gpus") or {}
    out.append(f"  {'pool':<7} {name:<11} {(status.get('nodes') or {}).get('total', 0):>5} {g.get('allocated', 0):>10} "
               f"{g.get('free', 0):>5} {g.get('allocatable', 0):>4}")
    return out
