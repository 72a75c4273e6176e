"""What the replays through kubeforge's pure admission core share (the preemption and NVL72
benches, the live preemption bench's prediction): the simulated clock's origin, priorities
from the Alibaba trace's QoS classes, and the other rules they compare kubeforge with, given to
:func:`kubeforge.admission.plan_admission` through its documented seam
(:class:`kubeforge.admission.AdmissionRules`).
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

from kubeforge.admission import AdmissionRules, JobView, choose_victims, queue_order
from kubeforge.placement import PendingGang

from e2e.bench.lib.timing import iso

__all__ = ["KUEUE_VICTIMS", "PRIORITY", "PRIORITY_FIRST", "T0", "iso", "no_checkpoints"]

PRIORITY = {"Guaranteed": 20, "LS": 10, "Burstable": 5, "BE": 0}
"""A trace task's priority from its QoS class: an LS gang may preempt BE gangs, as in a shared cluster."""
T0 = 1_800_000_000.0
"""The simulated clock's origin, unix seconds."""


def no_checkpoints(job: JobView, now: float) -> float:
    """Work a victim loses, as Kueue counts it: nothing (it reads no checkpoints)."""
    return 0.0


def _priority_then_age(queue: Sequence[PendingGang], borrows) -> list[PendingGang]:
    return queue_order(queue)


KUEUE_VICTIMS = AdmissionRules(choose_victims=partial(choose_victims, cost=no_checkpoints))
"""Kueue's victim order: checkpoint age counts 0, so candidates go lowest priority first, then
newest (Kueue's ``candidatesOrdering``), and no victim is worth more than another."""
PRIORITY_FIRST = AdmissionRules(entry_order=_priority_then_age)
"""kubeforge's queue order before it put gangs within nominal quota first: priority, then age."""
