"""The backfill bench's bound: the large-gang waits no policy can beat in this mix.

An ideal policy with perfect foresight and free preemption ("gangs first") starts every large
gang on arrival on the block that lets it start soonest, stopping whatever smaller jobs are on the
nodes it needs at once (no ``minRuntimeSeconds``, no ``preemptAfterSeconds`` delay, no lost work
counted); it waits only for other large gangs, which it never preempts (equal size and priority).
So the small jobs drop out and what is left is exact: gangs of ``need`` whole nodes inside one
block of ``block_nodes`` nodes, ``blocks`` blocks, each gang busy for its true run.

:func:`gangs_first` finds the schedule of least maximum wait (then least total wait) by
enumerating every order of the gangs and every block for each: in a given order each gang starts
at ``max(its arrival, the previous gang's start, the need-th soonest free node of its block)``.
Any schedule, its gangs taken in the order they start, is matched or beaten by that list schedule
of the same order and blocks (by induction: each block's sorted node-free times stay at or below
the schedule's), so the minimum over the enumeration is the minimum over all schedules. With more
orders than :data:`EXACT_LIMIT` it falls back to arrival order, each gang on its soonest block:
then the figure is one schedule's, not proven minimal (:attr:`Bound.exact` False).

Times are seconds (unix or relative, the same clock for every gang). Pure; no admission core.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from e2e.bench.lib.stats import pct

EXACT_LIMIT = 200_000
"""Most (order, block choice) schedules :func:`gangs_first` enumerates (5 gangs, 2 blocks: 3,840)."""


@dataclass(frozen=True)
class Gang:
    """A large gang of the bound: ``arrival`` and ``run`` in seconds."""

    name: str
    arrival: float
    run: float


@dataclass(frozen=True)
class Bound:
    """The gangs-first schedule.

    Attributes:
        waits: Per gang name, seconds from arrival to start.
        blocks: Per gang name, the block index it runs in.
        exact: Whether every schedule was enumerated (the maximum wait is then the minimum possible).
    """

    waits: dict[str, float]
    blocks: dict[str, int]
    exact: bool

    def p(self, q: float) -> float:
        """The ``q``-th percentile of the waits, minutes (the bench's :func:`pct`)."""
        return pct(list(self.waits.values()), q) / 60 if self.waits else 0.0


def _schedule(order: Sequence[Gang], choice: Sequence[int] | None, blocks: int, block_nodes: int,
              need: int) -> tuple[list[float], list[int]] | None:
    """Start times (in ``order``) and blocks of the list schedule; ``choice`` None: each gang on the
    block where it starts soonest. None when a gang cannot fit any block (``need > block_nodes``)."""
    free = [[-math.inf] * block_nodes for _ in range(blocks)]
    starts, used, prev = [], [], -math.inf
    for i, g in enumerate(order):
        cands = [choice[i]] if choice is not None else range(blocks)
        best = min(((max(g.arrival, prev, sorted(free[b])[need - 1]), b) for b in cands), default=None)
        if best is None:
            return None
        start, b = best
        nodes = sorted(range(block_nodes), key=lambda n: free[b][n])[:need]
        for n in nodes:
            free[b][n] = start + g.run
        starts.append(start)
        used.append(b)
        prev = start
    return starts, used


def gangs_first(gangs: Sequence[Gang], blocks: int, block_nodes: int, need: int) -> Bound:
    """The least maximum wait (ties: least total wait) of ``gangs``, each needing ``need`` whole
    nodes of one of ``blocks`` blocks of ``block_nodes`` nodes, when only the gangs compete for
    them (module docstring). ``need > block_nodes``: every gang waits forever (``math.inf``)."""
    if need > block_nodes or blocks < 1:
        return Bound({g.name: math.inf for g in gangs}, {}, True)
    n = len(gangs)
    exact = math.factorial(n) * blocks ** n <= EXACT_LIMIT
    best: tuple[float, float, Sequence[Gang], list[float], list[int]] | None = None
    orders = itertools.permutations(gangs) if exact else [sorted(gangs, key=lambda g: (g.arrival, g.name))]
    for order in orders:
        choices = itertools.product(range(blocks), repeat=n) if exact else [None]
        for choice in choices:
            got = _schedule(order, choice, blocks, block_nodes, need)
            if got is None:
                continue
            starts, used = got
            waits = [s - g.arrival for s, g in zip(starts, order)]
            key = (max(waits, default=0.0), sum(waits))
            if best is None or key < best[:2]:
                best = (key[0], key[1], order, starts, used)
    assert best is not None
    _, _, order, starts, used = best
    return Bound({g.name: s - g.arrival for g, s in zip(order, starts)},
                 {g.name: b for g, b in zip(order, used)}, exact)
