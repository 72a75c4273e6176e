"""The NVL72 bench's model: its gangs from the Alibaba trace, the DRA pool of 8 racks, each
gang's TrainingJob record as the operator's cache would hold it, and the Kueue-like scattered
victim choice it is compared with (given to the core through
:class:`kubeforge.admission.AdmissionRules`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from kubeforge.admission import AdmissionRules, Victim, eligible_victims, lost_work, run_time
from kubeforge.api import GPUPoolSpec, TrainingJobSpec
from kubeforge.objects import CLIQUE_LABEL, dra_key, record_from_k8s
from kubeforge.placement import Placement

from e2e.bench.lib.replay import PRIORITY, T0, iso
from e2e.bench.lib.traces import gpu_tasks

__all__ = ["DRIVER", "Gang", "KEY", "RACK_PRIORITY", "SCATTERED", "load", "pool_record", "record"]

DRIVER = "gpu.nvidia.com"
KEY = dra_key(DRIVER)
RACK_PRIORITY = 1000


@dataclass
class Gang:
    """One gang of the replay and what happened to it (times in simulated unix seconds)."""

    name: str
    priority: int
    nodes: int
    arrival: float
    work: float
    rack: bool = False
    saved: float = 0.0
    started: float | None = None
    placement: tuple[str, ...] = ()
    running_at: float | None = None
    stopping_until: float | None = None
    finished: float | None = None
    preemptions: int = 0
    lost: list[float] = field(default_factory=list)
    lost_to_racks: float = 0.0
    first_running: float | None = None
    busy_at_arrival: float | None = None
    cache: tuple = ()


def load(trace: Path, seed: int, racks: int, hours: float, load_factor: float, max_hours: float,
         rack_start: float, rack_every: float) -> tuple[list[Gang], float]:
    """Background gangs from the trace: at the start, gangs asking for ``load_factor`` x the fleet's
    GPUs with the rest of their runs; then a stream whose GPU-hours reach ``load_factor`` x the
    fleet's over ``hours``, arriving evenly (jittered); plus the rack-sized gangs (see the module
    docstring). Returns (gangs by arrival, the stream's offered GPU-hours)."""
    rows = gpu_tasks(trace)
    rng = random.Random(seed)
    gangs: list[Gang] = []

    def draw() -> Gang:
        r = rows[len(gangs) % len(rows)]
        nodes = max(1, min(32, int(r["num_gpu"]) * rng.choice((1, 2, 4, 8))))
        life = max(1200.0, min(max_hours * 3600, float(r["deletion_time"]) - float(r["creation_time"])))
        return Gang(f"g{len(gangs):04d}", PRIORITY.get(r["qos"], 0), nodes, 0.0, life)

    # The fleet as a steady state finds it: gangs asking for load_factor x its GPUs are there at the
    # start, each with what is left of its run (uniform), so the rack gangs never meet an empty fleet.
    gpus = 0
    while gpus < load_factor * racks * 72:
        g = draw()
        g.work = max(600.0, g.work * rng.random())
        g.arrival = T0 + len(gangs)
        gangs.append(g)
        gpus += g.nodes * 4
    # Then a stream that offers load_factor x the fleet's GPU-hours over the window.
    stream: list[Gang] = []
    offered = 0.0
    while offered < load_factor * racks * 72 * hours:
        g = draw()
        gangs.append(g)
        stream.append(g)
        offered += g.nodes * 4 * g.work / 3600
    gap = hours * 3600 / len(stream)
    for k, g in enumerate(stream):
        g.arrival = T0 + (k + rng.random()) * gap
    t, k = T0 + rack_start, 0
    while t < T0 + hours * 3600:
        gangs.append(Gang(f"rack{k:02d}", RACK_PRIORITY, 16, t, 3600.0, rack=True))
        t += rack_every
        k += 1
    return sorted(gangs, key=lambda g: g.arrival), offered


def pool_record(min_runtime: int | None = 0):
    """The DRA GPUPool ``nvl72`` record with the ``nvlink`` level on the clique label and
    ``preemption.minRuntimeSeconds`` = ``min_runtime`` (None: the API's default)."""
    spec = {"deviceAllocation": "DRA", "dra": {"driver": DRIVER},
            "topologyLevels": [{"name": "nvlink", "nodeLabel": CLIQUE_LABEL}]}
    if min_runtime is not None:
        spec["preemption"] = {"minRuntimeSeconds": min_runtime}
    # a uid per spec: parsed specs are cached by uid and generation (kubeforge.objects._records)
    body = {"metadata": {"name": "nvl72", "uid": f"pool-minrun-{min_runtime}", "generation": 1}, "spec": spec}
    rec = record_from_k8s(GPUPoolSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec


def record(g: Gang, now: float, ckpt: float):
    """The gang's TrainingJob record as the operator's cache would hold it now; built again only
    when its status changes (a placement, a preemption, a new checkpoint)."""
    ckpts = int((now - g.started) // ckpt) if g.placement and g.started is not None else -1
    key = (g.preemptions, g.placement, g.started, ckpts)
    if g.cache and g.cache[0] == key:
        return g.cache[1]
    status: dict = {"phase": "Pending", "attempt": g.preemptions}
    if g.placement:
        status = {"phase": "Running", "attempt": g.preemptions,
                  "placement": {"pool": "nvl72", "nodes": list(g.placement), "admittedAt": iso(g.started or now)}}
        if ckpts > 0:
            status["lastCheckpoint"] = {"time": iso(g.started + ckpts * ckpt)}
    topo = {"mode": "Required", "level": "nvlink"} if g.nodes <= 16 else {"mode": "Preferred", "level": "nvlink"}
    body = {"metadata": {"name": g.name, "namespace": "ml", "uid": f"{g.name}-{g.preemptions}", "generation": 1,
                         "creationTimestamp": iso(g.arrival)},
            "spec": {"pools": ["nvl72"], "replicas": g.nodes, "gpusPerReplica": 4, "priority": g.priority,
                     "topology": topo, "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}}},
            "status": status}
    rec = record_from_k8s(TrainingJobSpec, body)
    assert rec.spec is not None, rec.spec_error
    g.cache = (key, rec)
    return rec


def scattered_victims(preemptor, request, view, book, running, taken, in_flight, now):
    """Kueue-like victims: lowest priority, then newest, anywhere in the pool, until enough GPUs
    are free in all (topology-blind); no placement is nominated. Called as
    :func:`kubeforge.admission.choose_victims` is."""
    cands = eligible_victims(preemptor, request.gpus, book, running, in_flight, now)
    cands.sort(key=lambda c: (c[0].record.spec.priority, run_time(c[0], now)))  # lowest priority, newest
    free = sum(n.gpus_free for n in view.nodes if n.usable) - sum(taken.values())
    chosen = []
    for v, reason in cands:
        if free >= request.gpus:
            break
        by_node = {n: 4 for n in v.placement.nodes}
        chosen.append(Victim(v.key, reason, lost_work(v, now, view.resource), by_node))
        free += sum(by_node.values())
    if not chosen or free < request.gpus:
        return None
    return chosen, Placement(None, None, (), {}, "scattered")


SCATTERED = AdmissionRules(choose_victims=scattered_victims)
"""The rules of the "Kueue-like scattered" case: kubeforge's queue, :func:`scattered_victims`."""
