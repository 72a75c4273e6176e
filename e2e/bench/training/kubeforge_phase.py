"""The training bench's kubeforge phase: the operator runs, every job is a TrainingJob in one
GPUPool over the fleet, and besides the common figures the phase keeps what the operator says
(conditions, placements, pods, claims), the audit log's start breakdown, the control plane's
profile, the operator's own timings and, with a claim per job, the spot restart."""

from __future__ import annotations

import json
import time
from pathlib import Path

from e2e.bench.lib.cluster import (
    GROUP, JOB_LABEL, POOL, VERSION, apply_pool, component_pid, make_namespace, operator_metrics_port, operator_pid,
    shared_claim, start_operator, wait_for_pool,
)
from e2e.bench.lib.metrics import counter_delta, scrape_apiserver_watches
from e2e.bench.lib.procs import alive
from e2e.bench.lib.timing import say, ts
from e2e.bench.training.audit import breakdown, pod_steps, read_audit
from e2e.bench.training.components import WANTED, ComponentMetrics, OperatorProfile, scrape_operator
from e2e.bench.training.context import Run
from e2e.bench.training.phase import Phase, run_phase
from e2e.bench.training.restart import restart_after_spot_preemption
from e2e.bench.training.workload import OBJECT_STORE_SECRET, SHARED_CLAIM, Job, checkpoint_spec, training_job

__all__ = ["run_kubeforge"]


def run_kubeforge(run: Run, ph: Phase, ns: str, core, custom) -> None:
    """Start the operator on the pool, submit every job as a TrainingJob, measure; then the
    breakdown and the restart. Leaves the operator running (the caller stops it)."""
    args, c, extra = run.args, run.c, run.extra
    apply_pool(c, run.fleet_name)
    run.op_log_offset = run.op_log.stat().st_size if run.op_log.exists() else 0
    t = time.monotonic()
    pid = start_operator(c)
    say(f"operator started (pid {pid}, log {run.op_log})")
    if not wait_for_pool(custom, pid, run.op_log, run.capacity, 120):
        st = custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", POOL).get("status") or {}
        extra["pool_not_ready"] = (f"the GPUPool status did not show {run.capacity} allocatable GPUs within "
                                   f"120 s (it showed gpus={st.get('gpus')}, nodes={st.get('nodes')}); "
                                   f"submitted anyway")
        say(extra["pool_not_ready"])
    extra["operator_ready_s"] = time.monotonic() - t
    make_namespace(c, run.api, ns)
    _storage(run, ns, core)
    checkpoint = checkpoint_spec(args.checkpoint_mode)

    def submit(job: Job, ns=ns) -> None:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs",
                                               training_job(job, ns, args.topology_mode, args.topology_level,
                                                            checkpoint), _preload_content=False)

    say(f"kubeforge: creating {len(run.jobs)} TrainingJobs")
    components = ComponentMetrics({k: component_pid(c, k) for k in WANTED})
    profile = OperatorProfile(operator_pid(c) if args.py_spy else None, c.dir / "operator.pyspy")
    op_before = scrape_operator(operator_metrics_port(c))
    watches_before = scrape_apiserver_watches(c)
    run.costs[ph.name] = run_phase(c, run.api, ph, ns, submit, args, admission_only=args.admission_only,
                                   pid=operator_pid(c))
    extra["components"] = components.finish()
    extra["apiserver_watches"] = counter_delta(watches_before, scrape_apiserver_watches(c))
    extra["py_spy"] = profile.finish()
    extra["operator_times"] = {k: v if "max_concurrent" in k else v - op_before.get(k, 0.0)  # a gauge: as read
                               for k, v in scrape_operator(operator_metrics_port(c)).items()}
    extra["operator_cpu_s"] = run.costs[ph.name].cpu_s
    extra["operator_alive"] = alive(pid)
    _operator_view(run, ns, core, custom)
    _start_breakdown(run, ns, core, custom)


def _storage(run: Run, ns: str, core) -> None:
    """What the checkpoint mode needs before the jobs: the one shared PVC, Bound (existing-claim,
    shared: like for like with the baseline's plain pods, which mount none), or the object
    store's Secret (made-up keys: kwok starts no container)."""
    mode = run.args.checkpoint_mode
    if mode in ("existing-claim", "shared"):
        shared_claim(run.c, core, ns, SHARED_CLAIM)
    elif mode == "object-store":
        core.create_namespaced_secret(ns, {"apiVersion": "v1", "kind": "Secret",
                                           "metadata": {"name": OBJECT_STORE_SECRET, "namespace": ns},
                                           "stringData": {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}},
                                      _preload_content=False)


def _operator_view(run: Run, ns: str, core, custom) -> None:
    """What the operator says about the jobs, from one list after the phase: Admitted reasons,
    placements, where the time went (API server timestamps), pods and claims."""
    extra = run.extra
    items = json.loads(custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs",
                                                            _preload_content=False).data)["items"]
    reasons: dict[str, int] = {}
    admitted = 0
    created_at: dict[str, float] = {}
    admitted_at: dict[str, float] = {}
    for it in items:
        st = it.get("status") or {}
        admitted += bool(st.get("placement"))
        adm = next((x for x in st.get("conditions") or [] if x["type"] == "Admitted"), None)
        key = f"Admitted={adm['status']}/{adm['reason']}" if adm else "no Admitted condition"
        reasons[key] = reasons.get(key, 0) + 1
        created_at[it["metadata"]["name"]] = ts(it["metadata"]["creationTimestamp"])
        if adm and adm["status"] == "True":
            admitted_at[it["metadata"]["name"]] = ts(adm["lastTransitionTime"])
    extra["admitted"] = admitted
    extra["reasons"] = reasons
    pods = json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"]
    first_pod: dict[str, float] = {}
    for p in pods:
        j = p["metadata"]["labels"].get(JOB_LABEL)
        t_p = ts(p["metadata"]["creationTimestamp"])
        first_pod[j] = min(first_pod.get(j, t_p), t_p)
    extra["create_to_admitted"] = [admitted_at[j] - created_at[j] for j in admitted_at]
    extra["admitted_to_pods"] = [first_pod[j] - admitted_at[j] for j in admitted_at if j in first_pod]
    extra["gated_pods"] = sum(1 for p in pods if p["spec"].get("schedulingGates"))
    extra["pending_ungated"] = sum(1 for p in pods if not p["spec"].get("schedulingGates") and not p["spec"].get("nodeName"))
    extra["pods_created"] = len(pods)
    pvcs = json.loads(core.list_namespaced_persistent_volume_claim(ns, _preload_content=False).data)["items"]
    extra["pvcs"] = (len(pvcs), sum(1 for p in pvcs if (p.get("status") or {}).get("phase") == "Bound"))
    extra["job_claims"] = sum(1 for p in pvcs if JOB_LABEL in (p["metadata"].get("labels") or {}))


def _start_breakdown(run: Run, ns: str, core, custom) -> None:
    """The audit log's breakdown of each gang's start (and the baseline's pods beside it), then
    the spot restart when every job has its own claim."""
    args, extra, c = run.args, run.extra, run.c
    replicas = {j.name: j.replicas for j in run.jobs}
    audit = c.audit_log() if hasattr(c, "audit_log") else Path("/nonexistent")
    timeline = read_audit(audit, ns)
    extra["start"] = timeline and breakdown(timeline, replicas)
    base_tl = read_audit(audit, "bench-baseline") if "baseline" in run.phases else None
    if extra["start"] and base_tl:
        extra["start"]["baseline"] = pod_steps(base_tl, replicas)
    if args.restart_nodes > 0 and args.claims == "per-job":
        extra["restart"] = restart_after_spot_preemption(core, custom, ns, args.restart_nodes, args.settle * 2, audit)
