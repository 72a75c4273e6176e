"""Keep the sim from finishing the peers' Job pods.

kwok's default pod stages (``pod-complete``, kwokctl v0.8) turn every Running pod owned by a
Job into ``Succeeded`` within about a second, with no annotation to opt out: a JobSet's Jobs,
the JobSet and its Kueue Workload then finish and give their GPUs back, while kubeforge's pods
(owned by no Job) run until deleted. Benches that compare the two must hold GPUs alike, so on
a cluster that runs the peers, ``pod-complete`` skips pods annotated
:data:`KEEP_RUNNING`: the stage lives in the cluster's own kwok configuration
(``<KWOK_WORKDIR>/clusters/<name>/kwok.yaml``, which kwokctl wrote from its defaults and
kwok-controller reads at start), so one selector is added there and kwok-controller is
restarted with the command line kwokctl gave it. Other pods, and Job pods without the
annotation, behave as before. The node leases, which name the old process as their holder,
are deleted with it, so the new one takes the nodes over at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request

import yaml

from ._build import PeersError

KEEP_RUNNING = "kubeforge.io/sim-keep-running"
"""Pod annotation: kwok never completes a pod that carries it (on clusters prepared by
:func:`keep_annotated_job_pods_running`)."""

_SKIP = {"jq": {"key": f'.metadata.annotations["{KEEP_RUNNING}"]', "operator": "DoesNotExist"}}


def keep_annotated_job_pods_running(c, timeout: float = 60) -> bool:
    """Make kwok's ``pod-complete`` stage of cluster ``c`` skip pods annotated
    :data:`KEEP_RUNNING`, restarting kwok-controller; idempotent.

    Returns:
        True when the stage was changed now, False when it already skipped them.

    Raises:
        PeersError: the cluster's kwok configuration or kwok-controller was not found, or it
            did not answer ``/healthz`` within ``timeout`` s after the restart.
    """
    from kubeforge.sim.cluster import home

    workdir = home() / "kwok" / "clusters" / c.name
    cfg = workdir / "kwok.yaml"
    if not cfg.exists():
        raise PeersError(f"{cfg} not found: is {c.name} a kwokctl cluster?")
    docs = [d for d in yaml.safe_load_all(cfg.read_text()) if d]
    stage = next((d for d in docs if d.get("kind") == "Stage" and d["metadata"]["name"] == "pod-complete"), None)
    comp = next((x for d in docs if d.get("kind") == "KwokctlConfiguration" for x in d.get("components") or []
                 if x.get("name") == "kwok-controller"), None)
    if stage is None or comp is None:
        raise PeersError(f"{cfg} has no pod-complete stage or no kwok-controller component")
    exprs = stage["spec"].setdefault("selector", {}).setdefault("matchExpressions", [])
    if _SKIP in exprs:
        return False
    exprs.append(_SKIP)
    cfg.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    pidfile = workdir / "pids" / "kwok-controller.pid"
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):  # bounded: 5 s, then SIGKILL
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    # The node leases name the old process as holder: the new one would wait for them to expire
    # (200 s) before it runs any pod. Nothing else writes them, so they go with the old process.
    c.kubectl("delete", "leases", "-n", "kube-node-lease", "--all", "--wait=false", check=False, timeout=300)
    env = dict(os.environ, **{e["name"]: e.get("value", "") for e in comp.get("envs") or []})
    with open(workdir / "logs" / "kwok-controller.log", "ab") as log:
        proc = subprocess.Popen([comp["binary"], *comp.get("args", [])], cwd=comp.get("workDir") or workdir, env=env,
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    pidfile.write_text(str(proc.pid))
    port = next(p["port"] for p in comp.get("ports") or [{"port": 0}])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise PeersError(f"kwok-controller of {c.name} did not come back after its restart; see {workdir}/logs")
