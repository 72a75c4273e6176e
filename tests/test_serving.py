"""Table-style tests of the pure serving plan (kubeforge.serving.plan_serving): admitted groups
written and their pods created, readiness and endpoints, a lost pod or node recreating the
whole group, maxGroupRestarts, startup failures, drain before scale-down, rollout one group at
a time, and the shape of a replica in a pool."""

from __future__ import annotations

import pytest

from kubeforge.admission import AssumedGroup, GroupShape, group_shape, pool_view
from kubeforge.objects import rfc3339
from kubeforge.objects import Node, PlacementRecord, Taint
from kubeforge.serving import (
    DRAINING, GROUP_FAILED, GROUP_NOT_STARTED, GROUP_RESTARTED, ROLLING_OUT, ServingContext, plan_serving,
)
import builders as b
from records import CLIQUE, NOW, mk_node, mk_pool, mk_service

TH = "hash-1"
SHAPE2 = GroupShape(pool="p", pods=2, gpus=8, held=8, level="nvlink", mode="Required")
SHAPE1 = GroupShape(pool="p", pods=1, gpus=2, held=2)


def grp(index=0, *, attempt=0, phase="Ready", nodes=("n0", "n1"), th=TH, **extra):
    g = {"index": index, "attempt": attempt, "phase": phase, "pool": "p", "nodes": list(nodes), "gpusPerPod": 8,
         "templateHash": th, "admittedAt": rfc3339(NOW - 60), **extra}
    return g


def svc(*groups, desired=None, **spec):
    spec.setdefault("gpus", None)
    spec.setdefault("parallelism", {"tensor": 8, "pipeline": 2})
    st = {"groups": list(groups)}
    if desired is not None:
        st["desiredReplicas"] = desired
    return mk_service("llm", status=st, **spec)


LLM = b.InferenceService("llm").gpus(None).spec(parallelism={"tensor": 8, "pipeline": 2}).record()


def pod(group=0, worker=0, *, attempt=0, phase="Running", ready=True, node=None, bound=False, **kw):
    """Pod ``worker`` of group ``group`` of ``llm`` (2 pods of 8 GPUs), on ``n<worker>`` unless
    ``node``; a Pending one is unbound unless ``bound``; ``kw``: more Pod record fields."""
    sp = b.ServingPod(LLM, group, worker).attempt(attempt).on(node or f"n{worker}").phase(phase).ready(ready)
    return sp.unbound(phase == "Pending" and not bound).changes(**kw).record()


def group_pods(group=0, attempt=0, **kw):
    return [pod(group, w, attempt=attempt, **kw) for w in range(2)]


def plan(rec, pods=(), *, desired=1, shape=SHAPE2, now=NOW, nodes=None, **kw):
    nodes = nodes if nodes is not None else {f"n{i}": Node(f"n{i}") for i in range(4)}
    return plan_serving(rec, ServingContext(now=now, desired=desired, pods=list(pods), nodes=nodes, shape=shape,
                                            template_hash=kw.pop("th", TH), **kw))


def groups(p):
    return {g["index"]: g for g in p.status["groups"]}


def reasons(p):
    return [e[1] for e in p.events]


# --------------------------------------------------------------------------- shape


@pytest.mark.parametrize("gpus, par, want", [
    (2, None, (1, 2)), (8, None, (1, 8)), (None, {"tensor": 8, "pipeline": 2}, (2, 8)),
    (None, {"tensor": 16, "pipeline": 2}, (4, 8)), (None, {"tensor": 4, "pipeline": 3}, None),
])
def test_a_replica_is_one_pod_or_whole_nodes(gpus, par, want):
    pool = mk_pool("p")
    view = pool_view(pool, {n.name: n for n in [mk_node(f"n{i}", 8, {CLIQUE: "c0"}) for i in range(4)]}, {})
    rec = mk_service("s", gpus=gpus, **({"parallelism": par} if par else {}),
                     topology={"mode": "Required", "level": "nvlink"})
    shape = group_shape(rec, view)
    if want is None:
        assert isinstance(shape, str) and "multiple of 8" in shape
    else:
        assert (shape.pods, shape.gpus) == want
        assert shape.level == "nvlink"


def test_a_shape_error_is_reported_with_one_warning_event_not_one_per_reconcile():
    """Issue 32.6: InvalidSpec (e.g. tensor x pipeline not a multiple of the node's GPUs) comes
    with a Warning Event, as a TrainingJob's does, once per message."""
    why = "tensor x pipeline = 12 GPUs is not a multiple of 8"
    p = plan(svc(), shape=None, shape_error=why)
    assert ("Warning", "InvalidSpec", why) in p.events
    cond = next(c for c in p.status["conditions"] if c["type"] == "Ready")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    again = plan(mk_service("llm", status={"conditions": p.status["conditions"]}, gpus=None,
                            parallelism={"tensor": 8, "pipeline": 2}), shape=None, shape_error=why, now=NOW + 5)
    assert "InvalidSpec" not in reasons(again)


# --------------------------------------------------------------------------- admitted, ready, endpoints


def test_an_admitted_group_is_written_with_its_nodes_and_all_its_pods_created():
    a = AssumedGroup(0, PlacementRecord("p", ("n2", "n3"), "nvlink", "c1", "best fit"), 8)
    p = plan(svc(), assumed={0: a})
    g = groups(p)[0]
    assert (g["nodes"], g["gpusPerPod"], g["domain"], g["phase"], g["templateHash"]) == (["n2", "n3"], 8, "c1", "Starting", TH)
    assert g["leader"] == "llm-0-0-0" and p.written_assumed == [0]
    assert [(c[0].index, c[1]) for c in p.create] == [(0, 0), (0, 1)]
    assert p.status["replicas"] == 1 and p.status["readyReplicas"] == 0 and p.status["nodesPerReplica"] == 2


def test_leader_ready_creates_the_workers_once_the_leader_is_ready():
    rec = svc(grp(phase="Starting"), multiNode={"startupPolicy": "LeaderReady"})
    assert [w for _, w in plan(rec).create] == [0]
    assert [w for _, w in plan(rec, [pod(0, 0, ready=False)]).create] == []
    assert [w for _, w in plan(rec, [pod(0, 0)]).create] == [1]


def test_a_group_is_ready_when_every_pod_runs_and_the_leader_is_ready_and_only_its_leader_is_an_endpoint():
    rec = svc(grp(phase="Starting"))
    p = plan(rec, group_pods())
    assert groups(p)[0]["phase"] == "Ready" and groups(p)[0]["readySince"] == rfc3339(NOW)
    assert p.endpoints == [("llm-0-0-0", "10.0.0.0", "n0")]
    assert p.status["readyReplicas"] == 1 and next(c for c in p.status["conditions"] if c["type"] == "Ready")["status"] == "True"
    loading = plan(rec, [pod(0, 0, ready=False), pod(0, 1)])
    assert groups(loading)[0]["phase"] == "Starting" and loading.endpoints == []
    assert "loading the model" in groups(loading)[0]["message"]


# --------------------------------------------------------------------------- RecreateGroupOnPodRestart


@pytest.mark.parametrize("change, why", [
    ({"deleting": True}, "was deleted"),
    ({"phase": "Failed", "exit_code": 137}, "failed"),
    ({"disruption": "EvictionByEvictionAPI"}, "DisruptionTarget"),
    ({"container_restarts": 1}, "restarted"),
])
def test_a_lost_worker_recreates_the_whole_group_in_place(change, why):
    pods = [pod(0, 0), pod(0, 1, **change)]
    p = plan(svc(grp()), pods)
    g = groups(p)[0]
    assert (g["attempt"], g["restarts"], g["nodes"], g["phase"]) == (1, 1, ["n0", "n1"], "Starting")
    assert sorted(p.delete) == sorted(x.name for x in pods if not x.deleting and x.phase != "Failed")
    assert [(c[0].attempt, c[1]) for c in p.create] == [(1, 0), (1, 1)]  # the new attempt, on the same nodes
    assert GROUP_RESTARTED in reasons(p) and why in p.events[0][2]


def test_a_lost_node_releases_the_group_to_be_placed_again():
    nodes = {"n0": Node("n0"), "n1": Node("n1", taints=(Taint("karpenter.sh/disrupted", "", "NoSchedule"),))}
    p = plan(svc(grp()), group_pods(), nodes=nodes)
    g = groups(p)[0]
    assert g["nodes"] == [] and g["restarts"] == 1 and p.create == [] and p.release


def test_past_max_group_restarts_the_group_fails_releases_its_gpus_and_waits_for_a_spec_change():
    rec = svc(grp(restarts=5))
    p = plan(rec, [pod(0, 0), pod(0, 1, phase="Failed", exit_code=1)])
    g = groups(p)[0]
    assert g["phase"] == "Failed" and g["nodes"] == [] and p.release and p.create == []
    assert GROUP_FAILED in reasons(p)
    cond = next(c for c in p.status["conditions"] if c["type"] == "ReplicaGroupFailed")
    assert cond["status"] == "True" and "maxGroupRestarts 5" in cond["message"]
    failed = svc(dict(grp(phase="Failed", restarts=6, nodes=())))
    assert groups(plan(failed))[0]["phase"] == "Failed"  # the same spec: stays failed
    retried = groups(plan(failed, th="hash-2"))[0]  # the spec changed: waits to be placed again
    assert (retried["phase"], retried["restarts"], retried["nodes"]) == ("Starting", 0, [])


# --------------------------------------------------------------------------- startup


def test_a_pod_that_cannot_be_scheduled_on_its_node_is_placed_again_and_counted():
    stuck = pod(0, 1, phase="Pending", unschedulable_since=NOW - 31, unschedulable_message="0/4 nodes: Insufficient cpu")
    p = plan(svc(grp(phase="Starting")), [pod(0, 0), stuck])
    g = groups(p)[0]
    assert g["nodes"] == [] and g["startupFailures"] == 1 and g["restarts"] == 0
    assert GROUP_NOT_STARTED in reasons(p) and "Insufficient cpu" in g["message"]
    early = plan(svc(grp(phase="Starting")), [pod(0, 0), pod(0, 1, phase="Pending", unschedulable_since=NOW - 5,
                                                                     unschedulable_message="x")])
    assert groups(early)[0]["nodes"] == ["n0", "n1"] and early.requeue_after == pytest.approx(25)


def test_a_bound_pod_that_is_slow_to_load_is_never_cut_short_but_a_stuck_one_is():
    old = grp(phase="Starting", admittedAt=rfc3339(NOW - 3600))
    slow = [pod(0, 0, phase="Pending", ready=False, bound=True), pod(0, 1)]
    assert groups(plan(svc(old), slow))[0]["nodes"] == ["n0", "n1"]
    stuck = [pod(0, 0, phase="Pending", ready=False, bound=True, waiting="ErrImagePull: not found"), pod(0, 1)]
    g = groups(plan(svc(old), stuck))[0]
    assert g["nodes"] == [] and "ErrImagePull" in g["message"]


# --------------------------------------------------------------------------- scale down with drain


def test_scale_down_drains_the_least_loaded_ready_group_first():
    rec = svc(grp(0, nodes=("n0", "n1")), grp(1, nodes=("n2", "n3")), desired=2)
    pods = group_pods(0) + [pod(1, 0, node="n2"), pod(1, 1, node="n3")]
    p = plan(rec, pods, desired=1, load={0: 3, 1: 0.0})
    assert groups(p)[1]["drainingSince"] == rfc3339(NOW) and groups(p)[1]["drainFor"] == "ScaleDown"
    assert "drainingSince" not in groups(p)[0] and p.delete == [] and DRAINING in reasons(p)
    assert [e[1] for e in p.endpoints] == ["10.0.0.0"]  # the draining leader left the Service
    later = plan(svc(grp(0), grp(1, nodes=("n2", "n3"), drainingSince=rfc3339(NOW), drainFor="ScaleDown")),
                 pods, desired=1, load={1: 0.0}, now=NOW + 5)
    assert 1 not in groups(later) and sorted(later.delete) == ["llm-1-0-0", "llm-1-1-0"]


def test_a_draining_group_with_requests_in_flight_waits_up_to_drain_seconds():
    draining = grp(1, nodes=("n2", "n3"), drainingSince=rfc3339(NOW), drainFor="ScaleDown")
    pods = group_pods(0) + [pod(1, 0, node="n2"), pod(1, 1, node="n3")]
    busy = plan(svc(grp(0), draining), pods, desired=1, load={1: 4.0}, now=NOW + 60)
    assert 1 in groups(busy) and busy.delete == [] and busy.requeue_after == 5.0
    unknown = plan(svc(grp(0), draining), pods, desired=1, now=NOW + 60)
    assert 1 in groups(unknown)  # no metric: assumed busy until drainSeconds
    cut = plan(svc(grp(0), draining), pods, desired=1, load={1: 4.0}, now=NOW + 121)
    assert 1 not in groups(cut) and len(cut.delete) == 2


def test_an_idle_draining_group_stays_drain_min_seconds_for_routing_to_see_it_leave():
    """Nothing in flight is not enough at once: kube-proxy, a gateway or the simulator's router
    still sends it requests for a moment after it left the EndpointSlice, and deleting it then
    aborts them (the live KEDA bench's aborted requests). It goes at drainMinSeconds (2 s by
    default), never later than drainSeconds."""
    draining = grp(1, nodes=("n2", "n3"), drainingSince=rfc3339(NOW), drainFor="ScaleDown")
    pods = group_pods(0) + [pod(1, 0, node="n2"), pod(1, 1, node="n3")]
    soon = plan(svc(grp(0), draining), pods, desired=1, load={1: 0.0}, now=NOW + 0.5)
    assert 1 in groups(soon) and soon.delete == [] and soon.requeue_after == pytest.approx(1.5)
    then = plan(svc(grp(0), draining), pods, desired=1, load={1: 0.0}, now=NOW + 2)
    assert 1 not in groups(then) and len(then.delete) == 2
    at_once = plan(svc(grp(0), draining, drainSeconds=0), pods, desired=1, load={1: 0.0}, now=NOW + 0.5)
    assert 1 not in groups(at_once) and len(at_once.delete) == 2  # drainSeconds bounds the floor
    longer = plan(svc(grp(0), draining, drainMinSeconds=10), pods, desired=1, load={1: 0.0}, now=NOW + 5)
    assert 1 in groups(longer) and longer.requeue_after == pytest.approx(5.0)


def test_scale_down_removes_failed_then_unplaced_then_starting_groups_before_draining_ready_ones():
    rec = svc(grp(0), dict(grp(1, phase="Failed", nodes=())), dict(grp(2, phase="Starting", nodes=())),
              grp(3, phase="Starting", nodes=("n2", "n3")))
    p = plan(rec, group_pods(0), desired=1)
    assert sorted(groups(p)) == [0] and not any("drainingSince" in g for g in groups(p).values())


# --------------------------------------------------------------------------- rollout


def test_a_template_change_rolls_out_one_ready_group_at_a_time_through_a_drain():
    rec = svc(grp(0), grp(1, nodes=("n2", "n3")), desired=2)
    pods = group_pods(0) + [pod(1, 0, node="n2"), pod(1, 1, node="n3")]
    p = plan(rec, pods, desired=2, th="hash-2")
    draining = [g for g in groups(p).values() if g.get("drainingSince")]
    assert [g["index"] for g in draining] == [0] and draining[0]["drainFor"] == "Rollout"
    assert ROLLING_OUT in reasons(p)
    # drained: recreated in place from the new template, GPUs kept
    rec2 = svc(grp(0, drainingSince=rfc3339(NOW), drainFor="Rollout"), grp(1, nodes=("n2", "n3")), desired=2)
    q = plan(rec2, pods, desired=2, th="hash-2", load={0: 0.0}, now=NOW + 5)
    g0 = groups(q)[0]
    assert (g0["attempt"], g0["templateHash"], g0["nodes"], g0["phase"]) == (1, "hash-2", ["n0", "n1"], "Starting")
    assert "drainingSince" not in g0 and [(c[0].attempt, c[1]) for c in q.create] == [(1, 0), (1, 1)]
    # while group 0 starts again, group 1 (stale) is left alone: one replica unavailable at a time
    starting = svc(grp(0, attempt=1, phase="Starting", th="hash-2"), grp(1, nodes=("n2", "n3")), desired=2)
    r = plan(starting, [pod(1, 0, node="n2"), pod(1, 1, node="n3")], desired=2, th="hash-2")
    assert not any(g.get("drainingSince") for g in groups(r).values())


def test_a_scale_down_during_a_rollout_removes_the_group_draining_for_it_instead_of_recreating_it():
    """Issue 32.1: 3 groups, group 0 draining for a rollout, then the user sets 2 replicas. The
    rollout drain counts as a replica (it would come back), so the scale-down takes it: it is
    deleted once drained, and no other group drains or goes."""
    draining = grp(0, drainingSince=rfc3339(NOW), drainFor="Rollout")
    rec = svc(draining, grp(1, nodes=("n2", "n3")), grp(2, nodes=("n4", "n5")), desired=3)
    pods = group_pods(0) + [pod(1, w, node=f"n{2 + w}") for w in range(2)] + [pod(2, w, node=f"n{4 + w}") for w in range(2)]
    nodes = {f"n{i}": Node(f"n{i}") for i in range(6)}
    p = plan(rec, pods, desired=2, th="hash-2", load={0: 3.0}, now=NOW + 3, nodes=nodes)
    gs = groups(p)
    assert gs[0]["drainFor"] == "ScaleDown" and gs[0]["drainingSince"] == rfc3339(NOW)
    assert not any(gs[i].get("drainingSince") for i in (1, 2)) and p.delete == []
    # drained: gone, not recreated from the new template
    rec2 = svc(grp(0, drainingSince=rfc3339(NOW), drainFor="ScaleDown"), grp(1, nodes=("n2", "n3")),
               grp(2, nodes=("n4", "n5")), desired=2)
    q = plan(rec2, pods, desired=2, th="hash-2", load={0: 0.0}, now=NOW + 10, nodes=nodes)
    assert sorted(groups(q)) == [1, 2] and sorted(q.delete) == ["llm-0-0-0", "llm-0-1-0"] and q.release


def test_a_group_draining_for_a_rollout_counts_as_a_replica_so_no_group_is_added_beside_it():
    """No surge: with desired 2 and group 0 draining for a rollout, an admitted group for a third
    index is not written (its GPUs go back)."""
    rec = svc(grp(0, drainingSince=rfc3339(NOW), drainFor="Rollout"), grp(1, nodes=("n2", "n3")), desired=2)
    a = AssumedGroup(2, PlacementRecord("p", ("n4", "n5"), "nvlink", "c1", "best fit"), 8)
    p = plan(rec, group_pods(0) + [pod(1, w, node=f"n{2 + w}") for w in range(2)], desired=2, th="hash-2",
             load={0: 3.0}, assumed={2: a})
    assert sorted(groups(p)) == [0, 1] and p.release and p.written_assumed == [2]


def test_a_draining_group_shows_phase_draining_and_is_not_counted_ready():
    """Issue 32.2: the phases agree with readyReplicas; the phase reads back as a Ready group
    that drains."""
    rec = svc(grp(0), grp(1, nodes=("n2", "n3")), desired=2)
    pods = group_pods(0) + [pod(1, w, node=f"n{2 + w}") for w in range(2)]
    p = plan(rec, pods, desired=2, th="hash-2")
    phases = {i: g["phase"] for i, g in groups(p).items()}
    assert phases == {0: "Draining", 1: "Ready"} and p.status["readyReplicas"] == 1
    again = plan(svc(*p.status["groups"], desired=2), pods, desired=2, th="hash-2", load={0: 2.0}, now=NOW + 5)
    assert groups(again)[0]["phase"] == "Draining" and groups(again)[0]["drainFor"] == "Rollout"
    assert again.status["readyReplicas"] == 1 and again.delete == []


# --------------------------------------------------------------------------- leftovers


def test_pods_of_no_current_group_attempt_are_deleted():
    rec = svc(grp(0, attempt=2))
    p = plan(rec, group_pods(0, attempt=2) + [pod(0, 0, attempt=1), pod(7, 0)])
    assert sorted(p.delete) == ["llm-0-0-1", "llm-7-0-0"]


def test_nothing_is_decided_in_a_namespace_being_deleted():
    p = plan(svc(grp()), [pod(0, 0, deleting=True)], namespace_terminating=True)
    assert p.status is None and p.delete == [] and p.create == [] and p.events == []


def test_a_shape_error_is_reported_as_invalid_spec():
    p = plan(svc(), shape=None, shape_error="tensor x pipeline not a multiple of 8")
    ready = next(c for c in p.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")


def test_a_pod_its_own_template_keeps_off_its_node_fails_the_group_at_once_without_retries():
    tmpl = {"spec": {"containers": [{"name": "vllm", "image": "v", "command": ["vllm", "serve", "m"]}],
                     "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                         {"labelSelector": {"matchLabels": {"app": "nowhere"}}, "topologyKey": "kubernetes.io/hostname"}]}}}}
    stuck = pod(0, 0, phase="Pending", unschedulable_since=NOW - 1,
                unschedulable_message="0/4 nodes are available: 1 node(s) didn't match pod affinity rules")
    p = plan(svc(grp(phase="Starting"), template=tmpl), [stuck, pod(0, 1)])
    g = groups(p)[0]
    assert (g["phase"], g["nodes"], g["startupFailures"]) == ("Failed", [], 0)
    assert "podAffinity" in g["message"] and "UnschedulableTemplate" in reasons(p) and p.release


def test_a_group_added_back_at_an_index_whose_old_pod_still_terminates_gets_a_new_attempt():
    """Found by tests/test_runtime_properties.py: scale 2 -> 1 -> 2 reused the name llm-1-0-0 of
    a pod still terminating; its create got 409 and the group stayed without it."""
    a = AssumedGroup(1, PlacementRecord("p", ("n2", "n3"), "nvlink", "c1", "best fit"), 8)
    p = plan(svc(grp(0)), group_pods(0) + [pod(1, 0, node="n2", deleting=True)], desired=2, assumed={1: a})
    assert groups(p)[1]["attempt"] == 1 and [(c[0].attempt, c[1]) for c in p.create] == [(1, 0), (1, 1)]
