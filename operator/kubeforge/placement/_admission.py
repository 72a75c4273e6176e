"""The admission queue's order (the admission round itself is kubeforge.admission.plan_admission)."""

from __future__ import annotations

from typing import Sequence

from ._model import PendingGang


def queue_order(queue: Sequence[PendingGang]) -> list[PendingGang]:
    """The admission order: priority descending, then ``created`` ascending, then key (Kueue's
    ``BestEffortFIFO`` order: a gang that does not fit waits and the gangs behind it are still
    tried, ``pkg/scheduler/queue``)."""
    return sorted(queue, key=lambda p: (-p.priority, p.created, p.key))
