"""kubeforge.runtime.cache_expectations.Expectations on its own, with a clock set by hand:
creates and deletes sent and not seen yet, name by name, per owner, for at most a TTL."""

from __future__ import annotations

import pytest

from kubeforge.runtime.cache_expectations import EXPECTATION_TTL, Expectations

TTL = 60.0
A, B = ("ns", "a"), ("InferenceService", "ns", "a")  # a job and a service of one name


class Clock:
    """Monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def run(steps):
    """Play ``steps`` on fresh Expectations; ``("tick", s)`` moves the clock ``s`` seconds
    (back when negative), ``(method, *args)`` calls a method."""
    clock = Clock()
    e = Expectations(clock, TTL)
    for op, *args in steps:
        if op == "tick":
            clock.t += args[0]
        else:
            getattr(e, op)(*args)
    return e


CASES = {
    "nothing expected": ([], {A: (set(), set())}),
    "a create is pending until the index shows it": (
        [("expect_created", A, ["p0", "p1"]), ("created_observed", A, "p0")], {A: ({"p1"}, set())}),
    "a delete is pending until it is seen or fails": (
        [("expect_deleted", A, ["p0", "p1"]), ("deleted_observed", A, "p1")], {A: (set(), {"p0"})}),
    "creates and deletes are two books": (
        [("expect_created", A, ["p"]), ("expect_deleted", A, ["q"]), ("created_observed", A, "q")],
        {A: ({"p"}, {"q"})}),
    "observing in one book leaves the other": (
        [("expect_created", A, ["p"]), ("expect_deleted", A, ["p"]), ("deleted_observed", A, "p")],
        {A: ({"p"}, set())}),
    "owners never share names": (
        [("expect_created", A, ["p"]), ("expect_deleted", B, ["p"]), ("created_observed", B, "p")],
        {A: ({"p"}, set()), B: (set(), {"p"})}),
    "observing a name never expected is harmless": (
        [("created_observed", A, "x"), ("deleted_observed", B, "x")], {A: (set(), set()), B: (set(), set())}),
    "pending at the TTL": ([("expect_created", A, ["p"]), ("tick", TTL)], {A: ({"p"}, set())}),
    "gone past the TTL": ([("expect_created", A, ["p"]), ("tick", TTL + 1)], {A: (set(), set())}),
    "expired name by name": (
        [("expect_created", A, ["old"]), ("tick", 30), ("expect_created", A, ["new"]), ("tick", TTL - 29)],
        {A: ({"new"}, set())}),
    "expecting again renews": (
        [("expect_deleted", A, ["p"]), ("tick", TTL), ("expect_deleted", A, ["p"]), ("tick", TTL)],
        {A: (set(), {"p"})}),
    "a failed create expected again is pending again": (
        [("expect_created", A, ["p"]), ("created_observed", A, "p"), ("expect_created", A, ["p"])],
        {A: ({"p"}, set())}),
    "forget drops both books of one owner only": (
        [("expect_created", A, ["p"]), ("expect_deleted", A, ["q"]), ("expect_created", B, ["p"]), ("forget", A)],
        {A: (set(), set()), B: ({"p"}, set())}),
}


@pytest.mark.parametrize("steps, want", CASES.values(), ids=CASES.keys())
def test_pending(steps, want):
    e = run(steps)
    assert {k: (e.pending_creates(k), e.pending_deletes(k)) for k in want} == want


@pytest.mark.parametrize("read", ["pending_creates", "pending_deletes"])
def test_an_expired_name_is_dropped_when_read_not_only_hidden(read):
    clock = Clock()
    e = Expectations(clock, TTL)
    e.expect_created(A, ["p"])
    e.expect_deleted(A, ["p"])
    clock.t += TTL + 1
    assert getattr(e, read)(A) == set()
    clock.t -= 2 * TTL  # back before it expired: a dropped name stays dropped
    assert getattr(e, read)(A) == set()
    other = "pending_deletes" if read == "pending_creates" else "pending_creates"
    assert getattr(e, other)(A) == {"p"}  # the other book was not read, so not dropped


def test_pending_is_a_copy():
    e = Expectations(Clock(), TTL)
    e.expect_created(A, ["p"])
    e.pending_creates(A).add("q")
    assert e.pending_creates(A) == {"p"}


def test_defaults():
    assert Expectations().ttl == EXPECTATION_TTL == 60.0
