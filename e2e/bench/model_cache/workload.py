"""The model-cache bench's inputs: the fleet, the services and their models, each service's
desired replicas over the day, and the training gangs that occupy GPUs beside them.

Everything is drawn from ``seed`` (a seeded diurnal process, not a trace: the shipped Azure LLM
trace covers 57 minutes, not a day), so every policy replays the same day.

* Fleet: ``nodes`` nodes of 8 GPUs, NVLink domains of 8 nodes (``nvidia.com/gpu.clique``) and
  blocks of 4 domains (``cloud.google.com/gce-topology-block``), as the other benches' fleets.
* Services: 10 models from 16 GB to 810 GB (BF16 sizes of public checkpoints), 1-8 GPUs a
  replica, and the 405B model as a group of 2 nodes x 8 GPUs inside one NVLink domain.
* Demand: a day of 5-minute autoscaler ticks per service: a cosine with the service's own peak
  hour between ``min`` and ``max`` replicas, times a log-normal AR(1) noise (sigma 0.25, a
  15-minute memory), rounded. Scale-up goes to the target at once, scale-down one replica a tick.
* Background: training gangs arrive as a Poisson stream (about 45 % of the fleet's GPUs offered),
  one pod of 1-8 GPUs or 2-4 whole nodes, running 20 min to 8 h (exponential, mean 2 h); the day
  starts with the stream's steady state already running.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from kubeforge.placement import TopologyLevel
from kubeforge.sim.weights import GB

__all__ = ["BLOCK", "CLIQUE", "DAY", "GPUS_PER_NODE", "LEVELS", "SERVICES", "TICK", "Service", "Training",
           "demand", "fleet_labels", "training_stream"]

CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
LEVELS = (TopologyLevel("nvlink", CLIQUE), TopologyLevel("block", BLOCK))
GPUS_PER_NODE = 8
NODES_PER_DOMAIN = 8
DOMAINS_PER_BLOCK = 4
TICK = 300.0
"""Seconds between two autoscaler decisions."""
DAY = 24 * 3600.0


@dataclass(frozen=True)
class Service:
    """One InferenceService: its model and replica shape.

    Attributes:
        name: The service.
        uri: Its model's source (``spec.model.uri``).
        size: The weights, bytes.
        gpus: GPUs per pod.
        pods: Pods per replica (2: a leader and a worker on two nodes, one NVLink domain).
        min: Fewest replicas.
        max: Most replicas.
        peak_h: Hour of the day its demand peaks.
    """

    name: str
    uri: str
    size: int
    gpus: int
    pods: int
    min: int
    max: int
    peak_h: float


def _svc(name: str, repo: str, gb: float, gpus: int, lo: int, hi: int, peak: float, pods: int = 1) -> Service:
    return Service(name, f"s3://models/{repo}", int(gb * GB), gpus, pods, lo, hi, peak)


SERVICES = (
    _svc("chat-8b", "meta-llama/Llama-3.1-8B-Instruct", 16.1, 1, 2, 16, 11.0),
    _svc("code-14b", "Qwen/Qwen3-14B", 29.5, 1, 2, 12, 14.0),
    _svc("vision-27b", "google/gemma-3-27b-it", 54.9, 1, 1, 8, 16.0),
    _svc("agent-32b", "Qwen/Qwen3-32B", 65.5, 2, 1, 10, 10.0),
    _svc("chat-70b", "meta-llama/Llama-3.3-70B-Instruct", 141.1, 4, 1, 8, 13.0),
    _svc("reason-70b", "deepseek-ai/DeepSeek-R1-Distill-Llama-70B", 141.1, 4, 1, 6, 20.0),
    _svc("multi-72b", "Qwen/Qwen2.5-72B-Instruct", 145.4, 4, 1, 6, 9.0),
    _svc("moe-141b", "mistralai/Mixtral-8x22B-Instruct-v0.1", 281.2, 8, 1, 5, 15.0),
    _svc("moe-235b", "Qwen/Qwen3-235B-A22B", 470.2, 8, 1, 4, 18.0),
    _svc("frontier-405b", "meta-llama/Llama-3.1-405B-Instruct", 810.0, 8, 1, 3, 12.0, pods=2),
)
"""The day's services: 2,155 GB of distinct weights, more than a node's 2 TB cache holds."""


def fleet_labels(nodes: int) -> dict[str, dict[str, str]]:
    """Node name -> topology labels for ``nodes`` nodes (see the module)."""
    out = {}
    for i in range(nodes):
        dom = i // NODES_PER_DOMAIN
        block = dom // DOMAINS_PER_BLOCK
        out[f"n{i:03d}"] = {CLIQUE: f"b{block}.d{dom}", BLOCK: f"b{block}"}
    return out


def demand(svc: Service, hours: float, rng: random.Random) -> list[int]:
    """Target replicas of ``svc`` at each tick of ``hours`` (see the module)."""
    ticks = int(hours * 3600 / TICK) + 1
    phi = math.exp(-TICK / 900.0)
    noise, out = 0.0, []
    for k in range(ticks):
        hour = (k * TICK / 3600.0) % 24
        base = 0.5 + 0.5 * math.cos(2 * math.pi * (hour - svc.peak_h) / 24)
        noise = phi * noise + math.sqrt(1 - phi * phi) * rng.gauss(0.0, 0.25)
        want = svc.min + (svc.max - svc.min) * base * math.exp(noise)
        out.append(max(svc.min, min(svc.max, round(want))))
    return out


@dataclass(frozen=True)
class Training:
    """One background training gang.

    Attributes:
        name: ``train-<i>``.
        arrival: Seconds since the day's start (negative: running when the day starts).
        pods: Pods (one per node when several).
        gpus: GPUs per pod.
        run_s: Seconds it runs once placed.
    """

    name: str
    arrival: float
    pods: int
    gpus: int
    run_s: float


_SHAPES = ((1, 1, 0.08), (1, 2, 0.08), (1, 4, 0.14), (1, 8, 0.40), (2, 8, 0.20), (4, 8, 0.10))
"""(pods, GPUs per pod, share of arrivals): mean 10.7 GPUs a gang."""


def training_stream(nodes: int, hours: float, rng: random.Random, load: float = 0.45) -> list[Training]:
    """The background gangs of the day, by arrival (see the module); ``load`` is the share of the
    fleet's GPUs they offer on average."""
    mean_gpus = sum(p * g * w for p, g, w in _SHAPES)
    mean_run = 2 * 3600.0
    rate = load * nodes * GPUS_PER_NODE / (mean_gpus * mean_run)  # arrivals per second
    out: list[Training] = []
    t = -3 * mean_run  # warm: the day starts with the stream's steady state running
    while True:
        t += rng.expovariate(rate)
        if t >= hours * 3600:
            return out
        pods, gpus, _ = rng.choices(_SHAPES, weights=[w for _, _, w in _SHAPES])[0]
        run = min(8 * 3600.0, max(1200.0, rng.expovariate(1 / mean_run)))
        if t + run > 0:
            out.append(Training(f"train-{len(out)}", t, pods, gpus, run))
