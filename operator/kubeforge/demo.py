"""The local GPU cluster demo (``make demo`` / ``kubeforge demo``).

Builds what is missing, starts the cluster with the default fleet, applies the CRDs with
kubectl, starts the operator in the background, applies examples/, waits (bounded) until the
training pods run, and prints where each job landed, GPUs free per domain, and the kubectl
commands to look further. The cluster and operator keep running; ``kubeforge sim down`` stops
both.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kubeforge.sim.cluster import Cluster
from kubeforge.sim.fleet import load_fleet
from kubeforge.sim.tools import REPO_ROOT

EXAMPLES = ("gpupool-h100.yaml", "trainingjob-llama-pretrain.yaml", "trainingjob-finetune.yaml", "inferenceservice-vllm.yaml")
TRAINING_JOBS = ("llama-pretrain", "finetune")


def say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


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
    log = open(c.dir / f"{name}.log", "ab")
    env = {**c.env(), **(extra_env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubeforge", "run", "--health-address", f"127.0.0.1:{health}",
         "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
         # the sim's Prometheus listens on a free loopback port (the API server's own is refused)
         "--prometheus-url-allow", LOCAL_PROMETHEUS, "--activator-service", "/".join(LOCAL_ACTIVATOR), *args],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
    )
    (c.dir / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def stop_operator(c: Cluster, name: str = "operator", sig: int = signal.SIGTERM) -> None:
    """Stop an operator started by :func:`start_operator`, if any: ``sig`` (SIGTERM, or
    SIGKILL to kill it at once), then SIGKILL after a bounded wait."""
    pidfile = c.dir / f"{name}.pid"
    if not pidfile.exists():
        return
    try:
        pid = int(pidfile.read_text())
        os.killpg(pid, sig)
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    pidfile.unlink(missing_ok=True)


def _get(c: Cluster, *args: str) -> dict:
    return json.loads(c.kubectl("get", *args, "-o", "json").stdout)


def run_demo(name: str, fleet_path: Path, timeout: float) -> int:
    """Run the demo; returns a process exit code (0: every training job's pods Running)."""
    t0 = time.monotonic()
    c = Cluster(name)
    fleet = load_fleet(fleet_path)
    c.up(fleet, log=say)
    say("applying CRDs (kubectl apply -f crds/)")
    c.kubectl("apply", "--server-side", "-f", str(REPO_ROOT / "crds"))
    c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    pid = start_operator(c)
    say(f"operator started (pid {pid}, log {c.dir / 'operator.log'})")
    for f in EXAMPLES:
        c.kubectl("apply", "-f", str(REPO_ROOT / "examples" / f))
    say("applied examples/: GPUPool h100, TrainingJobs llama-pretrain (4x8) and finetune (2x8), InferenceService llama-chat")

    deadline = time.monotonic() + timeout
    ok = False
    while time.monotonic() < deadline:
        pods = _get(c, "pods", "-n", "default", "-l", "kubeforge.io/job-name")["items"]
        by_job: dict[str, list] = {}
        for p in pods:
            by_job.setdefault(p["metadata"]["labels"]["kubeforge.io/job-name"], []).append(p)
        jobs = {j["metadata"]["name"]: j for j in _get(c, "trainingjobs", "-n", "default")["items"]}
        ok = all(
            j in jobs and len([p for p in by_job.get(j, []) if p["status"].get("phase") == "Running"]) == jobs[j]["spec"]["replicas"]
            for j in TRAINING_JOBS
        )
        if ok:
            break
        time.sleep(1)
    elapsed = time.monotonic() - t0

    print()
    print(c.kubectl("get", "trainingjobs,inferenceservices", "-n", "default").stdout)
    print(c.kubectl("get", "gpupools").stdout)
    jobs = {j["metadata"]["name"]: j for j in _get(c, "trainingjobs", "-n", "default")["items"]}
    nodes = {n["metadata"]["name"]: n for n in _get(c, "nodes")["items"]}
    pods = _get(c, "pods", "-n", "default", "-l", "kubeforge.io/job-name")["items"]
    for name in TRAINING_JOBS:
        j = jobs.get(name)
        if not j:
            continue
        st = j.get("status") or {}
        pl = st.get("placement") or {}
        print(f"TrainingJob {name}: phase {st.get('phase')}, {pl.get('level') or 'pool'} domain {pl.get('domain')}")
        if pl.get("reason"):
            print(f"  why: {pl['reason']}")
        for p in sorted((p for p in pods if p["metadata"]["labels"]["kubeforge.io/job-name"] == name),
                        key=lambda p: int(p["metadata"]["labels"]["kubeforge.io/replica-index"])):
            node = p["spec"].get("nodeName") or "-"
            clique = nodes.get(node, {}).get("metadata", {}).get("labels", {}).get("nvidia.com/gpu.clique", "-")
            print(f"  rank {p['metadata']['labels']['kubeforge.io/replica-index']}: {p['metadata']['name']:<28} "
                  f"{p['status'].get('phase', '?'):<8} node {node:<12} nvlink {clique}")
        if not ok:
            adm = next((x for x in st.get("conditions") or [] if x["type"] == "Admitted"), None)
            if adm:
                print(f"  Admitted={adm['status']} {adm['reason']}: {adm['message']}")
    pool = _get(c, "gpupool", "h100")
    ps = pool.get("status") or {}
    print("\nGPUs free per domain (pool h100):")
    for d in ps.get("domains") or []:
        print(f"  {d['level']:<8} {d['name']:<12} {d['gpus']['free']:>3} free of {d['gpus']['allocatable']}")
    print(f"\nDone in {elapsed:.0f}s. The cluster and the operator keep running. Look further with:")
    print(f"  export KUBECONFIG={c.kubeconfig} PATH={c.bin_dir}:$PATH")
    print("  kubectl get trainingjobs,gpupools,inferenceservices -A")
    print("  kubectl describe trainingjob llama-pretrain        # conditions and Events")
    print("  kubectl get pods -o wide -l kubeforge.io/job-name   # where each rank runs")
    print("  kubectl get gpupool h100 -o yaml                    # GPUs per NVLink domain and IB block")
    print("  kubectl explain trainingjob.spec                    # the API, documented")
    print(f"Operator log: {c.dir / 'operator.log'}")
    print("Stop everything: .venv/bin/kubeforge sim down   (or: make down)")
    if not ok:
        say(f"training pods not all Running after {timeout:.0f}s")
        return 1
    return 0
