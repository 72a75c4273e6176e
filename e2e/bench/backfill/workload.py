"""The backfill bench's job mix and the records the pure admission core reads.

Small jobs are the Alibaba trace's GPU tasks (1, 2, 4 or 8 GPUs, one pod each), in the trace's
order, their lifetime capped at ``--small-max-hours`` (at least 5 minutes), arriving as a
seeded Poisson stream whose offered load is ``--small-load`` of the fleet's GPUs. Large gangs are
``--large-nodes`` x 8 GPUs, ``Required`` inside one ``block`` (16 nodes), every
``--large-every`` minutes, each running as long as one of the trace's long tasks (1-4 h).

What the operator knows of each job's end (documented in e2e/README-backfill-bench.md):

- 70 % of jobs report progress every 1-10 minutes (Hugging Face's callback, ``kubeforge.workload``),
  and each report's ETA is the job's true end (a steady step rate extrapolates exactly);
- 50 % of jobs set ``spec.maxRunSeconds``, 1.2-3x their true run rounded up to 15 minutes (the
  generous round limits users write), drawn independently of reporting;
- the others (15 %) have an unknown end: nothing can be counted on to free their GPUs.

Every job checkpoints every 30 minutes of its run (``CHECKPOINT_EVERY``, the preemption bench's
default); the operator knows a checkpoint only through a report (a job that does not report shows
none, and its work at risk counts from its placement). A job preempted for a reservation (the
``--preempt-after`` rows) loses the work since its last checkpoint and waits again from then.

Every draw comes from the seed, so the strategies replay the same arrivals.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from kubeforge.api import GPUPoolSpec, TrainingJobSpec
from kubeforge.objects import ADMITTED, PREEMPTED, Node, record_from_k8s

from e2e.bench.lib.replay import T0, iso
from e2e.bench.lib.traces import gpu_tasks

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
NS = "ml"
POOL = "h100"
CHECKPOINT_EVERY = 1800.0
"""Seconds of run between two checkpoints of every job (the preemption bench's default, 30 min)."""


@dataclass
class Job:
    """One job of the replay and what happened to it (times in simulated unix seconds)."""

    name: str
    large: bool
    replicas: int
    gpus: int
    arrival: float
    work: float  # seconds of running it needs
    report_every: float | None  # seconds between its progress reports; None: it never reports
    limit: int | None  # spec.maxRunSeconds, or None
    started: float | None = None
    placement: tuple[str, ...] = ()
    finished: float | None = None
    saved: float = 0.0  # seconds of work kept at the last checkpoint before a preemption
    attempt: int = 0  # preemptions so far
    requeued: float | None = None  # when it was last preempted (it waits again from then)
    lost: list[float] = field(default_factory=list)  # GPU-hours lost at each preemption

    @property
    def left(self) -> float:
        """Seconds of work it still needs from its current (or next) start."""
        return self.work - self.saved

    @property
    def total(self) -> int:
        """GPUs of the whole job."""
        return self.replicas * self.gpus

    def fresh(self) -> "Job":
        """The job as it arrives, before any replay touched it."""
        return Job(self.name, self.large, self.replicas, self.gpus, self.arrival, self.work, self.report_every,
                   self.limit)


@dataclass(frozen=True)
class Mix:
    """The bench's workload parameters (the flags of the same names)."""

    nodes: int = 32
    hours: float = 10.0
    small_load: float = 0.75
    small_max_hours: float = 4.0
    large_nodes: int = 8
    large_every: float = 120.0
    report_share: float = 0.7
    limit_share: float = 0.5


def _knowledge(rng: random.Random, mix: Mix, work: float) -> tuple[float | None, int | None]:
    every = 60.0 * rng.choice((1, 2, 5, 10)) if rng.random() < mix.report_share else None
    limit = None
    if rng.random() < mix.limit_share:
        limit = int(math.ceil(work * rng.uniform(1.2, 3.0) / 900.0) * 900)
    return every, limit


def load_jobs(trace: Path, mix: Mix, seed: int) -> list[Job]:
    """Small jobs and large gangs arriving over ``mix.hours`` (module docstring)."""
    rows = gpu_tasks(trace)
    rng = random.Random(seed)
    smalls = []
    for r in rows:
        life = float(r["deletion_time"] or 0) - float(r["creation_time"])
        smalls.append((int(r["num_gpu"]), max(300.0, min(mix.small_max_hours * 3600, life))))
    offset = rng.randrange(len(smalls))
    smalls = smalls[offset:] + smalls[:offset]
    mean_gpu_s = sum(g * d for g, d in smalls) / len(smalls)
    rate = mix.small_load * mix.nodes * 8 / mean_gpu_s  # arrivals per second
    jobs: list[Job] = []
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t > mix.hours * 3600:
            break
        g, d = smalls[i % len(smalls)]
        i += 1
        every, limit = _knowledge(rng, mix, d)
        jobs.append(Job(f"s{len(jobs):05d}", False, 1, g, T0 + t, d, every, limit))
    longs = [max(3600.0, min(4 * 3600.0, d)) for g, d in smalls if d >= 3600]
    k, t = 0, mix.large_every * 60
    while t <= mix.hours * 3600:
        d = longs[rng.randrange(len(longs))]
        every, limit = _knowledge(rng, mix, d)
        jobs.append(Job(f"L{k:03d}", True, mix.large_nodes, 8, T0 + t, d, every, limit))
        k += 1
        t += mix.large_every * 60
    jobs.sort(key=lambda j: (j.arrival, j.name))
    return jobs


def fleet(nodes: int) -> dict[str, Node]:
    """``nodes`` 8-GPU nodes: NVLink cliques of 4, blocks of 16."""
    return {f"n{i:03d}": Node(f"n{i:03d}", {CLIQUE: f"c{i // 4}", BLOCK: f"b{i // 16}"}, allocatable={GPU: 8},
                              capacity={GPU: 8}) for i in range(nodes)}


def pool_record(reservations: dict | None = None):
    """The GPUPool ``h100``: levels nvlink (the clique) and block; ``spec.reservations`` when given."""
    spec: dict = {"topologyLevels": [{"name": "nvlink", "nodeLabel": CLIQUE}, {"name": "block", "nodeLabel": BLOCK}]}
    if reservations:
        spec["reservations"] = reservations
    rec = record_from_k8s(GPUPoolSpec, {"metadata": {"name": POOL, "uid": f"pool-{sorted((reservations or {}).items())}",
                                                      "generation": 1}, "spec": spec})
    assert rec.spec is not None, rec.spec_error
    return rec


def job_record(job: Job, now: float, uid: str, ckpt: float = CHECKPOINT_EVERY):
    """The job's TrainingJob record as the operator's cache would hold it at ``now``: its placement,
    and for a job that reports, the progress of its last report (its ETA) and the last checkpoint
    (one every ``ckpt`` seconds of the run) written before that report; a preempted job waits again
    from its preemption (``Admitted=False`` since then)."""
    status: dict = {"phase": "Pending", "attempt": job.attempt}
    if job.requeued is not None and not job.placement:
        status["conditions"] = [{"type": ADMITTED, "status": "False", "reason": PREEMPTED,
                                 "lastTransitionTime": iso(job.requeued)}]
    if job.placement:
        start = job.started if job.started is not None else now
        status = {"phase": "Running", "attempt": job.attempt,
                  "placement": {"pool": POOL, "nodes": list(job.placement), "admittedAt": iso(start)}}
        if job.report_every is not None and now - start >= job.report_every:
            seen = start + ((now - start) // job.report_every) * job.report_every
            status["progress"] = {"step": 1, "eta": iso(start + job.left), "lastReportTime": iso(seen)}
            if seen - start >= ckpt:
                status["lastCheckpoint"] = {"step": 1, "path": "/c", "time": iso(start + ((seen - start) // ckpt) * ckpt)}
    topology = {"mode": "Required", "level": "block"} if job.large else {"mode": "None"}
    spec = {"pools": [POOL], "replicas": job.replicas, "gpusPerReplica": job.gpus, "topology": topology,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}}
    if job.limit is not None:
        spec["maxRunSeconds"] = job.limit
    body = {"metadata": {"name": job.name, "namespace": NS, "uid": uid, "generation": 1,
                         "creationTimestamp": iso(job.arrival)}, "spec": spec, "status": status}
    rec = record_from_k8s(TrainingJobSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec
