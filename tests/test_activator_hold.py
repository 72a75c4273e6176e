"""The activator's pure core: RequestBuffer decisions, table-driven, and its invariants under
random interleavings (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from examples import examples
from hypothesis import strategies as st

from kubeforge.activator import (
    AnswerKind,
    Backend,
    Forward,
    Hold,
    HoldPolicy,
    Reject,
    RequestBuffer,
    SliceView,
)
from kubeforge.activator import _reasons as R

NS, SVC = "ml", "llama"
KEY = (NS, SVC)


def activator_slice(limit: int = 3, hold: float = 10, ips: tuple[str, ...] = ("10.0.0.100",), svc: str = SVC,
                    name: str | None = None) -> SliceView:
    return SliceView(NS, name or f"kubeforge-{svc}", svc, "activator", ips, 8012, HoldPolicy(hold, limit))


def replicas_slice(*ips: str, svc: str = SVC, port: int = 8000, name: str | None = None) -> SliceView:
    return SliceView(NS, name or f"kubeforge-{svc}", svc, "replicas", tuple(ips), port)


def buffer_at_zero(limit: int = 3, hold: float = 10) -> RequestBuffer:
    b = RequestBuffer(retry_after=7)
    assert b.apply(activator_slice(limit, hold), now=0) == []
    return b


def test_unknown_service_is_404():
    b = RequestBuffer(retry_after=7)
    assert b.arrive(KEY, 1, now=0) == Reject(404, R.UNKNOWN_SERVICE)
    assert not b.known(KEY)


def test_held_at_zero_until_the_deadline_then_timed_out():
    b = buffer_at_zero(hold=10)
    assert b.arrive(KEY, 1, now=0) == Hold(deadline=10)
    assert b.arrive(KEY, 2, now=4) == Hold(deadline=14)
    assert b.expire(now=9.9) == []
    [a] = b.expire(now=10)
    assert (a.rid, a.kind, a.held_seconds, a.backend) == (1, AnswerKind.TIMED_OUT, 10, None)
    assert b.held(KEY) == 1
    [a] = b.expire(now=14.2)
    assert (a.rid, a.kind) == (2, AnswerKind.TIMED_OUT) and a.held_seconds == pytest.approx(10.2)
    assert b.held(KEY) == 0 and b.held_total() == 0


def test_queue_bound_answers_429_with_retry_after():
    b = buffer_at_zero(limit=2)
    assert isinstance(b.arrive(KEY, 1, now=0), Hold)
    assert isinstance(b.arrive(KEY, 2, now=0), Hold)
    assert b.arrive(KEY, 3, now=0) == Reject(429, R.QUEUE_FULL, 7)
    assert b.held(KEY) == 2
    assert b.cancel(1)  # room again
    assert isinstance(b.arrive(KEY, 4, now=1), Hold)


def test_release_in_arrival_order_to_the_least_loaded_backend():
    b = buffer_at_zero(limit=5)
    for rid in (1, 2, 3, 4, 5):
        b.arrive(KEY, rid, now=rid)
    answers = b.apply(replicas_slice("10.0.1.1", "10.0.1.2"), now=20)
    assert [a.rid for a in answers] == [1, 2, 3, 4, 5]
    assert all(a.kind is AnswerKind.RELEASED for a in answers)
    assert [a.held_seconds for a in answers] == [19, 18, 17, 16, 15]
    ips = [a.backend.ip for a in answers]
    assert ips == ["10.0.1.1", "10.0.1.2", "10.0.1.1", "10.0.1.2", "10.0.1.1"]
    assert b.outstanding(KEY) == {Backend("10.0.1.1", 8000): 3, Backend("10.0.1.2", 8000): 2}
    assert b.held(KEY) == 0


def test_forward_at_once_while_replicas_least_outstanding_first():
    b = RequestBuffer(retry_after=7)
    b.apply(replicas_slice("10.0.1.1", "10.0.1.2"), now=0)
    one, two = Backend("10.0.1.1", 8000), Backend("10.0.1.2", 8000)
    assert b.arrive(KEY, 1, now=0) == Forward(one)
    assert b.arrive(KEY, 2, now=0) == Forward(two)
    b.done(KEY, one)
    assert b.arrive(KEY, 3, now=0) == Forward(one)  # two still has one in flight
    b.done(KEY, one)
    b.done(KEY, two)
    assert b.outstanding(KEY) == {}
    # round robin on ties: the pick after `one` is `two`
    assert b.arrive(KEY, 4, now=0) == Forward(two)


def test_pick_skips_backends_already_tried():
    b = RequestBuffer(retry_after=7)
    b.apply(replicas_slice("10.0.1.1", "10.0.1.2"), now=0)
    first = b.arrive(KEY, 1, now=0).backend
    other = b.pick(KEY, [first])
    assert other is not None and other != first
    assert b.pick(KEY, [first, other]) is None


def test_replicas_slice_without_ready_addresses_holds():
    b = RequestBuffer(retry_after=7)
    b.apply(replicas_slice(), now=0)
    assert b.arrive(KEY, 1, now=0) == Hold(deadline=b.policy(KEY).hold_seconds)


def test_flip_back_to_activator_holds_new_requests():
    b = RequestBuffer(retry_after=7)
    b.apply(replicas_slice("10.0.1.1"), now=0)
    assert isinstance(b.arrive(KEY, 1, now=0), Forward)
    b.apply(activator_slice(), now=1)
    assert isinstance(b.arrive(KEY, 2, now=1), Hold)


def test_never_forwards_to_an_activator_address():
    b = RequestBuffer(retry_after=7, own_addresses=["10.0.0.7"])
    b.apply(activator_slice(ips=("10.0.0.100",), svc="other"), now=0)
    b.apply(activator_slice(), now=0)
    b.arrive(KEY, 1, now=0)
    # a replicas slice listing only activators (ours and a peer's) is not a backend
    assert b.apply(replicas_slice("10.0.0.7", "10.0.0.100"), now=1) == []
    assert b.backends(KEY) == ()
    assert isinstance(b.arrive(KEY, 2, now=1), Hold)
    assert b.activator_addresses() == {"10.0.0.7", "10.0.0.100"}
    # once the other service's activator slice goes, its address is a legitimate backend
    [a, c] = b.remove(NS, "kubeforge-other", "other", now=2)
    assert {a.rid, c.rid} == {1, 2} and a.backend == Backend("10.0.0.100", 8000)


def test_lowering_the_queue_limit_evicts_the_newest():
    b = buffer_at_zero(limit=4)
    for rid in (1, 2, 3, 4):
        b.arrive(KEY, rid, now=0)
    answers = b.apply(activator_slice(limit=2), now=1)
    assert [(a.rid, a.kind) for a in answers] == [(3, AnswerKind.EVICTED), (4, AnswerKind.EVICTED)]
    assert b.held(KEY) == 2


def test_deleting_the_last_slice_answers_every_held_request():
    b = buffer_at_zero()
    b.arrive(KEY, 1, now=0)
    answers = b.remove(NS, f"kubeforge-{SVC}", SVC, now=3)
    assert [(a.rid, a.kind, a.held_seconds) for a in answers] == [(1, AnswerKind.REMOVED, 3)]
    assert not b.known(KEY) and b.held_total() == 0
    assert b.arrive(KEY, 2, now=3) == Reject(404, R.UNKNOWN_SERVICE)


def test_two_slices_of_one_service_merge():
    b = buffer_at_zero()
    b.arrive(KEY, 1, now=0)
    b.apply(replicas_slice(name="extra"), now=1)  # a second slice with no address changes nothing
    assert b.held(KEY) == 1
    [a] = b.apply(replicas_slice("10.0.1.1", name="extra"), now=2)
    assert a.kind is AnswerKind.RELEASED
    assert b.remove(NS, "extra", SVC, now=3) == [] and b.known(KEY)  # the activator slice remains
    assert isinstance(b.arrive(KEY, 2, now=3), Hold)


def test_relist_forgets_slices_that_vanished_and_applies_the_rest():
    b = buffer_at_zero()
    b.apply(activator_slice(svc="gone"), now=0)
    b.arrive(("ml", "gone"), 1, now=0)
    b.arrive(KEY, 2, now=0)
    answers = b.replace_all([replicas_slice("10.0.1.1")], now=5)
    assert sorted((a.rid, a.kind) for a in answers) == [(1, AnswerKind.REMOVED), (2, AnswerKind.RELEASED)]
    assert b.keys() == [KEY]


def test_policy_change_keeps_earlier_deadlines_and_expiry_still_finds_them():
    b = buffer_at_zero(hold=100)
    b.arrive(KEY, 1, now=0)  # deadline 100
    b.apply(activator_slice(hold=5), now=1)
    b.arrive(KEY, 2, now=1)  # deadline 6: out of arrival order
    [a] = b.expire(now=6)
    assert a.rid == 2
    [a] = b.expire(now=100)
    assert a.rid == 1


def test_cancel_is_idempotent_and_only_for_held_requests():
    b = buffer_at_zero()
    b.arrive(KEY, 1, now=0)
    assert b.cancel(1) and not b.cancel(1) and not b.cancel(99)
    assert b.expire(now=1000) == []


def test_same_rid_twice_is_a_bug():
    b = buffer_at_zero()
    b.arrive(KEY, 1, now=0)
    with pytest.raises(ValueError):
        b.arrive(KEY, 1, now=0)


def test_flush_answers_everything_held():
    b = buffer_at_zero()
    b.arrive(KEY, 1, now=0)
    assert [(a.rid, a.kind) for a in b.flush(now=1)] == [(1, AnswerKind.REMOVED)]
    assert b.held_total() == 0 and b.known(KEY)


# --- invariants under random interleavings ------------------------------------------------

SERVICES = ("a", "b")
TICK = 0.5

ops = st.lists(st.one_of(
    st.tuples(st.just("arrive"), st.sampled_from(SERVICES)),
    st.tuples(st.just("tick"), st.floats(min_value=0.0, max_value=TICK)),
    st.tuples(st.just("ready"), st.sampled_from(SERVICES), st.integers(0, 2)),
    st.tuples(st.just("zero"), st.sampled_from(SERVICES), st.integers(1, 4), st.sampled_from([1.0, 2.0, 3.5])),
    st.tuples(st.just("cancel"), st.integers(0, 40)),
    st.tuples(st.just("delete"), st.sampled_from(SERVICES)),
    st.tuples(st.just("done"), st.integers(0, 40)),
), max_size=120)


@settings(max_examples=examples(400), deadline=None)
@given(ops)
def test_invariants(script):
    """Every request gets exactly one answer; no service holds more than its bound; nothing is
    held past hold + one tick; nothing is held while the service has a backend; releases
    follow arrival order; outstanding counts never go negative."""
    b = RequestBuffer(retry_after=1)
    now = 0.0
    rid = 0
    answered: dict[int, str] = {}  # rid -> how (exactly once)
    arrived: dict[int, tuple[tuple[str, str], float]] = {}
    held: set[int] = set()
    forwards: list[tuple[tuple[str, str], Backend]] = []
    deadline_of: dict[int, float] = {}

    def answer(r: int, how: str) -> None:
        assert r not in answered, f"request {r} answered twice ({answered[r]}, then {how})"
        answered[r] = how
        held.discard(r)

    def take(answers, last_pass: bool = False) -> None:
        released = [a.rid for a in answers if a.kind is AnswerKind.RELEASED]
        assert released == sorted(released), "released out of arrival order"
        for a in answers:
            assert a.rid in held, f"answer for a request not held: {a}"
            assert a.held_seconds == pytest.approx(now - arrived[a.rid][1])
            answer(a.rid, a.kind.value)
            if a.kind is AnswerKind.TIMED_OUT and not last_pass:
                hold = deadline_of[a.rid] - arrived[a.rid][1]
                assert hold <= a.held_seconds <= hold + TICK + 1e-9
            if a.backend is not None:
                forwards.append((a.key, a.backend))

    for op in script:
        kind = op[0]
        if kind == "arrive":
            key = (NS, op[1])
            rid += 1
            arrived[rid] = (key, now)
            out = b.arrive(key, rid, now)
            if isinstance(out, Hold):
                held.add(rid)
                assert out.deadline == now + b.policy(key).hold_seconds
                deadline_of[rid] = out.deadline
            else:
                answer(rid, type(out).__name__)
                if isinstance(out, Forward):
                    forwards.append((key, out.backend))
                else:
                    assert out.status in (404, 429)
                    assert (out.status == 404) == (not b.known(key))
        elif kind == "tick":
            now += op[1]
            take(b.expire(now))
        elif kind == "ready":
            ips = tuple(f"10.1.0.{i}" for i in range(op[2]))
            take(b.apply(replicas_slice(*ips, svc=op[1]), now))
        elif kind == "zero":
            take(b.apply(activator_slice(limit=op[2], hold=op[3], svc=op[1]), now))
        elif kind == "cancel":
            if op[1] in held:
                assert b.cancel(op[1])
                answer(op[1], "cancelled")
            else:
                assert not b.cancel(op[1])
        elif kind == "delete":
            take(b.remove(NS, f"kubeforge-{op[1]}", op[1], now))
        elif kind == "done" and forwards:
            key, backend = forwards.pop(op[1] % len(forwards))
            b.done(key, backend)

        # invariants after every step
        assert b.held_total() == len(held)
        for svc in SERVICES:
            key = (NS, svc)
            assert b.held(key) <= b.policy(key).queue_limit
            if b.backends(key):
                assert b.held(key) == 0
            assert all(n > 0 for n in b.outstanding(key).values())
        for r in held:
            # time moves only in ticks, each followed by an expiry pass
            assert now < deadline_of[r], f"request {r} held past its deadline"
    # whatever is still held is answered by the end of its hold plus one tick
    now = max([now, *deadline_of.values()])
    take(b.expire(now), last_pass=True)
    assert not held
    assert set(answered) == set(range(1, rid + 1))
