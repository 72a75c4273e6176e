"""One size of the scale bench: three admission rounds through kubeforge's pure core
(:func:`kubeforge.admission.plan_admission` with the runtime's :class:`AdmissionMemo`), each
timed in CPU seconds of this process (``time.process_time``) and wall seconds:

- **cold**: the operator's first round after a start (or a leader change): an empty memo, an
  empty fleet, every gang queued. It places what fits; every gang is tried once.
- **written**: the next round, with the cold round's admissions written (Running, on their
  nodes). What a preemption could do in the pool changed (the lowest running priority), so
  the memo's answers are stale and every waiting gang is placed again.
- **steady**: the next round with nothing changed: the safety-net round the loop runs every
  few seconds while gangs wait. The memo answers every waiting gang without placing it.
- **release**: one running gang ended (Succeeded): a node of the pool got freer, its epoch
  moves, and every waiting gang of the pool is placed again (the most expensive steady-state
  round: one per job end).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kubeforge.admission import AdmissionMemo, AdmissionPlan, plan_admission

from e2e.bench.lib.replay import T0
from e2e.bench.scale.workload import GPUS_PER_NODE, fleet, gangs, job_views, pool, snapshot

__all__ = ["ROUNDS", "RoundCost", "measure", "timed_round"]

ROUNDS = ("cold", "written", "steady", "release")


@dataclass(frozen=True)
class RoundCost:
    """What one round cost and decided.

    Attributes:
        cpu_s: CPU seconds of this process (user + system) in ``plan_admission``.
        wall_s: Wall seconds in it.
        admitted: Gangs it admitted.
        waiting: Gangs it left waiting (a preempting gang included).
        preempting: Gangs it made preempt others.
    """

    cpu_s: float
    wall_s: float
    admitted: int
    waiting: int
    preempting: int


def timed_round(snap, now: float, memo: AdmissionMemo) -> tuple[AdmissionPlan, RoundCost]:
    """``plan_admission(snap, now, memo)`` and its :class:`RoundCost`."""
    w0, c0 = time.perf_counter(), time.process_time()
    plan = plan_admission(snap, now, memo)
    c1, w1 = time.process_time(), time.perf_counter()
    return plan, RoundCost(c1 - c0, w1 - w0, len(plan.admit), len(plan.wait), len(plan.preempt))


def measure(nodes: int, jobs: int, trace: Path, seed: int = 7) -> dict:
    """The three rounds (:data:`ROUNDS`) at ``nodes`` 8-GPU nodes and ``jobs`` queued gangs.

    Returns:
        ``{"nodes", "jobs", "gpus", "gpus_asked", "parse_cpu_s"}`` and one entry per
        round of :data:`ROUNDS`, each round a :class:`RoundCost` as a dict;
        ``parse_cpu_s``: CPU seconds to parse the jobs' specs (kubeforge's records, once per
        job and generation in the operator, so not part of a round).
    """
    batch = gangs(trace, jobs, seed)
    c0 = time.process_time()
    views = job_views(batch)
    parse = time.process_time() - c0
    fleet_nodes, pool_rec = fleet(nodes), pool()
    memo = AdmissionMemo()
    out: dict = {"nodes": nodes, "jobs": jobs, "gpus": nodes * GPUS_PER_NODE,
                 "gpus_asked": sum(g.replicas * g.gpus for g in batch), "parse_cpu_s": parse}
    plan, cost = timed_round(snapshot(fleet_nodes, pool_rec, views), T0, memo)
    out["cold"] = asdict(cost)
    by_key = {(g.namespace, g.name): g for g in batch}
    placed = {a.key: a.placement.nodes for a in plan.admit}
    # What the runtime's snapshot does: a new view only for the jobs whose status changed.
    views.update(job_views([by_key[k] for k in placed], placed))
    for i, rnd in enumerate(("written", "steady")):
        plan, cost = timed_round(snapshot(fleet_nodes, pool_rec, views), T0 + 5 * (i + 1), memo)
        out[rnd] = asdict(cost)
    if placed:
        done = next(iter(placed))
        views.update(job_views([by_key[done]], finished=frozenset([done])))
    plan, cost = timed_round(snapshot(fleet_nodes, pool_rec, views), T0 + 15, memo)
    out["release"] = asdict(cost)
    return out
