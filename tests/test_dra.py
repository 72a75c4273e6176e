"""DRA pools, NVL72 cliques and whole-domain preemption in the pure core (issue 15)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings, strategies as st
from examples import examples

from kubeforge.admission import (
    AdmissionMemo, JobView, build_ledger, nvlink_request, plan_admission, pool_resource, pool_status, pool_view, quota_book,
)
from kubeforge.admission._victims import choose_victims
from kubeforge.builders.training import build_compute_domain, build_gpu_claim_template, build_worker_pod
from kubeforge.lifecycle import COMPUTE_DOMAIN_READY, TrainingContext, plan_training
from kubeforge.objects import (
    CLIQUE_LABEL, PlacementRecord, claim_from_k8s, compute_domain_from_k8s, compute_domain_name, dra_key, inventory,
    pod_from_k8s, slice_from_k8s,
)
from kubeforge.placement import GangRequest, NodeInfo, Placement, TopologyLevel, place_gang
from records import NOW, iso, mk_job, mk_node, mk_pool, placed, snapshot, view, worker_pod

DRIVER = "gpu.sim.kubeforge.io"
KEY = dra_key(DRIVER)
DRA_SPEC = {"deviceAllocation": "DRA", "dra": {"deviceClassName": DRIVER, "driver": DRIVER}}
NVLINK = [("nvlink", CLIQUE_LABEL)]


def dra_pool(name="p", **kw):
    rec = mk_pool(name, levels=NVLINK, **kw)
    return replace(rec, spec=rec.spec.model_copy(update={
        "device_allocation": "DRA", "dra": rec.spec.dra.model_copy(update={"device_class_name": DRIVER, "driver": DRIVER})}))


def slice_body(node, gpus=4, driver=DRIVER, mig=0):
    devs = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(gpus)]
    devs += [{"name": f"mig-{i}", "attributes": {f"{driver}/type": {"string": "mig"}}} for i in range(mig)]
    return {"metadata": {"name": f"{node}-s"}, "spec": {"driver": driver, "nodeName": node,
                                                        "pool": {"name": node}, "devices": devs}}


def claim_body(name, node, devices, pod=None, ns="other", driver=DRIVER):
    md = {"name": name, "namespace": ns}
    if pod:
        md["ownerReferences"] = [{"kind": "Pod", "name": pod, "uid": "u"}]
    return {"metadata": md, "status": {"allocation": {
        "devices": {"results": [{"request": "g", "driver": driver, "pool": node, "device": d} for d in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}


def rack(racks=2, nodes=18, gpus=4, dra=True):
    """NVL72 racks: DRA nodes (no device-plugin capacity), clique label per rack."""
    out = []
    for r in range(racks):
        for i in range(nodes):
            out.append(mk_node(f"r{r}-{i:02d}", gpus=0 if dra else gpus, labels={CLIQUE_LABEL: f"c{r}"}))
    return out


def dra_snapshot(pools, nodes, jobs=(), pods=(), claims=(), gpus=4):
    snap = snapshot(pools=pools, nodes=nodes, jobs=jobs, pods=pods)
    inv = inventory(slice_from_k8s(slice_body(n.name, gpus)) for n in nodes if n.allocatable.get("nvidia.com/gpu", 0) == 0)
    return replace(snap, devices=inv, resource_claims=[claim_from_k8s(c) for c in claims])


# --------------------------------------------------------------------------- records


def test_slice_claim_and_domain_records():
    s = slice_from_k8s(slice_body("n1", gpus=4, mig=2))
    assert (s.driver, s.pool, s.node, len(s.gpus), len(s.devices)) == (DRIVER, "n1", "n1", 4, 6)
    c = claim_from_k8s(claim_body("c", "n1", ["gpu-0", "gpu-1"], pod="p-0"))
    assert c.allocated and c.node == "n1" and c.pod == "p-0" and len(c.devices) == 2
    assert not claim_from_k8s({"metadata": {"name": "x", "namespace": "a"}}).allocated
    cd = compute_domain_from_k8s({"metadata": {"name": "d", "namespace": "a", "labels": {"kubeforge.io/job-name": "j"},
                                               "annotations": {"kubeforge.io/cliques": "c0,c1"}},
                                  "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "d-channel"}}},
                                  "status": {"status": "NotReady", "nodes": [{"name": "n1", "status": "Ready"},
                                                                             {"name": "n2", "status": "NotReady"}]}})
    assert cd.job == "j" and cd.cliques == ("c0", "c1") and cd.ready_nodes == {"n1"} and cd.channel_template == "d-channel"


# --------------------------------------------------------------------------- capacity and the ledger


def test_dra_pool_capacity_is_its_slices():
    pool = dra_pool()
    assert pool_resource(pool) == KEY
    snap = dra_snapshot([pool], rack(1, 3), gpus=4)
    v = pool_view(pool, snap.nodes, {})
    assert [n.gpus_allocatable for n in v.nodes] == [4, 4, 4]
    assert sum(n.gpus_free for n in v.nodes) == 12


def test_ledger_counts_foreign_claims_and_device_plugin_requests_once():
    """Allocated claims hold their devices; a kubeforge pod's claims are counted through its
    placement only; a device-plugin pod on a node whose GPUs are also DRA devices counts too."""
    pool = dra_pool()
    nodes = rack(1, 3)
    job = mk_job("j", replicas=1, gpus=4, status={"phase": "Running", "attempt": 0, "placement": placed("p", ["r0-00"])})
    ours = build_worker_pod(job, rank=0, attempt=0, placement=PlacementRecord("p", ("r0-00",)),
                            gpu_claim_template="j-gpus", channel_claim_template=None)
    ours["metadata"]["namespace"] = job.namespace
    ours["spec"]["nodeName"] = "r0-00"
    mine = pod_from_k8s(ours)
    assert mine.claims == ("gpus",) and not mine.requests
    foreign_dp = pod_from_k8s({"metadata": {"name": "dp", "namespace": "other"}, "spec": {"nodeName": "r0-02",
                              "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    claims = [claim_body("ours", "r0-00", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"], pod=mine.name, ns=job.namespace),
              claim_body("foreign", "r0-01", ["gpu-0", "gpu-1"], pod="x")]
    snap = dra_snapshot([pool], nodes, jobs=[job], pods=[mine, foreign_dp], claims=claims)
    led = build_ledger(snap, KEY)
    assert led.per_node == {"r0-00": 4, "r0-01": 2, "r0-02": 1}
    plan = plan_admission(replace(snap, jobs={**snap.jobs, **{(j.namespace, j.name): view(j) for j in
                                                                 [mk_job("big", replicas=1, gpus=4)]}}), NOW)
    assert not plan.admit  # r0-01 has 2, r0-02 has 3: no node has 4 free


def test_mixed_cluster_never_overcommits_with_two_pools():
    """A device-plugin pool and a DRA pool in one cluster: every admitted gang fits what the
    ledger (claims + requests + placements) leaves on its nodes."""
    dp_nodes = [mk_node(f"dp-{i}", gpus=4, labels={"grp": "dp"}) for i in range(2)]
    nodes = rack(1, 4) + dp_nodes
    pools = [dra_pool("p"), mk_pool("q", selector={"matchLabels": {"grp": "dp"}})]
    jobs = [mk_job(f"d{i}", replicas=1, gpus=3, pools=("p",)) for i in range(6)]
    jobs += [mk_job(f"e{i}", replicas=1, gpus=3, pools=("q",)) for i in range(3)]
    snap = dra_snapshot(pools, nodes, jobs=jobs, claims=[claim_body("f", "r0-03", ["gpu-0", "gpu-1"], pod="x")])
    plan = plan_admission(snap, NOW)
    used: dict[str, int] = {}
    for a in plan.admit:
        for n, g in a.placement.gpus_by_node.items():
            used[n] = used.get(n, 0) + g
    used["r0-03"] = used.get("r0-03", 0) + 2
    assert all(g <= 4 for g in used.values()), used
    assert len([a for a in plan.admit if a.pool == "p"]) == 3 and len([a for a in plan.admit if a.pool == "q"]) == 2


# --------------------------------------------------------------------------- placement


LEVELS = [TopologyLevel("nvlink", CLIQUE_LABEL)]


def infos(racks=2, nodes=18, used=()):
    return [NodeInfo(f"r{r}-{i:02d}", {CLIQUE_LABEL: f"c{r}"}, 4, 1 if f"r{r}-{i:02d}" in used else 0)
            for r in range(racks) for i in range(nodes)]


def test_whole_nodes_of_one_clique_leaving_spares():
    r = place_gang(GangRequest(16, 4, "Required", "nvlink", whole_nodes=True, spare_nodes=2), infos(used={"r0-00"}), LEVELS)
    assert isinstance(r, Placement) and r.domain == "c1" and len(set(r.nodes)) == 16  # c0 would leave 1 spare
    r = place_gang(GangRequest(16, 4, "Required", "nvlink", whole_nodes=True, spare_nodes=2),
                   infos(used={"r0-00", "r1-00"}), LEVELS)
    assert isinstance(r, Placement) and "r0-00" not in r.nodes and "r1-00" not in r.nodes  # never a shared node
    r = place_gang(GangRequest(32, 4, "Preferred", "nvlink", whole_nodes=True, spare_nodes=2), infos(), LEVELS)
    by = {}
    for n in set(r.nodes):
        by[n[:2]] = by.get(n[:2], 0) + 1
    assert by == {"r0": 16, "r1": 16}, by  # balanced, both racks keep their spares
    nofit = place_gang(GangRequest(17, 4, "Required", "nvlink", whole_nodes=True), infos(1, 18, used={"r0-00", "r0-01"}), LEVELS)
    assert not isinstance(nofit, Placement) and not nofit.permanent


def test_nvlink_request_only_for_multi_node_gangs_of_dra_clique_pools():
    snap = dra_snapshot([dra_pool()], rack(1, 4))
    v = pool_view(snap.pools["p"], snap.nodes, {})
    gang = GangRequest(4, 4, "Required", "nvlink")
    assert nvlink_request(gang, v).whole_nodes and nvlink_request(gang, v).spare_nodes == 2
    assert not nvlink_request(GangRequest(1, 4, "Required", "nvlink"), v).whole_nodes  # one node
    assert not nvlink_request(GangRequest(4, 4, "None"), v).whole_nodes
    dp = mk_pool("q", levels=NVLINK)
    assert not nvlink_request(gang, pool_view(dp, {n.name: replace(n, allocatable={"nvidia.com/gpu": 4}) for n in rack(1, 4)}, {})).whole_nodes


# --------------------------------------------------------------------------- serving in a DRA pool


def test_serving_replicas_are_refused_in_a_dra_pool_and_placed_in_the_next_device_plugin_pool():
    """No serving claims yet: a DRA pool gives an InferenceService no shape (a message, never a
    ``dra:`` key in container limits); admission places its groups in a device-plugin pool the
    service lists after it, and with none says why it waits."""
    from kubeforge.admission import group_shape
    from records import mk_service

    dp_nodes = [mk_node(f"dp-{i}", gpus=4, labels={"grp": "dp"}) for i in range(2)]
    pools = [dra_pool("p"), mk_pool("q", selector={"matchLabels": {"grp": "dp"}})]
    both = mk_service("both", pools=("p", "q"), gpus=2, status={"desiredReplicas": 1})
    only = mk_service("only", pools=("p",), gpus=2, status={"desiredReplicas": 1})
    snap = replace(dra_snapshot(pools, rack(1, 2) + dp_nodes), services={s.key: s for s in (both, only)})
    shape = group_shape(only, pool_view(snap.pools["p"], snap.nodes, {}))
    assert isinstance(shape, str) and "GPUPool p allocates GPUs through DRA" in shape
    plan = plan_admission(snap, NOW)
    assert [(g.key, g.pool) for g in plan.groups] == [(both.key, "q")]
    assert set(plan.groups[0].placement.nodes) <= {"dp-0", "dp-1"}
    reason, message = plan.serving_waits[only.key]
    assert reason == "Unschedulable" and "allocates GPUs through DRA" in message


# --------------------------------------------------------------------------- ComputeDomain


def test_builders_and_compute_domain_policy():
    job = mk_job("g", replicas=2, gpus=4, topology={"mode": "Required", "level": "nvlink"},
                 status={"phase": "Pending", "attempt": 0, "placement": placed("p", ["r0-00", "r0-01"], admitted_at=NOW - 60)})
    cd = build_compute_domain(job, ["c0"])
    assert cd["spec"] == {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{compute_domain_name('g', ['c0'])}-channel"}}}
    assert cd["metadata"]["finalizers"] == ["kubeforge.io/compute-domain"]
    tmpl = build_gpu_claim_template(job, DRIVER, 4)
    assert tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 4}
    ctx = TrainingContext(now=NOW, domain_cliques=("c0",), nodes={n.name: n for n in rack(1, 2)})
    plan = plan_training(job, ctx)
    assert plan.compute_domain == (cd["metadata"]["name"], ("c0",))
    cond = next(c for c in plan.status["conditions"] if c["type"] == COMPUTE_DOMAIN_READY)
    assert cond["status"] == "False" and "ContainerCreating" in cond["message"]
    view_ = compute_domain_from_k8s({**cd, "status": {"nodes": [{"name": "r0-00", "status": "Ready"}, {"name": "r0-01", "status": "Ready"}]}})
    plan = plan_training(job, replace(ctx, compute_domains=(view_,)))
    assert plan.compute_domain is None
    assert next(c for c in plan.status["conditions"] if c["type"] == COMPUTE_DOMAIN_READY)["status"] == "True"
    # Waiting to be placed again: the domain is kept. Finished: released once no pod is left.
    waiting = mk_job("g", replicas=2, gpus=4, status={"phase": "Restarting", "attempt": 1})
    assert not plan_training(waiting, TrainingContext(now=NOW, compute_domains=(view_,))).release_compute_domains
    done = mk_job("g", replicas=2, gpus=4, status={"phase": "Succeeded", "attempt": 0})
    assert plan_training(done, TrainingContext(now=NOW, compute_domains=(view_,))).release_compute_domains == [view_.name]
    moved = replace(ctx, domain_cliques=("c1",), compute_domains=(view_,))
    assert plan_training(job, moved).release_compute_domains == [view_.name]
    # Moved and running on the new clique: the current attempt's pods never hold the old domain
    # back (they use the new one); a pod of the earlier attempt still terminating does.
    on_c1 = mk_job("g", replicas=2, gpus=4, topology={"mode": "Required", "level": "nvlink"},
                   status={"phase": "Running", "attempt": 1, "placement": placed("p", ["r1-00", "r1-01"], admitted_at=NOW - 60)})
    new_pods = [worker_pod(on_c1, r, 1) for r in range(2)]
    nodes = {n.name: n for n in rack(2, 2)}
    moved = TrainingContext(now=NOW, domain_cliques=("c1",), compute_domains=(view_,), pods=new_pods, nodes=nodes)
    assert plan_training(on_c1, moved).release_compute_domains == [view_.name]
    old_pod = worker_pod(on_c1, 0, 0, nodes=["r0-00", "r0-01"], deleting=True)
    held = plan_training(on_c1, replace(moved, pods=[*new_pods, old_pod]))
    assert not held.release_compute_domains and held.requeue_after is not None


# --------------------------------------------------------------------------- whole-domain preemption


def running(name, nodes, ckpt_age, prio=0, admitted_ago=7200.0, gpus=4):
    return view(mk_job(name, replicas=len(nodes), gpus=gpus, priority=prio, pools=("p",),
                       status={"phase": "Running", "attempt": 0,
                               "placement": placed("p", nodes, admitted_at=NOW - admitted_ago),
                               "lastCheckpoint": {"time": iso(NOW - ckpt_age)}}))


def preempt_setup(gangs, racks=3, min_runtime=0):
    pool = dra_pool(preemption={"minRuntimeSeconds": min_runtime})
    nodes = rack(racks, 18)
    snap = dra_snapshot([pool], nodes, jobs=gangs)
    led = build_ledger(snap, KEY)
    v = pool_view(pool, snap.nodes, led.per_node)
    pre = view(mk_job("big", replicas=16, gpus=4, priority=100, pools=("p",), topology={"mode": "Required", "level": "nvlink"}))
    req = nvlink_request(GangRequest(16, 4, "Required", "nvlink"), v)
    return pre, req, v, quota_book(pool, v, led)


def test_whole_domain_preemption_frees_the_cheapest_clique():
    # c0: two gangs with fresh checkpoints (cheap); c1: one with an old checkpoint (costly);
    # c2: 1-node gangs on every node: freeing 16 of them costs more in all.
    gangs = [running("a", [f"r0-{i:02d}" for i in range(8)], 60), running("b", [f"r0-{i:02d}" for i in range(8, 17)], 120),
             running("c", [f"r1-{i:02d}" for i in range(17)], 3000)]
    gangs += [running(f"s{i}", [f"r2-{i:02d}"], 200) for i in range(18)]
    pre, req, v, book = preempt_setup(gangs)
    victims, placement = choose_victims(pre, req, v, book, gangs, {}, frozenset(), NOW)
    assert {x.key[1] for x in victims} == {"a", "b"} and placement.domain == "c0"


def test_min_runtime_protects_young_gangs():
    gangs = [running("young", [f"r0-{i:02d}" for i in range(17)], 10, admitted_ago=100),
             running("old", [f"r1-{i:02d}" for i in range(17)], 3000, admitted_ago=9000)]
    pre, req, v, book = preempt_setup(gangs, racks=2, min_runtime=600)
    victims, placement = choose_victims(pre, req, v, book, gangs, {}, frozenset(), NOW)
    assert [x.key[1] for x in victims] == ["old"] and placement.domain == "c1"
    pre, req, v, book = preempt_setup(gangs, racks=2, min_runtime=0)
    assert [x.key[1] for x in choose_victims(pre, req, v, book, gangs, {}, frozenset(), NOW)[0]] == ["young"]


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 17), st.integers(1, 6), st.integers(0, 4000),
                          st.integers(0, 1)), min_size=0, max_size=14))
def test_whole_domain_preemption_property(specs):
    """Never a victim set that leaves the preemptor unplaceable, never victims of two cliques, and
    no domain frees room for less lost work than the chosen one (each domain tried alone)."""
    # Three trays of each rack are busy with a low-priority gang, so no rack has the 16 free trays
    # the preemptor needs and every example preempts (filtering instead failed Hypothesis'
    # filter_too_much health check on some seeds).
    gangs = [running(f"fill{r}", [f"r{r}-{j:02d}" for j in (15, 16, 17)], 1000 + 100 * r, prio=0) for r in range(3)]
    taken: set[str] = {n for g in gangs for n in g.placement.nodes}
    for i, (r, start, size, age, low) in enumerate(specs):
        nodes = [f"r{r}-{j:02d}" for j in range(start, min(18, start + size)) if f"r{r}-{j:02d}" not in taken]
        if not nodes:
            continue
        taken.update(nodes)
        gangs.append(running(f"g{i}", nodes, age, prio=0 if low else 200))
    pre, req, v, book = preempt_setup(gangs)
    free_nodes = {n.name for n in v.nodes if n.gpus_allocated == 0}
    assert all(sum(1 for n in free_nodes if n.startswith(f"r{r}-")) < 16 for r in range(3))
    got = choose_victims(pre, req, v, book, gangs, {}, frozenset(), NOW)
    if got is None:
        # No clique can be freed by lower-priority gangs only.
        for r in range(3):
            blocked = {n for g in gangs if g.record.spec.priority >= 100 for n in g.placement.nodes if n.startswith(f"r{r}-")}
            assert 18 - len(blocked) < 16
        return
    victims, placement = got
    freed = {n for x in victims for n in x.gpus_by_node}
    cliques = {n.split("-")[0] for n in freed}
    assert len(cliques) == 1 and placement.domain == "c" + cliques.pop()[1:]
    assert set(placement.nodes) <= free_nodes | freed  # placeable once they are gone
    assert all(JobView is not None and x.key[1] != "big" for x in victims)
    prios = {g.key: g.record.spec.priority for g in gangs}
    assert all(prios[x.key] < 100 for x in victims)
    # The least work lost: no other clique frees room for less (each clique's victims chosen alone).
    lost = sum(x.lost_gpu_seconds for x in victims)
    for r in range(3):
        alone = [g for g in gangs if any(n.startswith(f"r{r}-") for n in g.placement.nodes)]
        other = choose_victims(pre, req, v, book, alone, {}, frozenset(), NOW)
        if other is not None and other[1].domain == f"c{r}":
            assert lost <= sum(x.lost_gpu_seconds for x in other[0]) + 1e-6


# --------------------------------------------------------------------------- a missing DeviceClass (issue 32.3)


def test_a_dra_pool_whose_device_class_is_missing_is_not_ready_and_admits_nothing():
    """The DeviceClass is not among those that exist: the pool says DeviceClassNotFound (not
    Ready=True) and the gang waits with the same reason, holding nothing; with the class, it is
    admitted. Unknown classes (None) refuse nothing."""
    pool = dra_pool()
    job = mk_job("j", replicas=1, gpus=4)
    for classes, admitted in ((frozenset({"other.example.com"}), False), (frozenset({DRIVER}), True), (None, True)):
        snap = replace(dra_snapshot([pool], rack(1, 2), jobs=[job]), device_classes=classes)
        plan = plan_admission(snap, NOW)
        assert bool(plan.admit) == admitted
        view_ = plan.views["p"]
        st = pool_status(view_, plan.ledgers[KEY], NOW)
        ready = next(c for c in st["conditions"] if c["type"] == "Ready")
        if admitted:
            assert ready["status"] == "True"
            continue
        assert (ready["status"], ready["reason"]) == ("False", "DeviceClassNotFound")
        assert DRIVER in ready["message"] and "other.example.com" in ready["message"]
        assert st["nodes"]["total"] == 2  # its nodes are still shown
        (wait,) = [w for w in plan.wait if w.key == job.key]
        assert wait.reason == "DeviceClassNotFound" and "does not exist" in wait.message


def test_an_empty_selector_counts_only_nodes_with_the_pools_gpus():
    """Issue 32, cosmetic: a device-plugin pool with an empty nodeSelector selected every node (a
    DRA node listing nvidia.com/gpu at 0, a CPU node); it selects the nodes with its GPUs, and a
    DRA pool with an empty selector the nodes with its driver's devices."""
    dp = [mk_node(f"dp-{i}", gpus=4) for i in range(2)]
    cpu = mk_node("cpu-0", gpus=0)
    snap = dra_snapshot([mk_pool("q"), dra_pool("p")], rack(1, 3) + dp)
    snap = replace(snap, nodes={**snap.nodes, cpu.name: cpu})  # no slice: a CPU node
    assert [n.name for n in pool_view(mk_pool("q"), snap.nodes, {}).nodes] == ["dp-0", "dp-1"]
    assert [n.name for n in pool_view(dra_pool("p", selector={}), snap.nodes, {}).nodes] == ["r0-00", "r0-01", "r0-02"]


def test_a_gang_that_waited_for_a_missing_device_class_is_placed_once_it_exists():
    """The admission memo keeps "does not fit" answers until the pool changes: a DeviceClass
    created later is such a change (the round placed nothing while it was missing)."""
    pool, job = dra_pool(), mk_job("j", replicas=1, gpus=4)
    memo = AdmissionMemo()
    snap = dra_snapshot([pool], rack(1, 2), jobs=[job])
    assert not plan_admission(replace(snap, device_classes=frozenset()), NOW, memo).admit
    assert plan_admission(replace(snap, device_classes=frozenset({DRIVER})), NOW + 1, memo).admit  # fails without the memo fix


def test_a_dra_pool_whose_driver_publishes_nothing_on_its_nodes_names_the_driver():
    """A DRA pool's nodes with no ResourceSlice of its driver: NoNodes naming spec.dra.driver, not
    the ledger's internal ``dra:<driver>`` key as if it were gpuResourceName."""
    pool = dra_pool(selector={"matchLabels": {CLIQUE_LABEL: "c0"}})
    snap = snapshot([pool], rack(1, 2))  # no slices at all
    ready = next(c for c in pool_status(pool_view(pool, snap.nodes, {}), build_ledger(snap, KEY), NOW)["conditions"]
                 if c["type"] == "Ready")
    assert ready["reason"] == "NoNodes" and f"DRA driver {DRIVER}" in ready["message"] and "dra:" not in ready["message"]
