"""The scale bench's inputs, as the operator's cache would hold them: a fleet of ``n`` 8-GPU
nodes in NVLink domains and InfiniBand blocks (the layout of ``e2e/fleets/bench-1024.yaml``),
one GPUPool over it, and ``count`` gangs cut from the Alibaba GPU trace, as TrainingJob records
parsed by kubeforge's own :func:`kubeforge.objects.record_from_k8s`.

The shipped trace has 7,064 GPU tasks; 50,000 gangs of 1-4 tasks need more, so the trace is
read again from its start as many times as needed, each pass with its own seed of gang sizes
(the jobs' names and uids stay unique: ``p<pass>-j<index>``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from kubeforge.admission import JobView, Snapshot
from kubeforge.api import GPUPoolSpec, TrainingJobSpec
from kubeforge.objects import Key, Node, PoolRecord, record_from_k8s

from e2e.bench.lib.replay import PRIORITY, T0, iso
from e2e.bench.lib.traces import gpu_tasks

__all__ = ["BLOCK", "CLIQUE", "GPU", "GPUS_PER_NODE", "POOL", "Gang", "fleet", "gangs", "job_views", "pool",
           "snapshot"]

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
"""The NVLink domain's node label (GPU Feature Discovery's)."""
BLOCK = "cloud.google.com/gce-topology-block"
"""The InfiniBand block's node label."""
FLEET_LABEL = "kubeforge.io/sim-fleet"
GPUS_PER_NODE = 8
NODES_PER_DOMAIN = 8
DOMAINS_PER_BLOCK = 16
POOL = "h100"
NAMESPACES = 16
"""Jobs are spread over this many team namespaces (``team-<i>``), as on a shared cluster."""


@dataclass(frozen=True)
class Gang:
    """One queued gang: ``replicas`` pods of ``gpus`` GPUs each, from the trace.

    Attributes:
        name: ``p<pass>-j<index>``, unique.
        namespace: ``team-<i>``.
        replicas: Pods of the gang (1-4 consecutive trace tasks of the same ``num_gpu``).
        gpus: GPUs per pod (the trace's ``num_gpu``).
        priority: From the first task's QoS class (:data:`e2e.bench.lib.replay.PRIORITY`).
        created: Creation time, unix seconds (the queue's age order).
    """

    name: str
    namespace: str
    replicas: int
    gpus: int
    priority: int
    created: float


def fleet(nodes: int) -> dict[str, Node]:
    """``nodes`` nodes of :data:`GPUS_PER_NODE` GPUs, :data:`NODES_PER_DOMAIN` to an NVLink
    domain and :data:`DOMAINS_PER_BLOCK` domains to an InfiniBand block, by name."""
    out = {}
    for i in range(nodes):
        dom = i // NODES_PER_DOMAIN
        block = dom // DOMAINS_PER_BLOCK
        name = f"n{i:05d}"
        out[name] = Node(name, {CLIQUE: f"ib{block}.{dom % DOMAINS_PER_BLOCK}", BLOCK: f"ib{block}",
                                FLEET_LABEL: "scale"},
                         allocatable={GPU: GPUS_PER_NODE}, capacity={GPU: GPUS_PER_NODE})
    return out


def pool() -> PoolRecord:
    """The one GPUPool :data:`POOL` over the fleet (its API defaults otherwise)."""
    rec = record_from_k8s(GPUPoolSpec, {
        "metadata": {"name": POOL, "uid": "pool-scale", "generation": 1},
        "spec": {"nodeSelector": {"matchLabels": {FLEET_LABEL: "scale"}}},
    })
    assert rec.spec is not None, rec.spec_error
    return rec


def gangs(trace: Path, count: int, seed: int = 7, max_replicas: int = 4) -> list[Gang]:
    """``count`` gangs of 1..``max_replicas`` consecutive same-``num_gpu`` GPU tasks of the
    trace (as :func:`e2e.bench.training.workload.form_jobs` forms them), the trace read again
    from its start, with the next seed, when it runs out; one second apart in creation time.

    Raises:
        ValueError: the trace has no GPU task.
    """
    tasks = [(int(r["num_gpu"]), PRIORITY.get(r["qos"], 0)) for r in gpu_tasks(trace)]
    if not tasks:
        raise ValueError(f"no GPU task in {trace}")
    out: list[Gang] = []
    rnd = 0
    while len(out) < count:
        rng = random.Random(seed + rnd)
        i = 0
        while i < len(tasks) and len(out) < count:
            g, prio = tasks[i]
            want, n = rng.randint(1, max_replicas), 1
            while n < want and i + n < len(tasks) and tasks[i + n][0] == g:
                n += 1
            k = len(out)
            out.append(Gang(f"p{rnd}-j{k:05d}", f"team-{k % NAMESPACES}", n, g, prio, T0 - count + k))
            i += n
        rnd += 1
    return out


def _body(g: Gang, status: Mapping) -> dict:
    return {"metadata": {"name": g.name, "namespace": g.namespace, "uid": f"uid-{g.name}", "generation": 1,
                         "creationTimestamp": iso(g.created)},
            "spec": {"pools": [POOL], "replicas": g.replicas, "gpusPerReplica": g.gpus, "priority": g.priority,
                     "topology": {"mode": "Preferred", "level": "nvlink"},
                     "template": {"spec": {"containers": [{"name": "trainer", "image": "example.com/train:1"}]}}},
            "status": dict(status)}


def job_views(batch: Sequence[Gang], placed: Mapping[Key, Sequence[str]] | None = None,
              finished: frozenset[Key] = frozenset(), now: float = T0) -> dict[Key, JobView]:
    """The gangs as admission sees them: Pending, Running on the nodes of ``placed`` (by key),
    or Succeeded (``finished``, holding nothing)."""
    placed = placed or {}
    out: dict[Key, JobView] = {}
    for g in batch:
        key = (g.namespace, g.name)
        status: dict = {"phase": "Pending", "attempt": 0}
        if key in finished:
            status = {"phase": "Succeeded", "attempt": 0}
        elif key in placed:
            status = {"phase": "Running", "attempt": 0,
                      "placement": {"pool": POOL, "nodes": list(placed[key]), "admittedAt": iso(now)}}
        rec = record_from_k8s(TrainingJobSpec, _body(g, status))
        assert rec.spec is not None, rec.spec_error
        out[key] = JobView(rec, rec.status)
    return out


def snapshot(nodes: Mapping[str, Node], pool_rec: PoolRecord, jobs: Mapping[Key, JobView]) -> Snapshot:
    """What one admission round reads: the pool, the fleet and the jobs (no pods: placements
    hold GPUs in the ledger until pods show them, as the operator assumes them)."""
    return Snapshot(pools={POOL: pool_rec}, nodes=dict(nodes), jobs=dict(jobs), storage_classes=frozenset())
