"""kubeforge.runtime.cache_events.HeldEvents on its own: the Events that narrate a status
write, held until its answer, handed over once, oldest first."""

from __future__ import annotations

import pytest

from kubeforge.runtime.cache_events import HeldEvents

J, S = ("ns", "a"), ("InferenceService", "ns", "a")
ADMITTED, SCALED, LIMITED = ("Normal", "Admitted", "m1"), ("Normal", "ScaledUp", "1 replica"), ("Warning", "X", "x")


def run(steps):
    """Play ``(method, *args)`` on fresh HeldEvents; returns it and what each ``take`` returned."""
    h, taken = HeldEvents(), []
    for op, *args in steps:
        out = getattr(h, op)(*args)
        if op == "take":
            taken.append(out)
    return h, taken


CASES = {
    "nothing held": ([("take", J)], [[]]),
    "handed over with the time they were decided, in order": (
        [("hold", J, [ADMITTED, LIMITED], 1.0), ("take", J)],
        [[("Normal", "Admitted", "m1", 1.0), ("Warning", "X", "x", 1.0)]]),
    "handed over once": ([("hold", J, [ADMITTED], 1.0), ("take", J), ("take", J)],
                         [[("Normal", "Admitted", "m1", 1.0)], []]),
    "a lost answer's Events wait for the next decision's": (
        [("hold", J, [LIMITED], 1.0), ("hold", J, [SCALED], 2.0), ("take", J)],
        [[("Warning", "X", "x", 1.0), ("Normal", "ScaledUp", "1 replica", 2.0)]]),
    "the same type and reason: the newer replaces and moves last": (
        [("hold", J, [ADMITTED, LIMITED], 1.0), ("hold", J, [("Normal", "Admitted", "new")], 2.0), ("take", J)],
        [[("Warning", "X", "x", 1.0), ("Normal", "Admitted", "new", 2.0)]]),
    "the same reason of another type is another Event": (
        [("hold", J, [("Normal", "X", "n")], 1.0), ("hold", J, [LIMITED], 2.0), ("take", J)],
        [[("Normal", "X", "n", 1.0), ("Warning", "X", "x", 2.0)]]),
    "a refused write's Events are dropped": (
        [("hold", J, [ADMITTED], 1.0), ("drop", J), ("take", J)], [[]]),
    "dropping what is not held is harmless": ([("drop", J), ("take", J)], [[]]),
    "holding nothing keeps what was held": (
        [("hold", J, [ADMITTED], 1.0), ("hold", J, [], 2.0), ("take", J)], [[("Normal", "Admitted", "m1", 1.0)]]),
    "per object": (
        [("hold", J, [ADMITTED], 1.0), ("hold", S, [SCALED], 2.0), ("drop", S), ("take", S), ("take", J)],
        [[], [("Normal", "Admitted", "m1", 1.0)]]),
}


@pytest.mark.parametrize("steps, want", CASES.values(), ids=CASES.keys())
def test_held_events(steps, want):
    _, taken = run(steps)
    assert taken == want


def test_holding_nothing_books_nothing():
    h, _ = run([("hold", J, [], 1.0)])
    assert h._held == {}
