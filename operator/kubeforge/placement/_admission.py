"""Gang admission over a queue: who gets which GPUs, without double booking."""

from __future__ import annotations

from typing import Literal, Mapping, Sequence

from ._fit import place_gang
from ._model import AdmissionDecision, NodeInfo, NoFit, PendingGang, Placement, TopologyLevel

QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]

_EMPTY: Mapping[str, int] = {}


def queue_order(queue: Sequence[PendingGang]) -> list[PendingGang]:
    """The admission order: priority descending, then ``created`` ascending, then key."""
    return sorted(queue, key=lambda p: (-p.priority, p.created, p.key))


def admit(
    queue: Sequence[PendingGang],
    nodes: Sequence[NodeInfo],
    levels: Sequence[TopologyLevel],
    reserved: Mapping[str, int] = _EMPTY,
    strategy: QueueingStrategy = "BestEffortFIFO",
) -> list[AdmissionDecision]:
    """Decide which pending gangs get GPUs now, in queue order.

    Gangs are taken in :func:`queue_order`. Each one is placed with :func:`place_gang`
    against the pool minus ``reserved`` minus every placement admitted earlier in this
    call, so no two gangs (and no gang and a reservation) ever get the same free GPUs.

    Queueing strategies (the names are Kueue's):

    * ``BestEffortFIFO`` (default): a gang that does not fit now waits, and gangs behind
      it are still tried, so a big job does not idle the pool for smaller ones. Priority
      and age only decide who gets contested GPUs first. A big job may wait while
      smaller ones keep taking freed GPUs; raise its priority or use ``StrictFIFO``.
    * ``StrictFIFO``: once a gang does not fit for lack of capacity, every gang after it
      (any priority) waits too, with a NoFit naming the blocking gang. Gangs that can
      never fit (``NoFit.permanent``) block nobody.

    Args:
        queue: Pending gangs; keys must be unique.
        nodes: The pool's nodes.
        levels: The pool's levels, narrowest first.
        reserved: GPUs per node already promised to admitted, not yet bound work.
        strategy: ``"BestEffortFIFO"`` or ``"StrictFIFO"``.

    Returns:
        One :class:`AdmissionDecision` per gang, in admission order.

    Raises:
        ValueError: On duplicate keys, an unknown strategy, or invalid levels.
    """
    if strategy not in ("BestEffortFIFO", "StrictFIFO"):
        raise ValueError(f"unknown queueing strategy {strategy!r}")
    keys = [p.key for p in queue]
    if len(set(keys)) != len(keys):
        raise ValueError("pending gang keys must be unique")
    taken: dict[str, int] = {n: max(0, v) for n, v in reserved.items()}
    decisions: list[AdmissionDecision] = []
    blocker: PendingGang | None = None
    for pending in queue_order(queue):
        if blocker is not None:
            decisions.append(
                AdmissionDecision(
                    pending.key,
                    NoFit(
                        reason=f"waiting behind {blocker.key} (StrictFIFO)",
                        level=pending.request.level if pending.request.mode != "None" else None,
                        gpus_short=0,
                    ),
                )
            )
            continue
        result = place_gang(pending.request, nodes, levels, taken)
        if isinstance(result, Placement):
            for node, gpus in result.gpus_by_node.items():
                taken[node] = taken.get(node, 0) + gpus
        elif strategy == "StrictFIFO" and isinstance(result, NoFit) and not result.permanent:
            blocker = pending
        decisions.append(AdmissionDecision(pending.key, result))
    return decisions
