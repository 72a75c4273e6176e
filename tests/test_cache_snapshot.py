"""kubeforge.runtime.cache_snapshot.Snapshotter on its own, with a clock set by hand: what an
admission round reads, through our own writes, assumptions, nominations and stop requests."""

from __future__ import annotations

import pytest

from kubeforge.admission import AssumedGroup
from kubeforge.objects import PlacementRecord, Record
from kubeforge.runtime.cache_assumptions import Assumptions
from kubeforge.runtime.cache_handoffs import HandOffs
from kubeforge.runtime.cache_keys import service_key
from kubeforge.runtime.cache_overlay import StatusOverlay
from kubeforge.runtime.cache_reader import IndexReader
from kubeforge.runtime.cache_snapshot import Snapshotter

TTL = 120.0
J, K = ("ns", "a"), ("ns", "b")
PL = PlacementRecord("h100", ("n1", "n2"), "nvlink", "d1", "fit")
ON_RECORD = {"pool": "h100", "nodes": ["n5", "n6"]}


class Clock:
    """Monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def rec(key, rv="10", **status):
    return Record(key[0], key[1], "u", 1, rv, 0.0, False, None, None, status)


class World:
    """A Snapshotter over indexes the test fills (``jobs``, ``services``)."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.jobs: dict = {}
        self.services: dict = {}
        self.reader = IndexReader()
        self.reader.attach({"kf_pods": {}, "kf_jobs": self.jobs, "kf_services": self.services})
        self.overlay = StatusOverlay(self.clock, 60.0)
        self.assumptions = Assumptions(self.clock, TTL)
        self.handoffs = HandOffs(self.clock, 600.0)
        self.snap = Snapshotter(self.reader, self.overlay, self.assumptions, self.handoffs)

    def add_job(self, key, **status):
        r = rec(key, **status)
        self.jobs[key] = [r]
        return r


@pytest.mark.parametrize("status, written, assumed, want_nodes, want_assumed", [
    pytest.param({}, None, None, None, None, id="nothing placed"),
    pytest.param({}, None, PL, PL.nodes, PL, id="assumed only: it holds"),
    pytest.param({"placement": ON_RECORD}, None, PL, ("n5", "n6"), None, id="the status wins over the assumption"),
    pytest.param({}, {"placement": ON_RECORD}, PL, ("n5", "n6"), None,
                 id="our own write wins over the lagging index and the assumption"),
    pytest.param({}, {"phase": "Pending"}, PL, PL.nodes, PL, id="a write without placement: the assumption holds"),
])
def test_a_jobs_view(status, written, assumed, want_nodes, want_assumed):
    w = World()
    r = w.add_job(J, **status)
    if written is not None:
        w.overlay.remember(J, {"metadata": {"resourceVersion": "11"}, "status": written})
    if assumed is not None:
        w.assumptions.assume(J, assumed)
    view = w.snap.snapshot().jobs[J]
    assert (view.placement.nodes if view.placement else None, view.assumed) == (want_nodes, want_assumed)
    assert view.status == {**status, **(written or {})}
    assert view.record.key == r.key


@pytest.mark.parametrize("change, reused", [
    pytest.param(lambda w: None, True, id="nothing changed: the same view"),
    pytest.param(lambda w: w.add_job(J), False, id="a new record in the index"),
    pytest.param(lambda w: w.overlay.remember(J, {"metadata": {"resourceVersion": "11"}, "status": {}}), False,
                 id="our own write"),
    pytest.param(lambda w: w.assumptions.assume(J, PL), False, id="an assumption"),
    pytest.param(lambda w: w.add_job(K), True, id="another job changed"),
])
def test_a_view_is_reused_while_nothing_it_shows_changed(change, reused):
    w = World()
    w.add_job(J)
    first = w.snap.snapshot().jobs[J]
    change(w)
    assert (w.snap.snapshot().jobs[J] is first) is reused
    assert (w.snap.job_view(w.jobs[J][0]) is first) is reused


def test_the_views_of_jobs_gone_are_dropped():
    w = World()
    r = w.add_job(J)
    first = w.snap.snapshot().jobs[J]
    del w.jobs[J]
    assert w.snap.snapshot().jobs == {}
    w.jobs[J] = [r]  # the very same record back: a new view, the old one was dropped
    assert w.snap.snapshot().jobs[J] is not first


def test_forget_drops_a_view():
    w = World()
    w.add_job(J)
    first = w.snap.snapshot().jobs[J]
    w.snap.forget(J)
    assert w.snap.snapshot().jobs[J] is not first


def test_services_read_our_own_write_under_the_service_key():
    w = World()
    svc = rec(J, phase="Pending")
    w.services[J] = [svc]
    w.overlay.remember(J, {"metadata": {"resourceVersion": "12"}, "status": {"phase": "JobWrite"}})
    assert w.snap.snapshot().services[J] is svc  # the job of the same name's write is not the service's
    w.overlay.remember(service_key(J), {"metadata": {"resourceVersion": "12"}, "status": {"phase": "Ready"}})
    assert w.snap.snapshot().services[J].status == {"phase": "Ready"}


@pytest.mark.parametrize("age, writing, want", [
    pytest.param(TTL, False, True, id="young: held"),
    pytest.param(TTL + 1, False, False, id="old: left out"),
    pytest.param(TTL + 1, True, True, id="old, its write in flight: held"),
])
def test_assumed_groups(age, writing, want):
    w = World()
    g = AssumedGroup(0, PL, 8)
    w.assumptions.assume_group(J, g)
    w.clock.t += age
    if writing:
        with w.assumptions.status_write(service_key(J)):
            got = w.snap.snapshot().assumed_groups
    else:
        got = w.snap.snapshot().assumed_groups
    assert got == ({(J, 0): g} if want else {})


@pytest.mark.parametrize("age, want", [(599.0, True), (600.0, False)])
def test_nominations_and_preempting(age, want):
    w = World()
    w.handoffs.nominate(J, "h100", {"n1": 8})
    w.handoffs.request_stop(K, "PreemptedByHigherPriority", "by ns/a", 10.0)
    w.clock.t += age
    s = w.snap.snapshot()
    assert s.nominations == ({J: ("h100", {"n1": 8})} if want else {})
    assert s.preempting == frozenset({K})
