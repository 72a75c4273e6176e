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

With ``late_share`` > 0 (``--preemptible``), that share of the gangs (spread evenly over the
queue: at 0.1, over 8 of the 16 namespaces) is held out of the cold round and submitted just
after it with priority :data:`LATE_PRIORITY`, above every trace priority: the written round sees
them arrive, and its tries and the release round's reach victims (the pool's defaults: one team
without quotas, ``withinQuota: LowerPriority``; the cold round's placements are written as made
:data:`LATE_AGE_S` before, older than the default ``minRuntimeSeconds``, so none is protected).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kubeforge.admission import AdmissionMemo, AdmissionPlan, plan_admission

from e2e.bench.lib.replay import T0
from e2e.bench.scale.workload import GPUS_PER_NODE, Gang, fleet, gangs, job_views, pool, snapshot

__all__ = ["LATE_AGE_S", "LATE_PRIORITY", "ROUNDS", "RoundCost", "late_split", "measure", "timed_round"]

ROUNDS = ("cold", "written", "steady", "release")
LATE_PRIORITY = 30
"""The late gangs' priority: above the trace's highest (20, ``Guaranteed``), so every running
gang is a possible victim of every late gang."""
LATE_AGE_S = 3600.0
"""How long before the rounds the cold round's placements are written as made (seconds) when
late gangs are submitted: past the pool's default ``minRuntimeSeconds`` (1,800 s)."""


@dataclass(frozen=True)
class RoundCost:
    """What one round cost and decided.

    Attributes:
        cpu_s: CPU seconds of this process (user + system) in ``plan_admission``.
        wall_s: Wall seconds in it.
        admitted: Gangs it admitted.
        waiting: Gangs it left waiting (a preempting gang included).
        preempting: Gangs it made preempt others.
        victims: Running gangs those preemptions stop, all preemptors together.
    """

    cpu_s: float
    wall_s: float
    admitted: int
    waiting: int
    preempting: int
    victims: int = 0


def timed_round(snap, now: float, memo: AdmissionMemo) -> tuple[AdmissionPlan, RoundCost]:
    """``plan_admission(snap, now, memo)`` and its :class:`RoundCost`."""
    w0, c0 = time.perf_counter(), time.process_time()
    plan = plan_admission(snap, now, memo)
    c1, w1 = time.process_time(), time.perf_counter()
    return plan, RoundCost(c1 - c0, w1 - w0, len(plan.admit), len(plan.wait), len(plan.preempt),
                           sum(len(p.victims) for p in plan.preempt))


def late_split(batch: list[Gang], share: float) -> tuple[list[Gang], list[Gang]]:
    """``(early, late)``: about ``share`` (0..1) of ``batch``, every ``1/share``-th gang in queue
    order, becomes late, with :data:`LATE_PRIORITY`, a creation time after the cold round's
    (``T0 + 1``, unix seconds) and a name (so a uid) of its own, ``<name>-late``: kubeforge's
    parse cache is keyed by uid and generation, and the same gang with another priority must
    not read as the same spec; the rest stay as they are. ``share`` 0: ``(batch, [])``."""
    early: list[Gang] = []
    late: list[Gang] = []
    for i, g in enumerate(batch):
        if int((i + 1) * share) > int(i * share):
            late.append(replace(g, name=f"{g.name}-late", priority=LATE_PRIORITY, created=T0 + 1))
        else:
            early.append(g)
    return early, late


def measure(nodes: int, jobs: int, trace: Path, seed: int = 7, late_share: float = 0.0) -> dict:
    """The rounds (:data:`ROUNDS`) at ``nodes`` 8-GPU nodes and ``jobs`` queued gangs, of which
    ``late_share`` arrive after the cold round (:func:`late_split`).

    Returns:
        ``{"nodes", "jobs", "gpus", "gpus_asked", "parse_cpu_s", "late"}`` and one entry per
        round of :data:`ROUNDS`, each round a :class:`RoundCost` as a dict;
        ``parse_cpu_s``: CPU seconds to parse the jobs' specs (kubeforge's records, once per
        job and generation in the operator, so not part of a round).
    """
    early, late = late_split(gangs(trace, jobs, seed), late_share)
    batch = early + late
    c0 = time.process_time()
    views = job_views(early)
    late_views = job_views(late)
    parse = time.process_time() - c0
    fleet_nodes, pool_rec = fleet(nodes), pool()
    memo = AdmissionMemo()
    out: dict = {"nodes": nodes, "jobs": jobs, "gpus": nodes * GPUS_PER_NODE,
                 "gpus_asked": sum(g.replicas * g.gpus for g in batch), "parse_cpu_s": parse, "late": len(late)}
    plan, cost = timed_round(snapshot(fleet_nodes, pool_rec, views), T0, memo)
    out["cold"] = asdict(cost)
    by_key = {(g.namespace, g.name): g for g in batch}
    placed = {a.key: a.placement.nodes for a in plan.admit}
    # What the runtime's snapshot does: a new view only for the jobs whose status changed.
    views.update(job_views([by_key[k] for k in placed], placed, now=T0 - LATE_AGE_S if late else T0))
    views.update(late_views)
    for i, rnd in enumerate(("written", "steady")):
        plan, cost = timed_round(snapshot(fleet_nodes, pool_rec, views), T0 + 5 * (i + 1), memo)
        out[rnd] = asdict(cost)
    if placed:
        done = next(iter(placed))
        views.update(job_views([by_key[done]], finished=frozenset([done])))
    plan, cost = timed_round(snapshot(fleet_nodes, pool_rec, views), T0 + 15, memo)
    out["release"] = asdict(cost)
    return out
