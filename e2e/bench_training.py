#!/usr/bin/env python3
"""Training bench: kubeforge gang admission vs. plain kube-scheduler, on a simulated GPU fleet.

One run, two phases on the same local cluster (``Cluster("kubeforge-bench")``, kwok nodes
from ``e2e/fleets/``), the same job mix from the Alibaba GPU trace:

1. **baseline**: no operator. Every job's replicas are created as plain Pods with the same
   GPU requests (no scheduling gate, no topology affinity) and left to kube-scheduler.
2. **kubeforge**: the operator runs (``kubeforge.demo.start_operator``); every job is a
   TrainingJob (topology ``Preferred`` at level ``nvlink`` unless told otherwise) in one
   GPUPool covering the fleet. The operator admits whole gangs and ungates them together.

Between the phases the baseline namespace is deleted (bounded wait) so that the fleet is empty
again. Binding is measured by watching pods (``spec.nodeName``) on this side of the API
server; every wait is bounded; nothing here asserts on wall-clock time: it prints figures.

Workload (see e2e/README-training-bench.md): GPU tasks of
/work/shared/data/traces/alibaba-openb-pods-2023.csv (``num_gpu`` > 0), taken in trace order
from ``--trace-start``; runs of consecutive tasks with the same ``num_gpu`` are cut into
gangs of 1..``--max-replicas`` replicas (size drawn with ``random.Random(--seed)``, capped by
the run's length); a gang becomes one job of ``replicas`` x ``num_gpu`` GPUs. Jobs are formed
until the GPUs requested reach ``--demand`` x the fleet's GPUs (or ``--jobs`` jobs).

Trace: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC 2023; Alibaba clusterdata, cluster-trace-gpu-v2023
(csv/openb_pod_list_default.csv), CC BY 4.0.

Run: ``.venv/bin/python e2e/bench_training.py [--fleet e2e/fleets/bench-128.yaml] [--keep]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

import yaml  # noqa: E402

from kubeforge.demo import start_operator, stop_operator  # noqa: E402
from kubeforge.sim.cluster import Cluster  # noqa: E402
from kubeforge.sim.fleet import load_fleet, node_manifests  # noqa: E402

TRACE = Path(os.environ.get("KUBEFORGE_TRACES", "/work/shared/data/traces")) / "alibaba-openb-pods-2023.csv"
CREDIT = ('Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0; '
          'Weng et al., "Beware of Fragmentation", USENIX ATC 2023.')
GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
JOB_LABEL = "kubeforge.io/job-name"
RANK_LABEL = "kubeforge.io/replica-index"
POOL = "bench"
GROUP, VERSION = "kubeforge.io", "v1alpha1"


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- workload from the trace -------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    name: str
    replicas: int
    gpus: int  # per replica
    first_task: str  # trace task name of rank 0, for provenance

    @property
    def total(self) -> int:
        return self.replicas * self.gpus


def form_jobs(trace: Path, start: int, seed: int, max_replicas: int, gpu_budget: int, max_jobs: int | None) -> list[Job]:
    """Gangs from consecutive same-``num_gpu`` GPU tasks (see module docstring); deterministic."""
    tasks = []
    with open(trace, newline="") as f:
        for row in csv.DictReader(f):
            n = int(row["num_gpu"])
            if n > 0:
                tasks.append((row["name"], n))
    rng = random.Random(seed)
    jobs: list[Job] = []
    i, total = start, 0
    while i < len(tasks):
        if max_jobs is not None and len(jobs) >= max_jobs:
            break
        if max_jobs is None and total >= gpu_budget:
            break
        name, g = tasks[i]
        want = rng.randint(1, max_replicas)
        n = 1
        while n < want and i + n < len(tasks) and tasks[i + n][1] == g:
            n += 1
        jobs.append(Job(f"j{len(jobs):04d}-{n}x{g}", n, g, name))
        total += n * g
        i += n
    return jobs


# --- observation --------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    jobs: dict[str, Job]
    node_clique: dict[str, str]
    node_block: dict[str, str]
    capacity: int
    t0: float = 0.0
    submitted: dict[str, float] = field(default_factory=dict)  # job -> monotonic time of create call
    submit_errors: list[str] = field(default_factory=list)
    submit_done: float | None = None
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod -> (time, node)
    pod_job: dict[str, str] = field(default_factory=dict)
    pods_seen: set = field(default_factory=set)
    job_bound: dict[str, float] = field(default_factory=dict)  # job -> time its last pod bound
    samples: list[tuple] = field(default_factory=list)
    partial_max: int = 0
    partial_ever: set = field(default_factory=set)
    end: float = 0.0
    end_reason: str = ""
    watch_restarts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_bind: float = 0.0

    def observe(self, pod: dict, now: float) -> None:
        md = pod.get("metadata") or {}
        name = md.get("name")
        job = (md.get("labels") or {}).get(JOB_LABEL)
        if not name or job not in self.jobs:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        with self.lock:
            self.pods_seen.add(name)
            self.pod_job[name] = job
            if node and name not in self.bound:
                self.bound[name] = (now, node)
                self.last_bind = now
                nb = sum(1 for p, j in self.pod_job.items() if j == job and p in self.bound)
                if nb == self.jobs[job].replicas and job not in self.job_bound:
                    self.job_bound[job] = now

    def sample(self, now: float) -> None:
        with self.lock:
            per_job: dict[str, int] = {}
            gpus = 0
            for p in self.bound:
                j = self.pod_job[p]
                per_job[j] = per_job.get(j, 0) + 1
                gpus += self.jobs[j].gpus
            partial = [j for j, n in per_job.items() if n < self.jobs[j].replicas]
            self.partial_max = max(self.partial_max, len(partial))
            self.partial_ever.update(partial)
            self.samples.append((now - self.t0, gpus, len(self.bound), len(self.job_bound), len(partial),
                                 sum(per_job[j] * self.jobs[j].gpus for j in partial)))


def watch_pods(api, ns: str, ph: Phase, stop: threading.Event) -> None:
    """List, then watch pods of ``ns`` (raw JSON, no model deserialization) until ``stop``."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    rv = None
    while not stop.is_set():
        try:
            if rv is None:
                resp = core.list_namespaced_pod(ns, _preload_content=False, _request_timeout=60)
                data = json.loads(resp.data)
                now = time.monotonic()
                for p in data.get("items") or []:
                    ph.observe(p, now)
                rv = data["metadata"]["resourceVersion"]
            resp = core.list_namespaced_pod(ns, watch=True, resource_version=rv, timeout_seconds=5,
                                            allow_watch_bookmarks=True, _preload_content=False,
                                            _request_timeout=(10, 30))
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        rv = None  # 410 Gone or similar: list again
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        ph.observe(obj, time.monotonic())
                if rv is None or stop.is_set():
                    break
            resp.release_conn()
        except Exception as e:  # noqa: BLE001 - keep watching; counted and reported
            ph.watch_restarts += 1
            rv = None
            if ph.watch_restarts < 5:
                say(f"{ph.name}: pod watch restarted ({type(e).__name__}: {str(e)[:120]})")
            time.sleep(0.5)


# --- manifests ------------------------------------------------------------------------------------


def plain_pods(job: Job, ns: str) -> list[dict]:
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job.name}-worker-{r}", "namespace": ns,
                     "labels": {JOB_LABEL: job.name, RANK_LABEL: str(r), "kubeforge.io/bench": "baseline"}},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "trainer", "image": "example.com/train:1", "command": ["torchrun", "train.py"],
                            "resources": {"requests": {GPU: str(job.gpus)}, "limits": {GPU: str(job.gpus)}}}],
        },
    } for r in range(job.replicas)]


def training_job(job: Job, ns: str, mode: str, level: str | None) -> dict:
    topo: dict = {"mode": mode}
    if level and mode != "None":
        topo["level"] = level
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
        "metadata": {"name": job.name, "namespace": ns, "labels": {"kubeforge.io/bench": "kubeforge"}},
        "spec": {
            "pools": [POOL], "replicas": job.replicas, "gpusPerReplica": job.gpus, "topology": topo,
            "template": {"spec": {"terminationGracePeriodSeconds": 0,
                                  "containers": [{"name": "trainer", "image": "example.com/train:1",
                                                  "command": ["torchrun", "train.py"]}]}},
        },
    }


# --- phases ---------------------------------------------------------------------------------------


def wait_until(pred, timeout: float, what: str, interval: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 - transient API errors while waiting
            pass
        time.sleep(interval)
    say(f"gave up waiting for {what} after {timeout:.0f}s")
    return False


def make_namespace(c: Cluster, api, ns: str) -> None:
    from kubernetes import client

    c.kubectl("create", "namespace", ns)
    core = client.CoreV1Api(api)
    wait_until(lambda: core.read_namespaced_service_account("default", ns, _preload_content=False), 60,
               f"default ServiceAccount in {ns}", 0.3)


def delete_namespace(c: Cluster, ns: str, timeout: float) -> bool:
    c.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
    return wait_until(lambda: c.kubectl("get", "namespace", ns, check=False).returncode != 0, timeout,
                      f"namespace {ns} to go", 1.0)


def run_phase(c: Cluster, api, ph: Phase, ns: str, submit, args) -> None:
    """Submit every job (thread pool), watch pods, sample; end when all jobs are bound, when
    nothing new bound for ``--settle`` s after submission, or at ``--phase-timeout``."""
    stop = threading.Event()
    ph.t0 = time.monotonic()
    watcher = threading.Thread(target=watch_pods, args=(api, ns, ph, stop), daemon=True)
    watcher.start()

    def one(job: Job) -> None:
        t = time.monotonic()
        try:
            submit(job)
            ph.submitted[job.name] = t
        except Exception as e:  # noqa: BLE001 - counted and reported
            ph.submit_errors.append(f"{job.name}: {str(e)[:200]}")

    def submit_all() -> None:
        with ThreadPoolExecutor(args.submit_workers) as pool:
            list(pool.map(one, ph.jobs.values()))
        ph.submit_done = time.monotonic()

    submitter = threading.Thread(target=submit_all, daemon=True)
    submitter.start()
    deadline = ph.t0 + args.phase_timeout
    ph.last_bind = ph.t0
    while True:
        time.sleep(args.sample_interval)
        now = time.monotonic()
        ph.sample(now)
        if ph.submit_done and len(ph.job_bound) == len(ph.jobs):
            ph.end_reason = "all jobs bound"
            break
        if ph.submit_done and now - max(ph.last_bind, ph.submit_done) >= args.settle:
            ph.end_reason = f"no pod bound for {args.settle:.0f}s after submission"
            break
        if now >= deadline:
            ph.end_reason = f"phase timeout ({args.phase_timeout:.0f}s)"
            break
    ph.end = time.monotonic()
    stop.set()
    submitter.join(timeout=30)
    watcher.join(timeout=15)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def summarize(ph: Phase) -> dict:
    placed = [j for j in ph.jobs if j in ph.job_bound and j in ph.submitted]
    lat = [ph.job_bound[j] - ph.submitted[j] for j in placed]
    last = max((ph.job_bound[j] for j in placed), default=ph.t0)
    first = min(ph.submitted.values(), default=ph.t0)
    multi = [j for j in placed if ph.jobs[j].replicas > 1]
    in_clique = in_block = multi_node = 0
    for j in multi:
        nodes = {ph.bound[p][1] for p, jj in ph.pod_job.items() if jj == j and p in ph.bound}
        multi_node += len(nodes) > 1
        in_clique += len({ph.node_clique.get(n) for n in nodes}) == 1
        in_block += len({ph.node_block.get(n) for n in nodes}) == 1
    final = ph.samples[-1] if ph.samples else (0, 0, 0, 0, 0, 0)
    by_size: dict[int, list[int]] = {}
    for j, job in ph.jobs.items():
        e = by_size.setdefault(job.gpus, [0, 0])
        e[1] += 1
        e[0] += j in placed
    return {
        "placed": len(placed), "placed_gpus": sum(ph.jobs[j].total for j in placed),
        "p50": pct(lat, 50), "p95": pct(lat, 95), "max": max(lat, default=float("nan")),
        "rate": len(placed) / (last - first) if placed and last > first else float("nan"),
        "span": last - first if placed else float("nan"),
        "multi": len(multi), "multi_node": multi_node, "in_clique": in_clique, "in_block": in_block,
        "alloc_end": final[1], "partial_end": final[4], "partial_gpus_end": final[5],
        "partial_max": ph.partial_max, "partial_ever": len(ph.partial_ever), "by_size": by_size,
        "submit_s": (ph.submit_done or ph.end) - ph.t0,
    }


def print_timeline(ph: Phase, rows: int) -> None:
    print(f"\n  {ph.name}: GPU allocation over time (sampled every ~{ph.samples[1][0] - ph.samples[0][0] if len(ph.samples) > 1 else 0:.0f}s)")
    print(f"  {'t(s)':>6} {'GPUs bound':>11} {'alloc %':>8} {'pods bound':>11} {'jobs placed':>12} {'partial gangs':>14} {'GPUs in partial':>16}")
    s = ph.samples
    pick = s if len(s) <= rows else [s[round(i * (len(s) - 1) / (rows - 1))] for i in range(rows)]
    for t, g, pods, jobs, partial, pg in pick:
        print(f"  {t:6.0f} {g:11d} {100 * g / ph.capacity:7.1f}% {pods:11d} {jobs:12d} {partial:14d} {pg:16d}")


# --- main -----------------------------------------------------------------------------------------


def apply_fleet(c: Cluster, api, fleet) -> list[dict]:
    """Create the fleet's Nodes: one server-side apply, then a status patch per node (client)."""
    from kubernetes import client

    nodes = node_manifests(fleet)
    docs = "\n---\n".join(yaml.safe_dump(n) for n in nodes)
    c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kubeforge-sim", "-f", "-", input=docs, timeout=300)
    core = client.CoreV1Api(api)
    for n in nodes:
        body = {"status": {"capacity": n["status"]["capacity"], "allocatable": n["status"]["allocatable"]}}
        core.patch_node_status(n["metadata"]["name"], body, _preload_content=False)
    names = {n["metadata"]["name"] for n in nodes}

    def ready() -> bool:
        items = json.loads(core.list_node(_preload_content=False).data)["items"]
        ok = 0
        for it in items:
            if it["metadata"]["name"] in names and it["status"].get("allocatable", {}).get(GPU) and any(
                    x["type"] == "Ready" and x["status"] == "True" for x in it["status"].get("conditions") or []):
                ok += 1
        return ok == len(names)

    wait_until(ready, 180, f"{len(names)} kwok nodes Ready with GPUs")
    return nodes


def ts(s: str) -> float:
    """RFC 3339 timestamp of the API server (1 s resolution) as epoch seconds."""
    from datetime import datetime

    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a live process (Linux /proc), NaN when unreadable."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", default="kubeforge-bench", help="local cluster name")
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
    ap.add_argument("--sample-interval", type=float, default=2.0)
    ap.add_argument("--submit-workers", type=int, default=8)
    ap.add_argument("--timeline-rows", type=int, default=12)
    ap.add_argument("--phases", default="baseline,kubeforge", help="comma-separated subset, in order")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    args = ap.parse_args()

    t_start = time.monotonic()
    fleet = load_fleet(args.fleet)
    gpus_per_node = (fleet.defaults.gpu.count if fleet.defaults and fleet.defaults.gpu else 8)
    capacity = sum(g.count * (g.gpu or (fleet.defaults and fleet.defaults.gpu)).count for g in fleet.resolved_groups())
    jobs = form_jobs(TRACE, args.trace_start, args.seed, args.max_replicas, int(args.demand * capacity), args.jobs)
    jobmap = {j.name: j for j in jobs}
    req_gpus = sum(j.total for j in jobs)
    mix: dict[str, int] = {}
    for j in jobs:
        mix[f"{j.replicas}x{j.gpus}"] = mix.get(f"{j.replicas}x{j.gpus}", 0) + 1

    print("=" * 100)
    print("kubeforge training bench: gang admission (kubeforge) vs. plain pods (kube-scheduler)")
    print(CREDIT)
    print(f"fleet {fleet.name} ({args.fleet}): {fleet.node_count} nodes x {gpus_per_node} GPUs = {capacity} GPUs; "
          f"NVLink domains ({CLIQUE}) and blocks ({BLOCK}) from the fleet file")
    print(f"jobs: {len(jobs)} from trace GPU tasks {args.trace_start}.. (seed {args.seed}, gangs of 1..{args.max_replicas} "
          f"consecutive same-num_gpu tasks): {sum(j.replicas for j in jobs)} pods, {req_gpus} GPUs requested "
          f"({req_gpus / capacity:.2f}x the fleet)")
    print("mix (replicas x GPUs: jobs): " + ", ".join(f"{k}: {v}" for k, v in sorted(mix.items(), key=lambda kv: (int(kv[0].split('x')[1]), int(kv[0].split('x')[0])))))
    print(f"kubeforge jobs: topology {args.topology_mode}"
          + (f" at {args.topology_level}" if args.topology_mode != "None" else "")
          + f"; per phase: at most {args.phase_timeout:.0f}s, ends {args.settle:.0f}s after the last bind; "
          f"submit with {args.submit_workers} threads; machine: {os.cpu_count()} CPUs")
    print("=" * 100, flush=True)

    from kubernetes import client, config

    c = Cluster(args.name)
    results: dict[str, tuple[Phase, dict]] = {}
    op_log = c.dir / "operator.log"
    op_log_offset = 0
    extra: dict[str, object] = {}
    try:
        t = time.monotonic()
        c.up(None, log=say)
        cfg = client.Configuration()
        config.load_kube_config(config_file=c.kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = max(16, args.submit_workers * 2)
        api = client.ApiClient(cfg)
        nodes = apply_fleet(c, api, fleet)
        node_clique = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, "") for n in nodes}
        node_block = {n["metadata"]["name"]: n["metadata"]["labels"].get(BLOCK, "") for n in nodes}
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        say(f"cluster up with {len(nodes)} nodes in {time.monotonic() - t:.0f}s")
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)

        for phase in [p.strip() for p in args.phases.split(",") if p.strip()]:
            ph = Phase(phase, jobmap, node_clique, node_block, capacity)
            ns = f"bench-{phase}"
            if phase == "baseline":
                make_namespace(c, api, ns)

                def submit(job: Job, ns=ns) -> None:
                    for pod in plain_pods(job, ns):
                        core.create_namespaced_pod(ns, pod, _preload_content=False)

                say(f"baseline: creating {sum(j.replicas for j in jobs)} plain pods for {len(jobs)} jobs")
                run_phase(c, api, ph, ns, submit, args)
            elif phase == "kubeforge":
                c.kubectl("apply", "-f", "-", input=json.dumps({
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUPool", "metadata": {"name": POOL},
                    "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/sim-fleet": fleet.name}}},
                }))
                op_log_offset = op_log.stat().st_size if op_log.exists() else 0
                t = time.monotonic()
                pid = start_operator(c)
                say(f"operator started (pid {pid}, log {op_log})")

                def pool_ready() -> bool:
                    st = custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", POOL).get("status") or {}
                    return int((st.get("gpus") or {}).get("allocatable") or 0) == capacity

                wait_until(pool_ready, 90, f"GPUPool {POOL} status to show {capacity} GPUs")
                extra["operator_ready_s"] = time.monotonic() - t
                make_namespace(c, api, ns)

                def submit(job: Job, ns=ns) -> None:
                    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs",
                                                           training_job(job, ns, args.topology_mode, args.topology_level),
                                                           _preload_content=False)

                say(f"kubeforge: creating {len(jobs)} TrainingJobs")
                cpu0 = cpu_seconds(pid)
                run_phase(c, api, ph, ns, submit, args)
                extra["operator_cpu_s"] = cpu_seconds(pid) - cpu0
                # What the operator says about the jobs it did not place.
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
                stop_operator(c)
            else:
                raise SystemExit(f"unknown phase {phase!r}")
            results[phase] = (ph, summarize(ph))
            say(f"{phase}: {results[phase][1]['placed']}/{len(jobs)} jobs placed; ended: {ph.end_reason}")
            if phase != args.phases.split(",")[-1].strip():
                t = time.monotonic()
                ok = delete_namespace(c, ns, 120)
                say(f"{ns} deleted in {time.monotonic() - t:.0f}s" if ok else f"{ns} still terminating")
    finally:
        stop_operator(c)
        if op_log.exists():
            with open(op_log, "rb") as f:
                f.seek(op_log_offset)
                lines = f.read().decode(errors="replace").splitlines()
            extra["log_lines"] = len(lines)
            bad = [ln for ln in lines if any(w in ln for w in ("ERROR", "Traceback", "Exception", "CRITICAL"))]
            extra["log_errors"] = len(bad)
            extra["log_warnings"] = sum(1 for ln in lines if "WARNING" in ln)
            extra["log_samples"] = bad[:6]
        if not args.keep:
            try:
                c.down(log=say)
            except Exception as e:  # noqa: BLE001
                say(f"cluster down failed: {e}; run: .venv/bin/kubeforge sim down --name {args.name}")

    # --- report --------------------------------------------------------------------------------
    print("\nRESULTS (times in seconds, measured client-side from the create call to the watch event that "
          "shows the job's last pod with spec.nodeName)")
    names = list(results)
    w = 22
    print(f"  {'':44}" + "".join(f"{n:>{w}}" for n in names))

    def row(label: str, fn) -> None:
        print(f"  {label:44}" + "".join(f"{fn(results[n][0], results[n][1]):>{w}}" for n in names))

    row("jobs submitted / errors", lambda p, s: f"{len(p.submitted)}/{len(p.submit_errors)}")
    row("submission took", lambda p, s: f"{s['submit_s']:.1f}")
    row("phase ended after", lambda p, s: f"{p.end - p.t0:.0f}")
    row("jobs placed (all pods bound)", lambda p, s: f"{s['placed']}/{len(p.jobs)}")
    row("GPUs of placed jobs", lambda p, s: f"{s['placed_gpus']}/{req_gpus}")
    row("create -> all pods bound p50", lambda p, s: f"{s['p50']:.2f}")
    row("create -> all pods bound p95", lambda p, s: f"{s['p95']:.2f}")
    row("create -> all pods bound max", lambda p, s: f"{s['max']:.2f}")
    row("jobs placed per second", lambda p, s: f"{s['rate']:.1f}")
    row("  (placed jobs / first create..last bind s)", lambda p, s: f"{s['span']:.1f}")
    row("multi-pod jobs placed", lambda p, s: f"{s['multi']}")
    row("  of them on more than one node", lambda p, s: f"{s['multi_node']}")
    row("  inside one NVLink domain", lambda p, s: f"{s['in_clique']} ({100 * s['in_clique'] / max(1, s['multi']):.0f}%)")
    row("  inside one IB block", lambda p, s: f"{s['in_block']} ({100 * s['in_block'] / max(1, s['multi']):.0f}%)")
    row("GPUs bound at end (allocation)", lambda p, s: f"{s['alloc_end']} ({100 * s['alloc_end'] / capacity:.0f}%)")
    row("partial gangs at end (GPUs held)", lambda p, s: f"{s['partial_end']} ({s['partial_gpus_end']})")
    row("partial gangs, max in one sample", lambda p, s: f"{s['partial_max']}")
    row("jobs ever seen partial", lambda p, s: f"{s['partial_ever']}")
    sizes = sorted({j.gpus for j in jobs})
    for g in sizes:
        row(f"placed jobs of {g} GPU/replica", lambda p, s, g=g: f"{s['by_size'][g][0]}/{s['by_size'][g][1]}")
    for n in names:
        p, s = results[n]
        print(f"  {n} ended: {p.end_reason}; pod watch restarts: {p.watch_restarts}")
        for e in p.submit_errors[:3]:
            print(f"    submit error: {e}")
    if "kubeforge" in results:
        print(f"  kubeforge: operator ready (pool status) {extra.get('operator_ready_s', float('nan')):.1f}s after start; "
              f"jobs with status.placement: {extra.get('admitted')}; pods created {extra.get('pods_created')}, "
              f"still gated {extra.get('gated_pods')}, ungated but unbound {extra.get('pending_ungated')}; "
              f"PVCs (created, bound): {extra.get('pvcs')}; operator CPU during the phase "
              f"{extra.get('operator_cpu_s', float('nan')):.1f}s")
        print(f"  kubeforge: Admitted conditions at end: {extra.get('reasons')}")
        a, b = extra.get("create_to_admitted") or [], extra.get("admitted_to_pods") or []
        print(f"  kubeforge: where the time goes (API server timestamps, 1 s resolution): TrainingJob created -> "
              f"Admitted p50 {pct(a, 50):.0f}s p95 {pct(a, 95):.0f}s max {max(a, default=float('nan')):.0f}s; "
              f"Admitted -> first pod created p50 {pct(b, 50):.0f}s p95 {pct(b, 95):.0f}s max {max(b, default=float('nan')):.0f}s")
        print(f"  kubeforge: operator log (this run): {extra.get('log_lines')} lines, {extra.get('log_errors')} "
              f"error/traceback lines, {extra.get('log_warnings')} warnings")
        for ln in extra.get("log_samples") or []:
            print(f"    | {ln[:220]}")
    for n in names:
        print_timeline(results[n][0], args.timeline_rows)
    print(f"\ntotal run {time.monotonic() - t_start:.0f}s; {CREDIT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
