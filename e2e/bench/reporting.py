"""Reporting bench: what workers' progress reports cost the operator (issue 27's endpoint target:
1,000 jobs reporting every 10 s add at most 10 % to the operator's CPU and nothing to admission).

One local cluster (``--cluster``), ``--jobs`` running TrainingJobs of one 1-GPU rank each (one
shared checkpoint claim), the operator as ``make demo`` runs it but with the chart's default
``--progress-write-seconds`` (30). Then two phases of ``--window`` seconds each, in the same run:

1. **baseline**: no reports;
2. **reports**: every job's rank 0 reports every ``--interval`` seconds (staggered) to the
   operator's real HTTPS endpoint with a real projected token (TokenRequest, bound to its pod):
   kubeforge's payload (step, total, loss; a checkpoint every 10th report), each job keeping one
   TLS connection as ``kubeforge.workload`` does (``--new-connections``: one per report), from a
   process of their own. The first interval (every token's first TokenReview) is a warm-up,
   outside the window.

In each window: the operator's CPU seconds (/proc), its API requests by kind (its own counter),
and the admission latency of ``--probes`` small probe jobs submitted through the window (from
the create call to a watch seeing ``Admitted=True``; p50 and p95). Printed side by side;
nothing is asserted (wall-clock figures on a shared machine are figures, not tests).

Run: ``.venv/bin/python -m e2e.bench.reporting`` (``make bench-reporting``); a smoke run:
``--jobs 100 --window 30 --probes 5``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from e2e.bench.lib.cluster import (
    GROUP, POOL, VERSION, Cluster, apply_crds, apply_fleet, apply_pool, component_pid, down, make_namespace, open_api,
    operator_metrics_port, shared_claim, start_operator, stop_operator,
)
from e2e.bench.lib.metrics import counter_delta, fetch_samples, scrape_operator_requests
from e2e.bench.lib.procs import cpu_seconds
from e2e.bench.lib.source import crds_dir
from e2e.bench.lib.stats import pct
from e2e.bench.lib.tables import Columns
from e2e.bench.lib.timing import say, wait_until
from e2e.bench.lib.watch import watch_events

NS, PROBES_NS, CLAIM = "rep", "rep-probe", "rep-checkpoints"
DEFAULT_CLUSTER = os.environ.get("KUBEFORGE_BENCH_REPORTING_CLUSTER", "kubeforge-bench-rep")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``)."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.reporting", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=DEFAULT_CLUSTER, help="local cluster name (default kubeforge-bench-rep)")
    ap.add_argument("--jobs", type=int, default=1000, help="running jobs that report (default 1000)")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between a job's reports (default 10)")
    ap.add_argument("--window", type=float, default=120.0, help="seconds measured per phase (default 120)")
    ap.add_argument("--probes", type=int, default=20, help="probe jobs per phase, for admission latency")
    ap.add_argument("--progress-write-seconds", type=float, default=30.0, help="the operator's flag (chart default)")
    ap.add_argument("--progress-writes-per-second", type=float, default=5.0, help="the operator's flag (chart default)")
    ap.add_argument("--new-connections", action="store_true",
                    help="a new TLS connection per report (default: one kept per job, as kubeforge.workload does)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    return ap.parse_args(argv)


def training_job(name: str, ns: str) -> dict:
    """One rank of one GPU, no topology constraint, on the shared claim."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name, "namespace": ns},
            "spec": {"pools": [POOL], "replicas": 1, "gpusPerReplica": 1, "topology": {"mode": "None"},
                     "checkpoint": {"existingClaimName": CLAIM},
                     "template": {"spec": {"containers": [{"name": "trainer", "image": "example.com/train:1"}]}}}}


class Load:
    """Every job's rank 0 reporting every ``interval`` s, from a process of its own (its TLS and
    JSON work must not slow the bench's watch of the probes): an asyncio loop there, one
    connection per job kept open from report to report (as :mod:`kubeforge.workload` and the
    Kubeflow SDK's session keep theirs), or a new one per report with ``new_connections``.

    Args:
        targets: ``(url, token)`` per job.
        ca: The endpoint's CA (PEM).
        interval: Seconds between a job's reports.
        new_connections: A new TLS connection per report.
    """

    def __init__(self, targets: list[tuple[str, str]], ca: str, interval: float, new_connections: bool = False):
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.stop = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_load_main, args=(targets, ca, interval, new_connections, self.stop, send),
                                name="report-load", daemon=True)
        self.samples: list[tuple[float, int, float]] = []

    def start(self) -> None:
        """Start the load process."""
        self.proc.start()

    def finish(self) -> None:
        """Stop it and collect its ``(monotonic time, code, seconds)`` per report (bounded waits)."""
        self.stop.set()
        if self._recv.poll(60):
            self.samples = self._recv.recv()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()

    def window(self, t0: float, t1: float) -> tuple[dict[int, int], list[float]]:
        """Answers by code and round trips of the reports sent between ``t0`` and ``t1``."""
        inside = [(c, d) for t, c, d in self.samples if t0 <= t <= t1]
        codes: dict[int, int] = {}
        for c, _ in inside:
            codes[c] = codes.get(c, 0) + 1
        return codes, [d for _, d in inside]


def _load_main(targets, ca, interval, new_connections, stop, send) -> None:
    """The load process: report until ``stop``, then send the samples back. Niced: in a cluster
    the workers run on their own nodes; here they share the CPUs with the control plane."""
    os.nice(5)
    samples: list[tuple[float, int, float]] = []
    asyncio.run(_load(targets, ca, interval, new_connections, stop, samples))
    send.send(samples)


async def _load(targets, ca, interval, new_connections, stop, samples) -> None:
    import aiohttp

    ctx = ssl.create_default_context(cadata=ca)

    async def job(i: int, url: str, token: str) -> None:
        """Job ``i``'s rank 0: its own session and connection, a report every ``interval`` s."""
        conn = aiohttp.TCPConnector(ssl=ctx, force_close=new_connections, limit=1)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=10)) as s:
            await asyncio.sleep(interval * i / max(1, len(targets)))
            step, n = 0, 0
            while not stop.is_set():  # bounded by stop, set at the end of the run
                step, n = step + 100, n + 1
                body = {"step": step, "totalSteps": 1_000_000, "metrics": {"loss": round(3.0 / math.sqrt(n), 4)}}
                if n % 10 == 0:
                    body["checkpoint"] = {"step": step, "path": f"/checkpoints/step-{step}"}
                t = time.monotonic()
                try:
                    async with s.post(url, json=body, headers={"Authorization": f"Bearer {token}"}) as r:
                        await r.read()
                        code = r.status
                except Exception:  # noqa: BLE001 - counted as 0 (no answer)
                    code = 0
                samples.append((t, code, time.monotonic() - t))
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - t)))

    await asyncio.gather(*(job(i, url, tok) for i, (url, tok) in enumerate(targets)))


class Probes:
    """Probe jobs' admission latency: create time to the watch seeing ``Admitted=True``."""

    def __init__(self, custom) -> None:
        self.custom = custom
        self.created: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.stop = threading.Event()
        restarts: dict[str, int] = {}
        self.thread = threading.Thread(target=watch_events, daemon=True, args=(
            lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, PROBES_NS, "trainingjobs", **kw),
            self._event, self.stop, restarts, "probes", say))

    def _event(self, kind: str, obj: dict, now: float) -> None:
        name = obj["metadata"]["name"]
        conds = (obj.get("status") or {}).get("conditions") or []
        if name not in self.admitted and any(c["type"] == "Admitted" and c["status"] == "True" for c in conds):
            self.admitted[name] = now

    def submit(self, name: str) -> None:
        """Create one probe job, noting when."""
        self.created[name] = time.monotonic()
        self.custom.create_namespaced_custom_object(GROUP, VERSION, PROBES_NS, "trainingjobs",
                                                    training_job(name, PROBES_NS), _request_timeout=60)

    def latencies(self, names: list[str]) -> list[float]:
        """Seconds to Admitted of the probes in ``names`` that were admitted."""
        return [self.admitted[n] - self.created[n] for n in names if n in self.admitted]


def phase(label: str, c: Cluster, pids: dict[str, int | None], probes: Probes, args) -> dict:
    """One measured window: CPU seconds of the operator (and of the control plane and the load,
    for what shares the machine), API requests, probe admissions; the probes are deleted after
    (their GPUs back for the next phase)."""
    port = operator_metrics_port(c)
    before, _ = scrape_operator_requests(port)
    cpu0, t0 = {k: cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
    names = []
    for k in range(args.probes):  # one probe every window/probes seconds
        wait_until(lambda: time.monotonic() >= t0 + k * args.window / args.probes, args.window, "probe slot", 0.2)
        name = f"{label}-{k}"
        probes.submit(name)
        names.append(name)
    wait_until(lambda: time.monotonic() >= t0 + args.window, args.window, "the window's end", 0.5)
    cpu1, t1 = {k: cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
    load_avg = os.getloadavg()[0]
    after, _ = scrape_operator_requests(port)
    wait_until(lambda: len(probes.latencies(names)) == len(names), 60, f"{label} probes admitted")
    lat = probes.latencies(names)
    c.kubectl("delete", "trainingjobs", "--all", "-n", PROBES_NS, "--wait=true", "--timeout=120s", check=False,
              timeout=180)
    delta = counter_delta(before, after) or {}
    cpu = {k: (cpu1[k] - cpu0[k]) / (t1 - t0) for k in pids}
    return {"cpu": cpu["operator"], "cpus": cpu, "loadavg": load_avg, "seconds": t1 - t0, "t0": t0, "t1": t1,
            "lat": lat, "probes": len(names),
            "status_patches": sum(v for (verb, res, _), v in delta.items() if verb == "PATCH" and res == "trainingjobs/status"),
            "reviews": sum(v for (verb, res, _), v in delta.items() if res == "tokenreviews"),
            "requests": sum(delta.values())}


def setup(c: Cluster, args) -> tuple[int, object, object]:
    """The cluster, fleet, pool, claim, operator and the running jobs; returns (operator pid, core, custom)."""
    from kubernetes import client

    from kubeforge.sim.fleet import Fleet

    c.up(None, log=say)
    api = open_api(c, 64)
    gpus = args.jobs + args.probes + 8
    fleet = Fleet.model_validate({"name": "rep", "nodePrefix": "rep-", "groups": [
        {"name": "n", "count": math.ceil(gpus / 8), "gpu": {"count": 8}, "labels": {"kubeforge.io/sim-fleet": "rep"}}]})
    apply_fleet(c, api, fleet, ready_timeout=600)
    apply_crds(c, crds_dir())
    for ns in (NS, PROBES_NS):
        make_namespace(c, api, ns)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    shared_claim(c, core, NS, CLAIM)
    shared_claim(c, core, PROBES_NS, CLAIM)
    apply_pool(c, "rep")
    pid = start_operator(c, args=("--progress-write-seconds", str(args.progress_write_seconds),
                                  "--progress-writes-per-second", str(args.progress_writes_per_second)))
    say(f"operator started (pid {pid}); creating {args.jobs} jobs")
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "trainingjobs", training_job(f"j{i:04d}", NS), _request_timeout=60), range(args.jobs)))

    def running() -> bool:
        """Every job's worker is Running."""
        pods = json.loads(core.list_namespaced_pod(NS, _preload_content=False, _request_timeout=60).data)["items"]
        return sum(p["status"].get("phase") == "Running" for p in pods) >= args.jobs
    wait_until(running, 900, f"{args.jobs} running workers", 5.0)
    return pid, core, custom


def targets(core, n: int) -> tuple[list[tuple[str, str]], str]:
    """Each job's report URL (from its pod's env, as built) and a projected token bound to its pod; the CA."""
    pods = json.loads(core.list_namespaced_pod(NS, _preload_content=False, _request_timeout=120).data)["items"]
    pods = [p for p in pods if p["status"].get("phase") == "Running"][:n]

    def one(p: dict) -> tuple[str, str]:
        """The pod's report URL and a token bound to it (TokenRequest)."""
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0].get("env") or []}
        body = {"spec": {"audiences": ["kubeforge.io"], "expirationSeconds": 3600, "boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}}}
        tr = json.loads(core.create_namespaced_service_account_token(
            "default", NS, body, _preload_content=False, _request_timeout=60).data)
        return env["KUBEFORGE_STATUS_URL"], tr["status"]["token"]

    with ThreadPoolExecutor(16) as pool:
        out = list(pool.map(one, pods))
    cm = json.loads(core.read_namespaced_config_map("kubeforge-status-ca", NS, _preload_content=False).data)
    return out, cm["data"]["ca.crt"]


def report(args, base: dict, rep: dict, answers: dict[int, int], trips: list[float]) -> None:
    """The figures, side by side."""
    how = "a new TLS connection per report" if args.new_connections else "one kept TLS connection per job"
    print(f"\nReporting bench: {args.jobs} running jobs, reports every {args.interval:g} s each "
          f"({args.jobs / args.interval:.0f}/s offered, {how}), --progress-write-seconds "
          f"{args.progress_write_seconds:g}, --progress-writes-per-second {args.progress_writes_per_second:g}, "
          f"windows of {args.window:g} s")
    t = Columns(["baseline", "reports"], 46, 14)
    t.header()
    t.row("operator CPU, % of one core", [f"{base['cpu'] * 100:.1f}", f"{rep['cpu'] * 100:.1f}"])
    for k in ("kube-apiserver", "etcd", "reporters"):
        t.row(f"  beside it: {k} CPU, % of one core",
              [f"{x['cpus'][k] * 100:.1f}" if x["cpus"].get(k) is not None and x["cpus"][k] == x["cpus"][k] else "-"
               for x in (base, rep)])
    t.row("  load average (1 min) at the window's end", [f"{x['loadavg']:.1f}" for x in (base, rep)])
    t.row("operator API requests / s", [f"{x['requests'] / x['seconds']:.1f}" for x in (base, rep)])
    t.row("  of them TrainingJob status patches / s", [f"{x['status_patches'] / x['seconds']:.1f}" for x in (base, rep)])
    t.row("  of them TokenReviews (whole window)", [f"{x['reviews']:.0f}" for x in (base, rep)])
    for q in (50, 95):
        t.row(f"probe admission latency p{q}, s", [f"{pct(x['lat'], q):.2f}" for x in (base, rep)])
    t.row("probes admitted", [f"{len(x['lat'])}/{x['probes']}" for x in (base, rep)])
    added = (rep["cpu"] - base["cpu"]) * 100
    rel = added / (base["cpu"] * 100) * 100 if base["cpu"] > 0 else float("nan")
    print(f"  reports answered in the window: {', '.join(f'{n} x {c}' for c, n in sorted(answers.items())) or 'none'} "
          f"({sum(answers.values()) / rep['seconds']:.0f}/s); report round trip p50 {pct(trips, 50) * 1000:.0f} ms, "
          f"p95 {pct(trips, 95) * 1000:.0f} ms")
    print(f"  added operator CPU: {added:+.1f} points of one core ({rel:+.0f} % of the baseline's); "
          f"target: at most 10 points, and the probes' admission latency unchanged")


def accepted(c: Cluster) -> float:
    """``kubeforge_status_reports_total{code="200"}`` of the operator (0 when unreadable)."""
    port = operator_metrics_port(c)
    got = fetch_samples(f"http://127.0.0.1:{port}/metrics", re.compile(r'kubeforge_status_reports_total\{code="200"\}'))
    return sum(got.values())


def reviews(c: Cluster) -> float:
    """TokenReviews the operator sent so far (its API request counter; 0 when unreadable)."""
    got, _ = scrape_operator_requests(operator_metrics_port(c))
    return sum(v for (verb, res, _), v in (got or {}).items() if res == "tokenreviews")


def warm_up(c: Cluster, n: int, args) -> None:
    """Until every token had its TokenReview (at the operator's bound of reviews a second) and
    the operator accepted ``n`` reports; at least one interval, at most 300 s."""
    t0 = time.monotonic()
    wait_until(lambda: reviews(c) >= n and accepted(c) >= n, 300, f"{n} tokens reviewed", 2.0)
    time.sleep(max(0.0, args.interval - (time.monotonic() - t0)) + 2)
    say(f"warm-up done in {time.monotonic() - t0:.0f}s")


def main(argv: list[str] | None = None) -> int:
    """Run the bench (see the module docstring); 0 unless it could not run."""
    args = parse_args(argv)
    c = Cluster(args.cluster)
    load = None
    try:
        pid, core, custom = setup(c, args)
        probes = Probes(custom)
        probes.thread.start()
        tg, ca = targets(core, args.jobs)
        say(f"{len(tg)} tokens made; baseline window ({args.window:g} s)")
        pids = {"operator": pid, "kube-apiserver": component_pid(c, "kube-apiserver"), "etcd": component_pid(c, "etcd")}
        base = phase("base", c, pids, probes, args)
        load = Load(tg, ca, args.interval, args.new_connections)
        load.start()
        say(f"reports started; warm-up until every job's report was accepted once, then the window ({args.window:g} s)")
        warm_up(c, len(tg), args)
        rep = phase("rep", c, {**pids, "reporters": load.proc.pid}, probes, args)
        load.finish()
        probes.stop.set()
        report(args, base, rep, *load.window(rep["t0"], rep["t1"]))
        return 0
    finally:
        if load is not None and load.proc.is_alive():
            load.finish()
        stop_operator(c)
        down(c, args.keep)


if __name__ == "__main__":
    raise SystemExit(main())
