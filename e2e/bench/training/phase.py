"""One phase of the training bench: submit every job from a thread pool, watch pods (and
TrainingJobs) on this side of the API server, sample the timeline, and the phase's figures.

A phase ends when every job is bound (with ``--admission-only``: admitted), when nothing new was
bound (admitted) for ``--settle`` s after the last submission, or at ``--phase-timeout``. Every
wait is bounded; nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from e2e.bench.lib.cluster import GROUP, JOB_LABEL, VERSION, Cluster
from e2e.bench.lib.stats import pct
from e2e.bench.lib.timing import ts
from e2e.bench.lib.watch import watch_raw
from e2e.bench.training.cost import Cost, measure_cost
from e2e.bench.training.workload import Job

__all__ = ["ADMITS", "Phase", "run_phase", "summarize"]

ADMITS = ("kubeforge", "kueue")  # phases whose jobs have an Admitted condition (TrainingJob, Kueue Workload)


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
