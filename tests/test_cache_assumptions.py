"""kubeforge.runtime.cache_assumptions.Assumptions on its own, with a clock set by hand:
assume → write → confirm or forget, for TrainingJob placements and InferenceService groups."""

from __future__ import annotations

import pytest

from kubeforge.admission import AssumedGroup
from kubeforge.objects import PlacementRecord
from kubeforge.runtime.cache_assumptions import ASSUME_TTL, Assumptions
from kubeforge.runtime.cache_keys import service_key

TTL = 120.0
J, K = ("ns", "a"), ("ns", "b")
PL = PlacementRecord("h100", ("n1", "n2"), "nvlink", "d1", "fit")
PL2 = PlacementRecord("h100", ("n3", "n4"))


def group(index: int) -> AssumedGroup:
    return AssumedGroup(index, PlacementRecord("h100", (f"n{index}",)), 8)


class Clock:
    """Monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def run(steps, a=None, clock=None):
    """Play ``steps``: ``("tick", s)`` moves the clock, ``("writing", key, steps)`` plays
    ``steps`` inside ``status_write(key)``, ``("check", method, key, want)`` asserts what a
    read returns there, ``(method, *args)`` calls a method."""
    clock = clock or Clock()
    a = a or Assumptions(clock, TTL)
    for op, *args in steps:
        if op == "tick":
            clock.t += args[0]
        elif op == "check":
            method, key, want = args
            assert getattr(a, method)(key) == want, (method, key)
        elif op == "writing":
            with a.status_write(args[0]):
                run(args[1], a, clock)
        else:
            getattr(a, op)(*args)
    return a


PLACEMENTS = {
    "none assumed": ([], {J: None}),
    "held for the TTL": ([("assume", J, PL), ("tick", TTL)], {J: PL, K: None}),
    "gone past the TTL": ([("assume", J, PL), ("tick", TTL + 1)], {J: None}),
    "assuming again replaces and restarts the clock": (
        [("assume", J, PL), ("tick", TTL - 1), ("assume", J, PL2), ("tick", TTL - 1)], {J: PL2}),
    "never expires while its write is in flight": (
        [("assume", J, PL), ("writing", J, [("tick", 10 * TTL), ("check", "assumed_for", J, PL)])], {J: None}),
    "kept through its write, then renewed": (
        [("assume", J, PL), ("writing", J, [("tick", 10 * TTL), ("check", "assumed_for", J, PL), ("renew", J)]),
         ("tick", TTL - 1)], {J: PL}),
    "another key's write does not keep it": (
        [("assume", J, PL), ("writing", K, [("tick", TTL + 1), ("check", "assumed_for", J, None), ("renew", J)])],
        {J: None}),
    "a service's write of the same name does not keep the job's": (
        [("assume", J, PL),
         ("writing", service_key(J), [("tick", TTL + 1), ("check", "assumed_for", J, None), ("renew", J)])],
        {J: None}),
    "renew holds it another TTL": (
        [("assume", J, PL), ("tick", TTL - 1), ("renew", J), ("tick", TTL - 1)], {J: PL}),
    "renew of nothing makes nothing": ([("renew", J)], {J: None}),
    "confirm drops it": ([("assume", J, PL), ("assume", K, PL2), ("confirm", J)], {J: None, K: PL2}),
    "forget drops it": ([("assume", J, PL), ("assume", K, PL2), ("forget", K)], {J: PL, K: None}),
}


@pytest.mark.parametrize("steps, want", PLACEMENTS.values(), ids=PLACEMENTS.keys())
def test_assumed_placement(steps, want):
    a = run(steps)
    assert {k: a.assumed_for(k) for k in want} == want


def test_the_placement_does_not_expire_inside_the_write_and_does_right_after():
    clock = Clock()
    a = Assumptions(clock, TTL)
    a.assume(J, PL)
    with a.status_write(J):
        clock.t += 10 * TTL
        assert a.assumed_for(J) == PL
    assert a.assumed_for(J) is None


def test_an_expired_placement_is_dropped_not_only_hidden():
    clock = Clock()
    a = Assumptions(clock, TTL)
    a.assume(J, PL)
    clock.t += TTL + 1
    assert a.assumed_for(J) is None
    clock.t -= TTL
    assert a.assumed_for(J) is None


GROUPS = {
    "none assumed": ([], {J: {}}),
    "held for the TTL": ([("assume_group", J, group(0)), ("assume_group", J, group(1)), ("tick", TTL)],
                         {J: {0: group(0), 1: group(1)}, K: {}}),
    "one index, the latest": ([("assume_group", J, group(0)), ("tick", TTL - 1),
                               ("assume_group", J, AssumedGroup(0, PL, 4)), ("tick", TTL - 1)],
                              {J: {0: AssumedGroup(0, PL, 4)}}),
    "gone past the TTL, each on its own clock": (
        [("assume_group", J, group(0)), ("tick", 10), ("assume_group", J, group(1)), ("tick", TTL - 9)],
        {J: {1: group(1)}}),
    "kept while the service's write is in flight, dropped after": (
        [("assume_group", J, group(0)),
         ("writing", service_key(J), [("tick", 10 * TTL), ("check", "groups_of", J, {0: group(0)})])],
        {J: {}}),
    "a job's write of the same name does not keep them": (
        [("assume_group", J, group(0)), ("writing", J, [("tick", TTL + 1), ("check", "groups_of", J, {})])],
        {J: {}}),
    "forget_groups drops those indices": (
        [("assume_group", J, group(0)), ("assume_group", J, group(1)), ("forget_groups", J, [0, 5])],
        {J: {1: group(1)}}),
    "forget_service drops one service's groups": (
        [("assume_group", J, group(0)), ("assume_group", K, group(0)), ("forget_service", J)],
        {J: {}, K: {0: group(0)}}),
    "groups and placements are apart": (
        [("assume", J, PL), ("assume_group", J, group(0)), ("forget", J)], {J: {0: group(0)}}),
}


@pytest.mark.parametrize("steps, want", GROUPS.values(), ids=GROUPS.keys())
def test_assumed_groups(steps, want):
    a = run(steps)
    assert {k: a.groups_of(k) for k in want} == want
    assert a.live_groups() == {(k, i): g for k, gs in want.items() for i, g in gs.items()}


def test_groups_are_kept_inside_the_services_write_and_dropped_for_good_after():
    clock = Clock()
    a = Assumptions(clock, TTL)
    a.assume_group(J, group(0))
    a.assume_group(K, group(1))
    with a.status_write(service_key(J)):
        clock.t += TTL + 1
        assert a.live_groups() == {(J, 0): group(0)}
        assert a.groups_of(J) == {0: group(0)}
    assert a.live_groups() == {}
    clock.t -= 2 * TTL
    assert a.groups_of(J) == {} and a.groups_of(K) == {}


def test_the_write_bracket_ends_when_the_write_raises():
    clock = Clock()
    a = Assumptions(clock, TTL)
    a.assume(J, PL)
    with pytest.raises(RuntimeError), a.status_write(J):
        raise RuntimeError("no answer")
    clock.t += TTL + 1
    assert a.assumed_for(J) is None


def test_defaults():
    assert Assumptions().ttl == ASSUME_TTL == 120.0


@pytest.mark.parametrize("placed, want, left", [(False, PL, PL), (True, None, None)])
def test_unless_placed_the_status_wins_and_spends_the_assumption(placed, want, left):
    """A status that shows a placement drops the assumption for good (a renewed one once outlived
    the placement it carried and was written for the next attempt with no admission round)."""
    a = Assumptions(Clock(), TTL)
    a.assume(J, PL)
    a.assume(K, PL2)
    with a.status_write(J):  # even while a write is in flight
        assert a.unless_placed(J, placed) == want
    assert a.unless_placed(J, False) == left
    assert a.assumed_for(K) == PL2  # another job's stays
