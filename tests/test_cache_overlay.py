"""kubeforge.runtime.cache_overlay.StatusOverlay on its own, with a clock set by hand: our own
last status write wins until the index reaches it, compared by resourceVersion as integers."""

from __future__ import annotations

import pytest

from kubeforge.objects import Record
from kubeforge.runtime.cache_overlay import StatusOverlay, resource_version

TTL = 60.0
KEY = ("ns", "a")


class Clock:
    """Monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def written(rv, **status):
    """An object as the API server answers a status write."""
    return {"metadata": {"resourceVersion": rv}, "status": status}


def seen(rv, **status):
    """The object as the index holds it."""
    return Record("ns", "a", "u1", 1, rv, 0.0, False, None, None, status)


@pytest.mark.parametrize("value, want", [("12", 12), ("100", 100), ("", None), (None, None), ("abc", None)])
def test_resource_version(value, want):
    assert resource_version(value) == want


INDEX = "index"
CASES = {
    "nothing written": ([], seen("5", phase="Pending"), INDEX),
    "the index lags: our write": ([written("12", phase="Running")], seen("10", phase="Pending"),
                                  ({"phase": "Running"}, "12")),
    "the index reached our write": ([written("12", phase="Running")], seen("12", phase="Running"), INDEX),
    "the index passed our write": ([written("12", phase="Running")], seen("13", phase="Failed"), INDEX),
    "compared as integers, not strings": ([written("100", phase="Running")], seen("99"), ({"phase": "Running"}, "100")),
    "the newer of two answers out of order": (
        [written("100", phase="Running"), written("90", phase="Pending")], seen("80"), ({"phase": "Running"}, "100")),
    "a newer answer replaces": (
        [written("100", phase="Pending"), written("110", phase="Running")], seen("80"), ({"phase": "Running"}, "110")),
    "the object went away during the write": ([written("12", phase="Running"), None], seen("10"), INDEX),
    "the whole status the API server returned": (
        [written("20", placement={"nodes": ["n2"]}, lastCheckpoint={"step": 5})], seen("19"),
        ({"placement": {"nodes": ["n2"]}, "lastCheckpoint": {"step": 5}}, "20")),
    "no status in the answer": ([{"metadata": {"resourceVersion": "7"}}], seen("6", phase="Pending"), ({}, "7")),
    "incomparable: trusted for the TTL": ([written("", phase="Running"), ("tick", TTL)], seen("10"),
                                          ({"phase": "Running"}, "10")),
    "incomparable: dropped past the TTL": ([written("12", phase="Running"), ("tick", TTL + 1)], seen("xyz"), INDEX),
    "comparable: never timed out": ([written("12", phase="Running"), ("tick", 10 * TTL)], seen("11"),
                                    ({"phase": "Running"}, "12")),
}


@pytest.mark.parametrize("steps, index, want", CASES.values(), ids=CASES.keys())
def test_effective(steps, index, want):
    clock = Clock()
    o = StatusOverlay(clock, TTL)
    for step in steps:
        if isinstance(step, tuple):
            clock.t += step[1]
        else:
            o.remember(KEY, step)
    eff = o.effective(KEY, index)
    if want == INDEX:
        assert eff is index
    else:
        assert (eff.status, eff.resource_version) == want
        assert (eff.namespace, eff.name, eff.uid, eff.generation) == ("ns", "a", "u1", 1)


@pytest.mark.parametrize("index", [seen("12"), seen("13"), seen("x")])
def test_once_the_index_is_the_truth_the_write_is_dropped(index):
    clock = Clock()
    o = StatusOverlay(clock, TTL)
    o.remember(KEY, written("12", phase="Running"))
    clock.t += TTL + 1
    assert o.effective(KEY, index) is index
    clock.t -= 2 * TTL
    older = seen("10")
    assert o.effective(KEY, older) is older


def test_per_key_and_forget():
    o = StatusOverlay(Clock(), TTL)
    o.remember(KEY, written("12", phase="Running"))
    o.remember(("ns", "b"), written("12", phase="Running"))
    other = Record("ns", "c", "u", 1, "5", 0.0, False, None, None, {})
    assert o.effective(("ns", "c"), other) is other
    o.forget(KEY)
    assert o.effective(KEY, seen("10")).status == {}
    assert o.effective(("ns", "b"), seen("10")).status == {"phase": "Running"}


@pytest.mark.parametrize("rv, echo, want", [
    ("12", "12", True), ("12", "13", False), ("12", "", False), ("", "", False), (None, "12", False),
])
def test_own_write_is_the_echo_of_our_last_write(rv, echo, want):
    o = StatusOverlay(Clock(), TTL)
    o.remember(KEY, written(rv, phase="Running"))
    assert o.own_write(KEY, echo) is want
    assert o.own_write(("ns", "b"), echo) is False


def test_the_written_status_is_a_copy():
    o = StatusOverlay(Clock(), TTL)
    answer = written("12", phase="Running")
    o.remember(KEY, answer)
    answer["status"]["phase"] = "Failed"
    assert o.effective(KEY, seen("10")).status == {"phase": "Running"}


@pytest.mark.parametrize("again", [1, 3])
def test_a_record_it_handed_out_is_not_the_index_catching_up(again):
    """The effective record carries our written resourceVersion: given back (a reconcile that
    asks again about the record it already acts on) it must not read as the index having
    reached our write. It did once (runtime/training._apply), and the next admission round saw
    a placed gang with no placement while the index still held the version before the write."""
    o = StatusOverlay(Clock(), TTL)
    o.remember(KEY, written("12", placement={"nodes": ["n1"]}))
    eff = o.effective(KEY, seen("10"))
    for _ in range(again):
        assert o.effective(KEY, eff) is eff
    assert o.effective(KEY, seen("10")).status == {"placement": {"nodes": ["n1"]}}  # the entry stayed
    assert o.effective(KEY, seen("12", placement={"nodes": ["n1"]})).resource_version == "12"
    assert o.effective(KEY, seen("10")).status == {}  # the index's record reached it: dropped then
