"""What kubeforge's pure admission core predicts for a live preemption, to set beside the real one.

Given the running set a live system had when a preemptor arrived (who runs where, since when,
its priority and last checkpoint), :func:`predict` asks ``kubeforge.admission.plan_admission``
which gangs the preemptor would preempt, once with kubeforge's own victim order (least work
lost first) and once with the preemption bench's "Kueue-like" order (checkpoint age ignored:
lowest priority, then newest; :data:`e2e.bench.lib.replay.KUEUE_VICTIMS`), the model the
large-scale replay (:mod:`e2e.bench.preemption`) uses for Kueue.
"""

from __future__ import annotations

from kubeforge.admission import AdmissionRules, JobView, Snapshot, plan_admission
from kubeforge.api import GPUPoolSpec, TrainingJobSpec
from kubeforge.objects import Node, record_from_k8s

from e2e.bench.lib.replay import KUEUE_VICTIMS
from e2e.bench.lib.timing import iso as _iso

__all__ = ["predict"]

GPU = "nvidia.com/gpu"


def predict(system, node_manifests: list[dict], running: dict, gangs: dict, last_ckpt: dict, preemptor,
            now: float, preemption: dict | None = None) -> dict:
    """Victims the pure core chooses for ``preemptor`` on ``system``'s running set.

    Args:
        system: the live system (``ns(team)``, ``prefix``, ``teams``, ``nominal``).
        node_manifests: the fleet's Node objects.
        running: gang name -> GangState (admitted, nodes, admitted_at) of the running gangs.
        gangs: gang name -> Gang (team, priority, replicas, gpus).
        last_ckpt: gang name -> unix time of its last checkpoint.
        preemptor: the arriving Gang.
        now: unix seconds of the arrival.
        preemption: the live pool's ``spec.preemption`` (None: withinQuota LowerPriority, reclaimQuota
            Any, the rest at the API's defaults).

    Returns:
        ``{"kubeforge": [...], "kueue-like": [...], "gangs": n, "gpus": g}``: victim names,
        sorted, and the running gangs and GPUs the model holds.
    """
    nodes = {}
    for n in node_manifests:
        gpus = int(n["status"]["allocatable"].get(GPU, 0))
        nodes[n["metadata"]["name"]] = Node(n["metadata"]["name"], dict(n["metadata"]["labels"]),
                                            allocatable={GPU: gpus}, capacity={GPU: gpus})
    pool = record_from_k8s(GPUPoolSpec, {
        "metadata": {"name": system.prefix, "uid": "pool", "generation": 1},
        "spec": {"quotas": [{"name": t, "namespaces": [system.ns(t)], "nominalGPUs": system.nominal} for t in system.teams],
                 "preemption": preemption or {"withinQuota": "LowerPriority", "reclaimQuota": "Any"}}})

    def record(g, created: float, status: dict):
        body = {"metadata": {"name": g.name, "namespace": system.ns(g.team), "uid": f"{system.prefix}-{g.name}", "generation": 1,
                             "creationTimestamp": _iso(created)},
                "spec": {"pools": [system.prefix], "replicas": g.replicas, "gpusPerReplica": g.gpus,
                         "priority": g.priority, "topology": {"mode": "Required", "level": "nvlink"},
                         "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}},
                "status": status}
        rec = record_from_k8s(TrainingJobSpec, body)
        return JobView(rec, rec.status)

    views = {}
    for name, s in running.items():
        g = gangs[name]
        if len(s.nodes) != g.replicas:
            continue  # not all bound yet: the live system may count it, the model cannot place it
        at = s.admitted_at or now
        st = {"phase": "Running", "attempt": 0,
              "placement": {"pool": system.prefix, "nodes": list(s.nodes), "admittedAt": _iso(at)},
              "lastCheckpoint": {"step": 1, "path": "/c", "time": _iso(last_ckpt[name])}}
        v = record(g, at, st)
        views[v.record.key] = v
    v = record(preemptor, now, {"phase": "Pending", "attempt": 0})
    views[v.record.key] = v

    def victims(rules: AdmissionRules | None = None) -> list[str]:
        snap = Snapshot(pools={system.prefix: pool}, nodes=nodes, jobs=views, storage_classes=frozenset())
        plan = plan_admission(snap, now, rules=rules)
        out = sorted(victim.key[1] for p in plan.preempt for victim in p.victims)
        if not out and any(a.key[1] == preemptor.name for a in plan.admit):
            return ["(fits without preemption)"]
        return out

    out: dict = {"kubeforge": victims(), "gangs": len(views) - 1,
                 "gpus": sum(gangs[v.record.name].total for k, v in views.items() if v.record.name != preemptor.name)}
    out["kueue-like"] = victims(KUEUE_VICTIMS)
    return out
