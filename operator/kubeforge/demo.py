"""The local GPU cluster demo (``make demo`` / ``kubeforge demo``): everything kubeforge does, live.

1. Starts the local cluster with the default fleet (``examples/fleet-h100.yaml``: 32 nodes,
   256 H100s in 8 NVLink domains), applies the CRDs, starts Debian's Prometheus, the
   model-server simulator and the kubeforge activator on loopback, then the operator.
2. Applies ``examples/``: the GPUPool, two TrainingJobs (4 x 8 GPUs inside one NVLink domain,
   2 x 8 preferring one), the 405B-class service (tensor 8 x pipeline 2: 2-node groups) and the
   chat service of ``examples/demo/`` (1 GPU a replica, from zero, short autoscaling windows),
   both services pointed at the local Prometheus.
3. Waits (bounded) until the training pods run and the 405B groups are Ready, then until the
   pool's status agrees with the pods (every domain's allocated GPUs), and prints where each
   job rank and each group landed and the pool's GPUs per domain.
4. Replays a burst of the Azure LLM inference trace against the chat service and prints it
   scaling from zero, up under the burst and back to zero after it (replicas, queue, Events).
5. Prints the pool again, any Warning Event (there should be none), and draws the picture
   (``--plot``, default ``demo-output/demo.png``): GPUs allocated per NVLink domain, and the
   chat service's replicas against its queue, over the demo.

The cluster and the operator keep running; ``kubeforge sim down`` stops both. Prometheus, the
simulator and the activator stop with the demo (the services then hold their replicas:
``ScalingActive`` False, no metric).
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from kubeforge.sim._process import start_detached, stop_pidfile
from kubeforge.sim.cluster import Cluster
from kubeforge.sim.fleet import load_fleet
from kubeforge.sim.tools import REPO_ROOT

NAMESPACE = "default"
POOL = "h100"
TRAINING_JOBS = ("llama-pretrain", "finetune")
LARGE = "llama-405b"
CHAT = "llama-chat"
EXAMPLES = ("gpupool-h100.yaml", "trainingjob-llama-pretrain.yaml", "trainingjob-finetune.yaml",
            "inferenceservice-llama-405b.yaml", "demo/inferenceservice-llama-chat.yaml")
"""What the demo applies, from examples/ (the services get ``autoscaling.prometheusURL`` set to
the local Prometheus)."""
DEFAULT_OUT = Path("demo-output")
DEFAULT_BURST_SECONDS = 16.0
POOL_AGREE_SECONDS = 30.0
SETTLE_SECONDS = 60.0


_T0 = [time.monotonic()]


def say(msg: str) -> None:
    """A progress line on stderr, with the seconds since the demo started."""
    print(f"[demo {time.monotonic() - _T0[0]:5.1f}s] {msg}", file=sys.stderr, flush=True)

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOCAL_ACTIVATOR = ("kubeforge-system", "kubeforge-activator")
"""The activator's Service the sim's operator looks for (``--activator-service``), as the chart
names it: the demo and the tests that hold requests at zero make it exist."""
LOCAL_PROMETHEUS = "http://127.0.0.1:"
"""The allow-list entry the local sim's operator gets: any port of loopback, where the sim
runs Prometheus (in a cluster, only in-cluster Service URLs are queried by default)."""


def start_operator(c: Cluster, extra_env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                   name: str = "operator") -> int:
    """Start ``kubeforge run`` in the background against cluster ``c``; returns its pid.

    The liveness and metrics endpoints get free loopback ports (written beside the pid as
    ``<name>.ports``), so several operators can run side by side (``name`` tells them apart:
    ``<name>.pid``, ``<name>.log``). ``args`` are extra ``kubeforge run`` flags.
    """
    stop_operator(c, name)
    health, metrics_port = free_port(), free_port()
    (c.dir / f"{name}.ports").write_text(json.dumps({"health": health, "metrics": metrics_port}))
    env = {**c.env(), **(extra_env or {})}
    pid = start_detached(
        c.dir / f"{name}.pid", c.dir / f"{name}.log",
        ["kubeforge", "run", "--health-address", f"127.0.0.1:{health}",
         "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
         # the sim's Prometheus listens on a free loopback port (the API server's own is refused)
         "--prometheus-url-allow", LOCAL_PROMETHEUS, "--activator-service", "/".join(LOCAL_ACTIVATOR), *args],
        env=env)
    assert pid is not None  # stop_operator removed the pid file
    return pid


def stop_operator(c: Cluster, name: str = "operator", sig: int = signal.SIGTERM) -> None:
    """Stop an operator started by :func:`start_operator`, if any: ``sig`` (SIGTERM, or
    SIGKILL to kill it at once), then SIGKILL after a bounded wait (5 s)."""
    stop_pidfile(c.dir / f"{name}.pid", sig)



@dataclass
class DemoResult:
    """What :func:`demo` did, for callers that check it (the cluster test).

    Attributes:
        rc: The process exit code: 0 when everything was placed, the pool agreed with the pods,
            the chat service scaled up and came back down, and no Warning Event appeared.
        problems: Why ``rc`` is 1, one line each.
        pool_tables: The pool tables printed (after placement, at the end), as lines.
        warnings: Warning Events seen during the demo (``reason: message``).
        plot: The PNG written, and ``panels`` the number of panels drawn in it.
        peak_replicas: The most replicas the chat service asked for (status.desiredReplicas).
        seconds: The demo's wall time.
    """

    rc: int = 1
    problems: list[str] = field(default_factory=list)
    pool_tables: list[list[str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plot: Path | None = None
    panels: int = 0
    peak_replicas: int = 0
    seconds: float = 0.0


def run_demo(name: str, fleet_path: Path, timeout: float, burst_seconds: float = DEFAULT_BURST_SECONDS,
             plot: Path | None = None, out_dir: Path = DEFAULT_OUT) -> int:
    """Run the demo (see the module docstring); returns the process exit code."""
    return demo(name, fleet_path, timeout, burst_seconds=burst_seconds, plot=plot, out_dir=out_dir).rc


def _manifests() -> list[dict[str, Any]]:
    """The documents of :data:`EXAMPLES`, in order."""
    return [doc for f in EXAMPLES for doc in yaml.safe_load_all((REPO_ROOT / "examples" / f).read_text()) if doc]


def _apply(c: Cluster, docs: list[dict[str, Any]]) -> None:
    c.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))


def demo(name: str, fleet_path: Path, timeout: float, burst_seconds: float = DEFAULT_BURST_SECONDS,
         plot: Path | None = None, out_dir: Path = DEFAULT_OUT, out: TextIO | None = None) -> DemoResult:
    """Run the demo; print to ``out`` (stdout), progress to stderr.

    Args:
        name: The cluster's name.
        fleet_path: The fleet file (``examples/fleet-h100.yaml``).
        timeout: Longest wait for the placements (training pods Running, groups Ready), s.
        burst_seconds: Seconds of the replayed burst (5 trace seconds each).
        plot: The PNG to draw; default ``<out_dir>/demo.png``.
        out_dir: Where the picture and the timeline (``timeline.json``) go.

    Returns:
        A :class:`DemoResult`.
    """
    from kubeforge._demo import report
    from kubeforge._demo.kube import Kube, wait_until
    from kubeforge._demo.pool import PoolTables
    from kubeforge._demo.plot import matplotlib_missing
    from kubeforge._demo.serving import CREDIT, Stack, run_burst
    from kubeforge._demo.timeline import Sampler, Timeline
    from kubeforge.sim.activation import activator_objects
    from kubeforge.sim.modelserver import AZURE_CODE_TRACE
    from kubeforge.sim.prometheus import PrometheusError, ensure_prometheus

    def emit(line: str = "") -> None:
        print(line, file=out or sys.stdout, flush=True)

    res = DemoResult()
    t_start, wall_start = time.monotonic(), time.time()
    _T0[0] = t_start
    plot = plot or out_dir / "demo.png"
    no_plot = matplotlib_missing()
    # the kubernetes client and matplotlib take seconds to import: while kwokctl starts the cluster
    threading.Thread(target=_preimport, args=(not no_plot,), name="demo-import", daemon=True).start()
    try:
        ensure_prometheus(log=say)
    except PrometheusError as e:
        say(f"the live autoscaling part needs Prometheus: {e}")
        res.problems.append(str(e))
        return res
    if not AZURE_CODE_TRACE.exists():
        res.problems.append(f"the burst replays {AZURE_CODE_TRACE}, which is missing (the shared data folder "
                            "beside the checkout)")
        say(res.problems[-1])
        return res
    c = Cluster(name)
    c.up(load_fleet(fleet_path), log=say)
    stack = Stack(c, [(NAMESPACE, CHAT), (NAMESPACE, LARGE)], say)
    sampler = None
    tl = Timeline()
    side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="demo-stack")
    # Prometheus, the simulator and the activator start (seconds of process start each) while
    # the CRDs are applied, the operator boots and the training jobs are placed
    starting = side.submit(stack.start)
    kube = Kube(c.kubeconfig)
    try:
        say("applying CRDs (kubectl apply -f crds/)")
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO_ROOT / "crds"))
        c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        # Established comes before the API server can list them ("storage is (re)initializing",
        # 429): an operator started at once logs an ERROR per kind before kopf retries
        wait_until(lambda: c.kubectl("get", "gpupools,trainingjobs,inferenceservices", "-A", check=False,
                                     timeout=10).returncode == 0, 30)
        # the activator's Service before the operator, so the operator finds it at once
        c.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(o) for o in activator_objects()))
        pid = start_operator(c)
        tl.t0 = time.monotonic()
        say(f"operator started (pid {pid}, log {c.dir / 'operator.log'})")
        sampler = Sampler(tl, lambda: Kube(c.kubeconfig), POOL, (NAMESPACE, CHAT))
        sampler.start()
        docs = _manifests()
        # the pool and the training jobs now, placed while the serving stack starts; the
        # services once Prometheus answers (their first reading finds it)
        _apply(c, [d for d in docs if d["kind"] != "InferenceService"])
        say(f"applied examples/: GPUPool {POOL}, TrainingJobs llama-pretrain (4x8) and finetune (2x8)")
        starting.result()
        sampler.sim = stack.sim
        for d in docs:
            if d["kind"] == "InferenceService":
                d["spec"].setdefault("autoscaling", {})["prometheusURL"] = stack.prometheus.url
        _apply(c, [d for d in docs if d["kind"] == "InferenceService"])
        say(f"applied examples/: InferenceServices {LARGE} (tensor 8 x pipeline 2) and {CHAT} (1 GPU, from zero), "
            f"autoscaled from {stack.prometheus.url}")
        large_min = next(d["spec"]["minReplicas"] for d in docs if d["metadata"]["name"] == LARGE)
        chat_min = next(d["spec"].get("minReplicas", 1) for d in docs if d["metadata"]["name"] == CHAT)

        def placed() -> bool:
            jobs = {j: kube.get("trainingjobs", j, NAMESPACE) for j in TRAINING_JOBS}
            pods = kube.pods(NAMESPACE, "kubeforge.io/job-name")
            for j, body in jobs.items():
                running = [p for p in pods if p["metadata"]["labels"]["kubeforge.io/job-name"] == j
                           and p["status"].get("phase") == "Running"]
                if not body or len(running) != body["spec"]["replicas"]:
                    return False
            st = kube.get("inferenceservices", LARGE, NAMESPACE).get("status") or {}
            chat = "activator" if chat_min == 0 else "replicas"  # at zero, its Service points at the activator
            return st.get("readyReplicas") == large_min and kube.endpoints(NAMESPACE, CHAT) == chat

        if not wait_until(placed, timeout):
            res.problems.append(f"not placed after {timeout:.0f}s (training pods Running, {LARGE} groups Ready)")
        nodes = kube.nodes()
        tables = PoolTables(kube, POOL, nodes, POOL_AGREE_SECONDS)
        emit()
        emit(c.kubectl("get", "trainingjobs,inferenceservices", "-n", NAMESPACE).stdout.rstrip())
        emit()
        level, node_domain = tables.narrowest()
        pods = kube.pods(NAMESPACE)
        for j in TRAINING_JOBS:
            job = kube.get("trainingjobs", j, NAMESPACE)
            if job:
                mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("kubeforge.io/job-name") == j]
                for line in report.training_lines(job, mine, node_domain, level):
                    emit(line)
        large = kube.get("inferenceservices", LARGE, NAMESPACE)
        mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("kubeforge.io/inference-service") == LARGE]
        for line in report.group_lines(large, mine, node_domain, level):
            emit(line)
        emit(f"InferenceService {CHAT}: 1 GPU a replica, {chat_min} replicas now (minReplicas {chat_min})"
             + ("; its Service's EndpointSlice points at the activator, which holds requests until a replica is Ready"
                if chat_min == 0 else ""))
        expected = [("TrainingJob", NAMESPACE, j) for j in TRAINING_JOBS] + [("InferenceService", NAMESPACE, LARGE)]
        lines, problem = tables.show(emit, expected, "after placement")
        res.pool_tables.append(lines)
        res.problems += [problem] if problem else []

        emit()

        def where() -> str:
            ready = [p["spec"]["nodeName"] for p in kube.pods(NAMESPACE, f"kubeforge.io/inference-service={CHAT}")
                     if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
            on = ", ".join(f"{n} ({level} {node_domain.get(n, '-')}) x{ready.count(n)}" for n in sorted(set(ready)))
            return f"{CHAT}: {len(ready)} Ready replicas on {on}"

        burst = run_burst(stack, kube, tl, NAMESPACE, CHAT, chat_min, burst_seconds, SETTLE_SECONDS, emit,
                          where=where)
        peak = max((s.desired or 0 for s in tl.since(tl.burst[0] if tl.burst else 0.0)), default=0)
        res.peak_replicas = peak
        last = tl.latest()
        codes = burst.http_codes
        emit(f"Burst over: {burst.completed} of {burst.requests} requests answered, {burst.aborted} aborted; "
             f"{burst.wait_line()}; {CHAT} went {chat_min} -> {peak} -> {last.desired if last else '?'} replicas")
        if codes:
            emit(f"  the {len(codes)} HTTP requests sent at zero replicas: held by the activator through the cold start, "
                 f"answered {', '.join(f'{codes.count(x)} x {x}' for x in sorted(set(codes)))} "
                 f"after {burst.http_seconds:.1f}s")
        if peak <= chat_min:
            res.problems.append(f"{CHAT} never scaled above minReplicas {chat_min}")
        if last is None or last.desired != chat_min or last.groups != chat_min:
            res.problems.append(f"{CHAT} not back at {chat_min} replicas {SETTLE_SECONDS:.0f}s after the burst")

        emit()
        lines, problem = tables.show(emit, expected, "at the end")
        res.pool_tables.append(lines)
        res.problems += [problem] if problem else []
        warn = [e for e in kube.events(None, "type=Warning")
                if (e.get("lastTimestamp") or e.get("eventTime") or "9") >= _rfc3339(wall_start - 1)]
        res.warnings = [f"{e['involvedObject'].get('kind')} {e['involvedObject'].get('name')}: {e.get('reason')}: "
                        f"{e.get('message')}" for e in warn]
        emit()
        emit("Warning Events during the demo: " + ("none" if not warn else f"{len(warn)} (unexpected: the demo "
                                                                            "shows none on purpose)"))
        for w in res.warnings[:10]:
            emit(f"  {w}")
        if warn:
            res.problems.append(f"{len(warn)} Warning Events")
    finally:
        if sampler is not None:
            sampler.stop()
            sampler.sample_now(kube)
        try:
            starting.result()
        except Exception:  # noqa: BLE001 - raised in the try block already, or stopped below
            pass
        side.shutdown()
        stack.stop()
        kube.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    tl.write_json(out_dir / "timeline.json")
    if no_plot:
        say(f"no picture: {no_plot}")
    else:
        from kubeforge._demo.plot import plot as draw

        res.panels = draw(tl, plot, CHAT, credit="burst: " + CREDIT.split(" (")[0])
        res.plot = plot
    res.seconds = time.monotonic() - t_start
    emit()
    emit(f"Done in {res.seconds:.0f}s. Picture: {res.plot or '-'} (GPUs per NVLink domain; {CHAT}'s replicas "
         f"against its queue); samples: {out_dir / 'timeline.json'}")
    emit(f"Burst from the {CREDIT}.")
    emit("The cluster and the operator keep running (Prometheus, the simulator and the activator stopped with the "
         "demo). Look further with:")
    emit(f"  export KUBECONFIG={c.kubeconfig} PATH={c.bin_dir}:$PATH")
    emit("  kubectl get trainingjobs,gpupools,inferenceservices -A")
    emit(f"  kubectl describe inferenceservice {CHAT}          # the scaling Events, ScalingActive / ScalingLimited")
    emit(f"  kubectl get inferenceservice {LARGE} -o yaml    # status.groups: domain, nodes, leader of each group")
    emit("  kubectl get pods -o wide                             # where each rank and group member runs")
    emit(f"  kubectl get gpupool {POOL} -o yaml                    # GPUs per NVLink domain and IB block, workloads")
    emit("  kubectl explain inferenceservice.spec.autoscaling    # the API, documented")
    emit(f"Operator log: {c.dir / 'operator.log'}")
    emit(f"Stop everything: .venv/bin/kubeforge sim down --name {name}   (or: make down)")
    for p in res.problems:
        say(f"problem: {p}")
    res.rc = 1 if res.problems else 0
    return res


def _preimport(matplotlib: bool) -> None:
    import kubernetes.client  # noqa: F401

    if matplotlib:
        from matplotlib import figure  # noqa: F401
        from matplotlib.backends import backend_agg  # noqa: F401


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
