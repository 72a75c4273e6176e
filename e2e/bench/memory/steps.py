"""The memory bench's run: the cluster and the idle operator, then the jobs in steps, a row of
RSS and CPU after each (every wait bounded; a step that times out still gives its row)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from e2e.bench.lib.cluster import (
    GROUP, JOB_LABEL, POOL, VERSION, Cluster, apply_crds, apply_fleet, apply_pool, component_pid, make_namespace,
    open_api, shared_claim, start_operator, stop_operator, wait_for_pool,
)
from e2e.bench.lib.procs import RssSampler, alive, cpu_seconds, log_digest, log_lines_since, rss_mib
from e2e.bench.lib.source import crds_dir
from e2e.bench.lib.stats import pct
from e2e.bench.lib.timing import Abort, logger
from e2e.bench.lib.watch import watch_raw

__all__ = ["CLAIM", "NS", "MemoryRun", "Row", "Seen", "training_job"]

NS = "bench-memory"
CLAIM = "bench-checkpoint"
say = logger("bench-memory")


@dataclass
class Seen:
    """What the watches saw: pods (created, bound) and jobs admitted, with the last progress time."""

    pods: set = field(default_factory=set)
    bound: set = field(default_factory=set)
    admitted: set = field(default_factory=set)
    last_progress: float = 0.0
    restarts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def pod(self, p: dict, now: float) -> None:
        """Record a pod event: created, and bound once ``spec.nodeName`` is set."""
        md = p.get("metadata") or {}
        name = md.get("name")
        if not name or JOB_LABEL not in (md.get("labels") or {}):
            return
        with self.lock:
            if name not in self.pods:
                self.pods.add(name)
                self.last_progress = now
            if (p.get("spec") or {}).get("nodeName") and name not in self.bound:
                self.bound.add(name)
                self.last_progress = now

    def job(self, tj: dict, now: float) -> None:
        """Record a TrainingJob event: admitted once ``Admitted=True``."""
        name = (tj.get("metadata") or {}).get("name")
        if not name or name in self.admitted:
            return
        if any(c.get("type") == "Admitted" and c.get("status") == "True"
               for c in (tj.get("status") or {}).get("conditions") or []):
            with self.lock:
                self.admitted.add(name)
                self.last_progress = now


@dataclass
class Row:
    """One line of the report: the state after a step."""

    label: str
    jobs: int
    pods: int
    bound: int
    admitted: int
    step_s: float
    why: str
    op_rss: float
    op_peak: float
    op_cpu: float
    api_rss: float
    etcd_rss: float


def training_job(i: int, replicas: int, gpus: int) -> dict:
    """TrainingJob ``m<i>``: ``replicas`` x ``gpus``, topology None, the shared checkpoint PVC."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
        "metadata": {"name": f"m{i:05d}", "namespace": NS, "labels": {"kubeforge.io/bench": "memory"}},
        "spec": {
            "pools": [POOL], "replicas": replicas, "gpusPerReplica": gpus, "topology": {"mode": "None"},
            "checkpoint": {"existingClaimName": CLAIM},
            "template": {"spec": {"terminationGracePeriodSeconds": 0,
                                  "containers": [{"name": "trainer", "image": "example.com/train:1",
                                                  "command": ["torchrun", "train.py"]}]}},
        },
    }


class MemoryRun:
    """One run of the memory bench on cluster ``c`` (see the module docstring); the report reads
    its fields: rows, notes, the API server's and etcd's RSS before the operator, the operator's
    VmHWM, the watches' restarts, the log digest."""

    def __init__(self, args, c: Cluster) -> None:
        self.args, self.c = args, c
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.seen = Seen()
        self.stop = threading.Event()
        self.watchers: list[threading.Thread] = []
        self.pid: int | None = None
        self.op_log = c.dir / "operator.log"
        self.log_offset = 0
        self.digest: dict = {}
        self.api_before = self.etcd_before = self.hwm = float("nan")
        self.api_pid = self.etcd_pid = None
        self.submitted = 0
        self.errors: list[str] = []
        self.core = self.custom = None

    def setup(self, fleet, capacity: int) -> None:
        """The cluster, the fleet, the CRDs, the namespace, the claim, the pool; the API server's
        and etcd's RSS; then the operator, once its pool shows every GPU, and the watches."""
        from kubernetes import client

        args, c = self.args, self.c
        t = time.monotonic()
        c.up(None, log=say)
        api = open_api(c, max(32, args.submit_workers * 2))
        nodes = apply_fleet(c, api, fleet, ready_timeout=600)
        apply_crds(c, crds_dir())
        say(f"cluster up with {len(nodes)} nodes in {time.monotonic() - t:.0f}s")
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.api_pid, self.etcd_pid = component_pid(c, "kube-apiserver"), component_pid(c, "etcd")
        if self.api_pid is None or self.etcd_pid is None:
            self.notes.append(f"pid not found: kube-apiserver {self.api_pid}, etcd {self.etcd_pid}")
        make_namespace(c, api, NS)
        shared_claim(c, self.core, NS, CLAIM)
        apply_pool(c, fleet.name)
        time.sleep(3)
        self.api_before, self.etcd_before = rss_mib(self.api_pid), rss_mib(self.etcd_pid)
        self.log_offset = self.op_log.stat().st_size if self.op_log.exists() else 0
        self.pid = start_operator(c)
        say(f"operator started (pid {self.pid}, log {self.op_log})")
        if not wait_for_pool(self.custom, self.pid, self.op_log, capacity, 180):
            self.notes.append("the GPUPool status never showed every GPU within 180 s")
        core, custom, seen = self.core, self.custom, self.seen
        self.watchers = [
            threading.Thread(target=watch_raw, daemon=True, args=(
                lambda **kw: core.list_namespaced_pod(NS, **kw), seen.pod, self.stop, seen.restarts, "pod")),
            threading.Thread(target=watch_raw, daemon=True, args=(
                lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", **kw),
                seen.job, self.stop, seen.restarts, "trainingjob")),
        ]
        for w in self.watchers:
            w.start()

    def idle(self) -> None:
        """The idle operator's RSS for ``--idle-seconds``: the first row."""
        args, pid = self.args, self.pid
        idle: list[float] = []
        t_idle = time.monotonic()
        while time.monotonic() - t_idle < args.idle_seconds:  # bounded by --idle-seconds
            idle.append(rss_mib(pid))
            time.sleep(0.5)
        idle = [v for v in idle if v == v]
        self.rows.append(Row("idle operator", 0, 0, 0, 0, args.idle_seconds, "idle sampling",
                             pct(idle, 50), max(idle, default=float("nan")), cpu_seconds(pid),
                             rss_mib(self.api_pid), rss_mib(self.etcd_pid)))
        say(f"idle operator RSS p50 {pct(idle, 50):.0f} MiB over {len(idle)} samples")

    def steps(self) -> None:
        """``--jobs`` TrainingJobs in steps of ``--step``, each a burst, each followed by a row;
        then (``--final-wait``) one more row for the last pods."""
        args = self.args
        with ThreadPoolExecutor(args.submit_workers) as pool:
            while self.submitted < args.jobs:  # bounded: at most ceil(jobs/step) steps
                n = min(args.step, args.jobs - self.submitted)
                t0 = time.monotonic()
                list(pool.map(self._create, range(self.submitted, self.submitted + n)))
                self.submitted += n
                t_sub = time.monotonic()
                say(f"{self.submitted} jobs submitted ({n} in {t_sub - t0:.1f}s)")
                self.wait_and_row(f"{self.submitted} jobs", t0, t_sub, args.step_timeout)
        if args.final_wait > 0 and len(self.seen.bound) < self.submitted * args.replicas:
            t0 = time.monotonic()
            self.wait_and_row(f"+{args.final_wait:.0f}s wait", t0, t0, args.final_wait)
        self.hwm = rss_mib(self.pid, "VmHWM")
        if self.errors:
            self.notes.append(f"{len(self.errors)} create errors, first: {self.errors[0]}")

    def _create(self, i: int) -> None:
        try:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, NS, "trainingjobs", training_job(i, self.args.replicas, self.args.gpus_per_replica),
                _preload_content=False, _request_timeout=60)
        except Exception as e:  # noqa: BLE001 - counted and reported
            self.errors.append(f"m{i:05d}: {str(e)[:160]}")

    def wait_and_row(self, label: str, t0: float, t_sub: float, timeout: float) -> Row:
        """Wait (at most ``timeout`` s from ``t0``) for every pod so far to bind, or for
        ``--settle`` s without progress; then take a row.

        Raises:
            Abort: the operator exited.
        """
        args, pid, seen = self.args, self.pid, self.seen
        sampler = RssSampler(pid).start()
        seen.last_progress = max(seen.last_progress, t_sub)
        target = self.submitted * args.replicas
        why = ""
        while not why:  # bounded by timeout
            time.sleep(1)
            now = time.monotonic()
            if not alive(pid):
                why = "the operator exited"
            elif len(seen.bound) >= target:
                why = "all pods bound"
            elif now - seen.last_progress >= args.settle:
                why = f"no progress for {args.settle:.0f}s"
            elif now - t0 >= timeout:
                why = f"timeout ({timeout:.0f}s)"
        sampler.stop()
        row = Row(label, self.submitted, len(seen.pods), len(seen.bound), len(seen.admitted), time.monotonic() - t0,
                  why, sampler.last, sampler.peak, cpu_seconds(pid), rss_mib(self.api_pid), rss_mib(self.etcd_pid))
        self.rows.append(row)
        if why == "the operator exited":
            raise Abort(f"the operator exited ({label}); its log: {self.op_log}")
        say(f"{row.label}: pods created {row.pods}, bound {row.bound}/{target}, admitted {row.admitted}; "
            f"operator RSS {row.op_rss:.0f} MiB (peak {row.op_peak:.0f}); kube-apiserver {row.api_rss:.0f} MiB; "
            f"{why} after {row.step_s:.0f}s")
        return row

    def finish(self) -> None:
        """Stop the watches and the operator; digest this run's operator log."""
        self.stop.set()
        for w in self.watchers:
            w.join(timeout=15)
        stop_operator(self.c)
        lines = log_lines_since(self.op_log, self.log_offset)
        if lines is not None:
            self.digest = log_digest(lines)
