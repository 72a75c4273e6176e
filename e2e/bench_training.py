#!/usr/bin/env python3
"""Training bench: kubeforge gang admission vs. plain kube-scheduler, on a simulated GPU fleet.

One run, two phases on the same local cluster (``--cluster``, kwok nodes from ``--fleet``),
the same job mix from the Alibaba GPU trace (``--trace``):

1. **baseline**: no operator. Every job's replicas are created as plain Pods with the same
   GPU requests (no scheduling gate, no topology affinity) and left to kube-scheduler.
2. **kubeforge**: the operator runs (``kubeforge.demo.start_operator``); every job is a
   TrainingJob (topology ``Preferred`` at level ``nvlink`` unless told otherwise) in one
   GPUPool covering the fleet. The operator admits whole gangs and ungates them together.
3. **kueue** (Kueue + JobSet, when built by ``hack/build-peers.sh``): every job is a JobSet
   queued in Kueue with TopologyAwareScheduling; see e2e/peers/kueue_phase.py.

Between the phases the baseline namespace is deleted (bounded wait) so that the fleet is empty
again. Binding is measured by watching pods (``spec.nodeName``) on this side of the API
server, admission by watching TrainingJobs (condition ``Admitted=True``); every wait is
bounded; nothing here asserts on wall-clock time: it prints figures.

Besides latency and placement quality, each phase prints what it cost: the API server's own
``apiserver_request_total`` counted before and after the phase and broken down by verb and
resource (writes per placed gang next to pods per gang), the operator's own
``kubeforge_api_requests_total`` when it exposes one, and the operator's CPU seconds per
placed job and peak RSS.

Workload (see e2e/README-training-bench.md): GPU tasks of the trace (``num_gpu`` > 0), taken
in trace order from ``--trace-start``; runs of consecutive tasks with the same ``num_gpu`` are
cut into gangs of 1..``--max-replicas`` replicas (size drawn with ``random.Random(--seed)``,
capped by the run's length); a gang becomes one job of ``replicas`` x ``num_gpu`` GPUs. Jobs
are formed until the GPUs requested reach ``--demand`` x the fleet's GPUs (or ``--jobs``).

Trace: Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC 2023; Alibaba clusterdata, cluster-trace-gpu-v2023
(csv/openb_pod_list_default.csv), CC BY 4.0. Default location: ``../shared/data/traces/``
beside the repository (``$KUBEFORGE_TRACES`` names another directory, ``--trace`` a file).

Run: ``.venv/bin/python e2e/bench_training.py [--fleet e2e/fleets/bench-128.yaml] [--keep]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


def _operator_src_arg() -> str | None:
    """``--operator-src`` (or ``$KUBEFORGE_OPERATOR_SRC``), read before the imports below need it."""
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a == "--operator-src" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--operator-src="):
            return a.split("=", 1)[1]
    return os.environ.get("KUBEFORGE_OPERATOR_SRC")


# The kubeforge code this bench drives (sim, provisioner, operator, CRDs): the working tree, or
# a snapshot given with --operator-src, for this process and, through PYTHONPATH, its children.
SRC = Path(_operator_src_arg() or ROOT).resolve()
sys.path.insert(0, str(SRC / "operator"))
if SRC != ROOT:
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC / "operator"), os.environ.get("PYTHONPATH")) if p)

import yaml  # noqa: E402

from _bench_serving_observe import watch_events  # noqa: E402

from kubeforge.demo import start_operator, stop_operator  # noqa: E402

import bench_claims  # noqa: E402  (this directory: the start breakdown, claim figures, spot restarts)
from kubeforge.sim.cluster import Cluster, home  # noqa: E402
from kubeforge.sim.fleet import GPUSpec, load_fleet, node_manifests  # noqa: E402

TRACE_FILE = "alibaba-openb-pods-2023.csv"
CREDIT = ('Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0; '
          'Weng et al., "Beware of Fragmentation", USENIX ATC 2023.')
GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
JOB_LABEL = "kubeforge.io/job-name"
RANK_LABEL = "kubeforge.io/replica-index"
POOL = "bench"
GROUP, VERSION = "kubeforge.io", "v1alpha1"
DEFAULT_CLUSTER = os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-bench")
READ_VERBS = {"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT"}
ADMITS = ("kubeforge", "kueue")  # phases whose jobs have an Admitted condition (TrainingJob, Kueue Workload)


def default_trace() -> Path:
    """The Alibaba pod trace: ``$KUBEFORGE_TRACES/<file>``, else ``../shared/data/traces/<file>``.

    The default is relative to the repository (its parent's ``shared/``), never an absolute
    machine path.
    """
    env = os.environ.get("KUBEFORGE_TRACES")
    base = Path(env) if env else ROOT.parent / "shared" / "data" / "traces"
    return base / TRACE_FILE


def say(msg: str) -> None:
    """Progress line on stderr with a wall-clock stamp."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- workload from the trace -------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One gang: ``replicas`` pods of ``gpus`` GPUs each."""

    name: str
    replicas: int
    gpus: int  # per replica
    first_task: str  # trace task name of rank 0, for provenance

    @property
    def total(self) -> int:
        """GPUs of the whole gang."""
        return self.replicas * self.gpus


def form_jobs(trace: Path, start: int, seed: int, max_replicas: int, gpu_budget: int, max_jobs: int | None) -> list[Job]:
    """Gangs from consecutive same-``num_gpu`` GPU tasks of the trace; deterministic.

    Args:
        trace: the Alibaba ``openb_pod_list`` CSV (columns ``name``, ``num_gpu``, ...).
        start: index of the first GPU task (``num_gpu`` > 0) taken.
        seed: seed of the gang-size draws.
        max_replicas: largest gang formed (sizes drawn uniformly from 1..max_replicas).
        gpu_budget: stop once the jobs request this many GPUs (ignored with ``max_jobs``).
        max_jobs: exact number of jobs, or None for ``gpu_budget``.

    Returns:
        The jobs, named ``j<index>-<replicas>x<gpus>``; fewer when the trace runs out.
    """
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


def _lag(obj: dict, cond_type: str) -> float:
    """Seconds from the API server's ``lastTransitionTime`` of condition ``cond_type`` (1 s
    resolution, truncated) to now; NaN without one. Same machine, so the clocks agree."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == cond_type and c.get("lastTransitionTime"):
            try:
                return time.time() - ts(c["lastTransitionTime"])
            except ValueError:
                break
    return float("nan")


@dataclass
class Phase:
    """What one phase submitted and what the watches saw (times are ``time.monotonic()``)."""

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
    admitted: dict[str, float] = field(default_factory=dict)  # job -> time the watch showed Admitted=True
    samples: list[tuple] = field(default_factory=list)
    partial_max: int = 0
    partial_ever: set = field(default_factory=set)
    end: float = 0.0
    end_reason: str = ""
    watch_restarts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_bind: float = 0.0
    last_admit: float = 0.0
    bound_per_job: dict[str, int] = field(default_factory=dict)
    bind_lag: list[float] = field(default_factory=list)  # s, watch receive - server transition time
    admit_lag: list[float] = field(default_factory=list)

    def observe(self, pod: dict, now: float) -> None:
        """Record a pod from the watch: first time seen with ``spec.nodeName``.

        Events received after the phase ended are ignored, so every figure covers the same window.
        The watch's lag (receive time minus the API server's ``PodScheduled`` transition time) is kept.
        """
        md = pod.get("metadata") or {}
        name = md.get("name")
        job = (md.get("labels") or {}).get(JOB_LABEL)
        if not name or job not in self.jobs or (self.end and now > self.end):
            return
        node = (pod.get("spec") or {}).get("nodeName")
        with self.lock:
            self.pods_seen.add(name)
            self.pod_job[name] = job
            if node and name not in self.bound:
                self.bound[name] = (now, node)
                self.last_bind = now
                nb = self.bound_per_job[job] = self.bound_per_job.get(job, 0) + 1
                if nb == self.jobs[job].replicas and job not in self.job_bound:
                    self.job_bound[job] = now
                self.bind_lag.append(_lag(pod, "PodScheduled"))

    def observe_job(self, tj: dict, now: float) -> None:
        """Record a TrainingJob from the watch: first time its ``Admitted`` condition is True
        (ignored after the phase ended; the watch's lag is kept as for pods)."""
        name = (tj.get("metadata") or {}).get("name")
        if name not in self.jobs or name in self.admitted or (self.end and now > self.end):
            return
        conds = (tj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conds):
            with self.lock:
                self.admitted.setdefault(name, now)
                self.last_admit = now
                self.admit_lag.append(_lag(tj, "Admitted"))

    def sample(self, now: float) -> None:
        """Append one timeline row: GPUs and pods bound, jobs placed, partial gangs."""
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
                                 sum(per_job[j] * self.jobs[j].gpus for j in partial), len(self.admitted)))


def watch_raw(list_call: Callable, on_obj: Callable[[dict, float], None], stop: threading.Event,
              restarts: dict[str, int], what: str) -> None:
    """List, then watch, with raw JSON (no model deserialization) until ``stop`` is set:
    :func:`_bench_serving_observe.watch_events` for objects listed, added or modified.

    Args:
        list_call: a kubernetes-client list method bound to its namespace/resource, called with
            ``_preload_content=False`` (and ``watch=True`` for the watch).
        on_obj: called with each object listed, added or modified, and the monotonic time.
        stop: ends the loop (within one watch timeout, 5 s).
        restarts: ``restarts[what]`` counts re-lists after errors.
        what: a short name for messages.
    """
    def on_event(kind: str, obj: dict, now: float) -> None:
        if kind != "DELETED":
            on_obj(obj, now)

    watch_events(list_call, on_event, stop, restarts, what, say)


# --- processes: CPU, RSS, pids ------------------------------------------------------------------


def cpu_seconds(pid: int | None) -> float:
    """User+system CPU seconds of a live process (Linux /proc/<pid>/stat), NaN when unreadable."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")


def rss_mib(pid: int | None, field_name: str = "VmRSS") -> float:
    """``VmRSS`` (or another ``Vm*`` line, e.g. ``VmHWM``) of /proc/<pid>/status in MiB; NaN if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError, TypeError):
        pass
    return float("nan")


class RssSampler:
    """Samples a process's RSS in a background thread; keeps the peak and the last value.

    Args:
        pid: the process.
        interval: seconds between samples.
    """

    def __init__(self, pid: int | None, interval: float = 0.5) -> None:
        self.pid, self.interval = pid, interval
        self.peak = float("nan")
        self.last = float("nan")
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():  # bounded by stop(), which every caller reaches in a finally
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> float:
        """Take one sample now and return it (MiB)."""
        v = rss_mib(self.pid)
        if v == v:  # not NaN
            self.last = v
            self.peak = v if self.peak != self.peak else max(self.peak, v)
            self.samples += 1
        return v

    def start(self) -> "RssSampler":
        """Start sampling; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (bounded join) and take a last sample."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()


def operator_pid(c: Cluster) -> int | None:
    """The operator's pid from ``<cluster dir>/operator.pid`` (written by ``start_operator``)."""
    try:
        return int((c.dir / "operator.pid").read_text())
    except (OSError, ValueError):
        return None


def operator_metrics_port(c: Cluster) -> int | None:
    """The operator's metrics port from ``<cluster dir>/operator.ports`` (JSON), or None."""
    try:
        return int(json.loads((c.dir / "operator.ports").read_text())["metrics"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def component_pid(c: Cluster, component: str) -> int | None:
    """Pid of a control-plane process of this cluster (``kube-apiserver``, ``etcd``, ``kwok-controller``).

    kwokctl's binary runtime keeps ``<KWOK_WORKDIR>/clusters/<name>/pids/<component>.pid``;
    failing that, /proc is scanned for the binary whose command line names this cluster.
    """
    workdir = home() / "kwok" / "clusters" / c.name
    for p in (workdir / "pids" / f"{component}.pid", workdir / f"{component}.pid"):
        try:
            pid = int(p.read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            continue
    for d in Path("/proc").iterdir():  # bounded: one pass over the process table
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode(errors="replace")).name == component and \
                any(str(workdir).encode() in a for a in argv):
            return int(d.name)
    return None


def describe_source() -> str:
    """Where the kubeforge code comes from: the working tree's commit (and whether it has edits
    under operator/), or the ``--operator-src`` directory (and its ``SOURCE`` file, if any)."""
    import subprocess

    if SRC != ROOT:
        note = (SRC / "SOURCE").read_text().strip() if (SRC / "SOURCE").exists() else ""
        return f"{SRC} (--operator-src{': ' + note if note else ''})"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "operator"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return f"working tree at {head}" + (" with uncommitted changes under operator/" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "working tree"


def alive(pid: int | None) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return st[0] != "Z"
    except (OSError, IndexError, TypeError):
        return False


def log_digest(lines: list[str]) -> dict:
    """Counts of error, traceback and warning lines, and the exception line ending each traceback."""
    bad = [ln for ln in lines if any(w in ln for w in ("ERROR", "Traceback", "Exception", "CRITICAL"))]
    exc = []
    for i, ln in enumerate(lines):
        if ln.startswith("Traceback"):
            for nxt in lines[i + 1:i + 400]:  # bounded: a traceback is a few dozen lines
                if nxt and not nxt.startswith((" ", "\t", "Traceback", "During handling", "The above")):
                    exc.append(nxt)
                    break
    return {"log_lines": len(lines), "log_errors": len(bad), "log_warnings": sum(1 for ln in lines if "WARNING" in ln),
            "log_samples": (exc + [b for b in bad if not b.startswith("Traceback")])[:6]
            + [w for w in lines if "WARNING" in w][:2]}


# --- API calls: the API server's counter and the operator's ------------------------------------

_SAMPLE = re.compile(r'^(\w+)\{(.*)\}\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_counter(text: str, metric: str) -> dict[tuple, float]:
    """Samples of one counter from Prometheus text exposition: ``{sorted label items: value}``."""
    out: dict[tuple, float] = {}
    prefix = metric + "{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        m = _SAMPLE.match(line)
        if not m or m.group(1) != metric:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2))))
        out[labels] = out.get(labels, 0.0) + float(m.group(3))
    return out


def scrape_apiserver(c: Cluster) -> dict[tuple, float] | None:
    """``apiserver_request_total`` from ``kubectl get --raw /metrics`` (the kubeconfig's
    credentials), keyed by (verb, group, resource, subresource, code); None on failure."""
    proc = c.kubectl("get", "--raw", "/metrics", check=False, timeout=60)
    if proc.returncode != 0:
        say(f"API server /metrics not readable: {proc.stderr.strip()[:200]}")
        return None
    out: dict[tuple, float] = {}
    for labels, v in parse_counter(proc.stdout, "apiserver_request_total").items():
        d = dict(labels)
        key = (d.get("verb", ""), d.get("group", ""), d.get("resource", ""), d.get("subresource", ""), d.get("code", ""))
        out[key] = out.get(key, 0.0) + v
    return out


def scrape_operator(port: int | None) -> tuple[dict[tuple, float] | None, str]:
    """``kubeforge_api_requests_total`` from the operator's metrics port, keyed by
    (verb, resource, code), and a reason when it is None (no port, unreachable, no counter)."""
    if not port:
        return None, "no metrics port in operator.ports"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode(errors="replace")
    except OSError as e:
        return None, f"metrics port {port} did not answer ({type(e).__name__})"
    samples = parse_counter(text, "kubeforge_api_requests_total")
    if not samples and "kubeforge_api_requests_total" not in text:
        return None, f"metrics port {port} answers without that counter"
    out: dict[tuple, float] = {}
    for labels, v in samples.items():
        d = dict(labels)
        key = (d.get("verb", ""), d.get("resource", ""), d.get("code", ""))
        out[key] = out.get(key, 0.0) + v
    return out, ""


def counter_delta(before: dict | None, after: dict | None) -> dict | None:
    """``after - before`` per key (keys only in ``after`` count from 0); None if either is missing."""
    if before is None or after is None:
        return None
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def who_writes(verb: str, group: str, resource: str, sub: str, pods_by: str) -> str:
    """Who, in this bench, makes a write of (verb, group, resource, subresource).

    ``pods_by`` is the creator of the phase's pods: ``operator`` or ``bench``. The API server's
    counter has no client label; the attribution below is by what each component writes here.
    """
    if resource == "trainingjobs" and verb == "POST":
        return "bench"
    if resource in ("namespaces",):
        return "bench"
    if resource == "pods" and sub == "binding":
        return "kube-scheduler"
    if resource == "pods" and sub == "status":
        return "kwok"
    if resource == "nodes":
        return "kwok"
    if resource == "leases":
        return "kwok"
    if resource == "events" and group == "events.k8s.io":
        return "kube-scheduler"
    if resource == "events":
        return "events"
    if resource == "persistentvolumes":
        return "provisioner"
    if resource == "persistentvolumeclaims" and (sub or verb in ("PUT",)):
        return "controller-manager"
    if resource in ("endpoints", "endpointslices", "serviceaccounts", "configmaps", "secrets",
                    "replicasets", "deployments", "controllerrevisions"):
        return "controller-manager"
    if resource == "pods":
        return pods_by
    if resource in ("trainingjobs", "gpupools", "inferenceservices", "services", "persistentvolumeclaims"):
        return "operator"
    return "other"


WHO_NOTE = {
    "operator": "the operator (pods, trainingjobs/status, gpupools/status, services, persistentvolumeclaims)",
    "events": "core/v1 events: the operator's, and other components' (the baseline, without operator, shows their share)",
    "bench": "the bench itself (trainingjobs POST; plain pods in the baseline)",
    "kwok": "kwok: pods/status (also kube-scheduler's PodScheduled=False), node heartbeats, node leases",
    "kube-scheduler": "kube-scheduler: pods/binding, events.k8s.io events",
    "provisioner": "the sim PV provisioner and PV controller: persistentvolumes",
    "controller-manager": "kube-controller-manager: PVC binding, endpoints, endpointslices",
    "other": "not attributed",
}


@dataclass
class Cost:
    """What a phase cost: API calls (server and operator counters), operator CPU and RSS."""

    api: dict | None = None  # apiserver_request_total delta
    op_api: dict | None = None  # kubeforge_api_requests_total delta
    op_api_why: str = ""
    cpu_s: float = float("nan")
    rss_peak: float = float("nan")
    rss_end: float = float("nan")
    rss_hwm: float = float("nan")
    rss_start: float = float("nan")
    api_rss_peak: float = float("nan")


# --- manifests ------------------------------------------------------------------------------------


def plain_pods(job: Job, ns: str) -> list[dict]:
    """The baseline's pods: one per replica, GPUs requested, nothing else."""
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


SHARED_CLAIM = "bench-checkpoint"
"""The one checkpoint PVC of ``--claims shared``."""


def training_job(job: Job, ns: str, mode: str, level: str | None, claim: str | None = None) -> dict:
    """The kubeforge phase's TrainingJob for ``job`` (``claim``: an existing checkpoint PVC)."""
    topo: dict = {"mode": mode}
    if level and mode != "None":
        topo["level"] = level
    spec: dict = {
        "pools": [POOL], "replicas": job.replicas, "gpusPerReplica": job.gpus, "topology": topo,
        "template": {"spec": {"terminationGracePeriodSeconds": 0,
                              "containers": [{"name": "trainer", "image": "example.com/train:1",
                                              "command": ["torchrun", "train.py"]}]}},
    }
    if claim:
        spec["checkpoint"] = {"existingClaimName": claim}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
        "metadata": {"name": job.name, "namespace": ns, "labels": {"kubeforge.io/bench": "kubeforge"}},
        "spec": spec,
    }


# --- phases ---------------------------------------------------------------------------------------


class Abort(Exception):
    """A bench step cannot go on (the operator exited, ...); the message says why."""


def shared_claim(c: Cluster, core, ns: str, name: str) -> None:
    """Create the one checkpoint PVC every job of a run mounts (``checkpoint.existingClaimName``)
    and wait (at most 60 s) until it is Bound."""
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    wait_until(lambda: json.loads(core.read_namespaced_persistent_volume_claim(name, ns, _preload_content=False).data)
               ["status"].get("phase") == "Bound", 60, f"PVC {name} to bind")


def wait_for_pool(custom, pid: int, op_log: Path, capacity: int, timeout: float) -> bool:
    """Wait (at most ``timeout`` s) until the GPUPool's status shows ``capacity`` allocatable
    GPUs: the operator is up and sees the fleet. Raises Abort when the operator exits."""
    def ready() -> bool:
        if not alive(pid):
            raise Abort(f"the operator exited during start-up; its log: {op_log}")
        st = custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", POOL).get("status") or {}
        return int((st.get("gpus") or {}).get("allocatable") or 0) == capacity

    return wait_until(ready, timeout, f"GPUPool {POOL} status to show {capacity} GPUs")


def wait_until(pred, timeout: float, what: str, interval: float = 1.0) -> bool:
    """Poll ``pred`` until true or ``timeout`` s; API errors count as false. Returns success.

    Raises:
        Abort: raised by ``pred`` itself, passed through.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return True
        except Abort:
            raise
        except Exception:  # noqa: BLE001 - transient API errors while waiting
            pass
        time.sleep(interval)
    say(f"gave up waiting for {what} after {timeout:.0f}s")
    return False


def make_namespace(c: Cluster, api, ns: str) -> None:
    """Create ``ns`` and wait (bounded) for its default ServiceAccount."""
    from kubernetes import client

    c.kubectl("create", "namespace", ns)
    core = client.CoreV1Api(api)
    wait_until(lambda: core.read_namespaced_service_account("default", ns, _preload_content=False), 60,
               f"default ServiceAccount in {ns}", 0.3)


def delete_namespace(c: Cluster, ns: str, timeout: float) -> bool:
    """Delete ``ns`` and wait (bounded) until it is gone; returns whether it went."""
    c.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
    return wait_until(lambda: c.kubectl("get", "namespace", ns, check=False).returncode != 0, timeout,
                      f"namespace {ns} to go", 1.0)


def measure_cost(c: Cluster, pid: int | None) -> Callable[[], Cost]:
    """Start measuring a phase's cost now; returns ``finish()`` that stops and returns the Cost.

    Scrapes both API counters, reads the operator's CPU time and starts RSS samplers for the
    operator (``pid``, may be None) and the API server.
    """
    cost = Cost()
    port = operator_metrics_port(c) if pid else None
    api0 = scrape_apiserver(c)
    op0, _ = scrape_operator(port)
    cpu0 = cpu_seconds(pid)
    cost.rss_start = rss_mib(pid)
    op_rss = RssSampler(pid).start() if pid else None
    api_rss = RssSampler(component_pid(c, "kube-apiserver"), 1.0).start()

    def finish() -> Cost:
        cost.cpu_s = cpu_seconds(pid) - cpu0
        if op_rss:
            op_rss.stop()
            cost.rss_peak, cost.rss_end, cost.rss_hwm = op_rss.peak, op_rss.last, rss_mib(pid, "VmHWM")
        api_rss.stop()
        cost.api_rss_peak = api_rss.peak
        cost.api = counter_delta(api0, scrape_apiserver(c))
        op1, cost.op_api_why = scrape_operator(port)
        cost.op_api = counter_delta(op0 or {}, op1) if op1 is not None else None
        return cost

    return finish


def run_phase(c: Cluster, api, ph: Phase, ns: str, submit, args, admission_only: bool = False,
              pid: int | None = None) -> Cost:
    """Submit every job (thread pool), watch pods (and TrainingJobs), sample; returns its cost.

    The phase ends when every job is bound (with ``admission_only``: admitted), when nothing new
    was bound (admitted) for ``--settle`` s after the last submission, or at ``--phase-timeout``.
    The cost counters are read just before the first submission and ``--drain`` s after the end.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    stop = threading.Event()
    watchers = [threading.Thread(target=watch_raw, daemon=True, args=(
        lambda **kw: core.list_namespaced_pod(ns, **kw), ph.observe, stop, ph.watch_restarts, f"{ph.name} pod"))]
    if ph.name == "kubeforge":
        watchers.append(threading.Thread(target=watch_raw, daemon=True, args=(
            lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", **kw),
            ph.observe_job, stop, ph.watch_restarts, f"{ph.name} trainingjob")))
    for w in watchers:
        w.start()
    finish = measure_cost(c, pid)
    ph.t0 = time.monotonic()

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
    ph.last_bind = ph.last_admit = ph.t0
    done, what = (ph.admitted, "admitted") if admission_only else (ph.job_bound, "bound")
    while True:  # bounded by the phase deadline
        time.sleep(args.sample_interval)
        now = time.monotonic()
        ph.sample(now)
        last = ph.last_admit if admission_only else ph.last_bind
        if ph.submit_done and len(done) == len(ph.jobs):
            ph.end_reason = f"all jobs {what}"
            break
        if ph.submit_done and now - max(last, ph.submit_done) >= args.settle:
            ph.end_reason = f"no job {what} for {args.settle:.0f}s after submission" if admission_only else \
                f"no pod bound for {args.settle:.0f}s after submission"
            break
        if now >= deadline:
            ph.end_reason = f"phase timeout ({args.phase_timeout:.0f}s)"
            break
    ph.end = now  # the last sample's time: later watch events are ignored
    if args.drain > 0:
        time.sleep(args.drain)  # let writes caused by the last binds (status Running) land
    cost = finish()
    stop.set()
    submitter.join(timeout=30)
    for w in watchers:
        w.join(timeout=15)
    return cost


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def summarize(ph: Phase) -> dict:
    """The figures of one phase (placed jobs, latencies, locality, partial gangs, admission)."""
    placed = [j for j in ph.jobs if j in ph.job_bound and j in ph.submitted]
    lat = [ph.job_bound[j] - ph.submitted[j] for j in placed]
    adm = [ph.admitted[j] - ph.submitted[j] for j in ph.jobs if j in ph.admitted and j in ph.submitted]
    last = max((ph.job_bound[j] for j in placed), default=ph.t0)
    first = min(ph.submitted.values(), default=ph.t0)
    multi = [j for j in placed if ph.jobs[j].replicas > 1]
    in_clique = in_block = multi_node = 0
    for j in multi:
        nodes = {ph.bound[p][1] for p, jj in ph.pod_job.items() if jj == j and p in ph.bound}
        multi_node += len(nodes) > 1
        in_clique += len({ph.node_clique.get(n) for n in nodes}) == 1
        in_block += len({ph.node_block.get(n) for n in nodes}) == 1
    final = ph.samples[-1] if ph.samples else (0, 0, 0, 0, 0, 0, 0)
    by_size: dict[int, list[int]] = {}
    for j, job in ph.jobs.items():
        e = by_size.setdefault(job.gpus, [0, 0])
        e[1] += 1
        e[0] += j in placed
    return {
        "placed": len(placed), "placed_gpus": sum(ph.jobs[j].total for j in placed),
        "placed_pods": sum(ph.jobs[j].replicas for j in placed),
        "p50": pct(lat, 50), "p95": pct(lat, 95), "max": max(lat, default=float("nan")),
        "adm_n": len(adm), "adm_pods": sum(ph.jobs[j].replicas for j in ph.admitted if j in ph.jobs), "adm_p50": pct(adm, 50), "adm_p95": pct(adm, 95), "adm_max": max(adm, default=float("nan")),
        "rate": len(placed) / (last - first) if placed and last > first else float("nan"),
        "span": last - first if placed else float("nan"),
        "multi": len(multi), "multi_node": multi_node, "in_clique": in_clique, "in_block": in_block,
        "alloc_end": final[1], "partial_end": final[4], "partial_gpus_end": final[5],
        "partial_max": ph.partial_max, "partial_ever": len(ph.partial_ever), "by_size": by_size,
        "submit_s": (ph.submit_done or ph.end) - ph.t0,
    }


def print_timeline(ph: Phase, rows: int) -> None:
    """The phase's samples, thinned to ``rows`` rows."""
    print(f"\n  {ph.name}: GPU allocation over time (sampled every ~{ph.samples[1][0] - ph.samples[0][0] if len(ph.samples) > 1 else 0:.0f}s)")
    adm = ph.name in ADMITS
    print(f"  {'t(s)':>6} {'GPUs bound':>11} {'alloc %':>8} {'pods bound':>11} {'jobs placed':>12} {'partial gangs':>14} "
          f"{'GPUs in partial':>16}" + (f" {'jobs admitted':>14}" if adm else ""))
    s = ph.samples
    pick = s if len(s) <= rows else [s[round(i * (len(s) - 1) / (rows - 1))] for i in range(rows)]
    for t, g, pods, jobs, partial, pg, na in pick:
        print(f"  {t:6.0f} {g:11d} {100 * g / ph.capacity:7.1f}% {pods:11d} {jobs:12d} {partial:14d} {pg:16d}"
              + (f" {na:14d}" if adm else ""))


def print_cost(name: str, cost: Cost, s: dict, pods_by: str, per_admitted: bool = False) -> None:
    """API calls per placed gang (API server and operator counters), operator CPU and RSS.

    With ``per_admitted`` (``--admission-only``) the figures are per admitted gang instead, since
    the phase ended before the admitted gangs were placed.
    """
    gangs = s["adm_n"] if per_admitted else s["placed"]
    kind = "admitted" if per_admitted else "placed"
    n_per = (s["adm_pods"] if per_admitted else s["placed_pods"]) / gangs if gangs else float("nan")
    per = (lambda v: f"{v / gangs:8.2f}") if gangs else (lambda v: f"{'-':>8}")
    print(f"\n  {name}: API calls during the phase ({gangs} {kind} gangs, N = {n_per:.2f} pods per {kind} gang)"
          + ("; --admission-only: the phase ended at admission, so writes for these gangs' pods were still in "
             "flight and per-gang figures undercount" if per_admitted else ""))
    if cost.api is None:
        print("    apiserver_request_total: not available (kubectl get --raw /metrics failed)")
    else:
        rows: dict[tuple, dict[str, float]] = {}
        reads: dict[str, float] = {}
        for (verb, group, res, sub, code), v in cost.api.items():
            if verb in READ_VERBS:
                reads[verb] = reads.get(verb, 0) + v
                continue
            who = who_writes(verb, group, res, sub, pods_by)
            key = (who, verb, (f"{group}/" if group and res == "events" else "") + res + (f"/{sub}" if sub else ""))
            rows.setdefault(key, {})[code] = rows.get(key, {}).get(code, 0) + v
        order = ["operator", "events", "bench", "kube-scheduler", "kwok", "controller-manager", "provisioner", "other"]
        print("    from the API server's apiserver_request_total (writes; no client label, attributed by what each "
              "component writes)")
        print(f"    {'who':<20} {'verb':<7} {'resource':<34} {'count':>7} {'per gang':>8}  codes")
        totals: dict[str, float] = {}
        for key in sorted(rows, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[2], k[1])):
            who, verb, res = key
            n = sum(rows[key].values())
            totals[who] = totals.get(who, 0) + n
            codes = " ".join(f"{c}:{int(v)}" for c, v in sorted(rows[key].items()))
            print(f"    {who:<20} {verb:<7} {res:<34} {int(n):>7} {per(n)}  {codes}")
        op = totals.get(pods_by if pods_by == "operator" else "bench", 0)
        if pods_by == "operator":
            ev = totals.get("events", 0)
            print(f"    => operator writes per {kind} gang: {per(op).strip()} (excl. core/v1 events), "
                  f"{per(op + ev).strip()} incl. them; N per gang {n_per:.2f}, so N + 2 = {n_per + 2:.2f}")
        else:
            print(f"    => pods created by the bench per {kind} gang: {per(op).strip()} (no operator: the floor for "
                  f"any controller that creates N pods is N = {n_per:.2f})")
        excluded = [w for w in order[2:] if totals.get(w) and not (w == "bench" and pods_by == "bench")]
        for w in excluded:
            print(f"    excluded: {WHO_NOTE[w]}: {int(totals[w])} writes")
        print("    reads by every client (the API server cannot tell them apart): "
              + ", ".join(f"{v} {int(n)}" for v, n in sorted(reads.items())))
    if pods_by == "operator":
        if cost.op_api is None:
            print(f"    kubeforge_api_requests_total: not available ({cost.op_api_why}); skipped")
        else:
            print("    from the operator's own kubeforge_api_requests_total{verb,resource,code}:")
            agg: dict[tuple, dict[str, float]] = {}
            for (verb, res, code), v in cost.op_api.items():
                agg.setdefault((verb, res), {})[code] = agg.get((verb, res), {}).get(code, 0) + v
            w_total = r_total = 0.0
            for (verb, res) in sorted(agg, key=lambda k: (k[0].upper() in READ_VERBS, k[1], k[0])):
                n = sum(agg[(verb, res)].values())
                if verb.upper() in READ_VERBS:
                    r_total += n
                else:
                    w_total += n
                codes = " ".join(f"{c}:{int(v)}" for c, v in sorted(agg[(verb, res)].items()))
                print(f"    {'operator':<20} {verb:<7} {res:<34} {int(n):>7} {per(n)}  {codes}")
            print(f"    => operator writes per {kind} gang {per(w_total).strip()}, reads {per(r_total).strip()} "
                  f"(N + 2 = {n_per + 2:.2f})")
        cpj = cost.cpu_s / gangs if gangs else float("nan")
        cpa = cost.cpu_s / s["adm_n"] if s["adm_n"] else float("nan")
        print(f"    operator CPU during the phase {cost.cpu_s:.1f}s = {1000 * cpj:.0f} ms per placed job "
              f"({1000 * cpa:.0f} ms per admitted job); "
              f"operator RSS {cost.rss_start:.0f} MiB at the start, peak {cost.rss_peak:.0f} MiB (sampled every 0.5 s), "
              f"{cost.rss_end:.0f} MiB at the end (VmHWM {cost.rss_hwm:.0f} MiB); kube-apiserver RSS peak "
              f"{cost.api_rss_peak:.0f} MiB")
    else:
        print(f"    kube-apiserver RSS peak {cost.api_rss_peak:.0f} MiB")


# --- main -----------------------------------------------------------------------------------------


def apply_fleet(c: Cluster, api, fleet, ready_timeout: float = 300) -> list[dict]:
    """Create the fleet's Nodes: one server-side apply, then a status patch per node (client).

    Waits (at most ``ready_timeout`` s, or half a second per node if longer) for kwok to mark
    every node Ready with its GPUs and for kube-controller-manager to lift the not-ready taint
    that every new Node gets.
    """
    from kubernetes import client

    nodes = node_manifests(fleet)
    docs = "\n---\n".join(yaml.safe_dump(n) for n in nodes)
    c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kubeforge-sim", "-f", "-", input=docs,
              timeout=max(300, len(nodes) // 2))
    core = client.CoreV1Api(api)

    def patch(n: dict) -> None:
        body = {"status": {"capacity": n["status"]["capacity"], "allocatable": n["status"]["allocatable"]}}
        core.patch_node_status(n["metadata"]["name"], body, _preload_content=False, _request_timeout=60)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(patch, nodes))
    names = {n["metadata"]["name"] for n in nodes}

    # kube-apiserver's TaintNodesByCondition admission plugin gives every new Node the taint
    # node.kubernetes.io/not-ready:NoSchedule; kube-controller-manager's node lifecycle
    # controller removes it after kwok reports the node Ready, a few nodes per second (at
    # 1,024 nodes on 2 CPUs, minutes after every node is Ready). Until then kube-scheduler
    # (and kubeforge, whose pool status counts the node's GPUs as unavailable) place nothing
    # there: a node is usable once Ready *and* free of that taint.
    startup_taints = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    state = {"tainted": 0}

    def ready() -> bool:
        items = json.loads(core.list_node(_preload_content=False, _request_timeout=60).data)["items"]
        ok = tainted = 0
        for it in items:
            if it["metadata"]["name"] not in names:
                continue
            if any(t.get("key") in startup_taints for t in it["spec"].get("taints") or []):
                tainted += 1
            elif it["status"].get("allocatable", {}).get(GPU) and any(
                    x["type"] == "Ready" and x["status"] == "True" for x in it["status"].get("conditions") or []):
                ok += 1
        state["tainted"] = tainted
        return ok == len(names)

    what = f"{len(names)} kwok nodes Ready with GPUs and without the not-ready taint"
    if not wait_until(ready, max(ready_timeout, len(names) / 2), what, 2.0):
        say(f"fleet: {state['tainted']} of {len(names)} nodes still carry the not-ready/unreachable taint "
            f"after {max(ready_timeout, len(names) / 2):.0f}s (kube-controller-manager removes it)")
    return nodes


def fleet_capacity(fleet) -> tuple[int, str]:
    """Total GPUs of a fleet and a short description of GPUs per node."""
    per = sorted({(g.gpu or GPUSpec()).count for g in fleet.resolved_groups()})
    total = sum(g.count * (g.gpu or GPUSpec()).count for g in fleet.resolved_groups())
    return total, "/".join(str(p) for p in per)


def open_api(c: Cluster, pool_size: int):
    """A kubernetes-client ApiClient on the cluster's kubeconfig with ``pool_size`` connections."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=c.kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


def main() -> int:
    """Run the bench; returns the process exit code (0 unless setup failed)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", "--name", dest="cluster", default=DEFAULT_CLUSTER,
                    help="local cluster name (default kubeforge-bench or $KUBEFORGE_BENCH_CLUSTER)")
    ap.add_argument("--trace", default=str(default_trace()),
                    help="Alibaba openb pod trace CSV (default ../shared/data/traces/alibaba-openb-pods-2023.csv "
                         "relative to the repository, or $KUBEFORGE_TRACES/alibaba-openb-pods-2023.csv)")
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
    ap.add_argument("--delete-timeout", type=float, default=None,
                    help="bound on deleting a phase's namespace (default: 120 s, or 1 s per 10 pods if more)")
    ap.add_argument("--operator-src", default=os.environ.get("KUBEFORGE_OPERATOR_SRC"),
                    help="drive the kubeforge code (operator, CRDs, sim) of this source tree instead of the working "
                         "tree, e.g. an export of a commit: git archive HEAD operator crds hack | tar -x -C DIR")
    ap.add_argument("--claims", default="per-job", choices=["per-job", "shared"],
                    help="per-job: each TrainingJob gets its own checkpoint PVC (the default); shared: every job "
                         "mounts one existing PVC (checkpoint.existingClaimName), like for like with the baseline's "
                         "plain pods, which mount none")
    ap.add_argument("--restart-nodes", type=int, default=4,
                    help="after the kubeforge phase (per-job claims), put the spot interruption taint on this many "
                         "nodes running gangs whose claims are Bound and measure taint -> Running again (0: skip)")
    ap.add_argument("--kcm-api-qps", type=int, default=bench_claims.KCM_API_QPS,
                    help="kube-controller-manager's --kube-api-qps and --kube-api-burst for the cluster the bench "
                         "creates (default %(default)s, as Kubernetes' own scale tests run it; 0: upstream's 20 / 30, "
                         "which caps the PV controller at ~4-6 claim bindings a second)")
    ap.add_argument("--py-spy", action="store_true",
                    help="sample the operator with py-spy (pip install py-spy) during the kubeforge phase and print "
                         "where its event loop spends its time")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    args = ap.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    bad = [p for p in phases if p not in ("baseline", "kubeforge", "kueue")]
    if bad or not phases:
        ap.error(f"--phases: unknown {bad or 'empty'}; use baseline, kubeforge and/or kueue")
    from peers import kueue_phase  # the Kueue + JobSet phase (e2e/peers/)

    phases = kueue_phase.select_phases(phases, say)
    if args.max_replicas < 1 or (args.jobs is not None and args.jobs < 1):
        ap.error("--max-replicas and --jobs must be at least 1")
    trace = Path(args.trace)
    if not trace.exists():
        ap.error(f"--trace {trace} not found (set --trace or $KUBEFORGE_TRACES)")
    crds = SRC / "crds"

    t_start = time.monotonic()
    fleet = load_fleet(args.fleet)
    capacity, gpus_per_node = fleet_capacity(fleet)
    jobs = form_jobs(trace, args.trace_start, args.seed, args.max_replicas, int(args.demand * capacity), args.jobs)
    jobmap = {j.name: j for j in jobs}
    req_gpus = sum(j.total for j in jobs)
    n_pods = sum(j.replicas for j in jobs)
    mix: dict[str, int] = {}
    for j in jobs:
        mix[f"{j.replicas}x{j.gpus}"] = mix.get(f"{j.replicas}x{j.gpus}", 0) + 1

    print("=" * 100)
    print("kubeforge training bench: gang admission (kubeforge) vs. plain pods (kube-scheduler)")
    print(CREDIT)
    print(f"trace {trace}")
    print(f"fleet {fleet.name} ({args.fleet}): {fleet.node_count} nodes x {gpus_per_node} GPUs = {capacity} GPUs; "
          f"NVLink domains ({CLIQUE}) and blocks ({BLOCK}) from the fleet file")
    print(f"jobs: {len(jobs)} from trace GPU tasks {args.trace_start}.. (seed {args.seed}, gangs of 1..{args.max_replicas} "
          f"consecutive same-num_gpu tasks): {n_pods} pods, {req_gpus} GPUs requested "
          f"({req_gpus / capacity:.2f}x the fleet)")
    print("mix (replicas x GPUs: jobs): " + ", ".join(f"{k}: {v}" for k, v in sorted(mix.items(), key=lambda kv: (int(kv[0].split('x')[1]), int(kv[0].split('x')[0])))))
    print(f"phases: {', '.join(phases)}; kubeforge jobs: topology {args.topology_mode}"
          + (f" at {args.topology_level}" if args.topology_mode != "None" else "")
          + ("; checkpoint PVC per job" if args.claims == "per-job" else f"; one shared checkpoint PVC ({SHARED_CLAIM})")
          + f"; per phase: at most {args.phase_timeout:.0f}s, ends {args.settle:.0f}s after the last "
          + ("admission (kubeforge, --admission-only) / bind" if args.admission_only else "bind")
          + f"; submit with {args.submit_workers} threads; cluster {args.cluster} "
          + (f"(kube-controller-manager --kube-api-qps/--kube-api-burst {args.kcm_api_qps})" if args.kcm_api_qps
             else "(kube-controller-manager's default API rate, 20 qps / 30 burst)")
          + f"; machine: {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"kubeforge code: {describe_source()}")
    print("=" * 100, flush=True)

    from kubernetes import client

    c = Cluster(args.cluster)
    results: dict[str, tuple[Phase, dict]] = {}
    costs: dict[str, Cost] = {}
    op_log = c.dir / "operator.log"
    op_log_offset = 0
    extra: dict[str, object] = {}
    delete_timeout = args.delete_timeout or max(120.0, n_pods / 10)
    try:
        t = time.monotonic()
        import inspect

        if "audit_policy" in inspect.signature(c.up).parameters:
            c.up(None, log=say, extra_args=bench_claims.kcm_args(args.kcm_api_qps),
                 audit_policy=bench_claims.audit_policy_file(c.dir))
        else:  # an --operator-src from before issue 20: no audit log, no breakdown
            c.up(None, log=say)
        api = open_api(c, max(16, args.submit_workers * 2))
        nodes = apply_fleet(c, api, fleet)
        node_clique = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, "") for n in nodes}
        node_block = {n["metadata"]["name"]: n["metadata"]["labels"].get(BLOCK, "") for n in nodes}
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
        c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        say(f"cluster up with {len(nodes)} nodes in {time.monotonic() - t:.0f}s")
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)

        for phase in phases:
            ph = Phase(phase, jobmap, node_clique, node_block, capacity)
            ns = f"bench-{phase}"
            if phase == "baseline":
                make_namespace(c, api, ns)

                def submit(job: Job, ns=ns) -> None:
                    for pod in plain_pods(job, ns):
                        core.create_namespaced_pod(ns, pod, _preload_content=False)

                say(f"baseline: creating {n_pods} plain pods for {len(jobs)} jobs")
                components = bench_claims.ComponentMetrics({k: component_pid(c, k) for k in bench_claims.WANTED})
                costs[phase] = run_phase(c, api, ph, ns, submit, args)
                extra["components_baseline"] = components.finish()
            elif phase == "kueue":
                extra["kueue"] = kueue_phase.run(sys.modules[__name__], c, api, ph, ns, args, fleet.name, capacity,
                                                 last=phase == phases[-1])
            else:
                c.kubectl("apply", "-f", "-", input=json.dumps({
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUPool", "metadata": {"name": POOL},
                    "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/sim-fleet": fleet.name}}},
                }))
                op_log_offset = op_log.stat().st_size if op_log.exists() else 0
                t = time.monotonic()
                pid = start_operator(c)
                say(f"operator started (pid {pid}, log {op_log})")

                if not wait_for_pool(custom, pid, op_log, capacity, 120):
                    st = custom.get_cluster_custom_object(GROUP, VERSION, "gpupools", POOL).get("status") or {}
                    extra["pool_not_ready"] = (f"the GPUPool status did not show {capacity} allocatable GPUs within "
                                               f"120 s (it showed gpus={st.get('gpus')}, nodes={st.get('nodes')}); "
                                               f"submitted anyway")
                    say(extra["pool_not_ready"])
                extra["operator_ready_s"] = time.monotonic() - t
                make_namespace(c, api, ns)
                claim = None
                if args.claims == "shared":  # like-for-like with the baseline: no PVC per job
                    claim = SHARED_CLAIM
                    shared_claim(c, core, ns, claim)

                def submit(job: Job, ns=ns) -> None:
                    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs",
                                                           training_job(job, ns, args.topology_mode, args.topology_level, claim),
                                                           _preload_content=False)

                say(f"kubeforge: creating {len(jobs)} TrainingJobs")
                components = bench_claims.ComponentMetrics({k: component_pid(c, k) for k in bench_claims.WANTED})
                profile = bench_claims.OperatorProfile(operator_pid(c) if args.py_spy else None, c.dir / "operator.pyspy")
                op_before = bench_claims.scrape_operator(operator_metrics_port(c))
                costs[phase] = run_phase(c, api, ph, ns, submit, args, admission_only=args.admission_only,
                                         pid=operator_pid(c))
                extra["components"] = components.finish()
                extra["py_spy"] = profile.finish()
                extra["operator_times"] = {k: v - op_before.get(k, 0.0) for k, v in
                                           bench_claims.scrape_operator(operator_metrics_port(c)).items()}
                extra["operator_cpu_s"] = costs[phase].cpu_s
                extra["operator_alive"] = alive(pid)
                # What the operator says about the jobs, from one list after the phase.
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
                audit = c.audit_log() if hasattr(c, "audit_log") else Path("/nonexistent")
                timeline = bench_claims.read_audit(audit, ns)
                extra["start"] = timeline and bench_claims.breakdown(timeline, {j.name: j.replicas for j in jobs})
                base_tl = bench_claims.read_audit(audit, "bench-baseline") if "baseline" in phases else None
                if extra["start"] and base_tl:
                    extra["start"]["baseline"] = bench_claims.pod_steps(base_tl, {j.name: j.replicas for j in jobs})
                if args.restart_nodes > 0 and args.claims == "per-job":
                    extra["restart"] = bench_claims.restart_after_spot_preemption(
                        core, custom, ns, args.restart_nodes, args.settle * 2, audit)
                stop_operator(c)
            results[phase] = (ph, summarize(ph))
            say(f"{phase}: {results[phase][1]['placed']}/{len(jobs)} jobs placed; ended: {ph.end_reason}")
            if phase != phases[-1]:
                t = time.monotonic()
                ok = delete_namespace(c, ns, delete_timeout)
                say(f"{ns} deleted in {time.monotonic() - t:.0f}s" if ok else f"{ns} still terminating")
    except Abort as e:
        extra["error"] = str(e)
        say(f"stopped: {e}")
    finally:
        stop_operator(c)
        if op_log.exists():
            with open(op_log, "rb") as f:
                f.seek(op_log_offset)
                lines = f.read().decode(errors="replace").splitlines()
            extra.update(log_digest(lines))
        if not args.keep:
            try:
                c.down(log=say)
            except Exception as e:  # noqa: BLE001
                say(f"cluster down failed: {e}; run: .venv/bin/kubeforge sim down --name {args.cluster}")

    report(results, costs, extra, jobs, req_gpus, capacity, args)
    if extra.get("error"):
        print(f"\nstopped early: {extra['error']}")
        for ln in extra.get("log_samples") or []:
            print(f"    | {ln[:220]}")
    print(f"\ntotal run {time.monotonic() - t_start:.0f}s, load average (1/5/15 min) at the end "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}; {CREDIT}")
    return 1 if extra.get("error") else 0


def ts(s: str) -> float:
    """RFC 3339 timestamp of the API server (1 s resolution) as epoch seconds."""
    from datetime import datetime

    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def report(results: dict, costs: dict, extra: dict, jobs: list[Job], req_gpus: int, capacity: int, args) -> None:
    """Print the results table, the cost of each phase and the timelines."""
    print("\nRESULTS (times in seconds, measured client-side from the create call to the watch event that "
          "shows the job's last pod with spec.nodeName; for Admitted, to the TrainingJob watch event whose "
          "status has condition Admitted=True)")
    names = list(results)
    if not names:
        print("  no phase completed")
        return
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
    if any(n in results for n in ADMITS):
        row("jobs Admitted (TrainingJob/Workload watch)", lambda p, s: f"{s['adm_n']}/{len(p.jobs)}" if p.name in ADMITS else "-")
        for q in ("p50", "p95", "max"):
            row(f"create -> Admitted {q}", lambda p, s, q=q: f"{s['adm_' + q]:.2f}" if p.name in ADMITS else "-")
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
        wr = ", ".join(f"{k}: {v}" for k, v in p.watch_restarts.items()) or "0"
        print(f"  {n} ended: {p.end_reason}; watch restarts: {wr}")
        lags = [("binds", [x for x in p.bind_lag if x == x]), ("admissions", [x for x in p.admit_lag if x == x])]
        print(f"    {n}: this bench's watch lag (receive time - the API server's lastTransitionTime, which is "
              f"truncated to 1 s): " + "; ".join(f"{k} p50 {pct(v, 50):.1f}s p95 {pct(v, 95):.1f}s max "
                                                 f"{max(v, default=float('nan')):.1f}s" for k, v in lags if v))
        for e in p.submit_errors[:3]:
            print(f"    submit error: {e}")
    if "kubeforge" in results:
        print(f"  kubeforge: operator ready (pool status) {extra.get('operator_ready_s', float('nan')):.1f}s after start; "
              f"jobs with status.placement: {extra.get('admitted')}; pods created {extra.get('pods_created')}, "
              f"still gated {extra.get('gated_pods')}, ungated but unbound {extra.get('pending_ungated')}; "
              f"PVCs (created, bound): {extra.get('pvcs')}; operator CPU during the phase "
              f"{extra.get('operator_cpu_s', float('nan')):.1f}s")
        if extra.get("pool_not_ready"):
            print(f"  kubeforge: {extra['pool_not_ready']}")
        print(f"  kubeforge: Admitted conditions at end: {extra.get('reasons')}")
        a, b = extra.get("create_to_admitted") or [], extra.get("admitted_to_pods") or []
        print(f"  kubeforge: where the time goes (API server timestamps, 1 s resolution): TrainingJob created -> "
              f"Admitted p50 {pct(a, 50):.0f}s p95 {pct(a, 95):.0f}s max {max(a, default=float('nan')):.0f}s; "
              f"Admitted -> first pod created p50 {pct(b, 50):.0f}s p95 {pct(b, 95):.0f}s max {max(b, default=float('nan')):.0f}s")
        print(f"  kubeforge: operator log (this run): {extra.get('log_lines')} lines, {extra.get('log_errors')} "
              f"error/traceback lines, {extra.get('log_warnings')} warnings; operator still running at the end of "
              f"the phase: {'yes' if extra.get('operator_alive') else 'NO'}")
        for ln in extra.get("log_samples") or []:
            print(f"    | {ln[:220]}")
    if "kubeforge" in results:
        base = results.get("baseline")
        bench_claims.report(args.claims, extra.get("start"), extra.get("components"), extra.get("restart"),
                            (base[1]["p50"], base[1]["p95"]) if base else None, extra.get("components_baseline"))
        bench_claims.report_profile(extra.get("py_spy"), extra.get("operator_times"))
    for n in names:
        if n in costs:
            print_cost(n, costs[n], results[n][1], "operator" if n == "kubeforge" else "bench",
                       per_admitted=args.admission_only and n == "kubeforge")
    if extra.get("kueue") and "kueue" in results:
        from peers import kueue_phase

        kueue_phase.print_report(sys.modules[__name__], extra["kueue"], results["kueue"][1], results["kueue"][0])
    for n in names:
        print_timeline(results[n][0], args.timeline_rows)


if __name__ == "__main__":
    sys.exit(main())
