"""The training bench's "Kueue + JobSet" phase (phase name ``kueue``): the same fleet and
trace as the kubeforge phase, run through the real Kueue (TopologyAwareScheduling on) and
JobSet managers built by ``hack/build-peers.sh``.

Setup (not measured): JobSet's and Kueue's CRDs, webhooks and managers (see
:mod:`e2e.peers.stack`); a Topology with the fleet's levels (block -> NVLink domain -> host), one
ResourceFlavor selecting the fleet's nodes with that Topology, one ClusterQueue holding every
GPU of the fleet, a LocalQueue in the phase's namespace. Each job becomes one JobSet (one
replicated Job of ``replicas`` indexed pods of ``gpus`` GPUs) queued in that LocalQueue, with
``kueue.x-k8s.io/podset-preferred-topology`` (``--topology-mode Preferred``, the default) or
``-required-topology`` at the node label of ``--topology-level`` (``nvlink`` ->
``nvidia.com/gpu.clique``, ``block`` -> ``cloud.google.com/gce-topology-block``).

Measured exactly as the other phases (:func:`e2e.bench.training.phase.run_phase`: create call ->
the watch event showing the gang's last pod bound), plus Admitted from a Workload watch
(condition ``Admitted=True``), the CPU of Kueue, JobSet and kube-controller-manager (whose Job
controller creates the pods) from /proc, and the writes per gang from
``apiserver_request_total`` attributed to Kueue, JobSet and the Job controller.

Kueue runs with its shipped client rate limit (QPS 50, burst 100);
``KUBEFORGE_KUEUE_QPS=500,1000`` (QPS, burst) raises it, to see how much of its latency is that
limiter. Its pods carry :data:`e2e.peers.queues.KWOK_KEEP_RUNNING`, so that kwok keeps them
Running like the other phases' pods (it completes pods owned by a Job within a second otherwise;
see :mod:`e2e.peers._kwok`).

It reuses the training bench's Phase, watch and cost code (:mod:`e2e.bench.training.phase`,
:mod:`e2e.bench.lib`) rather than keeping a copy.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from e2e.bench.lib.cluster import JOB_LABEL, component_pid, delete_namespace, make_namespace
from e2e.bench.lib.metrics import READ_VERBS
from e2e.bench.lib.procs import cpu_seconds, log_lines_since
from e2e.bench.lib.stats import pct
from e2e.bench.lib.timing import Abort, say, ts, wait_until
from e2e.bench.lib.watch import watch_raw
from e2e.bench.training.phase import run_phase
from e2e.peers import BUILD_HINT, PeersError, peers_bin, queues
from e2e.peers.stack import describe, peer_pid, start_jobset, start_kueue, stop_peers

PHASE = "kueue"
LEVEL_LABELS = {"nvlink": "nvidia.com/gpu.clique", "block": "cloud.google.com/gce-topology-block"}
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"


def select_phases(phases: list[str], say=print) -> list[str]:
    """``phases`` without ``kueue`` when the peers are not built (and a line saying how to
    build them); unchanged otherwise."""
    if PHASE in phases and peers_bin() is None:
        say(f"skipping the Kueue + JobSet phase: {BUILD_HINT}")
        return [p for p in phases if p != PHASE]
    return phases


@dataclass
class KueueResult:
    """What the phase measured besides the common Phase figures."""

    versions: str = ""
    qps: tuple[float, int] = (50.0, 100)  # Kueue's clientConnection qps, burst
    ready_s: float = float("nan")
    cpu: dict[str, float] = field(default_factory=dict)  # component -> CPU seconds in the phase
    api: dict | None = None
    rss_peak: float = float("nan")
    reasons: dict[str, int] = field(default_factory=dict)
    create_to_admitted: list[float] = field(default_factory=list)
    admitted_to_pods: list[float] = field(default_factory=list)
    pods: int = 0
    gated: int = 0
    log: dict = field(default_factory=dict)  # peer -> (error lines, first messages)


def _owner_name(obj: dict) -> str | None:
    for o in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if o.get("kind") == "JobSet":
            return o.get("name")
    return None


def run(c, api, ph, ns: str, args, fleet_name: str, capacity: int, last: bool) -> KueueResult:
    """Run the phase on cluster ``c``; returns its own figures (the Phase ``ph`` is filled as
    for the other phases).

    Args:
        c, api: the cluster and its kubernetes ApiClient.
        ph: the Phase to fill.
        ns: the namespace of the phase (created here).
        args: the bench's arguments (topology mode/level, timeouts, workers...).
        fleet_name: value of the fleet's ``kubeforge.io/sim-fleet`` node label.
        capacity: GPUs of the fleet (the ClusterQueue's nominal quota).
        last: whether no phase follows (else the namespace is deleted while Kueue still runs,
            since its finalizers need it).
    """
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    res = KueueResult(versions=describe())
    t = time.monotonic()
    logs = {p: c.dir / "peers" / f"{p}.log" for p in ("kueue", "jobset")}
    offsets = {p: f.stat().st_size if f.exists() else 0 for p, f in logs.items()}
    qps, _, burst = os.environ.get("KUBEFORGE_KUEUE_QPS", "50,100").partition(",")
    res.qps = (float(qps), int(burst or 2 * float(qps)))
    try:
        start_jobset(c)
        start_kueue(c, qps=res.qps[0], burst=res.qps[1])
    except PeersError as e:
        stop_peers(c)
        raise Abort(f"Kueue + JobSet did not start: {e}") from e
    res.ready_s = time.monotonic() - t
    say(f"kueue: Kueue and JobSet managers ready in {res.ready_s:.0f}s ({res.versions})")
    try:
        _queues(c, api, custom, ns, fleet_name, capacity)
        _measure(c, api, custom, ph, ns, args, res)
        _collect(custom, core, ns, res)
        if not last:
            t = time.monotonic()
            ok = delete_namespace(c, ns, args.delete_timeout or 300)
            say(f"{ns} deleted in {time.monotonic() - t:.0f}s (Kueue still running)" if ok else f"{ns} still terminating")
    finally:
        stop_peers(c)
        for peer, log in logs.items():  # this run's lines only (the logs are appended to)
            lines = log_lines_since(log, offsets[peer])
            if lines is not None:
                bad = [ln for ln in lines if '"level":"error"' in ln or "panic" in ln]
                res.log[peer] = (len(bad), [_msg(ln) for ln in bad[:3]])
    return res


def _queues(c, api, custom, ns: str, fleet_name: str, capacity: int) -> None:
    """The Topology, the ResourceFlavor, the ClusterQueue holding every GPU, the namespace and its
    LocalQueue; waits (60 s at most) for the ClusterQueue to be Active."""
    levels = [LEVEL_LABELS["block"], LEVEL_LABELS["nvlink"]]
    objs = [queues.topology("bench", levels),
            queues.resource_flavor("bench", {"kubeforge.io/sim-fleet": fleet_name}, "bench"),
            queues.cluster_queue("bench", "bench", capacity)]
    c.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))
    make_namespace(c, api, ns)
    c.kubectl("apply", "-f", "-", input=json.dumps(queues.local_queue(ns, "bench", "bench")))
    wait_until(lambda: any(x["type"] == "Active" and x["status"] == "True" for x in
                           (custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues",
                                                             "bench").get("status") or {}).get("conditions") or []),
               60, "ClusterQueue bench to be Active")


def _measure(c, api, custom, ph, ns: str, args, res: KueueResult) -> None:
    """Submit every job as a JobSet and measure the phase as the others are (plus a Workload
    watch for Admitted, and the CPU of Kueue, JobSet and kube-controller-manager)."""
    import threading

    mode = args.topology_mode
    label = LEVEL_LABELS.get(args.topology_level, args.topology_level)

    def submit(job) -> None:
        body = queues.jobset(job.name, ns, job.replicas, job.gpus, "bench", mode, label,
                             labels={"kubeforge.io/bench": PHASE},
                             pod_labels={JOB_LABEL: job.name, "kubeforge.io/bench": PHASE},
                             pod_annotations=queues.KWOK_KEEP_RUNNING)
        custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, ns, "jobsets", body,
                                               _preload_content=False)

    def on_workload(wl: dict, now: float) -> None:
        owner = _owner_name(wl)
        if owner:
            ph.observe_job({**wl, "metadata": {**wl["metadata"], "name": owner}}, now)

    stop = threading.Event()
    watcher = threading.Thread(target=watch_raw, daemon=True, args=(
        lambda **kw: custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, ns, "workloads", **kw),
        on_workload, stop, ph.watch_restarts, f"{PHASE} workload"))
    watcher.start()
    pids = {"kueue": peer_pid(c, "kueue"), "jobset": peer_pid(c, "jobset"),
            "kube-controller-manager": component_pid(c, "kube-controller-manager")}
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    say(f"kueue: creating {len(ph.jobs)} JobSets")
    cost = run_phase(c, api, ph, ns, submit, args, pid=pids["kueue"])
    res.cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
    res.api, res.rss_peak = cost.api, cost.rss_peak
    stop.set()
    watcher.join(timeout=15)


def _collect(custom, core, ns: str, res: KueueResult) -> None:
    """Workload conditions at the end, and where the time went (API server timestamps)."""
    items = json.loads(custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, ns, "workloads",
                                                            _preload_content=False).data)["items"]
    created: dict[str, float] = {}
    admitted: dict[str, float] = {}
    for it in items:
        owner = _owner_name(it) or it["metadata"]["name"]
        conds = (it.get("status") or {}).get("conditions") or []
        adm = next((x for x in conds if x["type"] == "Admitted"), None)
        qr = next((x for x in conds if x["type"] == "QuotaReserved"), None)
        key = f"Admitted={adm['status']}/{adm['reason']}" if adm else \
            (f"QuotaReserved={qr['status']}/{qr['reason']}" if qr else "no condition")
        res.reasons[key] = res.reasons.get(key, 0) + 1
        created[owner] = ts(it["metadata"]["creationTimestamp"])
        if adm and adm["status"] == "True":
            admitted[owner] = ts(adm["lastTransitionTime"])
    pods = json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"]
    first: dict[str, float] = {}
    for p in pods:
        j = (p["metadata"].get("labels") or {}).get(JOB_LABEL)
        tp = ts(p["metadata"]["creationTimestamp"])
        first[j] = min(first.get(j, tp), tp)
    res.create_to_admitted = [admitted[j] - created[j] for j in admitted]
    res.admitted_to_pods = [first[j] - admitted[j] for j in admitted if j in first]
    res.pods = len(pods)
    res.gated = sum(1 for p in pods if p["spec"].get("schedulingGates"))


def _msg(line: str) -> str:
    """``msg: error`` of a controller-runtime JSON log line (the line itself if not JSON)."""
    try:
        d = json.loads(line)
        return f"{d.get('msg', '')}: {d.get('error', '')}"
    except ValueError:
        return line


def who_writes(verb: str, group: str, resource: str, sub: str) -> str:
    """Who makes a write of (verb, group, resource, subresource) in the Kueue + JobSet phase.

    The API server's counter has no client label; this is by what each component writes:
    Kueue writes Workloads, queue statuses, suspends/resumes JobSets and ungates pods (TAS);
    JobSet creates Jobs and a headless Service per JobSet and writes JobSet status; the Job
    controller of kube-controller-manager creates the pods and writes Job status.
    """
    if resource == "jobsets" and verb == "POST":
        return "bench"
    if resource in ("workloads", "clusterqueues", "localqueues", "resourceflavors", "topologies", "cohorts"):
        return "kueue"
    if resource == "pods" and not sub and verb in ("PATCH", "PUT"):
        return "kueue"  # the TAS ungater removes kueue.x-k8s.io/topology and sets the node selector
    if resource == "jobsets" or (resource == "jobs" and not sub and verb in ("PATCH", "PUT")):
        return "kueue / jobset"  # Kueue suspends and resumes JobSets; JobSet propagates to its Jobs
    if resource in ("jobs", "services") and verb == "POST":
        return "jobset"
    if resource == "pods" and sub == "binding":
        return "kube-scheduler"
    if resource == "pods" and not sub and verb == "POST":
        return "job controller"
    if resource == "jobs" and sub == "status":
        return "job controller"
    if resource == "pods" and sub == "status":
        return "kwok"
    if resource in ("nodes", "leases"):
        return "kwok"
    if resource == "events" and group == "events.k8s.io":
        return "kube-scheduler"
    if resource == "events":
        return "events"
    if resource in ("endpoints", "endpointslices"):
        return "controller-manager"
    return "other"


CONTROLLERS = ("kueue", "kueue / jobset", "jobset", "job controller")


def print_report(res: KueueResult, s: dict, ph) -> None:
    """Print the phase's cost (writes per gang by component, CPU, RSS) and what Kueue says."""
    gangs, pods = s["placed"], s["placed_pods"]
    n_per = pods / gangs if gangs else float("nan")
    per = (lambda v: f"{v / gangs:8.2f}") if gangs else (lambda v: f"{'-':>8}")
    print(f"\n  kueue (Kueue + JobSet: {res.versions}; Kueue client QPS {res.qps[0]:g} / burst {res.qps[1]}): managers "
          f"ready {res.ready_s:.0f}s after start; "
          f"Workload conditions at end: {res.reasons}; pods created {res.pods}, still gated {res.gated}")
    a, b = res.create_to_admitted, res.admitted_to_pods
    print(f"  kueue: where the time goes (API server timestamps, 1 s resolution): Workload created -> Admitted p50 "
          f"{pct(a, 50):.0f}s p95 {pct(a, 95):.0f}s max {max(a, default=float('nan')):.0f}s; Admitted -> "
          f"first pod created p50 {pct(b, 50):.0f}s p95 {pct(b, 95):.0f}s max {max(b, default=float('nan')):.0f}s")
    for peer, (n, samples) in res.log.items():
        print(f"  kueue: {peer} log (this phase, shutdown included): {n} error lines" + (", the first:" if n else ""))
        for ln in samples:
            print(f"    | {ln[:220]}")
    print(f"\n  kueue: API calls during the phase ({gangs} placed gangs, N = {n_per:.2f} pods per placed gang)")
    if res.api is None:
        print("    apiserver_request_total: not available")
    else:
        rows: dict[tuple, dict[str, float]] = {}
        reads: dict[str, float] = {}
        for (verb, group, r, sub, code), v in res.api.items():
            if verb in READ_VERBS:
                reads[verb] = reads.get(verb, 0) + v
                continue
            key = (who_writes(verb, group, r, sub), verb, (f"{group}/" if group and r == "events" else "") + r
                   + (f"/{sub}" if sub else ""))
            rows.setdefault(key, {})[code] = rows.get(key, {}).get(code, 0) + v
        order = [*CONTROLLERS, "events", "bench", "kube-scheduler", "kwok", "controller-manager", "other"]
        print(f"    {'who':<20} {'verb':<7} {'resource':<34} {'count':>7} {'per gang':>8}  codes")
        totals: dict[str, float] = {}
        for key in sorted(rows, key=lambda k: (order.index(k[0]), k[2], k[1])):
            n = sum(rows[key].values())
            totals[key[0]] = totals.get(key[0], 0) + n
            codes = " ".join(f"{cd}:{int(v)}" for cd, v in sorted(rows[key].items()))
            print(f"    {key[0]:<20} {key[1]:<7} {key[2]:<34} {int(n):>7} {per(n)}  {codes}")
        ctl = sum(totals.get(w, 0) for w in CONTROLLERS)
        kj = sum(totals.get(w, 0) for w in CONTROLLERS[:3])
        print(f"    => Kueue + JobSet writes per placed gang: {per(kj).strip()}; with the Job controller's (pods, "
              f"jobs/status): {per(ctl).strip()}; incl. core/v1 events: {per(ctl + totals.get('events', 0)).strip()} "
              f"(N per gang {n_per:.2f})")
        print("    reads by every client: " + ", ".join(f"{v} {int(n)}" for v, n in sorted(reads.items())))
    cpu = res.cpu
    kj_cpu = cpu.get("kueue", float("nan")) + cpu.get("jobset", float("nan"))
    pj = (lambda v: f"{1000 * v / gangs:.0f}") if gangs else (lambda v: "-")
    print(f"    CPU during the phase: Kueue {cpu.get('kueue', float('nan')):.1f}s + JobSet {cpu.get('jobset', float('nan')):.1f}s"
          f" = {pj(kj_cpu)} ms per placed job; kube-controller-manager {cpu.get('kube-controller-manager', float('nan')):.1f}s"
          f" ({pj(cpu.get('kube-controller-manager', float('nan')))} ms per job; its Job controller creates the pods); "
          f"Kueue RSS peak {res.rss_peak:.0f} MiB")
