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
5. Prints the pool again and any Warning Event (there should be none).
6. Shows model weights cached on the nodes (issue 29, :mod:`kubeforge._demo.models`): on 3
   nodes left free, a GPUPool keeps a tiny model warm on one (real node agents fetch it from a
   local Hugging Face Hub stand-in), and a 2-replica service of it starts one replica Cached on
   that node and one Cold on another; prints the nodes' copies, the pool's Models column and
   each replica's weights source with its modelled start time for a 70B model, then deletes it.
7. Draws the picture (``--plot``, default ``demo-output/demo.png``): GPUs allocated per NVLink
   domain, and the chat service's replicas against its queue, over the demo.

The cluster and the operator keep running; ``kubeforge sim down`` stops both. Prometheus, the
simulator and the activator stop with the demo (the services then hold their replicas:
``ScalingActive`` False, no metric).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from kubeforge._demo.plot import matplotlib_missing
from kubeforge._demo.scene import (
    CHAT, EXAMPLES, LARGE, NAMESPACE, POOL, POOL_AGREE_SECONDS, SETTLE_SECONDS, TRAINING_JOBS, DemoResult,
    restart_clock, say,
)
from kubeforge.sim import free_port, start_detached, stop_pidfile
from kubeforge.sim.activation import LOCAL_ACTIVATOR
from kubeforge.sim.cluster import Cluster
from kubeforge.sim.fleet import load_fleet

__all__ = [
    "CHAT", "DEFAULT_BURST_SECONDS", "DEFAULT_OUT", "EXAMPLES", "LARGE", "LOCAL_ACTIVATOR", "LOCAL_PROMETHEUS",
    "NAMESPACE", "POOL", "POOL_AGREE_SECONDS", "SETTLE_SECONDS", "TRAINING_JOBS", "DemoResult", "demo", "free_port",
    "matplotlib_missing", "run_demo", "say", "start_operator", "stop_operator",
]

DEFAULT_OUT = Path("demo-output")
DEFAULT_BURST_SECONDS = 16.0
LOCAL_PROMETHEUS = "http://127.0.0.1:"
"""The allow-list entry the local sim's operator gets: any port of loopback, where the sim
runs Prometheus (in a cluster, only in-cluster Service URLs are queried by default)."""


LOCAL_PROGRESS_WRITE_SECONDS = 2.0
"""``--progress-write-seconds`` of an operator on the local cluster (tests and the demo watch
progress move within seconds; ``args`` may pass another)."""


def start_operator(c: Cluster, extra_env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                   name: str = "operator") -> int:
    """Start ``kubeforge run`` in the background against cluster ``c``; returns its pid.

    The liveness and metrics endpoints get free loopback ports (written beside the pid as
    ``<name>.ports``), so several operators can run side by side (``name`` tells them apart:
    ``<name>.pid``, ``<name>.log``). ``args`` are extra ``kubeforge run`` flags.
    """
    stop_operator(c, name)
    health, metrics_port, status, engines = free_port(), free_port(), free_port(), free_port()
    (c.dir / f"{name}.ports").write_text(json.dumps({"health": health, "metrics": metrics_port, "status": status,
                                                      "engines": engines}))
    env = {**c.env(), **(extra_env or {})}
    pid = start_detached(
        c.dir / f"{name}.pid", c.dir / f"{name}.log",
        ["kubeforge", "run", "--health-address", f"127.0.0.1:{health}",
         "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
         # the sim's Prometheus listens on a free loopback port (the API server's own is refused)
         "--prometheus-url-allow", LOCAL_PROMETHEUS, "--activator-service", "/".join(LOCAL_ACTIVATOR),
         # the workers' status endpoint on loopback: the local processes that stand in for pods reach it there
         "--status-address", f"127.0.0.1:{status}", "--status-url", f"https://127.0.0.1:{status}",
         "--progress-write-seconds", str(LOCAL_PROGRESS_WRITE_SECONDS),
         # standby replicas' sleep and wake go to the model-server simulator (kwok's pod IPs reach
         # nothing); the simulator listening on this port serves them (engine_control_port)
         "--engine-control-url", f"http://127.0.0.1:{engines}",
         # the model caches: the local cluster's agents are processes (or threads) beside it
         # that stand in for the chart's DaemonSet, one a node (tests/test_model_cache_cluster.py)
         "--model-cache", *args],
        env=env)
    assert pid is not None  # stop_operator removed the pid file
    return pid


def engine_control_port(c: Cluster, name: str = "operator") -> int | None:
    """The loopback port an operator started by :func:`start_operator` sends standby replicas'
    sleep and wake to (``--engine-control-url``): a model-server simulator started on it
    (``ModelServerSim(port=...)``) serves them. None when no such operator ran."""
    try:
        return int(json.loads((c.dir / f"{name}.ports").read_text())["engines"])
    except (OSError, ValueError, KeyError):
        return None


def stop_operator(c: Cluster, name: str = "operator", sig: int = signal.SIGTERM) -> None:
    """Stop an operator started by :func:`start_operator`, if any: ``sig`` (SIGTERM, or
    SIGKILL to kill it at once), then SIGKILL after a bounded wait (5 s)."""
    stop_pidfile(c.dir / f"{name}.pid", sig)


def run_demo(name: str, fleet_path: Path, timeout: float, burst_seconds: float = DEFAULT_BURST_SECONDS,
             plot: Path | None = None, out_dir: Path = DEFAULT_OUT) -> int:
    """Run the demo (see the module docstring); returns the process exit code."""
    return demo(name, fleet_path, timeout, burst_seconds=burst_seconds, plot=plot, out_dir=out_dir).rc


def demo(name: str, fleet_path: Path, timeout: float, burst_seconds: float = DEFAULT_BURST_SECONDS,
         plot: Path | None = None, out_dir: Path = DEFAULT_OUT, out: TextIO | None = None) -> DemoResult:
    """Run the demo; print to ``out`` (stdout), progress to stderr.

    The steps (the module docstring's, one function each in :mod:`kubeforge._demo.steps`):
    check Prometheus and the trace, start the cluster and (on a side thread) the serving stack,
    apply the CRDs and the activator's Service, start the operator, apply the examples, wait
    for the placements, print them, replay the burst, print the end state, show the model
    cache, stop the stack, draw the picture, print how to look further.

    Args:
        name: The cluster's name.
        fleet_path: The fleet file (``examples/fleet-h100.yaml``).
        timeout: Longest wait for the placements (training pods Running, groups Ready), s.
        burst_seconds: Seconds of the replayed burst (5 trace seconds each).
        plot: The PNG to draw; default ``<out_dir>/demo.png``.
        out_dir: Where the picture and the timeline (``timeline.json``) go.
        out: Where the demo's lines go (default stdout).

    Returns:
        A :class:`DemoResult`.
    """
    from kubeforge._demo import steps

    def emit(line: str = "") -> None:
        print(line, file=out or sys.stdout, flush=True)

    res = DemoResult()
    t_start, wall_start = time.monotonic(), time.time()
    restart_clock(t_start)
    plot = plot or out_dir / "demo.png"
    no_plot = matplotlib_missing()
    # the kubernetes client and matplotlib take seconds to import: while kwokctl starts the cluster
    threading.Thread(target=steps.preimport, args=(not no_plot,), name="demo-import", daemon=True).start()
    if not steps.preflight(res):
        return res
    c = Cluster(name)
    c.up(load_fleet(fleet_path), log=say)
    run = steps.Run.begin(c, emit, res)
    try:
        steps.apply_crds(run)
        steps.start_sampler(run, start_operator(c))
        steps.apply_examples(run)
        steps.wait_placed(run, timeout)
        steps.report_placement(run)
        emit()
        steps.replay_burst(run, burst_seconds)
        emit()
        steps.report_end(run, wall_start)
        emit()
        steps.model_cache(run)
    finally:
        run.stop()
    steps.draw(run, out_dir, plot, no_plot)
    res.seconds = time.monotonic() - t_start
    steps.closing(run, name, out_dir)
    for p in res.problems:
        say(f"problem: {p}")
    res.rc = 1 if res.problems else 0
    return res
