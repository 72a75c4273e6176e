"""The operator's memory (kubeforge.runtime.cache.Cache), without a cluster (``indexes=None``):
the parts as the Cache composes them (one clock, this module's ``time``), the status overlay,
assumed placements and expectations with their time limits, what spans parts (assume ends the
wait, forget(key), the books a job and a service of one name keep apart).

Each part has its own tests: tests/test_cache_{assumptions,expectations,events,handoffs,
overlay,reader,snapshot}.py. Ported from test_state.py (handlers.state.State); the work-queue
test moved to test_queue.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kubeforge.admission import AssumedGroup
from kubeforge.lifecycle import CreateError
from kubeforge.objects import PlacementRecord, Record
from kubeforge.runtime import cache as cache_mod
from kubeforge.runtime.cache import (
    ASSUME_TTL, EARLY_VIEW_SECONDS, EXPECTATION_TTL, NOMINATION_TTL, SERVICE_RECHECK, Cache, service_key,
)

KEY = ("ns", "job")
OTHER = ("ns", "other")


@pytest.fixture
def clock(monkeypatch):
    """The cache's monotonic clock, set by hand (``clock.t``)."""
    c = SimpleNamespace(t=1000.0)
    monkeypatch.setattr(cache_mod, "time", SimpleNamespace(monotonic=lambda: c.t))
    return c


def obj(rv, **status):
    """An object as the API server answers a status write."""
    return {"metadata": {"resourceVersion": str(rv)}, "status": status}


def rec(rv, **status):
    """The object as the index holds it."""
    return Record(namespace=KEY[0], name=KEY[1], uid="u1", generation=1, resource_version=str(rv), created=0.0,
                  deleting=False, spec=None, spec_error=None, status=status)


# --------------------------------------------------------------------------- the status overlay


def test_overlay_wins_until_the_index_reaches_our_write():
    c = Cache()
    c.remember(KEY, obj(12, placement={"nodes": ["n1"]}, phase="Pending"))
    # The index still holds an older version without the placement: we must not forget it,
    # however long the index lags (the job would be admitted twice).
    assert c.effective(KEY, rec(10, phase="Pending")).status["placement"] == {"nodes": ["n1"]}
    assert c.effective(KEY, rec(11)).status["placement"] == {"nodes": ["n1"]}
    # The index caught up (or moved past): the index is the truth again.
    assert c.effective(KEY, rec(12, placement={"nodes": ["n1"]}, phase="Running")).status["phase"] == "Running"
    assert c.effective(KEY, rec(10, phase="Pending")).status == {"phase": "Pending"}  # entry dropped



def test_index_past_our_write_drops_the_overlay():
    c = Cache()
    c.remember(KEY, obj(12, phase="Pending"))
    seen = rec(13, phase="Running")
    assert c.effective(KEY, seen) is seen
    older = rec(11, phase="Pending")
    assert c.effective(KEY, older) is older  # the overlay is gone: the index is the truth


def test_resource_versions_compare_as_integers():
    c = Cache()
    c.remember(KEY, obj(100, phase="Pending"))
    assert c.effective(KEY, rec(99, phase="Old")).status == {"phase": "Pending"}  # "99" > "100" as strings
    assert c.effective(KEY, rec(1000, phase="New")).status == {"phase": "New"}


def test_overlay_carries_our_resource_version_and_keeps_the_rest_of_the_record():
    c = Cache()
    c.remember(KEY, obj(12, phase="Running"))
    eff = c.effective(KEY, rec(10, phase="Pending"))
    assert eff.resource_version == "12"  # the next write is made on the version we wrote
    assert (eff.namespace, eff.name, eff.uid, eff.generation) == (KEY[0], KEY[1], "u1", 1)


def test_overlay_keeps_the_full_status_returned_by_the_api_server():
    c = Cache()
    # Another write (admission) landed between our GET and our patch: the API server's answer
    # holds both, so the overlay never hides the placement.
    c.remember(KEY, obj(20, placement={"nodes": ["n2"]}, lastCheckpoint={"step": 5}))
    assert c.effective(KEY, rec(19)).status["placement"] == {"nodes": ["n2"]}
    assert c.effective(KEY, rec(19)).status["lastCheckpoint"] == {"step": 5}


def test_object_deleted_during_the_write_clears_the_overlay():
    c = Cache()
    c.remember(KEY, obj(5, phase="Running"))
    c.remember(KEY, None)
    seen = rec(3, phase="Pending")
    assert c.effective(KEY, seen) is seen


def test_an_older_write_finishing_late_never_replaces_a_newer_one():
    c = Cache()
    c.remember(KEY, obj(100, placement={"nodes": ["n1"]}))
    c.remember(KEY, obj(90, phase="Pending"))  # issued earlier, answered later
    assert c.effective(KEY, rec(80)).status["placement"] == {"nodes": ["n1"]}
    c.remember(KEY, obj(110, phase="Running"))  # a newer answer does replace it
    assert c.effective(KEY, rec(80)).status == {"phase": "Running"}


def test_overlays_are_per_object():
    c = Cache()
    c.remember(KEY, obj(12, phase="Running"))
    other = Record(OTHER[0], OTHER[1], "u2", 1, "5", 0.0, False, None, None, {"phase": "Pending"})
    assert c.effective(OTHER, other) is other


@pytest.mark.parametrize("ours, seen", [("", "10"), ("12", ""), ("abc", "10"), ("12", "xyz")])
def test_incomparable_versions_trust_our_write_for_a_while(clock, ours, seen):
    c = Cache()
    c.remember(KEY, {"metadata": {"resourceVersion": ours}, "status": {"phase": "Running"}})
    index = Record(KEY[0], KEY[1], "u1", 1, seen, 0.0, False, None, None, {"phase": "Pending"})
    clock.t += EXPECTATION_TTL
    assert c.effective(KEY, index).status == {"phase": "Running"}
    clock.t += 1
    assert c.effective(KEY, index) is index
    clock.t -= 2 * EXPECTATION_TTL
    assert c.effective(KEY, index) is index  # dropped, not only expired


def test_comparable_versions_never_time_out(clock):
    c = Cache()
    c.remember(KEY, obj(12, placement={"nodes": ["n1"]}))
    clock.t += 10 * EXPECTATION_TTL
    assert c.effective(KEY, rec(11)).status == {"placement": {"nodes": ["n1"]}}


# --------------------------------------------------------------------------- assumed placements


PL = PlacementRecord("h100", ("n1", "n2"), "nvlink", "d1", "fit")


def test_assumed_placement_lives_for_assume_ttl(clock):
    c = Cache()
    assert c.handoffs.hand_waits({KEY: ("InsufficientGPUs", "short")}) == [KEY]
    c.assume(KEY, PL)
    assert c.handoffs.wait_of(KEY) is None  # placed: no longer waiting
    assert c.assumptions.assumed_for(OTHER) is None
    clock.t += ASSUME_TTL
    assert c.assumptions.assumed_for(KEY) == PL
    clock.t += 1
    assert c.assumptions.assumed_for(KEY) is None
    clock.t -= ASSUME_TTL
    assert c.assumptions.assumed_for(KEY) is None  # dropped, not only expired


def test_assuming_again_restarts_the_clock(clock):
    c = Cache()
    c.assume(KEY, PL)
    clock.t += ASSUME_TTL - 1
    c.assume(KEY, PlacementRecord("h100", ("n3", "n4")))
    clock.t += ASSUME_TTL - 1
    assert c.assumptions.assumed_for(KEY).nodes == ("n3", "n4")


def test_an_assumed_placement_never_expires_while_its_status_write_is_in_flight(clock):
    # The reconcile read the assumption just before ASSUME_TTL and is writing it: dropped now,
    # its GPUs would look free to the next admission round (two gangs on the same GPUs).
    c = Cache()
    c.assume(KEY, PL)
    clock.t += ASSUME_TTL - 0.1
    assert c.assumptions.assumed_for(KEY) == PL
    with c.assumptions.status_write(KEY):
        clock.t += 30
        assert c.assumptions.assumed_for(KEY) == PL
    assert c.assumptions.assumed_for(KEY) is None


def test_a_write_with_no_answer_renews_the_assumption_and_confirm_or_forget_drop_it(clock):
    c = Cache()
    c.assume(KEY, PL)
    clock.t += ASSUME_TTL - 1
    c.assumptions.renew(KEY)  # the write may be on record: hold the GPUs another ASSUME_TTL
    clock.t += ASSUME_TTL - 1
    assert c.assumptions.assumed_for(KEY) == PL
    c.assumptions.renew(OTHER)  # nothing assumed: nothing made up
    assert c.assumptions.assumed_for(OTHER) is None
    c.assumptions.confirm(KEY)
    assert c.assumptions.assumed_for(KEY) is None
    c.assume(KEY, PL)
    c.assumptions.forget(KEY)
    assert c.assumptions.assumed_for(KEY) is None


def test_waits_are_handed_over_when_they_change_and_replaced_by_each_round():
    c = Cache()
    assert c.handoffs.hand_waits({KEY: ("InsufficientGPUs", "a"), OTHER: ("Preempting", "b")}) == [KEY, OTHER]
    assert c.handoffs.hand_waits({KEY: ("InsufficientGPUs", "a"), OTHER: ("Preempting", "c")}) == [OTHER]
    assert c.handoffs.hand_waits({OTHER: ("Preempting", "c")}) == []
    assert c.handoffs.wait_of(KEY) is None and c.handoffs.wait_of(OTHER) == ("Preempting", "c")


def test_a_stop_request_is_held_until_it_is_on_record():
    c = Cache()
    c.handoffs.request_stop(KEY, "PreemptedByHigherPriority", "by ns/big", 3600.0)
    assert c.handoffs.stop_request(KEY) == ("PreemptedByHigherPriority", "by ns/big") and c.handoffs.stop_request(OTHER) is None
    c.handoffs.stop_done(KEY)
    assert c.handoffs.stop_request(KEY) is None


def test_job_view_uses_the_effective_status_and_the_assumed_placement_only_without_one(clock):
    c = Cache()
    c.assume(KEY, PL)
    view = c.job_view(rec(10, phase="Pending"))
    assert view.assumed == PL and view.placement == PL
    c.remember(KEY, obj(11, phase="Pending", placement={"pool": "h100", "nodes": ["n5", "n6"]}))
    view = c.job_view(rec(10, phase="Pending"))  # the index lags: our write is what counts
    assert view.assumed is None and view.placement.nodes == ("n5", "n6")


# --------------------------------------------------------------------------- expectations


def test_expectations_expire_name_by_name(clock):
    c = Cache()
    assert c.expectations.pending_creates(KEY) == set()
    c.expectations.expect_created(KEY, ["llm-worker-0-0", "llm-worker-1-0"])
    clock.t += 30
    c.expectations.expect_created(KEY, ["llm-checkpoint"])
    assert c.expectations.pending_creates(KEY) == {"llm-worker-0-0", "llm-worker-1-0", "llm-checkpoint"}
    assert c.expectations.pending_deletes(KEY) == set()  # one book per kind of change
    assert c.expectations.pending_creates(OTHER) == set()
    clock.t += EXPECTATION_TTL - 30
    assert c.expectations.pending_creates(KEY) == {"llm-worker-0-0", "llm-worker-1-0", "llm-checkpoint"}
    clock.t += 1
    assert c.expectations.pending_creates(KEY) == {"llm-checkpoint"}
    clock.t += 30
    assert c.expectations.pending_creates(KEY) == set()


def test_an_observed_name_is_no_longer_expected():
    c = Cache()
    c.expectations.expect_created(KEY, ["a", "b"])
    c.expectations.expect_deleted(KEY, ["a"])
    c.expectations.created_observed(KEY, "a")
    assert c.expectations.pending_creates(KEY) == {"b"} and c.expectations.pending_deletes(KEY) == {"a"}
    c.expectations.deleted_observed(KEY, "a")
    c.expectations.created_observed(OTHER, "a")  # never expected: harmless
    assert c.expectations.pending_deletes(KEY) == set()


def test_expecting_a_name_again_renews_it(clock):
    c = Cache()
    c.expectations.expect_deleted(KEY, ["p"])
    clock.t += EXPECTATION_TTL
    c.expectations.expect_deleted(KEY, ["p"])
    clock.t += EXPECTATION_TTL
    assert c.expectations.pending_deletes(KEY) == {"p"}


# --------------------------------------------------------------------------- forget


def test_forget_drops_everything_about_one_job_only_and_forget_service_the_service_of_that_name():
    c = Cache()
    c.handoffs.hand_waits({k: ("InsufficientGPUs", "short") for k in (KEY, OTHER)})
    for key in (KEY, OTHER):
        c.remember(key, obj(5, phase="Running"))
        c.expectations.expect_created(key, ["a"])
        c.expectations.expect_deleted(key, ["b"])
        c.handoffs.create_refused(key, CreateError(0, "Pod", "a", 422, "bad"))
        c.handoffs.wait_written(key, 1.0)
        c.handoffs.request_stop(key, "QuotaReclaimed", "m", 1.0)
        c.service_memory(key, dict)
    c.assume(KEY, PL)
    c.forget(KEY)

    def held(key):
        seen = Record(key[0], key[1], "u", 1, "1", 0.0, False, None, None, {"phase": "Pending"})
        return (c.effective(key, seen) is not seen, c.assumptions.assumed_for(key) is not None, bool(c.expectations.pending_creates(key)),
                bool(c.expectations.pending_deletes(key)), c.handoffs.create_error(key) is not None, c.handoffs.wait_of(key) is not None,
                c.handoffs.last_wait_write(key) > 0, c.handoffs.stop_request(key) is not None, c.known_service_memory(key) is not None)

    # the job's books are gone; an InferenceService of the same name keeps its own
    assert held(KEY) == (False,) * 8 + (True,)
    assert held(OTHER) == (True, False, True, True, True, True, True, True, True)
    c.forget_service(KEY)
    assert held(KEY) == (False,) * 9
    c.forget(("ns", "never-seen"))  # harmless
    c.forget_service(("ns", "never-seen"))


def test_without_indexes_the_cache_reads_nothing():
    c = Cache()
    assert c.job(KEY) is None and c.job_pods(KEY) == [] and list(c.jobs()) == [] and c.pools() == {}
    assert c.view("h100") is None


def test_a_view_before_the_first_round_is_built_once_a_while_and_a_round_replaces_it(clock, monkeypatch):
    # Each build reads the whole cluster (snapshot, ledger, view): a restart's first reconciles
    # of 2,000 running jobs at 5,000 nodes asked for two each, before any round had run.
    c = Cache()
    builds = []
    monkeypatch.setattr(c, "pool", lambda name: SimpleNamespace(name=name))
    monkeypatch.setattr(c, "snapshot", lambda: SimpleNamespace(nodes={}, device_classes=frozenset()))
    monkeypatch.setattr(cache_mod, "pool_resource", lambda pool: "nvidia.com/gpu")
    monkeypatch.setattr(cache_mod, "build_ledger", lambda snap, resource: SimpleNamespace(per_node={}))
    monkeypatch.setattr(cache_mod, "pool_view",
                        lambda pool, nodes, held, device_classes: builds.append(pool.name) or f"built {len(builds)}")
    assert [c.view("h100") for _ in range(100)] == ["built 1"] * 100
    assert c.view("a100") == "built 2"  # per pool
    clock.t += EARLY_VIEW_SECONDS
    assert c.view("h100") == "built 3"  # no older than EARLY_VIEW_SECONDS
    c.round_done({"h100": "the round's"}, {})
    assert c.view("h100") == "the round's"
    assert c.view("a100") == "built 4"  # a pool the round did not see: built afresh, not kept from before it


def test_the_workers_service_is_taken_as_present_for_a_while_then_checked_again(clock):
    # No watch of Services: once made, concurrent gangs of the namespace do not each create it
    # (409s), and one deleted by hand is created again by a gang after SERVICE_RECHECK.
    c = Cache()
    assert not c.workers_service_made("ns")
    c.workers_service_sent("ns")
    clock.t += SERVICE_RECHECK - 1
    assert c.workers_service_made("ns") and not c.workers_service_made("other")
    clock.t += 2
    assert not c.workers_service_made("ns")


def test_a_job_and_a_service_of_the_same_name_never_share_an_entry():
    """The books both kinds use are keyed apart (service_key): a service's status write is not
    the job's, its expectations and held Events are its own, and forgetting one leaves the other."""
    c = Cache()
    c.remember(KEY, obj(5, phase="Running"))
    c.remember(service_key(KEY), obj(9, replicas=1))
    c.expectations.expect_created(KEY, ["job-pod"])
    c.expectations.expect_created(service_key(KEY), ["svc-pod"])
    c.held_events.hold(service_key(KEY), [("Normal", "ScaledUp", "1 replica")], 1.0)
    job_seen = Record(KEY[0], KEY[1], "u", 1, "5", 0.0, False, None, None, {"phase": "Running"})
    assert c.effective(KEY, job_seen) is job_seen  # the service's newer write is not the job's status
    assert c.expectations.pending_creates(KEY) == {"job-pod"} and c.expectations.pending_creates(service_key(KEY)) == {"svc-pod"}
    assert c.held_events.take(KEY) == []
    c.forget_service(KEY)
    assert c.expectations.pending_creates(KEY) == {"job-pod"} and c.expectations.pending_creates(service_key(KEY)) == set()


# --------------------------------------------------------------------------- one clock


def _expired(c):
    """For each part: whether what was booked is gone now (by the Cache's clock)."""
    return {
        "assumptions": c.assumptions.assumed_for(KEY) is None,
        "groups": c.assumptions.groups_of(KEY) == {},
        "expectations": c.expectations.pending_creates(KEY) == set(),
        "nominations": c.snapshot().nominations == {},
        "overlay": c.effective(KEY, rec(0, phase="Pending")).status == {"phase": "Pending"},
    }


@pytest.mark.parametrize("part, ttl", [
    ("assumptions", ASSUME_TTL), ("groups", ASSUME_TTL), ("expectations", EXPECTATION_TTL),
    ("nominations", NOMINATION_TTL), ("overlay", EXPECTATION_TTL),
])
def test_every_part_reads_the_clock_of_the_cache_module(clock, part, ttl):
    """A test (or fakekube's clock) that sets ``kubeforge.runtime.cache.time`` moves the clock of
    every part, the ones in their own modules included."""
    c = Cache()
    c.assume(KEY, PL)
    c.assumptions.assume_group(KEY, AssumedGroup(0, PL, 8))
    c.expectations.expect_created(KEY, ["p"])
    c.handoffs.nominate(KEY, "h100", {"n1": 8})
    c.remember(KEY, {"metadata": {"resourceVersion": ""}, "status": {"phase": "Running"}})
    clock.t += ttl - 1
    assert not _expired(c)[part]
    clock.t += 2
    assert _expired(c)[part]


def test_the_constants_and_service_key_are_the_cache_modules():
    assert (ASSUME_TTL, EXPECTATION_TTL, NOMINATION_TTL, SERVICE_RECHECK) == (120.0, 60.0, 600.0, 600.0)
    assert service_key(KEY) == ("InferenceService", "ns", "job")
    assert set(cache_mod.__all__) >= {"ASSUME_TTL", "EXPECTATION_TTL", "NOMINATION_TTL", "SERVICE_RECHECK",
                                      "Cache", "service_key"}
