"""admission/_caches.py: the ModelCacheNode specs the operator writes and the pools' model counts
(issue 29), and the replica groups' ``weights`` in the serving status."""

from __future__ import annotations

from dataclasses import replace

from kubeforge.admission import AssumedGroup, GroupShape, build_ledger, placed_wants, plan_node_caches, pool_view
from kubeforge.api import ModelCachePolicy
from kubeforge.modelcache import CopyState, cache_key
from kubeforge.objects import MODEL_COPY_FAILED, REPLICA_GROUP_NOT_STARTED, PlacementRecord, rfc3339
from kubeforge.serving import ServingContext, plan_serving

import builders as b
from records import NOW, mk_node, mk_pool, mk_service, snapshot

SHA = "0123456789abcdef0123456789abcdef01234567"
HF = {"uri": "hf://meta-llama/Llama-3.1-8B", "revision": SHA}
GROUP0 = {"index": 0, "attempt": 0, "phase": "Starting", "nodes": ["n1"], "pool": "p", "gpusPerPod": 8,
          "templateHash": "h", "admittedAt": rfc3339(NOW - 60)}


def _views(snap):
    ledger = build_ledger(snap, "nvidia.com/gpu")
    return {name: pool_view(p, snap.nodes, ledger.per_node) for name, p in snap.pools.items()}


def _snap(services=(), **pool_kw):
    return snapshot([mk_pool("p", **pool_kw)], [mk_node(f"n{i}", 8) for i in range(4)], services=list(services))


def test_a_placed_replica_asks_its_node_for_the_model_and_nothing_else_is_written():
    svc = mk_service("chat", gpus=8, model=HF, status={"groups": [GROUP0]})
    snap = _snap([svc])
    plan = plan_node_caches(snap, _views(snap), {})
    key = cache_key(svc.spec.model, "default")
    assert list(plan.writes) == ["n1"]  # the other nodes want nothing and have no object: none is made
    spec = plan.writes["n1"]
    assert spec["pool"] == "p" and [(m["key"], m["reasons"]) for m in spec["models"]] == [(key, ["Placed"])]
    assert plan.models["p"][1] == "Llama-3.1-8B 0/4"
    # written once: the next pass, with the object as written, writes nothing
    again = plan_node_caches(snap, _views(snap), {"n1": spec})
    assert again.writes == {} and again.deletes == []


def test_assumed_groups_want_their_nodes_before_the_status_shows_them():
    svc = mk_service("chat", gpus=8, model=HF, status={"desiredReplicas": 1})
    snap = replace(_snap([svc]), assumed_groups={(svc.key, 0): AssumedGroup(0, PlacementRecord("p", ("n3",)), 8)})
    assert [w.nodes for w in placed_wants(snap)] == [["n3"]]


def test_a_node_no_longer_wanted_is_emptied_and_a_gone_node_deleted():
    svc = mk_service("chat", gpus=8, model=HF, status={"groups": []})
    snap = _snap([svc])
    old = {"pool": "p", "hostPath": "/var/lib/kubeforge/models", "models": [{"key": "x", "uri": "hf://a/b"}]}
    plan = plan_node_caches(snap, _views(snap), {"n2": old, "gone": old})
    assert plan.writes == {"n2": {"pool": "p", "hostPath": "/var/lib/kubeforge/models", "models": []}}
    assert plan.deletes == ["gone"]


def test_keep_warm_and_pvc_sources():
    pvc = mk_service("pvc", gpus=8, model={"uri": "pvc://weights/llama"}, status={"groups": [GROUP0]})
    snap = _snap([pvc])
    assert plan_node_caches(snap, _views(snap), {}).writes == {}  # pvc:// is mounted, never cached
    warm = ModelCachePolicy.model_validate({"keepWarm": [{"model": HF, "nodes": 2}]})
    pool = mk_pool("p")
    snap = replace(snap, pools={"p": replace(pool, spec=pool.spec.model_copy(update={"model_cache": warm}))})
    plan = plan_node_caches(snap, _views(snap), {})
    assert len(plan.writes) == 2 and all(s["models"][0]["reasons"] == ["KeepWarm"] for s in plan.writes.values())


def test_the_groups_weights_go_cold_then_loaded_and_keep_their_source():
    svc = mk_service("chat", gpus=8, model=HF, status={"groups": [GROUP0]})
    key = cache_key(svc.spec.model, "default")
    ctx = ServingContext(now=NOW, desired=1, model_key=key, nodes={"n1": mk_node("n1", 8)}, template_hash="h",
                         shape=GroupShape(pool="p", pods=1, gpus=8, held=8),
                         model_caches={"n1": {key: CopyState("Downloading", 40)}})
    rows = plan_serving(svc, ctx).status["groups"]
    assert rows[0]["weights"] == {"source": "Cold", "phase": "Downloading", "progressPercent": 40}
    svc = replace(svc, status={"groups": rows})
    ctx = replace(ctx, model_caches={"n1": {key: CopyState("Ready", 100)}})
    assert plan_serving(svc, ctx).status["groups"][0]["weights"] == {"source": "Cold", "phase": "LoadingWeights"}
    assert "weights" not in plan_serving(svc, replace(ctx, model_key=None)).status["groups"][0]


def test_a_kept_warm_copy_stays_on_its_node_when_replicas_fill_it():
    warm = ModelCachePolicy.model_validate({"keepWarm": [{"model": HF, "nodes": 1}]})
    pool = mk_pool("p")
    snap = replace(_snap(), pools={"p": replace(pool, spec=pool.spec.model_copy(update={"model_cache": warm}))})
    first = plan_node_caches(snap, _views(snap), {})
    assert list(first.writes) == ["n0"]  # all empty: the first by name
    key = first.writes["n0"]["models"][0]["key"]
    held = replace(snap, model_caches={"n0": {key: CopyState("Ready", 100)}},
                   nodes={**snap.nodes, "n0": mk_node("n0", 2)})  # n0 now the smallest
    again = plan_node_caches(held, _views(held), {"n0": first.writes["n0"]})
    assert again.writes == {}  # the copy does not move to an emptier node


def test_a_kept_warm_copy_stays_where_it_is_kept_when_both_nodes_hold_it():
    warm = ModelCachePolicy.model_validate({"keepWarm": [{"model": HF, "nodes": 1}]})
    pool = mk_pool("p")
    snap = replace(_snap(), pools={"p": replace(pool, spec=pool.spec.model_copy(update={"model_cache": warm}))})
    spec = plan_node_caches(snap, _views(snap), {}).writes["n0"]
    key = spec["models"][0]["key"]
    ready = {n: {key: CopyState("Ready", 100)} for n in ("n0", "n1")}
    held = replace(snap, model_caches=ready, nodes={**snap.nodes, "n0": mk_node("n0", 2)})
    assert plan_node_caches(held, _views(held), {"n0": spec}).writes == {}


def test_a_forecast_warms_the_nodes_the_next_replicas_would_get():
    forecast = {"replicas": 5, "method": "Trend"}
    svc = mk_service("chat", gpus=8, model=HF, status={"groups": [GROUP0], "forecast": forecast})
    snap = _snap([svc])
    plan = plan_node_caches(snap, _views(snap), {})
    reasons = {n: [r for m in s["models"] for r in m["reasons"]] for n, s in plan.writes.items()}
    # the running group's node is Placed; two more groups (MAX_WARM_AHEAD) go to free whole nodes
    assert reasons["n1"] == ["Placed"] and sorted(n for n, r in reasons.items() if r == ["Forecast"]) == ["n0", "n2"]
    # warmAhead off, or no forecast beyond the groups: nothing but the Placed copy
    off = ModelCachePolicy.model_validate({"warmAhead": False})
    pool = mk_pool("p")
    quiet = replace(snap, pools={"p": replace(pool, spec=pool.spec.model_copy(update={"model_cache": off}))})
    assert list(plan_node_caches(quiet, _views(quiet), {}).writes) == ["n1"]
    svc1 = mk_service("chat", gpus=8, model=HF, status={"groups": [GROUP0], "forecast": {**forecast, "replicas": 1}})
    snap1 = _snap([svc1])
    assert list(plan_node_caches(snap1, _views(snap1), {}).writes) == ["n1"]


def test_a_cold_placement_stays_cold_when_the_copy_lands_before_the_first_status_write():
    svc = mk_service("chat", gpus=8, model=HF, status={"desiredReplicas": 1})
    key = cache_key(svc.spec.model, "default")
    snap = _snap([svc])
    from kubeforge.admission import plan_admission

    (placed,) = plan_admission(snap, NOW).groups
    assert placed.cached is False  # no node held the model
    assumed = AssumedGroup(0, PlacementRecord("p", placed.placement.nodes), 8, placed.cached)
    node = placed.placement.nodes[0]
    ctx = ServingContext(now=NOW, desired=1, nodes={node: mk_node(node, 8)}, template_hash="h",
                         shape=GroupShape(pool="p", pods=1, gpus=8, held=8), assumed={0: assumed}, model_key=key,
                         model_caches={node: {key: CopyState("Ready", 100)}})  # fetched in the meantime
    (row,) = plan_serving(svc, ctx).status["groups"]
    assert row["weights"]["source"] == "Cold"
    warm = replace(snap, model_caches={"n3": {key: CopyState("Ready", 100)}})
    (again,) = plan_admission(warm, NOW).groups
    assert again.cached is True and again.placement.nodes == ("n3",)


def test_a_group_whose_node_cannot_fetch_the_model_is_placed_again_after_its_startup_timeout():
    svc = mk_service("chat", gpus=8, model=HF, status={"groups": [GROUP0]})
    key = cache_key(svc.spec.model, "default")
    pod = (b.ServingPod(svc, 0, 0).on("n1").phase("Pending").ready(False).record())
    ctx = ServingContext(now=NOW, desired=1, pods=[pod], nodes={"n1": mk_node("n1", 8)}, template_hash="h",
                         shape=GroupShape(pool="p", pods=1, gpus=8, held=8), model_key=key,
                         model_caches={"n1": {key: CopyState("Failed", 0, 0, "DigestMismatch")}})
    (row,) = plan_serving(svc, ctx).status["groups"]
    assert row["attempt"] == 0 and "DigestMismatch" in row["weights"]["message"]  # within its startup timeout
    late = replace(ctx, now=NOW - 60 + svc.spec.startup_timeout_seconds + 1)
    p = plan_serving(svc, late)
    (row,) = p.status["groups"]
    assert row["attempt"] == 1 and row["startupFailures"] == 1 and row["nodes"] == []
    assert [e[1] for e in p.events] == [REPLICA_GROUP_NOT_STARTED]
    assert row["message"].startswith(MODEL_COPY_FAILED) and "DigestMismatch" in p.events[0][2]


def test_a_copy_still_downloading_is_never_cut_short_and_one_nobody_reports_is():
    svc = mk_service("chat", gpus=8, model=HF, status={"groups": [GROUP0]})
    key = cache_key(svc.spec.model, "default")
    pod = (b.ServingPod(svc, 0, 0).on("n1").phase("Pending").ready(False).record())
    late = NOW - 60 + svc.spec.startup_timeout_seconds + 1
    ctx = ServingContext(now=late, desired=1, pods=[pod], nodes={"n1": mk_node("n1", 8)}, template_hash="h",
                         shape=GroupShape(pool="p", pods=1, gpus=8, held=8), model_key=key,
                         model_caches={"n1": {key: CopyState("Downloading", 40)}})
    assert plan_serving(svc, ctx).status["groups"][0]["attempt"] == 0
    (row,) = plan_serving(svc, replace(ctx, model_caches={})).status["groups"]
    assert row["attempt"] == 1 and "no node agent reported" in row["message"]
