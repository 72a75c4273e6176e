"""The orders admission works in, one named function each, as Kueue keeps its own in one place
(``pkg/scheduler/scheduler.go`` ``entryOrdering``, ``pkg/scheduler/preemption``
``candidatesOrdering``). Victims are ordered by :func:`kubeforge.admission._victims.victim_order`,
beside the cost it reads.

Pure: each takes what it orders and returns a new list; nothing is changed in place.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

from kubeforge.objects import InferenceServiceRecord
from kubeforge.placement import PendingGang

S = TypeVar("S", bound=InferenceServiceRecord)


def queue_order(queue: Sequence[PendingGang]) -> list[PendingGang]:
    """The admission queue: priority descending, then ``created`` ascending, then key (Kueue's
    ``BestEffortFIFO`` order: a gang that does not fit waits and the gangs behind it are still
    tried, ``pkg/scheduler/queue``)."""
    return sorted(queue, key=lambda p: (-p.priority, p.created, p.key))


def entry_order(queue: Sequence[PendingGang], borrows: Callable[[PendingGang], bool]) -> list[PendingGang]:
    """The order a round tries gangs in: :func:`queue_order`, with the gangs that fit within their
    team's nominal quota as the round starts (``borrows`` False) before those that would borrow,
    the order kept within each part (Kueue's ``entryOrdering``: not borrowing, then priority,
    then time)."""
    ordered = queue_order(queue)
    return [p for p in ordered if not borrows(p)] + [p for p in ordered if borrows(p)]


def service_order(services: Iterable[S]) -> list[S]:
    """InferenceServices whose replica groups want nodes: oldest first (creation time, then
    namespace and name), after every gang of the round."""
    return sorted(services, key=lambda s: (s.created, s.namespace, s.name))
