"""The training bench's workload: gangs cut from the Alibaba trace, and each phase's objects for
one gang (plain pods for kube-scheduler alone, a TrainingJob for kubeforge).

GPU tasks of the trace (``num_gpu`` > 0), taken in trace order from ``--trace-start``; runs of
consecutive tasks with the same ``num_gpu`` are cut into gangs of 1..``--max-replicas`` replicas
(size drawn with ``random.Random(--seed)``, capped by the run's length); a gang becomes one job of
``replicas`` x ``num_gpu`` GPUs. Jobs are formed until the GPUs requested reach ``--demand`` x
the fleet's GPUs (or ``--jobs``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from e2e.bench.lib.cluster import GPU, GROUP, JOB_LABEL, POOL, RANK_LABEL, VERSION
from e2e.bench.lib.traces import gpu_tasks

__all__ = ["CHECKPOINT_MODES", "OBJECT_STORE_SECRET", "SHARED_CLAIM", "Job", "checkpoint_spec", "form_jobs", "mix",
           "plain_pods", "training_job"]


@dataclass(frozen=True)
class Job:
    """One gang: ``replicas`` pods of ``gpus`` GPUs each."""

    name: str
    replicas: int
    gpus: int  # per replica
    first_task: str  # trace task name of rank 0, for provenance

    @property
    def total(self) -> int:
        """GPUs of the whole gang."""
        return self.replicas * self.gpus


def form_jobs(trace: Path, start: int, seed: int, max_replicas: int, gpu_budget: int, max_jobs: int | None) -> list[Job]:
    """Gangs from consecutive same-``num_gpu`` GPU tasks of the trace; deterministic.

    Args:
        trace: the Alibaba ``openb_pod_list`` CSV (columns ``name``, ``num_gpu``, ...).
        start: index of the first GPU task (``num_gpu`` > 0) taken.
        seed: seed of the gang-size draws.
        max_replicas: largest gang formed (sizes drawn uniformly from 1..max_replicas).
        gpu_budget: stop once the jobs request this many GPUs (ignored with ``max_jobs``).
        max_jobs: exact number of jobs, or None for ``gpu_budget``.

    Returns:
        The jobs, named ``j<index>-<replicas>x<gpus>``; fewer when the trace runs out.
    """
    tasks = [(row["name"], int(row["num_gpu"])) for row in gpu_tasks(trace)]
    rng = random.Random(seed)
    jobs: list[Job] = []
    i, total = start, 0
    while i < len(tasks):
        if max_jobs is not None and len(jobs) >= max_jobs:
            break
        if max_jobs is None and total >= gpu_budget:
            break
        name, g = tasks[i]
        want = rng.randint(1, max_replicas)
        n = 1
        while n < want and i + n < len(tasks) and tasks[i + n][1] == g:
            n += 1
        jobs.append(Job(f"j{len(jobs):04d}-{n}x{g}", n, g, name))
        total += n * g
        i += n
    return jobs


def mix(jobs: list[Job]) -> str:
    """``replicas x GPUs: jobs`` for every shape, by GPUs then replicas (the header's line)."""
    counts: dict[str, int] = {}
    for j in jobs:
        counts[f"{j.replicas}x{j.gpus}"] = counts.get(f"{j.replicas}x{j.gpus}", 0) + 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: (int(kv[0].split('x')[1]),
                                                                                   int(kv[0].split('x')[0]))))


def plain_pods(job: Job, ns: str) -> list[dict]:
    """The baseline's pods: one per replica, GPUs requested, nothing else."""
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job.name}-worker-{r}", "namespace": ns,
                     "labels": {JOB_LABEL: job.name, RANK_LABEL: str(r), "kubeforge.io/bench": "baseline"}},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "trainer", "image": "example.com/train:1", "command": ["torchrun", "train.py"],
                            "resources": {"requests": {GPU: str(job.gpus)}, "limits": {GPU: str(job.gpus)}}}],
        },
    } for r in range(job.replicas)]


SHARED_CLAIM = "bench-checkpoint"
"""The one checkpoint PVC of ``--checkpoint-mode existing-claim`` and ``shared``."""
OBJECT_STORE_SECRET = "bench-object-store"
"""The credentials Secret of ``--checkpoint-mode object-store`` (made up: kwok starts no container)."""
OBJECT_STORE_URI = "s3://kubeforge-bench/checkpoints"
"""The bucket of ``--checkpoint-mode object-store``."""
CHECKPOINT_MODES = {
    "per-job": "a checkpoint PVC per job (mode ClaimPerJob, the default)",
    "existing-claim": f"one existing PVC every job mounts whole (checkpoint.existingClaimName {SHARED_CLAIM})",
    "shared": f"a directory per job in one shared PVC (mode SharedClaim, claim {SHARED_CLAIM}, subPath "
              "<namespace>/<job>)",
    "object-store": f"an object store (mode ObjectStore, {OBJECT_STORE_URI}, Secret {OBJECT_STORE_SECRET}; no volume)",
}
"""``--checkpoint-mode``: what each puts in the TrainingJobs' ``spec.checkpoint``."""


def checkpoint_spec(mode: str) -> dict | None:
    """``spec.checkpoint`` of every TrainingJob in ``--checkpoint-mode mode`` (None: the default,
    a claim per job)."""
    if mode == "existing-claim":
        return {"existingClaimName": SHARED_CLAIM}
    if mode == "shared":
        return {"mode": "SharedClaim", "sharedClaim": {"claimName": SHARED_CLAIM}}
    if mode == "object-store":
        return {"mode": "ObjectStore", "objectStore": {"uri": OBJECT_STORE_URI, "secretName": OBJECT_STORE_SECRET}}
    return None


def training_job(job: Job, ns: str, mode: str, level: str | None, checkpoint: dict | None = None) -> dict:
    """The kubeforge phase's TrainingJob for ``job`` (``checkpoint``: its ``spec.checkpoint``,
    :func:`checkpoint_spec`; None: the default, a claim per job)."""
    topo: dict = {"mode": mode}
    if level and mode != "None":
        topo["level"] = level
    spec: dict = {
        "pools": [POOL], "replicas": job.replicas, "gpusPerReplica": job.gpus, "topology": topo,
        "template": {"spec": {"terminationGracePeriodSeconds": 0,
                              "containers": [{"name": "trainer", "image": "example.com/train:1",
                                              "command": ["torchrun", "train.py"]}]}},
    }
    if checkpoint:
        spec["checkpoint"] = checkpoint
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
        "metadata": {"name": job.name, "namespace": ns, "labels": {"kubeforge.io/bench": "kubeforge"}},
        "spec": spec,
    }
