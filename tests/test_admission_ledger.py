"""Booking (issue 18, pure core): the admission ledger (``kubeforge.admission.build_ledger``)
and the request rules it books by (``kubeforge.objects.pod_requests``). What kubeforge books is
what the pods hold, a gang's own template is blamed for what it causes (never another tenant), a
namespace being deleted is not a preemption, and pools say what is wrong with them (that
prometheusURL cannot reach the API server, also issue 18's, is in tests/test_prometheus_urls.py).
The property test over random templates is tests/test_ledger_properties.py (TEMPLATES, (g)).
"""

from __future__ import annotations

import pytest

from kubeforge.admission import build_ledger, gang_request, plan_admission, pool_status, pool_view
from kubeforge.builders.training import build_worker_pod
from kubeforge.objects import (
    PLACEMENT_LOST, UNSCHEDULABLE_TEMPLATE, PlacementRecord, Taint, gpu_request_conflict, pod_requests,
    rank_gpus, replica_requests,
)
from kubeforge.placement import node_info
from records import CLIQUE, mk_job, mk_node, mk_pool, placed, snapshot
from training_builders import (
    NOW, admitted, cond, event_reasons, job, node_names, nodes, placement, plan, pod, pods, restarts,
)

GPU = "nvidia.com/gpu"
SIDECAR = {"name": "profiler", "image": "nsys:1", "resources": {"limits": {GPU: 1}}}


def tmpl(*, containers=(), init=(), main_resources=None, affinity=None, labels=None):
    main = {"name": "trainer", "image": "pytorch:2"}
    if main_resources:
        main["resources"] = main_resources
    spec = {"containers": [main, *containers]}
    if init:
        spec["initContainers"] = list(init)
    if affinity:
        spec["affinity"] = affinity
    out = {"spec": spec}
    if labels:
        out["metadata"] = {"labels": labels}
    return out


# --------------------------------------------------------------------------- one number per rank


@pytest.mark.parametrize("template, gpus, want", [
    (tmpl(), 8, 8),
    (tmpl(containers=[SIDECAR]), 7, 8),                                           # app sidecar: sum
    (tmpl(init=[{**SIDECAR, "restartPolicy": "Always"}]), 7, 8),                  # KEP-753 sidecar: sum
    (tmpl(init=[{"name": "warm", "image": "w", "resources": {"limits": {GPU: 6}}}]), 4, 6),   # init: max
    (tmpl(init=[{"name": "warm", "image": "w", "resources": {"limits": {GPU: 2}}}]), 4, 4),
    (tmpl(init=[{**SIDECAR, "restartPolicy": "Always"},                           # sidecar before an init
                {"name": "warm", "image": "w", "resources": {"limits": {GPU: 6}}}]), 4, 7),
])
def test_a_rank_holds_what_the_scheduler_counts_for_the_pod_the_builder_makes(template, gpus, want):
    j = mk_job("j", gpus=gpus, template=template)
    assert rank_gpus(j, GPU) == want
    built = build_worker_pod(j, rank=0, attempt=0, placement=PlacementRecord("p", ("n0",)), gpu_resource=GPU)
    assert pod_requests(built["spec"])[GPU] == want  # one function books exactly the pod that is made


def test_replica_requests_keep_cpu_and_memory_and_leave_the_template_alone():
    t = tmpl(main_resources={"requests": {"cpu": "500m", "memory": "1Gi"}}, containers=[SIDECAR])["spec"]
    before = repr(t)
    assert replica_requests(t, 8, GPU) == {"cpu": 500, "memory": 2**30, GPU: 9}
    assert repr(t) == before


@pytest.mark.parametrize("resources, conflict", [
    ({"limits": {GPU: 8}}, False),
    ({"limits": {GPU: 4}}, True),
    ({"requests": {GPU: "2"}}, True),
    ({"limits": {"amd.com/gpu": 4}}, False),  # another resource: not the pool's
])
def test_a_main_container_gpu_request_that_disagrees_with_gpus_per_replica_is_refused(resources, conflict):
    t = tmpl(main_resources=resources)["spec"]
    why = gpu_request_conflict(t, 8, GPU)
    assert bool(why) is conflict
    if why:
        assert "'trainer'" in why and "gpusPerReplica is 8" in why


def test_admission_refuses_the_conflict_as_invalid_spec_before_holding_a_gpu():
    j = mk_job("j", gpus=8, template=tmpl(main_resources={"limits": {GPU: 4}}))
    plan_ = plan_admission(snapshot([mk_pool("p")], [mk_node("n0")], jobs=[j]), NOW)
    assert not plan_.admit and plan_.wait[0].reason == "InvalidSpec"


# --------------------------------------------------------------------------- the scenario


def test_a_gpu_sidecar_job_and_a_valid_job_share_a_node_and_both_fit():
    """8-GPU nodes: a 7 + 1-sidecar gang books 8 per node, so best fit never sends the valid
    job to a node whose GPUs are all held (it did: the node showed 1 phantom free GPU)."""
    n = [mk_node(f"n{i}", 8, {CLIQUE: "c0"}) for i in range(2)]
    side = mk_job("side", gpus=7, template=tmpl(containers=[SIDECAR]), created=NOW - 20)
    valid = mk_job("valid", gpus=1, created=NOW - 10)
    plan_ = plan_admission(snapshot([mk_pool("p")], n, jobs=[side, valid]), NOW)
    where = {a.key[1]: a.placement.nodes for a in plan_.admit}
    assert set(where) == {"side", "valid"} and where["valid"][0] != where["side"][0]
    assert plan_.ledgers[GPU].per_node == {where["side"][0]: 8, where["valid"][0]: 1}


def test_the_ledger_books_a_placed_rank_with_its_sidecar():
    j = mk_job("side", gpus=7, template=tmpl(containers=[SIDECAR]), status={"placement": placed("p", ["n0", "n1"])})
    led = build_ledger(snapshot([mk_pool("p")], [mk_node("n0"), mk_node("n1")], jobs=[j]), GPU)
    assert led.per_node == {"n0": 8, "n1": 8} and led.held_by(("TrainingJob", j.namespace, "side")) == 16


def test_an_init_container_beyond_every_node_is_unschedulable_up_front_not_placement_lost():
    j = mk_job("j", gpus=4, template=tmpl(init=[{"name": "warm", "image": "w", "resources": {"limits": {GPU: 16}}}]))
    plan_ = plan_admission(snapshot([mk_pool("p")], [mk_node("n0")], jobs=[j]), NOW)
    w = plan_.wait[0]
    assert (w.reason, plan_.admit) == ("Unschedulable", [])
    assert "needs 16 GPUs" in w.message and "init containers" in w.message


def test_a_replica_asking_more_cpu_than_any_node_offers_is_unschedulable_up_front():
    j = mk_job("j", gpus=1, template=tmpl(main_resources={"requests": {"cpu": "10000"}}))
    n = mk_node("n0", extra={"cpu": 192_000, "memory": 2 * 2**40})
    w = plan_admission(snapshot([mk_pool("p")], [n], jobs=[j]), NOW).wait[0]
    assert w.reason == "Unschedulable" and "10000 cpu" in w.message and "192 cpu" in w.message


def test_hostname_anti_affinity_between_ranks_puts_one_rank_per_node():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"kubeforge.io/job-name": "j"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    j = mk_job("j", replicas=2, gpus=4, template=tmpl(affinity=anti), topology={"mode": "Required", "level": "nvlink"})
    assert gang_request(j).one_per_node
    n = [mk_node(f"n{i}", 8, {CLIQUE: "c0"}) for i in range(2)]
    a = plan_admission(snapshot([mk_pool("p")], n, jobs=[j]), NOW).admit[0]
    assert sorted(a.placement.nodes) == ["n0", "n1"]  # without the rule: both ranks on n0 (best fit)


def test_anti_affinity_on_the_domain_the_gang_must_share_is_refused_up_front():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"team": "x"}}, "topologyKey": CLIQUE}]}}
    j = mk_job("j", replicas=2, gpus=8, template=tmpl(affinity=anti, labels={"team": "x"}),
               topology={"mode": "Required", "level": "nvlink"})
    n = [mk_node(f"n{i}", 8, {CLIQUE: "c0"}) for i in range(2)]
    w = plan_admission(snapshot([mk_pool("p")], n, jobs=[j]), NOW).wait[0]
    assert w.reason == "Unschedulable" and "podAntiAffinity" in w.message


# --------------------------------------------------------------------------- diagnose before blaming


def _stuck(rank, message, node=None):
    return pod(rank, phase="Pending", node=None, assigned=node or node_names(2)[rank],
               unschedulable_since=NOW - 5, unschedulable_message=message)


def _ctx(j, nodes_):
    view = pool_view(mk_pool("h100-spot"), {n.name: n for n in nodes_}, {})
    return {"request": gang_request(j, GPU), "pool_nodes": {n.name: n for n in view.nodes}}


def test_a_worker_its_own_template_keeps_off_its_node_is_blamed_at_once_without_a_retry():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    j = job(2, status=admitted(2), template=tmpl(affinity=anti))
    live = [pod(0), _stuck(1, "0/9 nodes are available: 1 node(s) didn't match pod anti-affinity rules")]
    p = plan(j, live, nodes(2))
    adm = cond(p.status, "Admitted")
    assert adm["reason"] == UNSCHEDULABLE_TEMPLATE and "podAntiAffinity" in adm["message"]
    assert p.release and p.status["placement"] is None and sorted(p.delete_pods) == sorted(x.name for x in live)
    assert p.status.get("restarts", restarts()) == restarts()  # no startup retry burnt
    assert UNSCHEDULABLE_TEMPLATE in event_reasons(p)


def test_a_node_that_cannot_hold_the_rank_is_the_template_s_doing():
    big = mk_node(node_names(2)[1], 8, extra={"cpu": 8000})
    j = job(2, gpus=8, status=admitted(2), template=tmpl(main_resources={"requests": {"cpu": "16"}}))
    p = plan(j, [pod(0), _stuck(1, "0/9 nodes are available: 1 Insufficient cpu")], nodes(2),
             **_ctx(j, [mk_node(node_names(2)[0], 8, extra={"cpu": 64000}), big]))
    assert cond(p.status, "Admitted")["reason"] == UNSCHEDULABLE_TEMPLATE


def test_someone_else_taking_the_gpus_is_still_placement_lost_after_the_timeout():
    j = job(2, status=admitted(2))
    stuck = _stuck(1, "0/9 nodes are available: 1 Insufficient nvidia.com/gpu")
    assert cond(plan(j, [pod(0), stuck], nodes(2)).status or {}, "Admitted") is None  # within the timeout
    late = plan(j, [pod(0), stuck], nodes(2), now=NOW + 60)
    assert cond(late.status, "Admitted")["reason"] == PLACEMENT_LOST


def test_another_pods_anti_affinity_against_ours_is_not_our_template():
    j = job(2, status=admitted(2), template=tmpl(affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}))
    stuck = _stuck(1, "0/9 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules")
    assert cond(plan(j, [pod(0), stuck], nodes(2), now=NOW + 60).status, "Admitted")["reason"] == PLACEMENT_LOST


# --------------------------------------------------------------------------- namespace deletion


def test_a_terminating_namespace_s_deleted_workers_are_not_a_preemption():
    j = job(2, status=admitted(2, phase="Running"))
    going = [pod(0, deleting=True), pod(1, deleting=True)]
    p = plan(j, going, nodes(2), namespace_terminating=True)
    st = p.status
    assert st["placement"] is None and "attempt" not in st and "restarts" not in st
    assert cond(st, "Admitted")["reason"] == "NamespaceTerminating"
    assert p.create_ranks == [] and p.delete_pods == [] and p.events == [] and p.release
    # without the namespace's deletion the same pods are a preemption
    assert plan(j, going, nodes(2)).status["restarts"]["preemptions"] == 1


def test_nothing_in_a_terminating_namespace_is_admitted():
    snap = snapshot([mk_pool("p")], [mk_node("n0")], jobs=[mk_job("j", gpus=1)])
    assert plan_admission(snap, NOW).admit
    gone = snapshot([mk_pool("p")], [mk_node("n0")], jobs=[mk_job("j", gpus=1)])
    object.__setattr__(gone, "terminating", frozenset({mk_job("j").namespace}))
    assert not plan_admission(gone, NOW).admit


# --------------------------------------------------------------------------- pools say what is wrong


def _conds(pool, nodes_):
    view = pool_view(pool, {n.name: n for n in nodes_}, {})
    st = pool_status(view, build_ledger(snapshot([pool], nodes_), view.resource), NOW)
    return {c["type"]: c for c in st["conditions"]}


def test_a_pool_whose_gpu_resource_no_node_has_is_not_ready():
    c = _conds(mk_pool("p", {"matchLabels": {"gpu": "yes"}}, resource="nvidia.com/gpux"),
               [mk_node(f"n{i}", 8, {"gpu": "yes"}) for i in range(4)])
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("False", "NoNodes")
    assert "none of them has nvidia.com/gpux" in c["Ready"]["message"] and "nvidia.com/gpu" in c["Ready"]["message"]


def test_a_configured_level_whose_label_no_node_carries_is_reported():
    pool = mk_pool("p", levels=[("nvlink", "example.com/clique-typo")])
    c = _conds(pool, [mk_node("n0", 8, {CLIQUE: "c0"})])
    assert c["Ready"]["status"] == "True"
    t = c["TopologyReady"]
    assert (t["status"], t["reason"]) == ("False", "LevelLabelMissing")
    assert "example.com/clique-typo" in t["message"] and CLIQUE in t["message"]  # the detected level it hides
    ok = _conds(mk_pool("p", levels=[("nvlink", CLIQUE)]), [mk_node("n0", 8, {CLIQUE: "c0"})])["TopologyReady"]
    assert ok["status"] == "True"


def test_node_info_carries_what_the_node_offers_besides_gpus():
    info = node_info(mk_node("n0", 8, extra={"cpu": 1000, "rdma/hca": 1}, taints=[Taint("a", "", "NoSchedule")]))
    assert info.resources == {"cpu": 1000, "rdma/hca": 1}
