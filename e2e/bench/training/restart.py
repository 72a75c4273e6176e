"""The training bench's spot-restart scenario: after the kubeforge phase, free room, put the spot
interruption taint (``aws-node-termination-handler/spot-itn``) on a few nodes running gangs
whose claims are Bound, and measure taint -> every worker of the new attempt Running, from the
API server's audit log (:mod:`~e2e.bench.training.audit`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from e2e.bench.lib.cluster import GROUP, JOB_LABEL, VERSION
from e2e.bench.lib.timing import say
from e2e.bench.training.audit import SPOT_TAINT, Timeline, read_audit

__all__ = ["restart_after_spot_preemption"]

RESTART_STEPS = ("taint -> gang stopped (status write)", "stopped -> placed again (status write)",
                 "placed -> new pods all created", "pods created -> all bound", "all bound -> all Running")


def _items(call) -> list[dict]:
    return json.loads(call(_preload_content=False).data)["items"]


def restart_after_spot_preemption(core, custom, ns: str, nodes: int, timeout: float, audit: Path) -> dict:
    """Taint ``nodes`` nodes that run gangs with a Bound claim and measure their restarts.

    Room first: every job still waiting is deleted, then placed jobs on other nodes until the
    free GPUs are at least twice what the tainted nodes' gangs hold (bounded waits), so the
    restarted gangs are placed at once, away from the tainted nodes. Then the taint
    ``aws-node-termination-handler/spot-itn:NoSchedule`` goes on every chosen node at ``t0``
    (wall clock, the API server's too: same machine); a gang has restarted when every worker
    of its next attempt is Running, read from the audit log afterwards.

    Returns:
        ``{"jobs", "nodes", "latency": [s], "steps": [(label, [s])], "gated": gangs whose new
        pods were gated, "missing": jobs not Running again within ``timeout``}``.
    """
    running, chosen, hit = _make_room(core, custom, ns, nodes)
    attempts = {j: int((running[j].get("status") or {}).get("attempt") or 0) for j in hit}
    t0 = time.time()
    for node in chosen:
        core.patch_node(node, {"spec": {"taints": [{"key": SPOT_TAINT, "value": "bench", "effect": "NoSchedule"}]}},
                        _preload_content=False)
    deadline = time.monotonic() + timeout
    back: set[str] = set()
    while time.monotonic() < deadline and len(back) < len(hit):  # bounded by the timeout
        for j in _items(lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", **kw)):
            st, name = j.get("status") or {}, j["metadata"]["name"]
            if name in hit and st.get("phase") == "Running" and int(st.get("attempt") or 0) > attempts[name]:
                back.add(name)
        time.sleep(0.5)
    for node in chosen:  # leave the nodes as they were
        core.patch_node(node, {"spec": {"taints": None}}, _preload_content=False)
    time.sleep(1)  # the audit log is written as requests complete
    tl = read_audit(audit, ns)
    out = {"jobs": len(hit), "nodes": len(chosen), "latency": [], "steps": [], "gated": 0,
           "missing": sorted(hit - back)}
    if tl is not None:
        _restart_steps(tl, out, back, running, attempts, t0)
    return out


def _make_room(core, custom, ns: str, nodes: int) -> tuple[dict[str, dict], list[str], set[str]]:
    """Choose ``nodes`` nodes whose gangs all run with a Bound claim, then delete every waiting
    job and running jobs elsewhere until twice those gangs' GPUs are free (bounded waits).

    Returns:
        (running jobs by name, the chosen nodes, the gangs on them).
    """
    jobs = _items(lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", **kw))
    pods = _items(lambda **kw: core.list_namespaced_pod(ns, **kw))
    bound = {c["metadata"]["name"] for c in _items(lambda **kw: core.list_namespaced_persistent_volume_claim(ns, **kw))
             if (c.get("status") or {}).get("phase") == "Bound"}
    on_node: dict[str, set[str]] = {}
    for p in pods:
        job, node = p["metadata"]["labels"].get(JOB_LABEL), p["spec"].get("nodeName")
        if job and node and (p.get("status") or {}).get("phase") == "Running":
            on_node.setdefault(node, set()).add(job)
    running = {j["metadata"]["name"]: j for j in jobs if (j.get("status") or {}).get("phase") == "Running"}
    gpus = {n: j["spec"]["replicas"] * j["spec"]["gpusPerReplica"] for n, j in running.items()}
    chosen: list[str] = []
    hit: set[str] = set()
    for node in sorted(on_node):
        js = on_node[node]
        if len(chosen) < nodes and all(j in running and f"{j}-checkpoint" in bound for j in js):
            chosen.append(node)
            hit |= js
    hit_nodes = {n for n, js in on_node.items() if js & hit}
    waiting = [j["metadata"]["name"] for j in jobs if not (j.get("status") or {}).get("placement")]
    drop, freed = [], 0
    for name in sorted(running):
        if freed >= 2 * sum(gpus[j] for j in hit):
            break
        if name not in hit and not any(name in on_node.get(x, ()) for x in hit_nodes):
            drop.append(name)
            freed += gpus[name]
    say(f"restart scenario: deleting {len(waiting)} waiting and {len(drop)} running jobs ({freed} GPUs) for room, "
        f"then tainting {len(chosen)} nodes running {len(hit)} gangs")
    for name in waiting + drop:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", name, _preload_content=False)
    gone = set(drop)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # bounded: until the dropped jobs' pods are gone
        if not any(p["metadata"]["labels"].get(JOB_LABEL) in gone for p in _items(lambda **kw: core.list_namespaced_pod(ns, **kw))):
            break
        time.sleep(1)
    time.sleep(3)  # the operator's pool view catches up with the freed GPUs
    return running, chosen, hit


def _restart_steps(tl: Timeline, out: dict, back: set[str], running: dict[str, dict], attempts: dict[str, int],
                   t0: float) -> None:
    """Fill ``out``'s latency, steps and gated counts from the audit log's new attempts."""
    steps: dict[str, list[float]] = {k: [] for k in RESTART_STEPS}
    for j in back:
        g = next((g for (jj, a), g in sorted(tl.gangs.items()) if jj == j and a > attempts[j]), None)
        n = running[j]["spec"]["replicas"]
        if g is None or len(g.running) < n or len(g.bound) < n:
            continue
        first, created = min(g.created.values()), max(g.created.values())
        writes = [t for t in tl.job_status.get(j, []) if t0 <= t <= first]
        out["latency"].append(max(g.running.values()) - t0)
        if writes:
            steps["taint -> gang stopped (status write)"].append(writes[0] - t0)
            steps["stopped -> placed again (status write)"].append(writes[-1] - writes[0])
            steps["placed -> new pods all created"].append(created - writes[-1])
        steps["pods created -> all bound"].append(max(g.bound.values()) - created)
        steps["all bound -> all Running"].append(max(g.running.values()) - max(g.bound.values()))
        out["gated"] += bool(g.ungated)
    out["steps"] = list(steps.items())
