"""Training bench: kubeforge gang admission vs. plain kube-scheduler, on a simulated GPU fleet.

One run, two phases on the same local cluster (``--cluster``, kwok nodes from ``--fleet``),
the same job mix from the Alibaba GPU trace (``--trace``):

1. **baseline**: no operator. Every job's replicas are created as plain Pods with the same
   GPU requests (no scheduling gate, no topology affinity) and left to kube-scheduler.
2. **kubeforge**: the operator runs (``kubeforge.demo.start_operator``); every job is a
   TrainingJob (topology ``Preferred`` at level ``nvlink`` unless told otherwise) in one
   GPUPool covering the fleet. The operator admits whole gangs and ungates them together.
3. **kueue** (Kueue + JobSet, when built by ``hack/build-peers.sh``): every job is a JobSet
   queued in Kueue with TopologyAwareScheduling; see :mod:`e2e.bench.training.kueue`.

Between the phases the baseline namespace is deleted (bounded wait) so that the fleet is empty
again. Binding is measured by watching pods (``spec.nodeName``) on this side of the API
server, admission by watching TrainingJobs (condition ``Admitted=True``); every wait is
bounded; nothing here asserts on wall-clock time: it prints figures.

Besides latency and placement quality, each phase prints what it cost: the API server's own
``apiserver_request_total`` counted before and after the phase and broken down by verb and
resource (writes per placed gang next to pods per gang), the operator's own
``kubeforge_api_requests_total`` when it exposes one, and the operator's CPU seconds per
placed job and peak RSS.

Workload (see e2e/README-training-bench.md and :mod:`e2e.bench.training.workload`): gangs cut
from consecutive same-``num_gpu`` GPU tasks of the trace until the GPUs requested reach
``--demand`` x the fleet's GPUs (or ``--jobs``).

Trace: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC 2023; Alibaba clusterdata, cluster-trace-gpu-v2023
(csv/openb_pod_list_default.csv), CC BY 4.0: the copy shipped with kubeforge
(``kubeforge/data/traces/``; ``$KUBEFORGE_TRACES`` names another directory, ``--trace`` a file).

Modules: the run (here), one phase (:mod:`~e2e.bench.training.phase`), the kubeforge phase
(:mod:`~e2e.bench.training.kubeforge_phase`), Kueue + JobSet (:mod:`~e2e.bench.training.kueue`),
the cost (:mod:`~e2e.bench.training.cost`), the audit log's breakdown
(:mod:`~e2e.bench.training.audit`), the control plane's profile
(:mod:`~e2e.bench.training.components`), the spot restart (:mod:`~e2e.bench.training.restart`),
the report (:mod:`~e2e.bench.training.report`, :mod:`~e2e.bench.training.claims_report`).

Run: ``.venv/bin/python -m e2e.bench.training [--fleet e2e/fleets/bench-128.yaml] [--keep]``
(``make bench-training``).
"""

from __future__ import annotations

import argparse
import inspect
import os
import time

from kubeforge.sim.fleet import load_fleet
from kubeforge.objects import PLACEMENT_LOST

from e2e.bench.lib.cluster import (
    BLOCK, CLIQUE, Cluster, apply_crds, apply_fleet, component_pid, delete_namespace, down, fleet_capacity,
    make_namespace, open_api, stop_operator,
)
from e2e.bench.lib.procs import log_digest, log_lines_since
from e2e.bench.lib.source import ROOT, crds_dir, describe_source
from e2e.bench.lib.timing import Abort, say
from e2e.bench.lib.traces import ALIBABA_CREDIT, ALIBABA_PODS, add_trace_arg, check_trace
from e2e.bench.training import kueue
from e2e.bench.training.audit import KCM_API_QPS, audit_policy_file, kcm_args
from e2e.bench.training.components import WANTED, ComponentMetrics
from e2e.bench.training.context import Run
from e2e.bench.training.kubeforge_phase import run_kubeforge
from e2e.bench.training.phase import Phase, run_phase, summarize
from e2e.bench.training.report import report
from e2e.bench.training.workload import CHECKPOINT_MODES, SHARED_CLAIM, Job, form_jobs, mix, plain_pods

__all__ = ["DEFAULT_CLUSTER", "main", "parse_args"]

DEFAULT_CLUSTER = os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-bench")
PHASES = ("baseline", "kubeforge", "kueue")


def _workload_flags(ap: argparse.ArgumentParser) -> None:
    """The cluster, the trace, the fleet, the jobs and the phases' limits."""
    ap.add_argument("--cluster", "--name", dest="cluster", default=DEFAULT_CLUSTER,
                    help="local cluster name (default kubeforge-bench or $KUBEFORGE_BENCH_CLUSTER)")
    add_trace_arg(ap, ALIBABA_PODS, "Alibaba openb pod trace")
    ap.add_argument("--fleet", default=str(ROOT / "e2e/fleets/bench-64.yaml"), help="fleet file")
    ap.add_argument("--trace-start", type=int, default=1400,
                    help="index of the first GPU task (num_gpu>0) taken from the trace")
    ap.add_argument("--seed", type=int, default=7, help="seed for gang sizes")
    ap.add_argument("--max-replicas", type=int, default=4, help="largest gang (replicas) formed")
    ap.add_argument("--demand", type=float, default=1.25, help="GPUs requested / fleet GPUs (ignored with --jobs)")
    ap.add_argument("--jobs", type=int, default=None, help="exact number of jobs (overrides --demand)")
    ap.add_argument("--topology-mode", default="Preferred", choices=["Required", "Preferred", "None"])
    ap.add_argument("--topology-level", default="nvlink")
    ap.add_argument("--phase-timeout", type=float, default=200, help="seconds per phase, at most")
    ap.add_argument("--settle", type=float, default=25, help="end a phase when nothing bound for this long")
    ap.add_argument("--drain", type=float, default=3,
                    help="seconds after a phase ends before its API counters are read again (default 3)")
    ap.add_argument("--sample-interval", type=float, default=2.0)
    ap.add_argument("--submit-workers", type=int, default=8, help="threads issuing the create calls")
    ap.add_argument("--timeline-rows", type=int, default=12)
    ap.add_argument("--phases", default="baseline,kubeforge,kueue",
                    help="comma-separated subset, in order (kueue: Kueue + JobSet, skipped when not built)")
    ap.add_argument("--admission-only", action="store_true",
                    help="end the kubeforge phase once every job is Admitted (or none was for --settle s), "
                         "not once every pod is bound")


def _run_flags(ap: argparse.ArgumentParser) -> None:
    """Namespaces, the kubeforge code, the claims, the restart, the control plane, py-spy."""
    ap.add_argument("--delete-timeout", type=float, default=None,
                    help="bound on deleting a phase's namespace (default: 120 s, or 1 s per 10 pods if more)")
    ap.add_argument("--operator-src", default=os.environ.get("KUBEFORGE_OPERATOR_SRC"),
                    help="drive the kubeforge code (operator, CRDs, sim) of this source tree instead of the working "
                         "tree, e.g. an export of a commit: git archive HEAD operator crds hack | tar -x -C DIR")
    ap.add_argument("--checkpoint-mode", default=None, choices=list(CHECKPOINT_MODES),
                    help="the TrainingJobs' checkpoint storage: " + "; ".join(f"{k}: {v}" for k, v in
                                                                              CHECKPOINT_MODES.items())
                         + " (default per-job). shared and object-store create no claim per job: nothing waits "
                           "for the PV controller")
    ap.add_argument("--claims", default=None, choices=["per-job", "shared"],
                    help="the older spelling: per-job = --checkpoint-mode per-job; shared = --checkpoint-mode "
                         "existing-claim (every job mounts one existing PVC whole)")
    ap.add_argument("--restart-nodes", type=int, default=4,
                    help="after the kubeforge phase (per-job claims), put the spot interruption taint on this many "
                         "nodes running gangs whose claims are Bound and measure taint -> Running again (0: skip)")
    ap.add_argument("--kcm-api-qps", type=int, default=KCM_API_QPS,
                    help="kube-controller-manager's --kube-api-qps and --kube-api-burst for the cluster the bench "
                         "creates (default %(default)s, as Kubernetes' own scale tests run it; 0: upstream's 20 / 30, "
                         "which caps the PV controller at ~4-6 claim bindings a second)")
    ap.add_argument("--py-spy", action="store_true",
                    help="sample the operator with py-spy (pip install py-spy) during the kubeforge phase and print "
                         "where its event loop spends its time")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``); ``phase_list`` (the phases to run: ``kueue`` only when
    the peers are built) is added, the rest checked."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.training", description=__doc__.split("\n\n")[0])
    _workload_flags(ap)
    _run_flags(ap)
    args = ap.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    bad = [p for p in phases if p not in PHASES]
    if bad or not phases:
        ap.error(f"--phases: unknown {bad or 'empty'}; use baseline, kubeforge and/or kueue")
    args.phase_list = kueue.select_phases(phases, say)
    if args.max_replicas < 1 or (args.jobs is not None and args.jobs < 1):
        ap.error("--max-replicas and --jobs must be at least 1")
    check_trace(ap, args.trace)
    if args.claims and args.checkpoint_mode:
        ap.error("--claims is the older spelling of --checkpoint-mode: give one of them")
    args.checkpoint_mode = args.checkpoint_mode or {"shared": "existing-claim"}.get(args.claims or "", "per-job")
    args.claims = args.checkpoint_mode  # what the report and the restart read
    return args


def header(args, fleet, capacity: int, gpus_per_node: str, jobs: list[Job], phases: list[str]) -> None:
    """What the run is: the trace, the fleet, the jobs and their mix, the phases, the machine."""
    req_gpus = sum(j.total for j in jobs)
    n_pods = sum(j.replicas for j in jobs)
    print("=" * 100)
    print("kubeforge training bench: gang admission (kubeforge) vs. plain pods (kube-scheduler)")
    print(ALIBABA_CREDIT)
    print(f"trace {args.trace}")
    print(f"fleet {fleet.name} ({args.fleet}): {fleet.node_count} nodes x {gpus_per_node} GPUs = {capacity} GPUs; "
          f"NVLink domains ({CLIQUE}) and blocks ({BLOCK}) from the fleet file")
    print(f"jobs: {len(jobs)} from trace GPU tasks {args.trace_start}.. (seed {args.seed}, gangs of 1..{args.max_replicas} "
          f"consecutive same-num_gpu tasks): {n_pods} pods, {req_gpus} GPUs requested "
          f"({req_gpus / capacity:.2f}x the fleet)")
    print("mix (replicas x GPUs: jobs): " + mix(jobs))
    print(f"phases: {', '.join(phases)}; kubeforge jobs: topology {args.topology_mode}"
          + (f" at {args.topology_level}" if args.topology_mode != "None" else "")
          + {"per-job": "; checkpoint PVC per job", "existing-claim": f"; one shared checkpoint PVC ({SHARED_CLAIM})"}
          .get(args.checkpoint_mode, f"; checkpoints: {CHECKPOINT_MODES[args.checkpoint_mode]}")
          + f"; per phase: at most {args.phase_timeout:.0f}s, ends {args.settle:.0f}s after the last "
          + ("admission (kubeforge, --admission-only) / bind" if args.admission_only else "bind")
          + f"; submit with {args.submit_workers} threads; cluster {args.cluster} "
          + (f"(kube-controller-manager --kube-api-qps/--kube-api-burst {args.kcm_api_qps})" if args.kcm_api_qps
             else "(kube-controller-manager's default API rate, 20 qps / 30 burst)")
          + f"; machine: {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"kubeforge code: {describe_source()}")
    print("=" * 100, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the bench; returns the process exit code (0 unless setup failed)."""
    args = parse_args(argv)
    t_start = time.monotonic()
    fleet = load_fleet(args.fleet)
    capacity, gpus_per_node = fleet_capacity(fleet)
    jobs = form_jobs(args.trace, args.trace_start, args.seed, args.max_replicas, int(args.demand * capacity), args.jobs)
    header(args, fleet, capacity, gpus_per_node, jobs, args.phase_list)
    run = Run(args, Cluster(args.cluster), fleet.name, capacity, jobs, args.phase_list)
    try:
        bring_up(run, fleet)
        for phase in run.phases:
            run_one(run, phase)
    except Abort as e:
        run.extra["error"] = str(e)
        say(f"stopped: {e}")
    finally:
        stop_operator(run.c)
        lines = log_lines_since(run.op_log, run.op_log_offset)
        if lines is not None:
            run.extra.update(log_digest(lines))
            run.extra["placements_lost"] = sum(1 for ln in lines if f": {PLACEMENT_LOST}: " in ln)
        down(run.c, args.keep)
    report(run)
    extra = run.extra
    if extra.get("error"):
        print(f"\nstopped early: {extra['error']}")
        for ln in extra.get("log_samples") or []:
            print(f"    | {ln[:220]}")
    print(f"\ntotal run {time.monotonic() - t_start:.0f}s, load average (1/5/15 min) at the end "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}; {ALIBABA_CREDIT}")
    return 1 if extra.get("error") else 0


def bring_up(run: Run, fleet) -> None:
    """The cluster (with the audit policy and kube-controller-manager's API rate), the fleet's
    nodes, the CRDs."""
    args, c = run.args, run.c
    t = time.monotonic()
    if "audit_policy" in inspect.signature(c.up).parameters:
        c.up(None, log=say, extra_args=kcm_args(args.kcm_api_qps), audit_policy=audit_policy_file(c.dir))
    else:  # an --operator-src from before issue 20: no audit log, no breakdown
        c.up(None, log=say)
    run.api = open_api(c, max(16, args.submit_workers * 2))
    nodes = apply_fleet(c, run.api, fleet)
    run.node_clique = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, "") for n in nodes}
    run.node_block = {n["metadata"]["name"]: n["metadata"]["labels"].get(BLOCK, "") for n in nodes}
    apply_crds(c, crds_dir())
    say(f"cluster up with {len(nodes)} nodes in {time.monotonic() - t:.0f}s")


def run_one(run: Run, phase: str) -> None:
    """One phase on the fleet, then (unless it is the last) its namespace deleted, bounded."""
    from kubernetes import client

    args, c, api = run.args, run.c, run.api
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ph = Phase(phase, run.jobmap, run.node_clique, run.node_block, run.capacity)
    ns = f"bench-{phase}"
    if phase == "baseline":
        make_namespace(c, api, ns)

        def submit(job: Job, ns=ns) -> None:
            for pod in plain_pods(job, ns):
                core.create_namespaced_pod(ns, pod, _preload_content=False)

        say(f"baseline: creating {run.n_pods} plain pods for {len(run.jobs)} jobs")
        components = ComponentMetrics({k: component_pid(c, k) for k in WANTED})
        run.costs[phase] = run_phase(c, api, ph, ns, submit, args)
        run.extra["components_baseline"] = components.finish()
    elif phase == "kueue":
        run.extra["kueue"] = kueue.run(c, api, ph, ns, args, run.fleet_name, run.capacity,
                                       last=phase == run.phases[-1])
    else:
        run_kubeforge(run, ph, ns, core, custom)
        stop_operator(c)
    run.results[phase] = (ph, summarize(ph))
    say(f"{phase}: {run.results[phase][1]['placed']}/{len(run.jobs)} jobs placed; ended: {ph.end_reason}")
    if phase != run.phases[-1]:
        t = time.monotonic()
        ok = delete_namespace(c, ns, args.delete_timeout or max(120.0, run.n_pods / 10))
        say(f"{ns} deleted in {time.monotonic() - t:.0f}s" if ok else f"{ns} still terminating")
