#!/usr/bin/env python3
"""Memory bench: the operator's RSS as TrainingJobs and their pods grow to 5,000 / 20,000.

One local cluster (``--cluster``, kwok nodes from ``--fleet``, by default 320 nodes x 64 GPUs
= 20,480 GPUs), one GPUPool, one namespace with one checkpoint PVC that every job names in
``checkpoint.existingClaimName`` (so no job gets a PVC and PV of its own). Then:

1. the API server's RSS before the operator starts (for scale);
2. the operator starts; once its GPUPool status shows every GPU, its RSS is sampled for
   ``--idle-seconds`` with no TrainingJob at all: the baseline of an idle operator;
3. ``--jobs`` TrainingJobs of ``--replicas`` x ``--gpus-per-replica`` GPUs (topology
   ``{mode: None}``) are created in steps of ``--step`` jobs, each step as a burst from
   ``--submit-workers`` threads. After each step the bench waits until every pod so far is
   bound, or nothing progressed for ``--settle`` s, or ``--step-timeout`` s passed, and then
   prints the operator's RSS (now and the peak during the step), its CPU seconds, and the RSS
   of kube-apiserver and etcd.

Every wait is bounded; a step that times out still prints its row (with how many pods were
created and bound, so the row says what it measured). Nothing is asserted: it prints figures.

Run: ``.venv/bin/python e2e/bench_memory.py`` (``make bench-memory``);
a smoke run: ``--jobs 200 --step 100 --fleet e2e/fleets/bench-64.yaml``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_training import (  # noqa: E402
    GROUP, JOB_LABEL, POOL, ROOT, VERSION, Abort, RssSampler, alive, apply_fleet, component_pid, cpu_seconds,
    SRC, describe_source, fleet_capacity, log_digest, make_namespace, open_api, pct, rss_mib, shared_claim,
    wait_for_pool, watch_raw,
)
from kubeforge.demo import start_operator, stop_operator  # noqa: E402
from kubeforge.sim.cluster import Cluster  # noqa: E402
from kubeforge.sim.fleet import load_fleet  # noqa: E402

NS = "bench-memory"
CLAIM = "bench-checkpoint"
DEFAULT_CLUSTER = os.environ.get("KUBEFORGE_BENCH_MEMORY_CLUSTER", "kubeforge-bench-mem")


def say(msg: str) -> None:
    """Progress line on stderr with a wall-clock stamp."""
    print(f"[bench-memory {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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


def main() -> int:
    """Run the memory bench; returns the process exit code (0 unless setup failed)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=DEFAULT_CLUSTER,
                    help="local cluster name (default kubeforge-bench-mem or $KUBEFORGE_BENCH_MEMORY_CLUSTER)")
    ap.add_argument("--fleet", default=str(ROOT / "e2e/fleets/bench-mem-320.yaml"), help="fleet file")
    ap.add_argument("--jobs", type=int, default=5000, help="TrainingJobs in all (default 5000)")
    ap.add_argument("--step", type=int, default=1000, help="jobs per step; a row is printed after each")
    ap.add_argument("--replicas", type=int, default=4, help="pods per job (default 4)")
    ap.add_argument("--gpus-per-replica", type=int, default=1)
    ap.add_argument("--submit-workers", type=int, default=16, help="threads issuing the create calls")
    ap.add_argument("--step-timeout", type=float, default=600, help="seconds a step may wait, at most")
    ap.add_argument("--final-wait", type=float, default=600,
                    help="after the last step, wait at most this long more for every pod to bind (one more row)")
    ap.add_argument("--settle", type=float, default=120,
                    help="end a step when no pod was created or bound and no job admitted for this long")
    ap.add_argument("--idle-seconds", type=float, default=20, help="sampling of the idle operator")
    ap.add_argument("--operator-src", default=os.environ.get("KUBEFORGE_OPERATOR_SRC"),
                    help="drive the kubeforge code (operator, CRDs, sim) of this source tree instead of the working "
                         "tree, e.g. an export of a commit: git archive HEAD operator crds hack | tar -x -C DIR")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    args = ap.parse_args()
    if min(args.jobs, args.step, args.replicas, args.gpus_per_replica, args.submit_workers) < 1:
        ap.error("--jobs, --step, --replicas, --gpus-per-replica and --submit-workers must be at least 1")

    t_start = time.monotonic()
    fleet = load_fleet(args.fleet)
    capacity, per_node = fleet_capacity(fleet)
    want_gpus = args.jobs * args.replicas * args.gpus_per_replica
    print("=" * 100)
    print("kubeforge memory bench: operator RSS as TrainingJobs and pods grow")
    print(f"fleet {fleet.name} ({args.fleet}): {fleet.node_count} nodes x {per_node} GPUs = {capacity} GPUs")
    print(f"jobs: {args.jobs} TrainingJobs of {args.replicas} x {args.gpus_per_replica} GPU "
          f"({args.jobs * args.replicas} pods, {want_gpus} GPUs, {100 * want_gpus / max(1, capacity):.0f}% of the fleet), "
          f"topology None, checkpoint.existingClaimName {CLAIM} (one PVC shared by every job: no per-job PVC/PV)")
    print(f"steps of {args.step} jobs, each a burst from {args.submit_workers} threads; a step ends when every pod so far "
          f"is bound, after {args.settle:.0f}s without progress, or at {args.step_timeout:.0f}s; then at most "
          f"{args.final_wait:.0f}s more for the last pods; "
          f"cluster {args.cluster}; machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"kubeforge code: {describe_source()}")
    print("=" * 100, flush=True)

    from kubernetes import client

    c = Cluster(args.cluster)
    rows: list[Row] = []
    notes: list[str] = []
    error = None
    seen = Seen()
    stop = threading.Event()
    watchers: list[threading.Thread] = []
    pid = None
    op_log = c.dir / "operator.log"
    log_offset = 0
    digest: dict = {}
    idle: list[float] = []
    api_before = etcd_before = float("nan")
    hwm = float("nan")
    try:
        t = time.monotonic()
        c.up(None, log=say)
        api = open_api(c, max(32, args.submit_workers * 2))
        nodes = apply_fleet(c, api, fleet, ready_timeout=600)
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(SRC / "crds"))
        c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        say(f"cluster up with {len(nodes)} nodes in {time.monotonic() - t:.0f}s")
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        api_pid, etcd_pid = component_pid(c, "kube-apiserver"), component_pid(c, "etcd")
        if api_pid is None or etcd_pid is None:
            notes.append(f"pid not found: kube-apiserver {api_pid}, etcd {etcd_pid}")
        make_namespace(c, api, NS)
        shared_claim(c, core, NS, CLAIM)
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUPool", "metadata": {"name": POOL},
            "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/sim-fleet": fleet.name}}},
        }))
        time.sleep(3)
        api_before, etcd_before = rss_mib(api_pid), rss_mib(etcd_pid)

        log_offset = op_log.stat().st_size if op_log.exists() else 0
        pid = start_operator(c)
        say(f"operator started (pid {pid}, log {op_log})")

        ok = wait_for_pool(custom, pid, op_log, capacity, 180)
        if not ok:
            notes.append("the GPUPool status never showed every GPU within 180 s")
        watchers = [
            threading.Thread(target=watch_raw, daemon=True, args=(
                lambda **kw: core.list_namespaced_pod(NS, **kw), seen.pod, stop, seen.restarts, "pod")),
            threading.Thread(target=watch_raw, daemon=True, args=(
                lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", **kw),
                seen.job, stop, seen.restarts, "trainingjob")),
        ]
        for w in watchers:
            w.start()
        t_idle = time.monotonic()
        while time.monotonic() - t_idle < args.idle_seconds:  # bounded by --idle-seconds
            idle.append(rss_mib(pid))
            time.sleep(0.5)
        idle = [v for v in idle if v == v]
        rows.append(Row("idle operator", 0, 0, 0, 0, args.idle_seconds, "idle sampling",
                        pct(idle, 50), max(idle, default=float("nan")), cpu_seconds(pid),
                        rss_mib(api_pid), rss_mib(etcd_pid)))
        say(f"idle operator RSS p50 {pct(idle, 50):.0f} MiB over {len(idle)} samples")

        submitted = 0
        errors: list[str] = []

        def wait_and_row(label: str, t0: float, t_sub: float, timeout: float) -> Row:
            """Wait (at most ``timeout`` s from ``t0``) for every pod so far to bind, or for
            ``--settle`` s without progress; then take a row."""
            sampler = RssSampler(pid).start()
            seen.last_progress = max(seen.last_progress, t_sub)
            target = submitted * args.replicas
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
            row = Row(label, submitted, len(seen.pods), len(seen.bound), len(seen.admitted), time.monotonic() - t0, why,
                      sampler.last, sampler.peak, cpu_seconds(pid), rss_mib(api_pid), rss_mib(etcd_pid))
            rows.append(row)
            if why == "the operator exited":
                raise Abort(f"the operator exited ({label}); its log: {op_log}")
            say(f"{row.label}: pods created {row.pods}, bound {row.bound}/{target}, admitted {row.admitted}; "
                f"operator RSS {row.op_rss:.0f} MiB (peak {row.op_peak:.0f}); kube-apiserver {row.api_rss:.0f} MiB; "
                f"{why} after {row.step_s:.0f}s")
            return row

        with ThreadPoolExecutor(args.submit_workers) as pool:
            while submitted < args.jobs:  # bounded: at most ceil(jobs/step) steps
                n = min(args.step, args.jobs - submitted)
                t0 = time.monotonic()

                def create(i: int) -> None:
                    try:
                        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs",
                                                               training_job(i, args.replicas, args.gpus_per_replica),
                                                               _preload_content=False, _request_timeout=60)
                    except Exception as e:  # noqa: BLE001 - counted and reported
                        errors.append(f"m{i:05d}: {str(e)[:160]}")

                list(pool.map(create, range(submitted, submitted + n)))
                submitted += n
                t_sub = time.monotonic()
                say(f"{submitted} jobs submitted ({n} in {t_sub - t0:.1f}s)")
                wait_and_row(f"{submitted} jobs", t0, t_sub, args.step_timeout)
        if args.final_wait > 0 and len(seen.bound) < submitted * args.replicas:
            t0 = time.monotonic()
            wait_and_row(f"+{args.final_wait:.0f}s wait", t0, t0, args.final_wait)
        hwm = rss_mib(pid, "VmHWM")
        if errors:
            notes.append(f"{len(errors)} create errors, first: {errors[0]}")
    except Exception as e:  # noqa: BLE001 - print what was measured, then the error
        error = f"{type(e).__name__}: {str(e)[:400]}"
        say(f"stopped early: {error}")
    finally:
        stop.set()
        for w in watchers:
            w.join(timeout=15)
        stop_operator(c)
        if op_log.exists():
            with open(op_log, "rb") as f:
                f.seek(log_offset)
                digest = log_digest(f.read().decode(errors="replace").splitlines())
        if not args.keep:
            try:
                c.down(log=say)
            except Exception as e:  # noqa: BLE001
                say(f"cluster down failed: {e}; run: .venv/bin/kubeforge sim down --name {args.cluster}")

    print("\nRESULTS (RSS in MiB from /proc/<pid>/status VmRSS; 'peak' sampled every 0.5 s during the step; "
          "CPU = operator utime+stime since it started)")
    print(f"  kube-apiserver before the operator started: {api_before:.0f} MiB, etcd {etcd_before:.0f} MiB "
          f"({fleet.node_count} nodes, no job)")
    print(f"  {'after':<14} {'pods':>7} {'bound':>7} {'admitted':>9} {'step s':>7} {'operator':>9} {'op peak':>8} "
          f"{'op CPU s':>9} {'apiserver':>10} {'etcd':>7}  step ended")
    for r in rows:
        print(f"  {r.label:<14} {r.pods:>7} {r.bound:>7} {r.admitted:>9} {r.step_s:>7.0f} {r.op_rss:>9.0f} "
              f"{r.op_peak:>8.0f} {r.op_cpu:>9.1f} {r.api_rss:>10.0f} {r.etcd_rss:>7.0f}  {r.why}")
    if len(rows) >= 2:
        base, last = rows[0], rows[-1]
        grow = last.op_rss - base.op_rss
        per_job = 1024 * grow / last.jobs if last.jobs else float("nan")
        per_pod = 1024 * grow / last.pods if last.pods else float("nan")
        print(f"  operator: idle baseline {base.op_rss:.0f} MiB -> {last.op_rss:.0f} MiB with {last.jobs} jobs / "
              f"{last.pods} pods (+{grow:.0f} MiB: {per_job:.0f} KiB per job, {per_pod:.0f} KiB per pod created); "
              f"peak of any step {max(r.op_peak for r in rows):.0f} MiB, VmHWM {hwm:.0f} MiB")
    print(f"  watch restarts: {seen.restarts or 0}")
    if digest:
        print(f"  operator log (this run): {digest['log_lines']} lines, {digest['log_errors']} error/traceback lines, "
              f"{digest['log_warnings']} warnings")
        for ln in digest["log_samples"]:
            print(f"    | {ln[:220]}")
    for n in notes:
        print(f"  note: {n}")
    if error:
        print(f"  stopped early: {error}")
    print(f"\ntotal run {time.monotonic() - t_start:.0f}s, load average (1/5/15 min) at the end "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
