"""The demo's steps, one function each, in the order :func:`kubeforge.demo.demo` runs them:
:func:`preflight`, :meth:`Run.begin` (the serving stack starts on a side thread),
:func:`apply_crds`, (the operator starts), :func:`start_sampler`, :func:`apply_examples`,
:func:`wait_placed`, :func:`report_placement`, :func:`replay_burst`, :func:`report_end`,
:func:`model_cache`, :meth:`Run.stop`, :func:`draw`, :func:`closing`.

Each step reads and fills one :class:`Run`; the lines for the user go to ``run.emit``, progress
to :func:`~kubeforge._demo.scene.say`.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from kubeforge.sim.activation import activator_objects
from kubeforge.sim.cluster import Cluster
from kubeforge.sim.modelserver import AZURE_CODE_TRACE
from kubeforge.sim.prometheus import PrometheusError, ensure_prometheus
from kubeforge.sim.tools import REPO_ROOT

from . import models, report
from .kube import Kube, wait_until
from .plot import plot as draw_plot
from .pool import PoolTables
from .progress import SyntheticTrainer, start_trainers
from .scene import (
    CHAT, EXAMPLES, LARGE, NAMESPACE, POOL, POOL_AGREE_SECONDS, PROGRESS_SECONDS, SETTLE_SECONDS, TRAINING_JOBS,
    DemoResult, say,
)
from .serving import CREDIT, Stack, run_burst
from .timeline import Sampler, Timeline

Expected = list[tuple[str, str, str]]
"""(kind, namespace, name) of the workloads the pool's status should list."""


@dataclass
class Run:
    """One demo run's moving parts, handed from step to step.

    Attributes:
        c: The cluster (up).
        emit: Prints one line to the demo's output.
        res: The :class:`~kubeforge._demo.scene.DemoResult` being filled in.
        stack: Prometheus, the simulator and the activator; ``starting`` their start on ``side``.
        tl: The samples of the pool and the chat service (the sampler fills it).
        kube: The demo thread's client.
        sampler: The sampler thread, once started.
        docs: The manifests applied (:func:`manifests`).
        chat_min: The chat service's ``minReplicas``; ``large_min`` the 405B service's.
        tables: The pool tables' reader, ``expected`` the workloads it should list, and
            ``where`` what says where the chat service's Ready replicas run (from
            :func:`report_placement`).
        trainers: The training jobs' stand-in rank 0s reporting their progress
            (:mod:`kubeforge._demo.progress`), from :func:`wait_placed` on.
    """

    c: Cluster
    emit: Callable[..., None]
    res: DemoResult
    stack: Stack
    tl: Timeline
    side: ThreadPoolExecutor
    starting: Future
    kube: Kube
    sampler: Sampler | None = None
    docs: list[dict[str, Any]] = field(default_factory=list)
    chat_min: int = 1
    large_min: int = 0
    tables: PoolTables | None = None
    expected: Expected = field(default_factory=list)
    where: Callable[[], str] | None = None
    trainers: list[SyntheticTrainer] = field(default_factory=list)

    @classmethod
    def begin(cls, c: Cluster, emit: Callable[..., None], res: DemoResult) -> "Run":
        """Start Prometheus, the simulator and the activator on a side thread (seconds of process
        start each) while the CRDs are applied, the operator boots and the training jobs are
        placed; open the demo's client."""
        stack = Stack(c, [(NAMESPACE, CHAT), (NAMESPACE, LARGE)], say)
        tl = Timeline()
        side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="demo-stack")
        starting = side.submit(stack.start)
        return cls(c, emit, res, stack, tl, side, starting, Kube(c.kubeconfig))

    def stop(self) -> None:
        """Stop the sampler (one last sample), the serving stack (once it has started or failed)
        and the demo's client; the cluster and the operator keep running."""
        for t in self.trainers:
            t.stop()
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler.sample_now(self.kube)
        try:
            self.starting.result()
        except Exception:  # noqa: BLE001 - raised in the demo's steps already, or stopped below
            pass
        self.side.shutdown()
        self.stack.stop()
        self.kube.close()


def preflight(res: DemoResult) -> bool:
    """Whether what the demo needs beside the cluster is there (Debian's Prometheus, the
    replayed trace); False with the problem in ``res.problems`` when not."""
    try:
        ensure_prometheus(log=say)
    except PrometheusError as e:
        say(f"the live autoscaling part needs Prometheus: {e}")
        res.problems.append(str(e))
        return False
    if not AZURE_CODE_TRACE.exists():
        res.problems.append(f"the burst replays {AZURE_CODE_TRACE}, which is missing (it ships in "
                            "kubeforge/data/traces: reinstall the package, pip install -e .)")
        say(res.problems[-1])
        return False
    return True


def apply_crds(run: Run) -> None:
    """Apply the CRDs, wait until the API server serves them, and make the activator's Service
    (before the operator starts, so that it finds the Service at once)."""
    c = run.c
    say("applying CRDs (kubectl apply -f crds/)")
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO_ROOT / "crds"))
    c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    # Established comes before the API server can list them ("storage is (re)initializing",
    # 429): an operator started at once logs an ERROR per kind before kopf retries
    wait_until(lambda: c.kubectl("get", "gpupools,trainingjobs,inferenceservices", "-A", check=False,
                                 timeout=10).returncode == 0, 30)
    c.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(o) for o in activator_objects()))


def start_sampler(run: Run, pid: int) -> None:
    """Once the operator (``pid``) started: the timeline's zero, and the sampler thread."""
    c = run.c
    run.tl.t0 = time.monotonic()
    say(f"operator started (pid {pid}, log {c.dir / 'operator.log'})")
    run.sampler = Sampler(run.tl, lambda: Kube(c.kubeconfig), POOL, (NAMESPACE, CHAT))
    run.sampler.start()


def manifests() -> list[dict[str, Any]]:
    """The documents of :data:`~kubeforge._demo.scene.EXAMPLES`, in order."""
    return [doc for f in EXAMPLES for doc in yaml.safe_load_all((REPO_ROOT / "examples" / f).read_text()) if doc]


def _apply(c: Cluster, docs: list[dict[str, Any]]) -> None:
    c.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))


def apply_examples(run: Run) -> None:
    """Apply the pool and the training jobs (placed while the serving stack starts), then, once
    the stack is up, the services pointed at its Prometheus (their first reading finds it)."""
    c, stack = run.c, run.stack
    docs = run.docs = manifests()
    _apply(c, [d for d in docs if d["kind"] != "InferenceService"])
    say(f"applied examples/: GPUPool {POOL}, TrainingJobs llama-pretrain (4x8) and finetune (2x8)")
    run.starting.result()
    assert run.sampler is not None  # start_sampler came first
    run.sampler.sim = stack.sim
    for d in docs:
        if d["kind"] == "InferenceService":
            d["spec"].setdefault("autoscaling", {})["prometheusURL"] = stack.prometheus.url
    _apply(c, [d for d in docs if d["kind"] == "InferenceService"])
    say(f"applied examples/: InferenceServices {LARGE} (tensor 8 x pipeline 2) and {CHAT} (1 GPU, from zero), "
        f"autoscaled from {stack.prometheus.url}")
    run.large_min = next(d["spec"]["minReplicas"] for d in docs if d["metadata"]["name"] == LARGE)
    run.chat_min = next(d["spec"].get("minReplicas", 1) for d in docs if d["metadata"]["name"] == CHAT)


def wait_placed(run: Run, timeout: float) -> None:
    """Wait (``timeout`` s at most) until every training pod runs, the 405B service has its
    groups Ready and the chat service's endpoints are what its ``minReplicas`` makes them (the
    activator at zero); a problem in ``run.res`` when not."""
    kube, large_min, chat_min = run.kube, run.large_min, run.chat_min

    def placed() -> bool:
        jobs = {j: kube.get("trainingjobs", j, NAMESPACE) for j in TRAINING_JOBS}
        pods = kube.pods(NAMESPACE, "kubeforge.io/job-name")
        for j, body in jobs.items():
            running = [p for p in pods if p["metadata"]["labels"]["kubeforge.io/job-name"] == j
                       and p["status"].get("phase") == "Running"]
            # the job's own phase too: its pods run a moment before the operator writes Running
            if not body or len(running) != body["spec"]["replicas"] or (body.get("status") or {}).get("phase") != "Running":
                return False
        st = kube.get("inferenceservices", LARGE, NAMESPACE).get("status") or {}
        chat = "activator" if chat_min == 0 else "replicas"  # at zero, its Service points at the activator
        return st.get("readyReplicas") == large_min and kube.endpoints(NAMESPACE, CHAT) == chat

    if not wait_until(placed, timeout):
        run.res.problems.append(f"not placed after {timeout:.0f}s (training jobs Running, {LARGE} groups Ready)")
        return
    run.trainers = start_trainers(run.c, kube, TRAINING_JOBS)


def report_placement(run: Run) -> None:
    """Print the workloads, where each rank and group landed and the pool's GPUs per domain; keep
    the pool tables' reader, the workloads the pool should list and what says where the chat
    service's Ready replicas run in ``run``."""
    c, kube, emit, chat_min = run.c, run.kube, run.emit, run.chat_min
    tables = run.tables = PoolTables(kube, POOL, kube.nodes(), POOL_AGREE_SECONDS)
    wait_until(lambda: all(((kube.get("trainingjobs", j, NAMESPACE).get("status") or {}).get("progress") or {}).get("eta")
                           for j in TRAINING_JOBS), PROGRESS_SECONDS if run.trainers else 0)
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
            emit(report.progress_line(job.get("status") or {}, time.time()))
    large = kube.get("inferenceservices", LARGE, NAMESPACE)
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("kubeforge.io/inference-service") == LARGE]
    for line in report.group_lines(large, mine, node_domain, level):
        emit(line)
    emit(f"InferenceService {CHAT}: 1 GPU a replica, {chat_min} replicas now (minReplicas {chat_min})"
         + ("; its Service's EndpointSlice points at the activator, which holds requests until a replica is Ready"
            if chat_min == 0 else ""))
    run.expected = [("TrainingJob", NAMESPACE, j) for j in TRAINING_JOBS] + [("InferenceService", NAMESPACE, LARGE)]
    lines, problem = tables.show(emit, run.expected, "after placement")
    run.res.pool_tables.append(lines)
    run.res.problems += [problem] if problem else []

    def where() -> str:
        ready = [p["spec"]["nodeName"] for p in kube.pods(NAMESPACE, f"kubeforge.io/inference-service={CHAT}")
                 if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
        on = ", ".join(f"{n} ({level} {node_domain.get(n, '-')}) x{ready.count(n)}" for n in sorted(set(ready)))
        return f"{CHAT}: {len(ready)} Ready replicas on {on}"

    run.where = where


def replay_burst(run: Run, burst_seconds: float) -> None:
    """Replay the burst against the chat service, print how it went, and note a problem unless
    the service scaled above ``minReplicas`` and came back to it."""
    tl, emit, chat_min, res = run.tl, run.emit, run.chat_min, run.res
    burst = run_burst(run.stack, run.kube, tl, NAMESPACE, CHAT, chat_min, burst_seconds, SETTLE_SECONDS, emit,
                      where=run.where)
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


def report_end(run: Run, wall_start: float) -> None:
    """Print the pool again and every Warning Event since the demo started at ``wall_start``
    (``time.time()``); there should be none: each is a problem."""
    emit, res = run.emit, run.res
    assert run.tables is not None  # report_placement came first
    lines, problem = run.tables.show(emit, run.expected, "at the end")
    res.pool_tables.append(lines)
    res.problems += [problem] if problem else []
    emit()
    emit("Training progress at the end (status.progress, as the jobs' rank 0s reported it):")
    for j in TRAINING_JOBS:
        st = run.kube.get("trainingjobs", j, NAMESPACE).get("status") or {}
        res.progress[j] = st.get("progress") or {}
        emit(f"TrainingJob {j}, phase {st.get('phase')}")
        emit(report.progress_line(st, time.time()))
        if not (res.progress[j].get("eta") and res.progress[j].get("percent") is not None):
            res.problems.append(f"TrainingJob {j} shows no progress and ETA")
    warn = [e for e in run.kube.events(None, "type=Warning")
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


def model_cache(run: Run) -> None:
    """A model kept warm on a node, and a cached replica start beside a cold one (issue 29):
    :func:`kubeforge._demo.models.show`, on nodes the burst left free."""
    models.show(run.c, run.kube, run.stack, run.emit, run.res)


def draw(run: Run, out_dir: Path, plot: Path, no_plot: str | None) -> None:
    """Write the timeline (``<out_dir>/timeline.json``) and draw the picture to ``plot``, unless
    matplotlib is missing (``no_plot`` says why)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    run.tl.write_json(out_dir / "timeline.json")
    if no_plot:
        say(f"no picture: {no_plot}")
    else:
        run.res.panels = draw_plot(run.tl, plot, CHAT, credit="burst: " + CREDIT.split(" (")[0])
        run.res.plot = plot


def closing(run: Run, name: str, out_dir: Path) -> None:
    """Print where the picture is, the trace's credit, and how to look further at cluster
    ``name``."""
    c, emit, res = run.c, run.emit, run.res
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


def preimport(matplotlib: bool) -> None:
    """Import the kubernetes client (and matplotlib's figure and Agg canvas, when ``matplotlib``):
    seconds each, done on a thread while kwokctl starts the cluster."""
    import kubernetes.client  # noqa: F401

    if matplotlib:
        from matplotlib import figure  # noqa: F401
        from matplotlib.backends import backend_agg  # noqa: F401


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
