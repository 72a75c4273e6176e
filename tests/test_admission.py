"""Table-driven tests of kubeforge.admission: the ledger, pool views and status, and
plan_admission's queue, fallback and serving rules.

Inputs are built with the small builders of ``tests/records.py``, through the parsers the
operator uses (``record_from_k8s``, ``pod_from_k8s``, ``build_worker_pod``). Two tests run the
real runtime (admission round, job reconcile) on the in-memory cluster of ``tests/fakekube.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from kubeforge.admission import (
    AssumedGroup,
    AdmissionMemo, JobView, awaiting_admission, build_ledger, build_ledgers, candidate_pools, first_pool_index, gang_request,
    plan_admission, pool_status, pool_view, queued_since,
)
from kubeforge.builders.training import spec_hash
from kubeforge.lifecycle import TrainingContext, plan_training
from kubeforge.objects import PlacementRecord, Taint, pod_requests
from kubeforge.objects._labels import VOLUME_GATE

import builders as b
from fakekube import pinned_node, settle, small_cluster
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.training import reconcile_job
from records import (
    BLOCK, CLIQUE, GPU, NOW, NS, SPOT, foreign_pod, iso, job_body, mk_job, mk_node, mk_pool,
    mk_service, placed, snapshot, submitted, view, worker_pod,
)

MIG = "nvidia.com/mig-1g.10gb"


def nodes(n=2, gpus=8):
    return [mk_node(f"n{i}", gpus) for i in range(n)]


def admitted(plan):
    return {a.key[1]: a for a in plan.admit}


def waiting(plan):
    return {w.key[1]: w for w in plan.wait}


def adm_cond(reason, at, generation=1):
    return {"type": "Admitted", "status": "False", "reason": reason, "message": "",
            "lastTransitionTime": iso(at), "observedGeneration": generation}


# ------------------------------------------------------------------------------- queue order


@pytest.mark.parametrize("jobs, winner", [
    # (name, priority, created offset): one 8-GPU node, every job wants all of it.
    ([("old", 0, -100), ("young", 0, -10)], "old"),
    ([("old", 0, -100), ("young-high", 5, -10)], "young-high"),
    ([("low", -1, -500), ("zero", 0, -1)], "zero"),
    ([("b", 0, -50), ("a", 0, -50)], "a"),  # same priority and age: by key
])
def test_queue_order_is_priority_then_age(jobs, winner):
    recs = [mk_job(n, priority=p, created=NOW + c, gpus=8) for n, p, c in jobs]
    plan = plan_admission(snapshot([mk_pool("p")], nodes(1), jobs=recs), NOW)
    assert list(admitted(plan)) == [winner]
    assert set(waiting(plan)) == {n for n, _, _ in jobs} - {winner}
    assert all(w.reason == "WaitingForCapacity" for w in plan.wait)


def test_best_effort_fifo_a_big_gang_that_does_not_fit_does_not_block_smaller_ones():
    big = mk_job("big", replicas=3, gpus=8, priority=10, created=NOW - 1000)
    small = [mk_job(f"s{i}", replicas=1, gpus=4, created=NOW - 10 + i) for i in range(4)]
    busy = [foreign_pod("f0", "n0", 1), foreign_pod("f1", "n1", 1)]  # big would fit an empty pool
    plan = plan_admission(snapshot([mk_pool("p")], nodes(4), pods=busy, jobs=[big, *small]), NOW)
    assert set(admitted(plan)) == {"s0", "s1", "s2", "s3"}
    assert waiting(plan)["big"].reason == "WaitingForCapacity"


@pytest.mark.parametrize("pools", [["p"], ["p", "q"]])
def test_no_double_booking_within_a_round(pools):
    """Three 8-GPU gangs on two 8-GPU nodes: two admitted on different nodes, whatever pool
    (``q`` selects the same nodes: one ledger per resource, shared by overlapping pools)."""
    recs = [mk_job(f"j{i}", gpus=8, pools=[pools[i % len(pools)]], created=NOW - 10 + i) for i in range(3)]
    plan = plan_admission(snapshot([mk_pool("p"), mk_pool("q")], nodes(2), jobs=recs), NOW)
    got = admitted(plan)
    assert len(got) == 2 and len(plan.wait) == 1
    used = [n for a in got.values() for n in a.placement.nodes]
    assert sorted(used) == ["n0", "n1"]
    assert plan.ledgers[GPU].per_node == {"n0": 8, "n1": 8}


def test_many_small_gangs_fill_nodes_exactly_and_no_further():
    recs = [mk_job(f"j{i:02d}", replicas=2, gpus=1, created=NOW - 100 + i) for i in range(12)]
    plan = plan_admission(snapshot([mk_pool("p")], nodes(2, gpus=8), jobs=recs), NOW)
    assert len(plan.admit) == 8 and len(plan.wait) == 4
    per = {}
    for a in plan.admit:
        for n, g in a.placement.gpus_by_node.items():
            per[n] = per.get(n, 0) + g
    assert per == {"n0": 8, "n1": 8} == plan.ledgers[GPU].per_node


# ------------------------------------------------------------------------------- the ledger


def test_assumed_placement_holds_gpus_before_status_or_pods_show_it():
    a = mk_job("a", gpus=8, created=NOW - 100)
    b = mk_job("b", gpus=8, created=NOW - 50)
    snap = snapshot([mk_pool("p")], nodes(1), jobs=[view(a, PlacementRecord("p", ("n0",))), b])
    assert build_ledger(snap, GPU).per_workload == {("TrainingJob", NS, "a"): {"n0": 8}}
    plan = plan_admission(snap, NOW)
    assert plan.admit == [] and waiting(plan)["b"].reason == "WaitingForCapacity"
    assert not awaiting_admission(snap.jobs[(NS, "a")], NOW)  # it holds a placement: not queued again


def test_status_placement_without_pods_holds_gpus():
    a = mk_job("a", gpus=4, replicas=2, status={"phase": "Pending", "attempt": 0, "placement": placed("p", ["n0", "n0"])})
    led = build_ledger(snapshot([mk_pool("p")], nodes(1), jobs=[a]), GPU)
    assert led.per_node == {"n0": 8}
    assert led.held_by(("TrainingJob", NS, "a")) == 8


def test_pods_of_the_current_attempt_are_not_counted_twice():
    st = {"phase": "Running", "attempt": 2, "placement": placed("p", ["n0", "n1"])}
    a = mk_job("a", replicas=2, gpus=4, status=st)
    pods = [worker_pod(a, r, 2) for r in range(2)]
    led = build_ledger(snapshot([mk_pool("p")], nodes(2), pods=pods, jobs=[a]), GPU)
    assert led.per_node == {"n0": 4, "n1": 4}
    assert led.per_workload == {("TrainingJob", NS, "a"): {"n0": 4, "n1": 4}}


@pytest.mark.parametrize("phase, deleting, counted", [
    ("Running", True, True),      # terminating: the kubelet has not released its GPUs yet
    ("Running", False, True),     # left over (a crash before the delete): still holds them
    ("Pending", True, True),      # assigned, not yet bound: held where it was pinned
    ("Failed", True, False),      # terminal: released
    ("Succeeded", False, False),
])
def test_pods_of_an_older_attempt_count_until_terminal(phase, deleting, counted):
    st = {"phase": "Running", "attempt": 1, "placement": placed("p", ["n1"])}
    a = mk_job("a", gpus=8, status=st)
    old = worker_pod(a, 0, 0, nodes=["n0"], phase=phase, deleting=deleting, bound=phase != "Pending")
    new = worker_pod(a, 0, 1)
    led = build_ledger(snapshot([mk_pool("p")], nodes(2), pods=[old, new] if not old.terminal else [new], jobs=[a]), GPU)
    assert led.per_node == ({"n0": 8, "n1": 8} if counted else {"n1": 8})
    # and a new gang cannot be placed on the GPUs the old pod still holds
    b = mk_job("b", gpus=8)
    plan = plan_admission(snapshot([mk_pool("p")], nodes(2), pods=[old, new] if counted else [new], jobs=[a, b]), NOW)
    assert ("b" in admitted(plan)) == (not counted)


def test_pods_of_a_job_without_placement_count_by_themselves():
    """A suspended (or just stopped) job: its placement is gone, its pods still terminate."""
    st = {"phase": "Suspended", "attempt": 1}
    a = mk_job("a", replicas=2, gpus=4, status=st, suspend=True)
    pods = [worker_pod(a, r, 0, nodes=["n0", "n1"], deleting=True) for r in range(2)]
    led = build_ledger(snapshot([mk_pool("p")], nodes(2), pods=pods, jobs=[a]), GPU)
    assert led.per_node == {"n0": 4, "n1": 4}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_placement_of_a_finished_job_holds_nothing(phase):
    a = mk_job("a", gpus=8, status={"phase": phase, "attempt": 0, "placement": placed("p", ["n0"])})
    assert build_ledger(snapshot([mk_pool("p")], nodes(1), jobs=[a]), GPU).per_node == {}


def test_foreign_pods_and_serving_groups_hold_their_gpus():
    """A foreign pod holds its request where bound; a serving group holds gpusPerPod on each of
    its nodes from status.groups (its pods of that attempt are not counted twice)."""
    group = {"index": 0, "attempt": 1, "phase": "Ready", "pool": "p", "nodes": ["n1"], "gpusPerPod": 2}
    svc = mk_service("chat", gpus=2, status={"groups": [group]})
    pool = mk_pool("p")
    mine = b.ServingPod(svc, 0).attempt(1).on("n1").record()
    old = b.ServingPod(svc, 0).on("n0").changes(deleting=True).record()
    pods = [foreign_pod("f", "n0", 3), mine, old, foreign_pod("pending", None, 8)]
    led = build_ledger(snapshot([pool], nodes(2), pods=pods, services=[svc]), GPU)
    assert led.per_node == {"n0": 5, "n1": 2}
    assert led.per_workload == {("Pod", "other", "f"): {"n0": 3}, ("InferenceService", NS, "chat"): {"n1": 2, "n0": 2}}


def test_a_pool_counts_only_its_own_gpu_resource():
    """Two pools over the same nodes with different resources (whole GPUs and MIG slices)."""
    ns_ = [mk_node(f"n{i}", 8, extra={MIG: 7}) for i in range(2)]
    whole, mig = mk_pool("whole"), mk_pool("mig", resource=MIG)
    a = mk_job("a", gpus=8, pools=["whole"], status={"phase": "Running", "attempt": 0, "placement": placed("whole", ["n0"])})
    b = mk_job("b", gpus=7, pools=["mig"], status={"phase": "Running", "attempt": 0, "placement": placed("mig", ["n1"])})
    pods = [worker_pod(a, 0), worker_pod(b, 0, nodes=["n1"], pool="mig", resource=MIG),
            foreign_pod("slice", "n0", 3, resource=MIG)]
    snap = snapshot([whole, mig], ns_, pods=pods, jobs=[a, b])
    leds = build_ledgers(snap)
    assert set(leds) == {GPU, MIG}
    assert leds[GPU].per_node == {"n0": 8}
    assert leds[MIG].per_node == {"n1": 7, "n0": 3}
    vw = pool_view(mig, snap.nodes, leds[MIG].per_node)
    assert {n.name: n.gpus_free for n in vw.nodes} == {"n0": 4, "n1": 0}
    st = pool_status(vw, leds[MIG], NOW)
    assert st["gpus"]["allocatable"] == 14 and st["gpus"]["allocated"] == 10
    assert {(w["kind"], w["name"]): w["gpus"] for w in st["workloads"]} == {("TrainingJob", "b"): 7, ("Pod", "slice"): 3}
    # A new MIG job fits only in n0's 4 free slices; a whole-GPU job only on n1.
    c = mk_job("c", gpus=4, pools=["mig"])
    d = mk_job("d", gpus=8, pools=["whole"])
    plan = plan_admission(snapshot([whole, mig], ns_, pods=pods, jobs=[a, b, c, d]), NOW)
    assert admitted(plan)["c"].placement.nodes == ("n0",)
    assert admitted(plan)["d"].placement.nodes == ("n1",)


@pytest.mark.parametrize("containers, init, expected", [
    ([2], [], 2),
    ([2, 1], [], 3),
    ([2], [("init", 4)], 4),                          # an init container alone needs more
    ([2], [("sidecar", 1)], 3),                       # sidecars run alongside: summed
    ([2], [("init", 4), ("sidecar", 1), ("init", 3)], 4),  # max(2+1, 4, 3+1)
    ([1], [("sidecar", 2), ("init", 4)], 6),          # the init runs beside the sidecar: 2+4
    ([0], [("init", 1), ("init", 1)], 1),             # init containers run one at a time
])
def test_sidecar_and_init_gpu_requests_counted_by_the_schedulers_rule(containers, init, expected):
    def c(name, g):
        return {"name": name, "image": "x", "resources": {"limits": {GPU: str(g)}} if g else {}}
    spec = {"containers": [c(f"c{i}", g) for i, g in enumerate(containers)],
            "initContainers": [{**c(f"i{i}", g), **({"restartPolicy": "Always"} if kind == "sidecar" else {})}
                               for i, (kind, g) in enumerate(init)]}
    assert pod_requests(spec).get(GPU, 0) == expected
    pod = foreign_pod("f", "n0", 0, spec={**spec})
    assert build_ledger(snapshot([mk_pool("p")], nodes(1), pods=[pod]), GPU).per_node == {"n0": expected}


def test_requests_default_to_limits_and_requests_win():
    spec = {"containers": [{"name": "a", "image": "x", "resources": {"requests": {GPU: "2"}, "limits": {GPU: "2"}}},
                           {"name": "b", "image": "x", "resources": {"limits": {GPU: "1"}}}]}
    assert pod_requests(spec) == {GPU: 3}


# ------------------------------------------------------------------------------- pool status


def _fleet_for_status():
    labels = lambda i, spot: {CLIQUE: f"c{i // 2}", BLOCK: f"b{i // 4}", **({SPOT: "spot"} if spot else {})}  # noqa: E731
    return [
        mk_node("n0", 8, labels(0, True)),
        mk_node("n1", 8, labels(1, True), taints=[Taint("aws-node-termination-handler/spot-itn")]),
        mk_node("n2", 8, labels(2, False), unschedulable=True),
        mk_node("n3", 8, labels(3, False), ready=False),
        mk_node("n4", 4, labels(4, False)),
        mk_node("n5", 8, labels(5, True), taints=[Taint("dedicated", "ml", "NoSchedule")]),
        mk_node("n6", 8, labels(6, False)),
        mk_node("n7", 2, labels(7, False)),
    ]


@pytest.mark.parametrize("capacity_type, spot_nodes, od_nodes", [
    (None, 3, 5),            # Auto: from karpenter.sh/capacity-type
    ("Spot", 8, 0),          # the pool says so, whatever the labels
    ("OnDemand", 0, 8),
])
def test_pool_status_capacity_type_and_counts_add_up(capacity_type, spot_nodes, od_nodes):
    fleet = _fleet_for_status()
    pool = mk_pool("p", capacity_type=capacity_type)
    a = mk_job("a", replicas=2, gpus=4, status={"phase": "Running", "attempt": 0, "placement": placed("p", ["n0", "n6"])})
    pods = [worker_pod(a, 0), worker_pod(a, 1),
            foreign_pod("over", "n7", 3),       # more than n7 has: over-committed by someone else
            foreign_pod("t", "n1", 8), foreign_pod("c", "n2", 2)]
    snap = snapshot([pool], fleet, pods=pods, jobs=[a])
    led = build_ledger(snap, GPU)
    vw = pool_view(pool, snap.nodes, led.per_node)
    st = pool_status(vw, led, NOW)
    assert st["nodes"]["spot"] == spot_nodes and st["nodes"]["onDemand"] == od_nodes
    assert st["nodes"]["total"] == 8
    # usable: n0, n4, n6, n7 (n1 interrupted, n2 cordoned, n3 NotReady, n5 tainted)
    assert st["gpus"]["allocatable"] == 8 + 4 + 8 + 2
    assert st["gpus"]["unavailable"] == 8 + 8 + 8 + 8
    assert st["gpus"]["allocated"] == 4 + 4 + 2  # n7 capped at its allocatable
    for counts in [st["gpus"], st["spotGPUs"], st["onDemandGPUs"]] + [d["gpus"] for d in st["domains"]]:
        assert counts["allocated"] + counts["free"] == counts["allocatable"], counts
        assert 0 <= counts["allocated"] <= counts["allocatable"]
    for key in ("capacity", "allocatable", "allocated", "free", "unavailable"):
        assert st["spotGPUs"][key] + st["onDemandGPUs"][key] == st["gpus"][key], key
    for level in ("nvlink", "block"):
        doms = [d for d in st["domains"] if d["level"] == level]
        assert sum(d["gpus"]["allocatable"] for d in doms) == st["gpus"]["allocatable"]
        assert sum(d["nodes"] for d in doms) == 8
    assert {(w["kind"], w["name"]): w["gpus"] for w in st["workloads"]} == \
        {("TrainingJob", "a"): 8, ("Pod", "over"): 3, ("Pod", "t"): 8, ("Pod", "c"): 2}


def test_pool_status_of_a_pool_without_nodes_is_not_ready():
    pool = mk_pool("p", {"matchLabels": {"no": "such"}})
    st = pool_status(pool_view(pool, {}, {}), build_ledger(snapshot([pool]), GPU), NOW)
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "NoNodes"
    assert st["gpus"] == {"capacity": 0, "allocatable": 0, "allocated": 0, "free": 0, "unavailable": 0}


# ------------------------------------------------------------------------------- wait reasons


@pytest.mark.parametrize("case, reason", [
    ("pool-missing", "PoolNotFound"),
    ("every-pool-missing", "PoolNotFound"),
    ("replica-too-big", "Unschedulable"),
    ("gang-too-big", "Unschedulable"),
    ("unknown-level", "Unschedulable"),
    ("full", "WaitingForCapacity"),
    ("storage-class", "StorageClassNotFound"),
    ("claim", "ClaimNotFound"),
])
def test_wait_reasons(case, reason):
    kw = {"gpus": 8, "replicas": 1}
    pools = ["p"]
    pods = []
    if case == "pool-missing":
        pools = ["nope"]
    elif case == "every-pool-missing":
        pools = ["nope", "gone"]
    elif case == "replica-too-big":
        kw["gpus"] = 16
    elif case == "gang-too-big":
        kw["replicas"] = 3
    elif case == "unknown-level":
        kw["topology"] = {"mode": "Required", "level": "rack"}
    elif case == "full":
        pods = [foreign_pod("f0", "n0", 8), foreign_pod("f1", "n1", 1)]
    elif case == "storage-class":
        kw["checkpoint"] = {"storageClassName": "fast"}
    elif case == "claim":
        kw["checkpoint"] = {"existingClaimName": "mine"}
    j = mk_job("j", pools=pools, **kw)
    plan = plan_admission(snapshot([mk_pool("p")], nodes(2), pods=pods, jobs=[j]), NOW)
    assert plan.admit == []
    assert [w.reason for w in plan.wait] == [reason], plan.wait
    assert sum(plan.ledgers[GPU].per_node.values()) == sum(p.requests.get(GPU, 0) for p in pods)  # nothing held


@pytest.mark.parametrize("checkpoint, claims, storage_classes, admit", [
    ({"storageClassName": "fast"}, {}, {"fast"}, True),
    ({"storageClassName": "fast"}, {(NS, "j-checkpoint"): "Bound"}, set(), True),  # made earlier: exists
    ({}, {}, set(), True),                                                       # the default class
    ({"existingClaimName": "mine"}, {(NS, "mine"): "Bound"}, set(), True),
    ({"existingClaimName": "mine"}, {("elsewhere", "mine"): "Bound"}, set(), False),
])
def test_storage_checks(checkpoint, claims, storage_classes, admit):
    j = mk_job("j", checkpoint=checkpoint)
    snap = snapshot([mk_pool("p")], nodes(1), jobs=[j], storage_classes=storage_classes, claims=claims)
    assert bool(plan_admission(snap, NOW).admit) == admit


def test_a_missing_pool_before_an_existing_one_falls_through():
    j = mk_job("j", pools=["nope", "p"], fallbackAfterSeconds=600)
    plan = plan_admission(snapshot([mk_pool("p")], nodes(1), jobs=[j]), NOW)
    assert admitted(plan)["j"].pool == "p"


# ------------------------------------------------------------------------------- fallback


def _two_pools():
    ns_ = [mk_node("a0", 8, {"pool": "a"}), mk_node("b0", 8, {"pool": "b"})]
    return ns_, [mk_pool("a", {"matchLabels": {"pool": "a"}}), mk_pool("b", {"matchLabels": {"pool": "b"}})]


@pytest.mark.parametrize("fallback, waited, expect", [
    (300, 0, None),
    (300, 299, None),
    (300, 300, "b"),
    (300, 10_000, "b"),
    (0, 0, "b"),
    (60, 61, "b"),
])
def test_fallback_to_the_next_pool_after_fallback_after_seconds(fallback, waited, expect):
    ns_, pools = _two_pools()
    created = NOW - waited
    j = mk_job("j", pools=["a", "b"], fallbackAfterSeconds=fallback, created=created)
    full = foreign_pod("f", "a0", 8)
    plan = plan_admission(snapshot(pools, ns_, pods=[full], jobs=[j]), NOW)
    if expect is None:
        assert waiting(plan)["j"].reason == "WaitingForCapacity"
        assert candidate_pools(view(j), NOW) == ["a"]
    else:
        assert admitted(plan)["j"].pool == expect
        assert candidate_pools(view(j), NOW) == ["a", "b"]


def test_fallback_counts_from_when_the_job_last_started_waiting():
    """queued_since: the last time Admitted turned False (a preempted job waits afresh)."""
    ns_, pools = _two_pools()
    st = {"phase": "Restarting", "attempt": 1, "conditions": [adm_cond("Preempted", NOW - 100)],
          "restarts": {"failures": 0, "preemptions": 1}}
    j = mk_job("j", pools=["a", "b"], fallbackAfterSeconds=300, created=NOW - 10_000, status=st,
               failurePolicy={"preemptionsBeforeFallback": 5})
    assert queued_since(view(j)) == NOW - 100
    full = foreign_pod("f", "a0", 8)
    assert plan_admission(snapshot(pools, ns_, pods=[full], jobs=[j]), NOW).admit == []
    assert admitted(plan_admission(snapshot(pools, ns_, pods=[full], jobs=[j]), NOW + 200))["j"].pool == "b"


def test_fallback_at_once_when_the_first_pool_can_never_fit():
    ns_, pools = _two_pools()
    j = mk_job("j", pools=["a", "b"], gpus=8, replicas=1, fallbackAfterSeconds=3600,
               topology={"mode": "Required", "level": "rack"},
               template={"spec": {"containers": [{"name": "trainer", "image": "x"}]}})
    # "rack" is a level only pool b has: in a the gang can never fit.
    pools[1] = mk_pool("b", {"matchLabels": {"pool": "b"}}, levels=[("rack", "rack")])
    ns_[1] = mk_node("b0", 8, {"pool": "b", "rack": "r1"})
    plan = plan_admission(snapshot(pools, ns_, jobs=[j]), NOW)
    assert admitted(plan)["j"].pool == "b"


def test_unschedulable_only_when_every_pool_can_never_fit():
    ns_, pools = _two_pools()
    j = mk_job("j", pools=["a", "b"], gpus=16, fallbackAfterSeconds=3600)
    plan = plan_admission(snapshot(pools, ns_, jobs=[j]), NOW)
    w = waiting(plan)["j"]
    assert w.reason == "Unschedulable" and "pool a" in w.message and "pool b" in w.message


def test_first_pool_full_second_can_never_fit_waits_for_capacity():
    ns_, pools = _two_pools()
    ns_[1] = mk_node("b0", 4, {"pool": "b"})
    j = mk_job("j", pools=["a", "b"], gpus=8, fallbackAfterSeconds=0)
    plan = plan_admission(snapshot(pools, ns_, pods=[foreign_pod("f", "a0", 8)], jobs=[j]), NOW)
    assert waiting(plan)["j"].reason == "WaitingForCapacity"


@pytest.mark.parametrize("per_pool, preemptions, first", [
    (0, 0, 0), (0, 1, 1), (0, 2, 1),
    (1, 0, 0), (1, 1, 1),
    (2, 1, 0), (2, 2, 1), (2, 9, 1),
])
def test_preemptions_before_fallback(per_pool, preemptions, first):
    ns_, pools = _two_pools()
    st = {"phase": "Restarting", "attempt": preemptions, "restarts": {"failures": 3, "preemptions": preemptions}}
    j = mk_job("j", pools=["a", "b"], status=st, fallbackAfterSeconds=3600,
               failurePolicy={"preemptionsBeforeFallback": per_pool})
    assert first_pool_index(j.spec, j.status) == first
    plan = plan_admission(snapshot(pools, ns_, jobs=[j]), NOW)  # both pools empty
    assert admitted(plan)["j"].pool == ["a", "b"][first]
    assert candidate_pools(view(j), NOW) == ["a", "b"][first:first + 1]


# ------------------------------------------------------------------------------- who is queued


def test_blocked_until_the_generation_changes():
    st = {"phase": "Pending", "attempt": 1, "conditions": [adm_cond("InvalidSpec", NOW - 5, generation=3)]}
    j = mk_job("j", status=st, generation=3)
    assert not awaiting_admission(view(j), NOW)
    assert plan_admission(snapshot([mk_pool("p")], nodes(1), jobs=[j]), NOW).admit == []
    edited = mk_job("j", status=st, generation=4)
    assert awaiting_admission(view(edited), NOW)
    assert admitted(plan_admission(snapshot([mk_pool("p")], nodes(1), jobs=[edited]), NOW))


@pytest.mark.parametrize("reason", ["WaitingForCapacity", "Preempted", "Backoff", "StartupTimeout", "CreateFailed"])
def test_other_wait_reasons_do_not_block(reason):
    st = {"phase": "Pending", "attempt": 1, "conditions": [adm_cond(reason, NOW - 5, generation=3)]}
    assert awaiting_admission(view(mk_job("j", status=st, generation=3)), NOW)


@pytest.mark.parametrize("offset, queued", [(+30, False), (+1, False), (0, True), (-1, True)])
def test_restart_not_before_is_respected(offset, queued):
    st = {"phase": "Restarting", "attempt": 1, "restartNotBefore": iso(NOW + offset)}
    j = mk_job("j", status=st)
    assert awaiting_admission(view(j), NOW) == queued
    assert bool(plan_admission(snapshot([mk_pool("p")], nodes(1), jobs=[j]), NOW).admit) == queued


@pytest.mark.parametrize("kind", ["suspended", "deleting", "succeeded", "failed", "placed", "invalid"])
def test_jobs_not_waiting_for_gpus(kind):
    body = job_body("j")
    if kind == "suspended":
        body["spec"]["suspend"] = True
    elif kind == "deleting":
        body["metadata"]["deletionTimestamp"] = iso(NOW)
    elif kind == "succeeded":
        body["status"] = {"phase": "Succeeded"}
    elif kind == "failed":
        body["status"] = {"phase": "Failed"}
    elif kind == "placed":
        body["status"] = {"phase": "Running", "placement": placed("p", ["n0"])}
    elif kind == "invalid":
        body["spec"]["replicas"] = 0
    from kubeforge.api import TrainingJobSpec
    from kubeforge.objects import record_from_k8s
    rec = record_from_k8s(TrainingJobSpec, body)
    jv = JobView(rec, rec.status)
    assert not awaiting_admission(jv, NOW)
    plan = plan_admission(snapshot([mk_pool("p")], nodes(2), jobs=[jv]), NOW)
    assert plan.admit == [] and plan.wait == []


# ------------------------------------------------------------------------------- template constraints


def test_template_tolerations_open_tainted_nodes_to_that_job_only():
    ns_ = [mk_node("n0", 8, taints=[Taint("dedicated", "ml", "NoSchedule")]), mk_node("n1", 8, {"x": "y"})]
    pods = [foreign_pod("f", "n1", 8)]
    tolerant = mk_job("tolerant", created=NOW - 10, template={"spec": {
        "containers": [{"name": "trainer", "image": "x"}],
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]}})
    plain = mk_job("plain", created=NOW - 20)
    plan = plan_admission(snapshot([mk_pool("p")], ns_, pods=pods, jobs=[plain, tolerant]), NOW)
    assert admitted(plan)["tolerant"].placement.nodes == ("n0",)
    assert waiting(plan)["plain"].reason == "WaitingForCapacity"
    assert gang_request(tolerant).tolerations[0]["key"] == "dedicated"


def test_pool_tolerations_apply_to_every_job():
    ns_ = [mk_node("n0", 8, taints=[Taint("nvidia.com/gpu", "", "NoSchedule")])]
    pool = mk_pool("p", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}])
    assert admitted(plan_admission(snapshot([pool], ns_, jobs=[mk_job("j")]), NOW))


@pytest.mark.parametrize("tmpl, expect", [
    ({"nodeSelector": {"gpu": "h100"}}, ("n1",)),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100"]}]}]}}}}, ("n1",)),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}]}}}}, ("n0",)),
    ({"nodeSelector": {"gpu": "b200"}}, None),
])
def test_template_node_selector_and_affinity_are_honoured(tmpl, expect):
    ns_ = [mk_node("n0", 8, {"gpu": "a100"}), mk_node("n1", 8, {"gpu": "h100"})]
    j = mk_job("j", template={"spec": {"containers": [{"name": "trainer", "image": "x"}], **tmpl}})
    plan = plan_admission(snapshot([mk_pool("p")], ns_, jobs=[j]), NOW)
    if expect is None:
        assert waiting(plan)["j"].reason == "Unschedulable"
    else:
        assert admitted(plan)["j"].placement.nodes == expect


# ------------------------------------------------------------------------------- serving


def _svc(name="chat", desired=1, **kw):
    return mk_service(name, status={"desiredReplicas": desired, **kw.pop("status", {})}, **kw)


def test_serving_groups_go_after_gangs_and_never_on_gpus_a_gang_holds():
    pool = mk_pool("p")
    svc = _svc(gpus=2)
    j = mk_job("j", gpus=8, created=NOW - 1)
    assumed = mk_job("k", gpus=6, created=NOW - 2)
    snap = snapshot([pool], nodes(2), jobs=[j, view(assumed, PlacementRecord("p", ("n1",)))], services=[svc])
    plan = plan_admission(snap, NOW)
    assert admitted(plan)["j"].placement.nodes == ("n0",)
    assert [(g.key[1], g.index, g.placement.nodes) for g in plan.groups] == [("chat", 0, ("n1",))]  # what k left
    assert plan.ledgers[GPU].per_node == {"n0": 8, "n1": 8}


def test_serving_groups_do_not_double_book_each_other_and_say_why_the_rest_wait():
    plan = plan_admission(snapshot([mk_pool("p")], nodes(2), services=[_svc(gpus=3, desired=6)]), NOW)
    per: dict[str, int] = {}
    for g in plan.groups:
        for n in g.placement.nodes:
            per[n] = per.get(n, 0) + g.gpus_per_pod
    assert per == {"n0": 6, "n1": 6} and [g.index for g in plan.groups] == [0, 1, 2, 3]
    reason, message = plan.serving_waits[(NS, "chat")]
    assert reason == "WaitingForCapacity" and "3" in message


def test_a_one_pod_replica_with_required_topology_needs_the_level_label():
    ns_ = [mk_node("n0", 8), mk_node("n1", 8, {CLIQUE: "c1"})]
    pool = mk_pool("p", levels=[("nvlink", CLIQUE)])
    svc = _svc("big", gpus=4, topology={"mode": "Required", "level": "nvlink"})
    assert [g.placement.nodes for g in plan_admission(snapshot([pool], ns_, services=[svc]), NOW).groups] == [("n1",)]


def test_a_multi_node_group_takes_whole_nodes_of_one_nvlink_domain():
    """tensor 8 x pipeline 2 on 8-GPU nodes: 2 pods of 8 GPUs, both in one clique. A clique with
    one busy node cannot hold a group; a third group waits, saying why."""
    ns_ = [mk_node(f"n{c}{i}", 8, {CLIQUE: f"c{c}"}) for c in range(3) for i in range(2)]
    busy = foreign_pod("f", "n20", 1)
    svc = _svc("llm", desired=3, gpus=None, parallelism={"tensor": 8, "pipeline": 2},
               topology={"mode": "Required", "level": "nvlink"})
    plan = plan_admission(snapshot([mk_pool("p")], ns_, pods=[busy], services=[svc]), NOW)
    placed_ = {g.index: g.placement for g in plan.groups}
    assert sorted(placed_) == [0, 1]
    for p in placed_.values():
        assert p.level == "nvlink" and len(p.nodes) == 2 and len({n[:2] for n in p.nodes}) == 1
    assert {p.domain for p in placed_.values()} == {"c0", "c1"}  # never c2, where n20 is busy
    assert all(g.gpus_per_pod == 8 for g in plan.groups)
    assert plan.serving_waits[(NS, "llm")][0] == "WaitingForCapacity"


def test_a_shape_that_does_not_divide_into_nodes_is_reported():
    svc = _svc("odd", gpus=None, parallelism={"tensor": 4, "pipeline": 3})  # 12 GPUs on 8-GPU nodes
    plan = plan_admission(snapshot([mk_pool("p")], nodes(2), services=[svc]), NOW)
    assert plan.groups == [] and "multiple of 8" in plan.serving_waits[(NS, "odd")][1]


def test_groups_on_record_and_assumed_count_toward_the_desired_count():
    held = {"index": 0, "phase": "Ready", "pool": "p", "nodes": ["n0"], "gpusPerPod": 1}
    released = {"index": 1, "phase": "Starting", "pool": "p", "nodes": [], "gpusPerPod": 1, "restarts": 2}
    failed = {"index": 2, "phase": "Failed", "pool": "p", "nodes": [], "gpusPerPod": 1}
    svc = _svc(gpus=1, desired=5, status={"groups": [held, released, failed]})
    snap = snapshot([mk_pool("p")], nodes(1), services=[svc])
    object.__setattr__(snap, "assumed_groups", {((NS, "chat"), 3): AssumedGroup(3, PlacementRecord("p", ("n0",)), 1)})
    plan = plan_admission(snap, NOW)
    # wanted: the released group 1 first, then one new index (5 - held - released - failed - assumed 3 = 1): 4
    assert [g.index for g in plan.groups] == [1, 4]
    assert plan.ledgers[GPU].per_node == {"n0": 4}  # held 1 + assumed 1 + the two placed now


def test_a_group_draining_for_a_rollout_counts_and_one_draining_for_a_scale_down_does_not():
    """Issue 32.1: a rollout has no surge, so no group is placed beside one draining for it; a
    group draining for a scale-down is on its way out, so a scale-up places a new one."""
    def drained(reason):
        return {"index": 0, "phase": "Draining", "pool": "p", "nodes": ["n0"], "gpusPerPod": 1,
                "drainingSince": "2026-01-01T00:00:00Z", "drainFor": reason}
    ready = {"index": 1, "phase": "Ready", "pool": "p", "nodes": ["n0"], "gpusPerPod": 1}
    for reason, want in (("Rollout", []), ("ScaleDown", [2])):
        svc = _svc(gpus=1, desired=2, status={"groups": [drained(reason), ready]})
        assert [g.index for g in plan_admission(snapshot([mk_pool("p")], nodes(1), services=[svc]), NOW).groups] == want


def test_nothing_is_placed_for_a_service_being_deleted_or_invalid():
    gone = replace(_svc("gone"), deleting=True)
    assert plan_admission(snapshot([mk_pool("p")], nodes(1), services=[gone]), NOW).groups == []


# ------------------------------------------------------------------------------- through the lifecycle


def test_admission_then_reconcile_writes_the_placement_and_creates_pinned_pods(monkeypatch):
    """One pass of the runtime (the real admission round and job reconcile, on FakeKube): an
    admitted gang's reconcile writes status.placement, makes its checkpoint claim and, in the
    same step, one pod per rank pinned to placement.nodes[rank] behind the volume gate; once the
    claim is bound the gate is lifted. The ledger holds the same GPUs all along."""

    async def go():
        kube = await small_cluster(2)
        kube.use_clock(monkeypatch)
        await kube.client_create("TrainingJob", submitted(job_body("j", replicas=2, gpus=8)))
        key = (NS, "j")
        plan = await admission_round(kube.rt, kube.now)
        assert kube.rt.cache.snapshot().jobs[key].assumed is not None  # assumed until written
        before = dict(plan.ledgers[GPU].per_node)
        assert before == {"n0": 8, "n1": 8}
        await reconcile_job(kube.rt, key)
        st = kube.get("TrainingJob", NS, "j")["status"]
        assert st["placement"]["nodes"] == list(admitted(plan)["j"].placement.nodes)
        assert st["attempt"] == 0 and kube.rt.cache.snapshot().jobs[key].assumed is None
        assert kube.get("PersistentVolumeClaim", NS, "j-checkpoint")["status"] == {}  # Pending
        pods = sorted(kube.rt.cache.job_pods(key), key=lambda p: p.rank)
        assert [(p.name, p.assigned, p.attempt, p.gates) for p in pods] == [
            ("j-worker-0-0", st["placement"]["nodes"][0], 0, (VOLUME_GATE,)),
            ("j-worker-1-0", st["placement"]["nodes"][1], 0, (VOLUME_GATE,))]
        assert [pinned_node(kube.get("Pod", NS, p.name)["spec"]) for p in pods] == st["placement"]["nodes"]
        assert build_ledger(kube.rt.cache.snapshot(), GPU).per_node == before
        await kube.kubelet()  # the provisioner binds the claim; gated pods are not bound
        assert kube.rt.cache.claim((NS, "j-checkpoint"))[0] == "Bound"
        assert all(p.node is None for p in kube.rt.cache.job_pods(key))
        await reconcile_job(kube.rt, key)
        assert all(p.gates == () for p in kube.rt.cache.job_pods(key))
        assert build_ledger(kube.rt.cache.snapshot(), GPU).per_node == before
        await settle(kube)
        assert kube.get("TrainingJob", NS, "j")["status"]["phase"] == "Running"
        assert sorted(p.node for p in kube.rt.cache.job_pods(key)) == sorted(st["placement"]["nodes"])
        assert build_ledger(kube.rt.cache.snapshot(), GPU).per_node == before

    asyncio.run(go())


def test_a_finished_job_deletes_the_workers_a_lost_delete_left_running():
    """A gang whose last restart is used up is Failed; if the reconcile that wrote Failed could
    not delete the other ranks (the operator restarted, a delete call failed), the next one must:
    otherwise a worker of a Failed job runs on, holding its GPUs, forever."""
    st = {"phase": "Failed", "attempt": 0, "restarts": {"failures": 0, "preemptions": 0, "startupFailures": 0}}
    j = mk_job("j", replicas=2, gpus=8, status=st, failurePolicy={"maxRestarts": 0})
    pods = [worker_pod(j, 0, 0, nodes=["n0", "n1"], phase="Failed"), worker_pod(j, 1, 0, nodes=["n0", "n1"])]
    plan = plan_training(j, TrainingContext(now=NOW, pods=pods, spec_hash=spec_hash(j)))
    assert plan.delete_pods == ["j-worker-1-0"]


def test_first_stop_of_a_job_whose_status_has_no_attempt_moves_it_by_one():
    """``attempt``: 0 first, +1 every time the gang stops, even for a status without the field
    (the API server defaults it to 0 once a status exists; a caller that skips defaulting
    must not see the first preemption jump to 2 through the failures + preemptions fallback)."""
    st = {"phase": "Running", "placement": placed("p", ["n0"])}
    j = mk_job("j", status=st)
    st["placement"]["specHash"] = spec_hash(j)
    j = mk_job("j", status=st)
    pods = [worker_pod(j, 0, 0, disruption="PreemptionByScheduler", deleting=True)]
    plan = plan_training(j, TrainingContext(now=NOW, pods=pods, nodes={"n0": mk_node("n0")}, spec_hash=spec_hash(j)))
    assert plan.status["restarts"]["preemptions"] == 1
    assert plan.status["attempt"] == 1


# ------------------------------------------------------------------------------- the admission memo


def test_memo_keeps_a_wait_until_a_node_gets_freer_then_places_again():
    pool = mk_pool("p")
    memo = AdmissionMemo()
    j = mk_job("j", gpus=8)
    busy = [foreign_pod("f", "n0", 2)]
    assert waiting(plan_admission(snapshot([pool], nodes(1), pods=busy, jobs=[j]), NOW, memo))["j"]
    assert waiting(plan_admission(snapshot([pool], nodes(1), pods=busy, jobs=[j]), NOW + 1, memo))["j"]
    plan = plan_admission(snapshot([pool], nodes(1), jobs=[j]), NOW + 2, memo)  # the foreign pod ended
    assert admitted(plan)["j"].placement.nodes == ("n0",)


def test_memo_gives_the_answers_a_fresh_round_gives_over_a_sequence():
    """Admissions hold (their placements are written before the next round); foreign pods come
    and go; jobs finish: the memo changes nothing but the work done."""
    pool = mk_pool("p")
    memo = AdmissionMemo()
    specs = {f"j{i}": (r, g) for i, (r, g) in enumerate([(2, 8), (1, 4), (3, 2), (1, 8), (2, 2), (1, 1)])}
    held: dict[str, tuple] = {}
    foreign = [[foreign_pod("a", "n0", 8)], [foreign_pod("a", "n0", 8), foreign_pod("b", "n1", 4)],
               [foreign_pod("b", "n1", 4)], [], [foreign_pod("c", "n2", 1)], [foreign_pod("c", "n2", 1)], []]
    finish = {3: "j1", 5: "j0"}
    for t, pods in enumerate(foreign):
        if t in finish:
            held.pop(finish[t], None)
            specs.pop(finish[t])
        jobs = []
        for i, (name, (r, g)) in enumerate(specs.items()):
            st = {"phase": "Running", "attempt": 0, "placement": placed("p", held[name])} if name in held else {}
            jobs.append(mk_job(name, replicas=r, gpus=g, created=NOW - 100 + i, status=st, uid=f"uid-{name}-{t}"))
        snap = snapshot([pool], nodes(3), pods=pods, jobs=jobs)
        with_memo = plan_admission(snap, NOW + t, memo)
        fresh = plan_admission(snap, NOW + t)
        assert [(a.key, a.placement.nodes) for a in with_memo.admit] == [(a.key, a.placement.nodes) for a in fresh.admit], t
        # (the message of a kept wait is the one of the round that computed it: "room for 1
        # replica" may be stale once even less is free; the reason is the same)
        assert [(w.key, w.reason) for w in with_memo.wait] == [(w.key, w.reason) for w in fresh.wait], t
        held.update({a.key[1]: a.placement.nodes for a in with_memo.admit})
    assert held  # something ran


def test_memo_compares_with_the_gpus_left_after_the_last_rounds_admissions():
    """Round 1: 5 GPUs free; y takes 4, x (2 GPUs) waits with 1 left. Before round 2 y holds
    its 4 and a foreign pod gives 3 back: 4 free, fewer than at the start of round 1, but more
    than x was refused with. x must be placed again, and fit."""
    pool = mk_pool("p")
    memo = AdmissionMemo()
    y = mk_job("y", gpus=4, priority=1)
    x = mk_job("x", gpus=2)
    plan = plan_admission(snapshot([pool], nodes(1), pods=[foreign_pod("f", "n0", 3)], jobs=[y, x]), NOW, memo)
    assert list(admitted(plan)) == ["y"] and waiting(plan)["x"].reason == "WaitingForCapacity"
    y_held = JobView(y, y.status, PlacementRecord("p", ("n0",)))
    plan = plan_admission(snapshot([pool], nodes(1), jobs=[y_held, x]), NOW + 1, memo)
    assert admitted(plan)["x"].placement.nodes == ("n0",), f"x still waits: {plan.wait}"


def test_memo_forgets_a_wait_caused_by_an_admission_that_was_abandoned():
    """A Wait caused by GPUs another gang took earlier in the same round must not outlive that
    gang's admission when it is abandoned before the next round (suspended or deleted before
    its reconcile, status write refused, assumed TTL)."""
    pool = mk_pool("p")
    memo = AdmissionMemo()
    y = mk_job("y", gpus=8, priority=1)
    x = mk_job("x", gpus=8)
    plan = plan_admission(snapshot([pool], nodes(1), jobs=[y, x]), NOW, memo)
    assert list(admitted(plan)) == ["y"] and list(waiting(plan)) == ["x"]
    # y is suspended before its reconcile writes the placement: the assumption is dropped.
    y = mk_job("y", gpus=8, priority=1, suspend=True)
    plan = plan_admission(snapshot([pool], nodes(1), jobs=[y, x]), NOW + 1, memo)
    assert list(admitted(plan)) == ["x"], f"x still waits: {plan.wait}"


def test_a_gang_behind_one_suspended_right_after_admission_runs(monkeypatch):
    """The same through the runtime (the real admission round and reconciles, on FakeKube):
    the gang behind one suspended by its user right after admission, before its reconcile wrote
    the placement, gets the GPUs."""

    async def go():
        kube = await small_cluster(4)
        kube.use_clock(monkeypatch)
        await kube.client_create("TrainingJob", submitted(job_body("first", replicas=4, gpus=8, priority=1)))
        await kube.client_create("TrainingJob", submitted(job_body("second", replicas=4, gpus=8)))
        plan = await admission_round(kube.rt, kube.now)
        assert list(admitted(plan)) == ["first"] and list(waiting(plan)) == ["second"]
        first = kube.get("TrainingJob", NS, "first")  # its user suspends it now
        first["spec"]["suspend"] = True
        first["metadata"]["generation"] += 1
        await kube.put("TrainingJob", first)
        await settle(kube)
        snap = kube.rt.cache.snapshot()
        assert all(v.assumed is None for v in snap.jobs.values())
        # settled means settled: a round from scratch would place nothing more
        assert not plan_admission(snap, kube.now).admit
        assert kube.get("TrainingJob", NS, "second")["status"]["phase"] == "Running"
        assert kube.get("TrainingJob", NS, "first")["status"]["phase"] == "Suspended"
        assert build_ledger(snap, GPU).held_by(("TrainingJob", NS, "second")) == 32

    asyncio.run(go())


def test_memo_sees_a_node_label_that_makes_a_gang_fit():
    pool = mk_pool("p")
    memo = AdmissionMemo()
    j = mk_job("j", replicas=2, gpus=8, topology={"mode": "Required", "level": "nvlink"})
    joined = [mk_node("n0", 8, {CLIQUE: "c0"}), mk_node("n1", 8)]
    assert waiting(plan_admission(snapshot([pool], joined, jobs=[j]), NOW, memo))["j"].reason == "Unschedulable"
    labelled = [mk_node("n0", 8, {CLIQUE: "c0"}), mk_node("n1", 8, {CLIQUE: "c0"})]
    assert plan_admission(snapshot([pool], labelled, jobs=[j]), NOW).admit  # a fresh round places it
    plan = plan_admission(snapshot([pool], labelled, jobs=[j]), NOW + 1, memo)
    assert admitted(plan), f"still waits: {plan.wait}"


def test_memo_does_not_carry_a_wait_to_a_new_job_of_the_same_name():
    pool = mk_pool("p")
    memo = AdmissionMemo()
    old = mk_job("j", gpus=8, replicas=2)
    assert waiting(plan_admission(snapshot([pool], nodes(1), jobs=[old]), NOW, memo))["j"].reason == "Unschedulable"
    new = mk_job("j", gpus=1, replicas=1)  # kubectl replace --force: new uid, generation 1
    plan = plan_admission(snapshot([pool], nodes(1), jobs=[new]), NOW + 1, memo)
    assert admitted(plan), f"the new job waits with the old one's reason: {plan.wait}"


def test_memo_reuses_a_pool_view_only_while_its_pool_and_nodes_are_the_same_objects():
    """A round reuses the last round's pool view (AdmissionMemo.views) when the pool's spec is
    equal and the node records are the very objects it was built from: only the GPUs held (and
    the pool's record) differ, and the views, admissions and waits are those of a fresh round.
    A node record replaced (a label added) or a pool spec changed makes a fresh view; a pool
    record replaced by a status write does not, nor the same node records in another order."""
    pool = mk_pool("p")
    memo = AdmissionMemo()
    fleet = [mk_node(f"n{i}", 8, {CLIQUE: f"c{i // 2}"}) for i in range(6)]
    held: dict[str, tuple] = {}
    specs = {"a": (2, 8), "b": (1, 4), "c": (2, 8)}
    steps = []
    for t in range(6):
        if t == 5:  # the same records in another order: the operator's index store moves a node
            fleet = fleet[3:] + fleet[:3]  # to the end of its order on every event (a heartbeat)
        if t == 2:  # a label arrives on n3: a new record for it
            fleet[5] = mk_node("n5", 8, {CLIQUE: "c2", "extra": "yes"})
        if t == 3:
            pool = mk_pool("p", price=2.5, generation=2)  # the pool's spec changed
        if t == 4:
            pool = mk_pool("p", price=2.5, generation=2, status={"gpus": {"free": 1}})  # a status write
        jobs = [mk_job(n, replicas=r, gpus=g, created=NOW - 100 + i, uid=f"uid-{n}",
                       topology={"mode": "Required", "level": "nvlink"},
                       status={"phase": "Running", "attempt": 0, "placement": placed("p", held[n])} if n in held else {})
                for i, (n, (r, g)) in enumerate(specs.items())]
        snap = snapshot([pool], fleet, jobs=jobs)
        last = memo.views.get("p")
        with_memo = plan_admission(snap, NOW + t, memo)
        fresh = plan_admission(snap, NOW + t)
        view = with_memo.views["p"]
        assert view == fresh.views["p"] and view.record is pool, t
        assert [n.path for n in view.nodes] == [n.path for n in fresh.views["p"].nodes], t
        assert view.labels_key == fresh.views["p"].labels_key, t
        assert [(a.key, a.placement.nodes) for a in with_memo.admit] == [(a.key, a.placement.nodes) for a in fresh.admit]
        assert [(w.key, w.reason) for w in with_memo.wait] == [(w.key, w.reason) for w in fresh.wait]
        kept = [n.name for n, m in zip(view.nodes, last.nodes) if n is m] if last is not None else []
        steps.append((t, kept))
        held.update({a.key[1]: a.placement.nodes for a in with_memo.admit})
    # t=1: the nodes round 0's admissions took are copied with their new counts, the others
    # kept; t=2 (a node relabelled) and t=3 (the spec changed): built afresh; t=4 (only the
    # pool's status changed) and t=5 (the records reordered): all kept
    assert steps[0] == (0, [])
    assert 0 < len(steps[1][1]) < 6
    assert steps[2] == (2, []) and steps[3] == (3, [])
    assert steps[4] == (4, [f"n{i}" for i in range(6)]) and steps[5] == (5, [f"n{i}" for i in range(6)])


def test_a_gang_in_a_pool_whose_nodes_lack_its_gpu_resource_names_the_resource():
    """Issue 32, cosmetic: a job in an AMD pool with no AMD node said "more than the largest
    node's 0 allocatable GPUs"; it names the missing resource, as the pool's Ready condition does."""
    pool = mk_pool("amd", selector={"matchExpressions": [{"key": "kubernetes.io/os", "operator": "DoesNotExist"}]},
                   resource="amd.com/gpu")
    job = mk_job("j", gpus=8, pools=("amd",))
    plan = plan_admission(snapshot([pool], nodes(2), jobs=[job]), NOW)
    (wait,) = plan.wait
    assert "none of them has amd.com/gpu" in wait.message and "largest node" not in wait.message
