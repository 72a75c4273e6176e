"""A real PyTorch run under kubeforge's contract (issue 27): two ranks of
examples/workload/train_ddp.py, each launched by Debian's real torchrun from the environment of a
worker pod the operator built (PET_*, checkpoint dir, reporting), train with DDP over gloo, report
their progress and checkpoints to the operator's status endpoint with real projected tokens,
stop on SIGTERM with a checkpoint and the JSON termination message, and the next attempt's pods
(built from the status the live reports wrote) resume from that step.

How the pods become processes: :mod:`kubeforge.sim.workers` (the env taken from the pod objects,
volumes mapped to local directories, workers' DNS names to 127.0.0.1, and the two torchrun flags
that dodge Debian's torch 1.13 crash under Python 3.11).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import ROOT, apply, get_json, job_status, running_pods, training_job, wait_for
from kubeforge.builders.reporting import STATUS_CA_CONFIGMAP
from kubeforge.sim.workers import DEBIAN_PYTHON, has_torch, local_worker, pod_token, termination_checkpoint

pytestmark = [pytest.mark.cluster, pytest.mark.system,
              pytest.mark.skipif(not has_torch(), reason="Debian's python3-torch is missing (make system-deps)")]

SCRIPT = ROOT / "examples" / "workload" / "train_ddp.py"
STEPS, EVERY = 200, 20
TORCHRUN = ["-m", "torch.distributed.run"]  # /usr/bin/torchrun is this module's entry point


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def start_gang(cluster, namespace, job, attempt, tmp_path, ck_dir):
    """Every current worker pod of ``job`` as a local torchrun; returns the workers, rank order."""
    pods = wait_for(lambda: (p := [x for x in running_pods(cluster, namespace, job)
                                   if x["metadata"]["labels"]["kubeforge.io/restart-attempt"] == str(attempt)])
                    and len(p) == 2 and p, timeout=90, what=f"2 running workers of attempt {attempt}")
    pods.sort(key=lambda p: int(p["metadata"]["labels"]["kubeforge.io/replica-index"]))
    ca = get_json(cluster, "configmap", STATUS_CA_CONFIGMAP, "-n", namespace)["data"]["ca.crt"]
    extra = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT / "operator"), "OMP_NUM_THREADS": "1"}
    workers = [local_worker(p, tmp_path / p["metadata"]["name"], pod_token(cluster.kubectl, p), ca,
                            {"checkpoint": ck_dir}, extra) for p in pods]
    assert workers[0].env["PET_MASTER_ADDR"] == "127.0.0.1" and workers[1].env["PET_NODE_RANK"] == "1"
    assert workers[0].env["KUBEFORGE_CHECKPOINT_DIR"] == str(ck_dir)
    assert workers[0].env["KUBEFORGE_STATUS_TOKEN"].startswith(str(workers[0].root))
    port = int(workers[0].env["PET_MASTER_PORT"])
    if not port_free(port):
        # In a pod the port is the pod's own; on this shared machine another process may hold it.
        # Rather than skip (the run would prove nothing), both ranks move to one free port.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        print(f"\n[torch] port {workers[0].env['PET_MASTER_PORT']} (the builder's MASTER_PORT) is taken here: "
              f"the ranks rendezvous on {port}")
        for w in workers:
            for key in ("PET_MASTER_PORT", "MASTER_PORT"):
                if key in w.env:
                    w.env[key] = str(port)
    argv = [DEBIAN_PYTHON, *TORCHRUN, str(SCRIPT), "--steps", str(STEPS), "--checkpoint-every", str(EVERY),
            "--report-every", "0.5", "--step-sleep", "0.1"]
    for w in workers:
        w.start(argv)
    return workers


def wait_exit(workers, timeout=120):
    deadline = time.monotonic() + timeout
    for w in workers:
        try:
            w.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            raise AssertionError(f"{w.pod} did not exit:\n{w.output.read_text()[-3000:]}")


def test_real_ddp_run_reports_live_stops_on_sigterm_and_resumes(cluster, namespace, fleet, tmp_path):
    fleet(cliques=2, nodes=2, gpus=8, spot=True)
    apply(cluster, training_job("ddp", namespace, replicas=2, gpus=1,  # PET_NPROC_PER_NODE=1: one CPU rank per pod
                                checkpoint={"size": "1Gi", "deletionPolicy": "Delete"}))
    ck_dir = tmp_path / "checkpoint-volume"
    ck_dir.mkdir()
    workers = start_gang(cluster, namespace, "ddp", 0, tmp_path / "a0", ck_dir)
    try:
        seen = []

        def progressed():
            st = job_status(cluster, namespace, "ddp")
            if st.get("progress"):
                seen.append(st["progress"]["step"])
            return (st.get("progress") or {}).get("step", 0) >= 60 and (st.get("lastCheckpoint") or {}).get("step") and st
        st = wait_for(progressed, timeout=180, interval=0.5, what="live progress past step 60 and a live checkpoint")
        assert st["lastCheckpoint"]["step"] % EVERY == 0 and st["progress"]["totalSteps"] == STEPS
        assert seen == sorted(seen) and len(set(seen)) >= 2  # the steps only moved forward, live
        assert st["progress"]["reporter"] == workers[0].pod and st["progress"]["eta"]
        # the spot notice: SIGTERM to each pod's PID 1 (torchrun), which forwards it to its rank
        for w in workers:
            os.killpg(w.proc.pid, signal.SIGTERM)
        wait_exit(workers)
    finally:
        for w in workers:
            if w.proc and w.proc.poll() is None:
                os.killpg(w.proc.pid, signal.SIGKILL)
    out0 = workers[0].output.read_text()
    stopped = int(re.search(r"stopped at step (\d+)", out0).group(1))
    assert 60 <= stopped < STEPS
    for w in workers:  # the contract's termination message, per pod
        ck = termination_checkpoint(w)
        assert ck and ck["step"] == stopped and ck["path"] == str(ck_dir / f"step-{stopped}"), w.output.read_text()[-2000:]
    assert (ck_dir / f"step-{stopped}" / "COMPLETE").is_file()
    st = wait_for(lambda: (s := job_status(cluster, namespace, "ddp")).get("lastCheckpoint", {}).get("step") == stopped
                  and s, timeout=30, what="the SIGTERM checkpoint, reported live, in status")
    assert st["lastCheckpoint"]["path"] == str(ck_dir / f"step-{stopped}")

    # the node is reclaimed: the operator restarts the gang; the new pods carry the live checkpoint
    node = get_json(cluster, "pod", workers[0].pod, "-n", namespace)["spec"]["nodeName"]
    cluster.kubectl("taint", "node", node, "aws-node-termination-handler/spot-itn=true:NoSchedule")
    again = start_gang(cluster, namespace, "ddp", 1, tmp_path / "a1", ck_dir)
    try:
        assert again[0].env["KUBEFORGE_LAST_CHECKPOINT_STEP"] == str(stopped)
        assert again[0].env["KUBEFORGE_RESTART_ATTEMPT"] == "1"
        wait_exit(again, timeout=240)
    finally:
        for w in again:
            if w.proc and w.proc.poll() is None:
                os.killpg(w.proc.pid, signal.SIGKILL)
    out1 = again[0].output.read_text()
    assert f"resumed from {ck_dir / f'step-{stopped}'} at step {stopped}" in out1, out1[-3000:]
    assert f"finished at step {STEPS}" in out1 and all(w.proc.returncode == 0 for w in again), out1[-3000:]
    final = wait_for(lambda: (s := job_status(cluster, namespace, "ddp")).get("progress", {}).get("step") == STEPS and s,
                     timeout=60, what="the last step in status")
    assert final["progress"]["percent"] == 100.0 and final["progress"]["reporter"] == again[0].pod
    assert final["lastCheckpoint"]["step"] == STEPS and final["restarts"]["preemptions"] == 1
    # the step sequence: 0 .. stopped in attempt 0, stopped .. STEPS in attempt 1, checkpoints on the way
    assert [int(s) for s in re.findall(r"step (\d+) loss", out0)][:1] == [0]
    later = [int(s) for s in re.findall(r"step (\d+) loss", out1)]
    assert later and min(later) >= stopped
