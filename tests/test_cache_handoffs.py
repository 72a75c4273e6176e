"""kubeforge.runtime.cache_handoffs.HandOffs on its own, with a clock set by hand: waits
replaced by each round, create refusals, nominations and stop requests, and forgetting."""

from __future__ import annotations

import pytest

from kubeforge.lifecycle import CreateError
from kubeforge.runtime.cache_handoffs import NOMINATION_TTL, HandOffs

TTL = 600.0
J, K = ("ns", "a"), ("ns", "b")
SHORT, OTHER = ("InsufficientGPUs", "short"), ("Preempting", "by ns/big")
E1, E2 = CreateError(0, "Pod", "a-0", 422, "bad"), CreateError(1, "Pod", "a-0", 403, "quota")


class Clock:
    """Monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("rounds, want", [
    pytest.param([{J: SHORT, K: OTHER}], [[J, K]], id="first round: every key changed"),
    pytest.param([{J: SHORT}, {J: SHORT}], [[J], []], id="the same wait again: nothing to write"),
    pytest.param([{J: SHORT}, {J: ("InsufficientGPUs", "shorter")}], [[J], [J]], id="a new message"),
    pytest.param([{J: SHORT}, {J: OTHER}], [[J], [J]], id="a new reason"),
    pytest.param([{J: SHORT, K: OTHER}, {K: OTHER}], [[J, K], []], id="a key left out waits no more, silently"),
    pytest.param([{J: SHORT}, {}, {J: SHORT}], [[J], [], [J]], id="back after a round out"),
])
@pytest.mark.parametrize("hand, read", [("hand_waits", "wait_of"), ("hand_serving_waits", "serving_wait_of")])
def test_each_round_replaces_the_waits_and_returns_what_changed(hand, read, rounds, want):
    h = HandOffs(Clock(), TTL)
    assert [getattr(h, hand)(r) for r in rounds] == want
    last = rounds[-1]
    assert {k: getattr(h, read)(k) for k in (J, K)} == {k: last.get(k) for k in (J, K)}


def test_job_and_serving_waits_are_apart():
    h = HandOffs(Clock(), TTL)
    h.hand_waits({J: SHORT})
    assert h.hand_serving_waits({J: OTHER}) == [J]
    assert (h.wait_of(J), h.serving_wait_of(J)) == (SHORT, OTHER)
    h.stop_waiting(J)
    assert (h.wait_of(J), h.serving_wait_of(J)) == (None, OTHER)
    assert h.hand_waits({J: SHORT}) == [J]  # placed, then waiting again: written again


def test_the_last_wait_write():
    h = HandOffs(Clock(), TTL)
    assert h.last_wait_write(J) == 0.0
    h.wait_written(J, 5.0)
    h.wait_written(J, 7.0)
    assert (h.last_wait_write(J), h.last_wait_write(K)) == (7.0, 0.0)


@pytest.mark.parametrize("steps, want", [
    pytest.param([], None, id="none"),
    pytest.param([("create_refused", J, E1)], E1, id="held"),
    pytest.param([("create_refused", J, E1), ("create_refused", J, E2)], E2, id="the newer replaces"),
    pytest.param([("create_refused", J, E1), ("clear_create_error", J)], None, id="cleared"),
    pytest.param([("create_refused", K, E1)], None, id="per job"),
    pytest.param([("create_refused", J, E1), ("forget", J)], None, id="forgotten"),
])
def test_create_refusals(steps, want):
    h = HandOffs(Clock(), TTL)
    for op, *args in steps:
        getattr(h, op)(*args)
    assert h.create_error(J) == want


@pytest.mark.parametrize("steps, want", [
    pytest.param([("nominate", J, "p", {"n1": 8})], {J: ("p", {"n1": 8})}, id="held"),
    pytest.param([("nominate", J, "p", {"n1": 8}), ("tick", TTL - 1)], {J: ("p", {"n1": 8})}, id="before the TTL"),
    pytest.param([("nominate", J, "p", {"n1": 8}), ("tick", TTL)], {}, id="at the TTL: no longer"),
    pytest.param([("nominate", J, "p", {"n1": 8}), ("tick", TTL - 1), ("nominate", J, "q", {"n2": 4}),
                  ("tick", TTL - 1)], {J: ("q", {"n2": 4})}, id="nominated again: replaced, clock restarted"),
    pytest.param([("nominate", J, "p", {"n1": 8}), ("nominate", K, "p", {"n2": 8}), ("keep_nominations", [K])],
                 {K: ("p", {"n2": 8})}, id="only those still preempting are kept"),
    pytest.param([("nominate", J, "p", {"n1": 8}), ("keep_nominations", iter([J, K]))], {J: ("p", {"n1": 8})},
                 id="keeping one never nominated makes nothing"),
    pytest.param([("nominate", J, "p", {"n1": 8}), ("forget", J)], {}, id="forgotten"),
])
def test_nominations(steps, want):
    clock = Clock()
    h = HandOffs(clock, TTL)
    for op, *args in steps:
        if op == "tick":
            clock.t += args[0]
        else:
            getattr(h, op)(*args)
    assert h.nominations() == want


def test_a_nomination_copies_the_gpus_it_was_given():
    h = HandOffs(Clock(), TTL)
    given = {"n1": 8}
    h.nominate(J, "p", given)
    given["n1"] = 0
    assert h.nominations() == {J: ("p", {"n1": 8})}


@pytest.mark.parametrize("steps, want, preempting", [
    pytest.param([], None, frozenset(), id="none"),
    pytest.param([("request_stop", J, "PreemptedByHigherPriority", "by ns/big", 3600.0)],
                 ("PreemptedByHigherPriority", "by ns/big"), frozenset({J}), id="held until on record"),
    pytest.param([("request_stop", J, "A", "a", 1.0), ("request_stop", J, "B", "b", 2.0)], ("B", "b"),
                 frozenset({J}), id="the newer replaces"),
    pytest.param([("request_stop", J, "A", "a", 1.0), ("request_stop", K, "A", "a", 1.0), ("stop_done", J)], None,
                 frozenset({K}), id="done"),
    pytest.param([("request_stop", J, "A", "a", 1.0), ("forget", J)], None, frozenset(), id="forgotten"),
])
def test_stop_requests(steps, want, preempting):
    h = HandOffs(Clock(), TTL)
    for op, *args in steps:
        getattr(h, op)(*args)
    assert (h.stop_request(J), h.preempting()) == (want, preempting)


def test_forget_drops_one_jobs_hand_offs_and_forget_service_its_serving_wait():
    h = HandOffs(Clock(), TTL)
    for k in (J, K):
        h.hand_waits({J: SHORT, K: SHORT})
        h.hand_serving_waits({J: OTHER, K: OTHER})
        h.wait_written(k, 3.0)
        h.create_refused(k, E1)
        h.nominate(k, "p", {"n": 1})
        h.request_stop(k, "A", "a", 1.0)
    h.forget(J)

    def held(k):
        return (h.wait_of(k), h.last_wait_write(k), h.create_error(k), k in h.nominations(), h.stop_request(k),
                h.serving_wait_of(k))

    assert held(J) == (None, 0.0, None, False, None, OTHER)  # a service of the same name keeps its own
    assert held(K) == (SHORT, 3.0, E1, True, ("A", "a"), OTHER)
    h.forget_service(J)
    assert held(J)[-1] is None and held(K)[-1] == OTHER


def test_defaults():
    assert HandOffs().nomination_ttl == NOMINATION_TTL == 600.0
