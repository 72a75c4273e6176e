"""The demo's training jobs report their progress: rank 0 of each job, as its training loop would,
through the operator's real status endpoint with a real projected token.

kwok pods run nothing, so a thread per job stands in for its rank 0's training loop: it takes
the env of the pod the operator built (``KUBEFORGE_STATUS_*``, ``KUBEFLOW_TRAINER_STATUS_*``),
a token made for that pod with the TokenRequest API (audience kubeforge.io, bound to it) and the
namespace's CA (:func:`kubeforge.sim.workers.local_worker` maps them to files, as a kubelet
would), and reports once a second:

- ``llama-pretrain`` with :mod:`kubeforge.workload` (kubeforge's payload: step, total, loss,
  a checkpoint every 500 steps);
- ``finetune`` the way Kubeflow SDK scripts and Hugging Face's ``KubeflowTrainerCallback`` do
  (Kubeflow Trainer's payload on its path: percent, seconds left, metrics as strings).

The operator folds them into ``status.progress`` (PROGRESS and ETA in ``kubectl get``) and
``status.lastCheckpoint``; :func:`kubeforge._demo.report.progress_line` prints them.
"""

from __future__ import annotations

import json
import math
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kubeforge.builders.reporting import CA_FILE, STATUS_CA_CONFIGMAP
from kubeforge.sim.cluster import Cluster
from kubeforge.sim.workers import local_worker, pod_token
from kubeforge.workload import Reporter

from .scene import NAMESPACE, say

PLANS = {"llama-pretrain": (100_000, 23.0, False), "finetune": (3_000, 9.0, True)}
"""Job -> (total steps, steps a second, Kubeflow's payload), the synthetic training's shape."""
CHECKPOINT_EVERY = 500
INTERVAL = 1.0


def kubeflow_post(env: Mapping[str, str], payload: dict[str, Any]) -> int:
    """POST ``payload`` as the Kubeflow SDK's ``update_runtime_status`` does (its three variables,
    the token file read, the CA file trusted); returns the HTTP status."""
    token = Path(env["KUBEFLOW_TRAINER_STATUS_TOKEN"]).read_text().strip()
    req = urllib.request.Request(env["KUBEFLOW_TRAINER_STATUS_URL"], data=json.dumps(payload).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=env["KUBEFLOW_TRAINER_STATUS_CA_CERT"])
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@dataclass
class SyntheticTrainer:
    """One job's rank 0 (see the module docstring).

    Attributes:
        job: The TrainingJob.
        env: The rank 0 pod's env, mapped to local files.
        total: Total steps; ``rate`` steps a second; ``kubeflow``: Kubeflow's payload.
        codes: The answers so far, by HTTP status.
    """

    job: str
    env: dict[str, str]
    total: int
    rate: float
    kubeflow: bool
    codes: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Report every :data:`INTERVAL` seconds on a daemon thread."""
        self._thread = threading.Thread(target=self._loop, name=f"demo-report-{self.job}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop reporting."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        t0 = time.monotonic()
        reporter = Reporter(self.env, min_interval=0.0, retries=0)
        while not self._stop.wait(INTERVAL):
            step = min(self.total, int((time.monotonic() - t0) * self.rate))
            loss = round(2.5 * math.exp(-step / 20_000) + 0.6, 4)
            if self.kubeflow:
                code = kubeflow_post(self.env, {"trainerStatus": {
                    "progressPercentage": int(100 * step / self.total),
                    "estimatedRemainingSeconds": int((self.total - step) / self.rate),
                    "metrics": [{"name": "loss", "value": str(loss)}, {"name": "epoch", "value": f"{step / 1000:.2f}"}],
                    "lastUpdatedTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}})
            else:
                saved = step - step % CHECKPOINT_EVERY
                ck = (saved, f"/checkpoints/step-{saved}") if saved else None
                reporter.report(step=step, total_steps=self.total, metrics={"loss": loss}, checkpoint=ck)
                code = reporter.last_status or 0
            self.codes[code] = self.codes.get(code, 0) + 1


def start_trainers(c: Cluster, kube: Any, jobs: tuple[str, ...]) -> list[SyntheticTrainer]:
    """A :class:`SyntheticTrainer` per job of :data:`PLANS`, from its rank 0 pod; none for a job
    whose pod has no reporting env (the endpoint is off)."""
    ca = (kube.config_map(NAMESPACE, STATUS_CA_CONFIGMAP).get("data") or {}).get(CA_FILE)
    root = Path(tempfile.mkdtemp(prefix="kubeforge-demo-report-"))
    out = []
    for job in jobs:
        pods = [p for p in kube.pods(NAMESPACE, f"kubeforge.io/job-name={job}")
                if (p["metadata"].get("labels") or {}).get("kubeforge.io/replica-index") == "0"]
        if not pods or not ca or job not in PLANS:
            continue
        pod = max(pods, key=lambda p: int(p["metadata"]["labels"].get("kubeforge.io/restart-attempt", "0")))
        w = local_worker(pod, root / job, pod_token(c.kubectl, pod), ca, {})
        if "KUBEFORGE_STATUS_URL" not in w.env:
            continue
        total, rate, kubeflow = PLANS[job]
        t = SyntheticTrainer(job, w.env, total, rate, kubeflow)
        t.start()
        out.append(t)
    if out:
        say("training jobs report their progress: " + ", ".join(
            f"{t.job} ({'Kubeflow Trainer payload' if t.kubeflow else 'kubeforge.workload'})" for t in out))
    return out
