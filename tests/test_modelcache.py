"""The pure decisions of the node model caches (issue 29): keys and pins, placement's preference
for nodes that hold the model (never a requirement), what each node should hold, LRU eviction,
and what the statuses say."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from kubeforge.admission import plan_admission
from kubeforge.api import InferenceServiceSpec, KeepWarm, ModelCachePolicy, ModelSource, WantReason
from kubeforge.modelcache import (
    CopyState, Held, PoolNodes, Want, cache_key, cache_state, choose_evictions, group_weights, keep_warm_nodes,
    listing_digest, node_specs, place_preferring_cache, pool_models, pool_wants, ready_nodes,
)
from kubeforge.placement import GangRequest, NodeInfo, Placement, TopologyLevel, place_gang

from records import NOW, mk_node, mk_pool, mk_service, snapshot

SHA = "0123456789abcdef0123456789abcdef01234567"
HF = {"uri": "hf://meta-llama/Llama-3.1-8B", "revision": SHA, "sizeBytes": 16_000_000_000}
CLIQUE = "nvidia.com/gpu.clique"
READY = CopyState("Ready", 100, 16)


def source(**kw) -> ModelSource:
    return ModelSource.model_validate({**HF, **kw})


@pytest.mark.parametrize("body, why", [
    ({"uri": "hf://org/m"}, "40-hex commit"),
    ({"uri": "hf://org/m", "revision": "main"}, "40-hex commit"),
    ({"uri": "oci://reg.local/models/llama:latest"}, "tags are refused"),
    ({"uri": "ftp://x/y"}, "should match pattern"),
])
def test_unpinned_sources_are_refused(body, why):
    with pytest.raises(ValidationError, match=why):
        ModelSource.model_validate(body)


def test_pinned_sources_are_accepted_and_pvc_is_never_cached():
    assert source().cached and source().scheme == "hf"
    assert ModelSource.model_validate({"uri": "oci://reg.local/m@sha256:" + "a" * 64}).cached
    assert ModelSource.model_validate({"uri": "s3://bucket/llama"}).cached
    assert not ModelSource.model_validate({"uri": "pvc://weights/llama"}).cached
    spec = InferenceServiceSpec.model_validate({"pools": ["p"], "template": {"spec": {"containers": [
        {"name": "vllm", "image": "vllm"}]}}, "model": HF})
    assert spec.model is not None and spec.model.mount_path == "/mnt/models"


def test_a_copy_is_shared_by_the_cluster_unless_it_needs_a_secret():
    assert cache_key(source(), "a") == cache_key(source(), "b")  # public: one copy a node for everyone
    private = source(credentialsSecret="hf-token")
    assert cache_key(private, "a") != cache_key(private, "b")  # within the Secret's namespace only
    assert cache_key(source(), "a") != cache_key(source(revision="f" * 40), "a")  # another pin, another copy
    key = cache_key(source(), None)
    assert key.startswith("llama-3-1-8b-") and len(key) <= 63


def test_the_listing_digest_ignores_order_and_etag_quotes():
    a = listing_digest([("b.safetensors", 10, '"e2"'), ("config.json", 3, "e1")])
    assert a == listing_digest([("config.json", 3, '"e1"'), ("b.safetensors", 10, "e2")])
    assert a != listing_digest([("config.json", 4, "e1"), ("b.safetensors", 10, "e2")])


def _nodes(n=4, free=8):
    return [NodeInfo(f"n{i}", {CLIQUE: f"c{i // 2}"}, 8, 8 - free) for i in range(n)]


LEVELS = (TopologyLevel("nvlink", CLIQUE),)


def test_placement_prefers_nodes_holding_the_model():
    req = GangRequest(replicas=1, gpus_per_replica=8, mode="None")
    plain = place_gang(req, _nodes(), LEVELS, {})
    assert isinstance(plain, Placement) and plain.nodes == ("n0",)
    got = place_preferring_cache(place_gang, req, _nodes(), LEVELS, {}, frozenset({"n3"}))
    assert got.result.nodes == ("n3",) and got.all_cached and got.tier == 1
    assert got.result.reason.startswith("weights cached on every node")


def test_a_group_goes_to_the_domain_holding_a_copy_when_no_cached_pair_fits():
    req = GangRequest(replicas=2, gpus_per_replica=8, mode="Required", level="nvlink")
    got = place_preferring_cache(place_gang, req, _nodes(), LEVELS, {}, frozenset({"n2"}))
    assert got.result.domain == "c1" and set(got.result.nodes) == {"n2", "n3"} and got.tier == 2
    assert not got.all_cached and got.cached == {"n2"}


def test_a_replica_never_waits_for_a_cache_when_uncached_capacity_exists():
    req = GangRequest(replicas=1, gpus_per_replica=8, mode="None")
    full_cached = {"n3": 8}  # the only node with the model is full
    got = place_preferring_cache(place_gang, req, _nodes(), LEVELS, full_cached, frozenset({"n3"}))
    assert isinstance(got.result, Placement) and got.result.nodes == ("n0",) and got.tier == 3
    # nothing fits anywhere: the pool's own reason, not the cache's
    none = place_preferring_cache(place_gang, req, _nodes(), LEVELS, {f"n{i}": 8 for i in range(4)}, frozenset({"n3"}))
    assert none.result == place_gang(req, _nodes(), LEVELS, {f"n{i}": 8 for i in range(4)})


def test_admission_places_a_service_on_the_node_holding_its_model():
    svc = mk_service("chat", gpus=8, status={"desiredReplicas": 2}, model=HF)
    key = cache_key(svc.spec.model, "default")
    snap = snapshot([mk_pool("p")], [mk_node(f"n{i}", 8) for i in range(4)], services=[svc])
    plain = plan_admission(snap, NOW)
    assert [g.placement.nodes for g in plain.groups] == [("n0",), ("n1",)]
    snap = replace(snap, model_caches={"n2": {key: READY}, "n0": {key: CopyState("Downloading", 40)}})
    plan = plan_admission(snap, NOW)
    assert [g.placement.nodes for g in plan.groups] == [("n2",), ("n0",)]  # cached first, then cold, never waits


def _pool(**policy):
    return PoolNodes("p", ModelCachePolicy.model_validate(policy), [f"n{i}" for i in range(6)],
                     {f"n{i}": f"b{i % 2}" for i in range(6)}, {f"n{i}": i for i in range(6)})


def test_keep_warm_spreads_over_domains_emptiest_first():
    pool = _pool()
    assert keep_warm_nodes(pool, KeepWarm.model_validate({"model": HF, "nodes": 3})) == ["n4", "n5", "n2"]
    assert keep_warm_nodes(pool, KeepWarm.model_validate({"model": HF})) == pool.nodes


def test_node_specs_merge_reasons_and_fetch_placed_copies_first():
    pool = _pool(keepWarm=[{"model": HF, "nodes": 2}], capacityBytes=10**12)
    other = source(uri="s3://models/qwen", revision=None)
    wants = pool_wants([pool]) + [Want("p", ["n4"], other, "ns", WantReason.PLACED),
                                  Want("p", ["n4", "n1"], source(), "ns", WantReason.FORECAST)]
    specs = node_specs([pool], wants)
    assert set(specs) == {f"n{i}" for i in range(6)} and specs["n0"]["models"] == []
    n4 = specs["n4"]
    assert n4["capacityBytes"] == 10**12 and n4["hostPath"] == "/var/lib/kubeforge/models"
    assert [(m["uri"], m["reasons"]) for m in n4["models"]] == [
        ("s3://models/qwen", ["Placed"]), ("hf://meta-llama/Llama-3.1-8B", ["Forecast", "KeepWarm"])]


def test_lru_eviction_never_takes_a_wanted_copy():
    held = [Held("a", 40, 100, False), Held("b", 40, 50, False), Held("c", 40, 10, True)]
    assert choose_evictions(held, None, 999) == []
    assert choose_evictions(held, 200, 40) == []
    assert choose_evictions(held, 130, 40) == ["b"]  # the least recently used unwanted one
    assert choose_evictions(held, 90, 40) == ["b", "a"]
    assert choose_evictions(held, 60, 40) is None  # c is wanted: it stays, the download fails DiskFull


def test_pool_counts_and_group_weights():
    key = cache_key(source(), None)
    specs = {"n0": {"models": [{"key": key, "uri": HF["uri"]}]}}
    state = cache_state({"n0": {"models": [{"key": key, "phase": "Ready", "progressPercent": 100}]},
                         "n1": {"models": [{"key": key, "phase": "Downloading", "progressPercent": 30}]}})
    assert ready_nodes(state, key) == {"n0"}
    rows, summary = pool_models(["n0", "n1", "n2"], specs, state)
    assert rows[0]["ready"] == 1 and rows[0]["downloading"] == 1 and summary == "Llama-3.1-8B 1/3"
    assert group_weights(None, ["n0"], key, state, False) == {"source": "Cached", "phase": "LoadingWeights"}
    cold = group_weights(None, ["n0", "n1"], key, state, False)
    assert cold == {"source": "Cold", "phase": "Downloading", "progressPercent": 30}
    assert group_weights(cold, ["n0", "n1"], key, cache_state({}), True) == {"source": "Cold", "phase": "Loaded"}


def test_a_failed_copy_is_named_in_the_groups_weights():
    key = cache_key(source(), None)
    state = cache_state({"n0": {"models": [{"key": key, "phase": "Failed", "reason": "DigestMismatch"}]},
                         "n1": {"models": [{"key": key, "phase": "Ready", "progressPercent": 100}]}})
    got = group_weights(None, ["n0", "n1"], key, state, False)
    assert got["phase"] == "Downloading" and got["message"] == "copy failed on n0: DigestMismatch (the node agent retries)"
