"""Table-driven tests of the pure placement core (kubeforge.placement)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubeforge.objects import node_from_k8s
from kubeforge.placement._nodes import node_info
from kubeforge.admission import queue_order
from kubeforge.placement import (
    WELL_KNOWN_LEVELS,
    GangRequest,
    NodeInfo,
    NoFit,
    PendingGang,
    Placement,
    TopologyLevel,
    capacity_type,
    detect_levels,
    node_affinity,
    place_gang,
    summarize_pool,
)

CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
LEVELS = [TopologyLevel("nvlink", CLIQUE), TopologyLevel("block", BLOCK)]


def node_info_from_k8s(node, gpu_resource="nvidia.com/gpu", allocated=0, tolerated_taint_keys=()):
    """NodeInfo of a raw Node dict, tolerating the taints whose keys are given (any value, effect)."""
    tolerations = [{"key": k, "operator": "Exists"} for k in tolerated_taint_keys]
    return node_info(node_from_k8s(node), gpu_resource, allocated, tolerations)


# --- builders ---------------------------------------------------------------------------


def node(name: str, gpus: int = 8, used: int = 0, clique: str | None = None,
         block: str | None = None, **flags: bool) -> NodeInfo:
    labels = {k: v for k, v in ((CLIQUE, clique), (BLOCK, block)) if v is not None}
    return NodeInfo(name=name, labels=labels, gpus_allocatable=gpus, gpus_allocated=used, **flags)


def fleet(blocks: int = 2, nvlink_per_block: int = 2, nodes_per_nvlink: int = 4, gpus: int = 8,
          spot: bool = False) -> list[NodeInfo]:
    """Nodes named ``b{block}-c{clique}-n{i}`` in clique ``b{b}-c{c}`` and block ``b{b}``."""
    out = []
    for b in range(blocks):
        for c in range(nvlink_per_block):
            for i in range(nodes_per_nvlink):
                labels = {CLIQUE: f"b{b}-c{c}", BLOCK: f"b{b}"}
                if spot:
                    labels["karpenter.sh/capacity-type"] = "spot"
                out.append(NodeInfo(f"b{b}-c{c}-n{i}", labels, gpus, 0))
    return out


def use(nodes: list[NodeInfo], **allocated: int) -> list[NodeInfo]:
    """Copy of ``nodes`` with ``gpus_allocated`` set (keys: node names with '-' as '_')."""
    alloc = {k.replace("_", "-"): v for k, v in allocated.items()}
    return [replace(n, gpus_allocated=alloc.get(n.name, n.gpus_allocated)) for n in nodes]


def gang(replicas: int, gpus: int = 8, mode: str = "Required", level: str | None = "nvlink",
         avoid: tuple[str, ...] = ()) -> GangRequest:
    return GangRequest(replicas, gpus, mode, level if mode != "None" else None, frozenset(avoid))


# --- NodeInfo, capacity type, node_info_from_k8s ----------------------------------------


def test_gpus_free_never_negative():
    assert NodeInfo("a", {}, 8, 3).gpus_free == 5
    assert NodeInfo("a", {}, 4, 6).gpus_free == 0


@pytest.mark.parametrize("bad", [{"gpus_allocatable": -1}, {"gpus_allocated": -2}, {"name": ""}])
def test_nodeinfo_rejects_bad_values(bad):
    kwargs = {"name": "a", "labels": {}, "gpus_allocatable": 8, "gpus_allocated": 0} | bad
    with pytest.raises(ValueError):
        NodeInfo(**kwargs)


@pytest.mark.parametrize(
    "labels, expected",
    [
        ({}, "on-demand"),
        ({"karpenter.sh/capacity-type": "spot"}, "spot"),
        ({"karpenter.sh/capacity-type": "on-demand"}, "on-demand"),
        ({"cloud.google.com/gke-spot": "true"}, "spot"),
        ({"cloud.google.com/gke-spot": "false"}, "on-demand"),
        ({"eks.amazonaws.com/capacityType": "SPOT"}, "spot"),
        ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, "on-demand"),
        ({"kubernetes.azure.com/scalesetpriority": "spot"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "regular"}, "on-demand"),
    ],
)
def test_capacity_type(labels, expected):
    assert capacity_type(labels) == expected


def k8s_node(name="n1", ready="True", unschedulable=None, taints=(), alloc="8", cap="8", labels=None):
    node = {
        "metadata": {"name": name, "labels": labels or {"kubernetes.io/hostname": name}},
        "spec": {"taints": list(taints)},
        "status": {
            "allocatable": {"nvidia.com/gpu": alloc, "cpu": "96"},
            "capacity": {"nvidia.com/gpu": cap},
            "conditions": [{"type": "MemoryPressure", "status": "False"}]
            + ([{"type": "Ready", "status": ready}] if ready is not None else []),
        },
    }
    if unschedulable is not None:
        node["spec"]["unschedulable"] = unschedulable
    return node


SPOT_ITN = {"key": "aws-node-termination-handler/spot-itn", "value": "x", "effect": "NoSchedule"}
NVIDIA_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    "kwargs, tolerated, expect",
    [
        ({}, (), dict(ready=True, schedulable=True, interrupted=False)),
        ({"ready": "False"}, (), dict(ready=False, schedulable=True, interrupted=False)),
        ({"ready": "Unknown"}, (), dict(ready=False)),
        ({"ready": None}, (), dict(ready=False)),
        ({"unschedulable": True}, (), dict(schedulable=False, interrupted=False)),
        ({"taints": [NVIDIA_TAINT]}, (), dict(schedulable=False)),
        ({"taints": [NVIDIA_TAINT]}, ("nvidia.com/gpu",), dict(schedulable=True)),
        ({"taints": [{"key": "x", "effect": "PreferNoSchedule"}]}, (), dict(schedulable=True)),
        ({"taints": [{"key": "x", "effect": "NoExecute"}]}, (), dict(schedulable=False)),
        ({"taints": [SPOT_ITN]}, (), dict(schedulable=False, interrupted=True)),
        ({"taints": [SPOT_ITN]}, (SPOT_ITN["key"],), dict(schedulable=True, interrupted=True)),
        ({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}, (), dict(interrupted=True)),
        ({"taints": [{"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}]},
         (), dict(interrupted=True)),
        ({"taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]},
         (), dict(interrupted=True)),
    ],
)
def test_node_info_from_k8s_state(kwargs, tolerated, expect):
    info = node_info_from_k8s(k8s_node(**kwargs), "nvidia.com/gpu", 2, tolerated)
    for attr, value in expect.items():
        assert getattr(info, attr) == value, attr
    assert (info.gpus_allocatable, info.gpus_allocated, info.gpus_free) == (8, 2, 6)


def test_node_info_from_k8s_counts_and_labels():
    info = node_info_from_k8s(k8s_node(alloc="7", cap="8", labels={CLIQUE: "c1"}), allocated=0)
    assert (info.gpus_capacity, info.gpus_allocatable, info.labels) == (8, 7, {CLIQUE: "c1"})
    other = node_info_from_k8s(k8s_node(), gpu_resource="amd.com/gpu")
    assert (other.gpus_allocatable, other.gpus_capacity) == (0, 0)
    # A malformed quantity on one node never stops the operator: that node offers no GPUs.
    assert node_info_from_k8s(k8s_node(alloc="lots")).gpus_allocatable == 0


# --- detect_levels ----------------------------------------------------------------------


def names(levels):
    return [lvl.name for lvl in levels]


def test_well_known_levels_are_unique_and_provider_ordered():
    labels = [lvl.node_label for lvl in WELL_KNOWN_LEVELS]
    assert len(set(labels)) == len(labels) == len(set(names(WELL_KNOWN_LEVELS)))
    order = {lvl.node_label: i for i, lvl in enumerate(WELL_KNOWN_LEVELS)}
    chains = [
        [CLIQUE, "cloud.google.com/gce-topology-subblock", BLOCK],
        ["topology.k8s.aws/network-node-layer-3", "topology.k8s.aws/network-node-layer-2",
         "topology.k8s.aws/network-node-layer-1"],
        ["oci.oraclecloud.com/rdma.local_block_id", "oci.oraclecloud.com/rdma.network_block_id",
         "oci.oraclecloud.com/rdma.hpc_island_id"],
        ["network.topology.nvidia.com/accelerator", "network.topology.nvidia.com/leaf",
         "network.topology.nvidia.com/spine", "network.topology.nvidia.com/core"],
    ]
    for chain in chains:
        assert [order[c] for c in chain] == sorted(order[c] for c in chain)


AWS1, AWS2, AWS3 = (f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3))


@pytest.mark.parametrize(
    "label_sets, expected",
    [
        ([], []),
        ([{"foo": "bar"}], []),
        ([{BLOCK: "b0", CLIQUE: "c0"}], ["nvlink", "block"]),
        ([{BLOCK: "b0"}, {CLIQUE: "c0"}], ["nvlink", "block"]),  # no overlap: table order
        ([{AWS1: "s", AWS2: "m", AWS3: "r"}], ["aws-layer-3", "aws-layer-2", "aws-layer-1"]),
        # nvlink cliques nest in AWS layer 3 here: narrowest.
        ([{AWS3: "r0", CLIQUE: "c0"}, {AWS3: "r0", CLIQUE: "c1"}, {AWS3: "r1", CLIQUE: "c2"}],
         ["nvlink", "aws-layer-3"]),
        # A "clique" label spanning two layer-3 racks is observed wider than layer 3.
        ([{AWS3: "r0", CLIQUE: "c0"}, {AWS3: "r1", CLIQUE: "c0"}], ["aws-layer-3", "nvlink"]),
        # Crossing partitions: table order.
        ([{AWS3: "r0", CLIQUE: "c0"}, {AWS3: "r1", CLIQUE: "c0"}, {AWS3: "r1", CLIQUE: "c1"},
          {AWS3: "r0", CLIQUE: "c1"}], ["nvlink", "aws-layer-3"]),
        # GCE block observed inside an AWS layer-1 domain, label mix on one node set.
        ([{BLOCK: "b0", AWS1: "s0"}, {BLOCK: "b1", AWS1: "s0"}], ["block", "aws-layer-1"]),
        ([{BLOCK: "b0", AWS1: "s0"}, {BLOCK: "b0", AWS1: "s1"}], ["aws-layer-1", "block"]),
    ],
)
def test_detect_levels(label_sets, expected):
    nodes = [NodeInfo(f"n{i}", labels, 8, 0) for i, labels in enumerate(label_sets)]
    assert names(detect_levels(nodes)) == expected


def test_detect_levels_fleet():
    assert detect_levels(fleet()) == LEVELS


# --- summarize_pool ---------------------------------------------------------------------


def test_summarize_pool_numbers():
    nodes = fleet(blocks=1, nvlink_per_block=2, nodes_per_nvlink=2)
    nodes = use(nodes, b0_c0_n0=8, b0_c0_n1=3)
    nodes[2] = replace(nodes[2], ready=False)  # b0-c1-n0: its free GPUs do not count
    nodes.append(NodeInfo("spot-1", {"cloud.google.com/gke-spot": "true", BLOCK: "b9"}, 4, 1,
                          gpus_capacity=8))
    nodes.append(NodeInfo("bare", {}, 8, 0, interrupted=True))
    s = summarize_pool(nodes, LEVELS)
    assert (s.nodes_total, s.nodes_ready, s.nodes_usable, s.nodes_spot, s.nodes_on_demand) == (6, 5, 4, 1, 5)
    # allocatable and allocated count usable nodes only, so allocated + free == allocatable; the
    # NotReady and the interrupted node's 16 GPUs are "unavailable".
    assert (s.gpus.capacity, s.gpus.allocatable, s.gpus.allocated, s.gpus.free, s.gpus.unavailable) == (48, 28, 12, 16, 16)
    assert (s.gpus_spot.capacity, s.gpus_spot.allocatable, s.gpus_spot.allocated, s.gpus_spot.free) == (8, 4, 1, 3)
    assert s.gpus_on_demand.free == 13
    table = [(d.level, d.name, d.nodes, d.gpus.allocatable, d.gpus.allocated, d.gpus.free, d.gpus.unavailable) for d in s.domains]
    assert table == [
        ("nvlink", "b0-c0", 2, 16, 11, 5, 0),
        ("nvlink", "b0-c1", 2, 8, 0, 8, 8),
        ("block", "b0", 4, 24, 11, 13, 8),
        ("block", "b9", 1, 4, 1, 3, 0),
    ]
    for counts in [s.gpus, s.gpus_spot, s.gpus_on_demand] + [d.gpus for d in s.domains]:
        assert counts.allocated + counts.free == counts.allocatable
    assert s.domains_omitted == 0
    assert [d.gpus.capacity for d in s.domains] == [16, 16, 32, 8]


def test_summarize_pool_bounds_domains_keeping_the_freest():
    nodes = use(fleet(blocks=1, nvlink_per_block=4, nodes_per_nvlink=1), b0_c0_n0=8, b0_c2_n0=2)
    s = summarize_pool(nodes, LEVELS, max_domains_per_level=2)
    assert [(d.level, d.name) for d in s.domains] == [("nvlink", "b0-c1"), ("nvlink", "b0-c3"), ("block", "b0")]
    assert s.domains_omitted == 2
    assert summarize_pool([], LEVELS).domains == ()


# --- place_gang: modes and best fit -----------------------------------------------------


def test_required_fits_in_one_clique():
    p = place_gang(gang(4), fleet(), LEVELS)
    assert isinstance(p, Placement)
    assert (p.level, p.domain) == ("nvlink", "b0-c0")
    assert p.nodes == ("b0-c0-n0", "b0-c0-n1", "b0-c0-n2", "b0-c0-n3")
    assert dict(p.gpus_by_node) == {n: 8 for n in p.nodes}
    assert p.reason == (
        "best fit: nvlink domain b0-c0 leaves 0 of its 32 free GPUs (3 other domains fit); "
        "4 x 8 GPUs on 4 nodes"
    )


@pytest.mark.parametrize(
    "allocated, request_, expect_domain",
    [
        # b1-c1 has exactly 16 free: best fit beats the empty cliques.
        ({"b0_c0_n0": 8, "b1_c1_n0": 8, "b1_c1_n1": 8}, gang(2), "b1-c1"),
        # b0-c0 has 24 free (leaves 8), b1-c1 16 free (leaves 0).
        ({"b0_c0_n0": 8, "b1_c1_n0": 8, "b1_c1_n1": 8}, gang(2, 8, level="nvlink"), "b1-c1"),
        # b0-c0 has 28 free but room for only 3 replicas; the other cliques tie: name decides.
        ({"b0_c0_n0": 4}, gang(4), "b0-c1"),
        # Block level: best fit block b1 (24 free after use) vs b0 (64 free).
        ({"b1_c0_n0": 8, "b1_c0_n1": 8, "b1_c1_n0": 8, "b1_c1_n1": 8, "b1_c1_n2": 8},
         gang(3, level="block"), "b1"),
    ],
)
def test_required_best_fit_domain(allocated, request_, expect_domain):
    p = place_gang(request_, use(fleet(), **allocated), LEVELS)
    assert isinstance(p, Placement), p
    assert p.domain == expect_domain


def test_required_best_fit_ties_fewer_nodes_then_name():
    # Two cliques with 16 free each: c0 as 2 x 8 (2 nodes), c1 as 1 x 16 (1 node).
    nodes = [
        node("a1", 8, clique="c0"), node("a2", 8, clique="c0"),
        node("z1", 16, clique="c1"),
    ]
    p = place_gang(gang(2), nodes, LEVELS[:1])
    assert (p.domain, p.nodes) == ("c1", ("z1", "z1"))
    # Equal leftovers and node counts: domain name decides.
    same = [node("x", 8, clique="c9"), node("y", 8, clique="c3")]
    assert place_gang(gang(1), same, LEVELS[:1]).domain == "c3"


def test_required_within_block_prefers_one_clique():
    # Block b0 fits 3 x 8 either spread over cliques or inside b0-c1 (which has 3 free nodes).
    nodes = use(fleet(blocks=1), b0_c1_n0=8, b0_c0_n0=8, b0_c0_n1=8)
    p = place_gang(gang(3, level="block"), nodes, LEVELS)
    assert (p.level, p.domain) == ("block", "b0")
    assert set(p.nodes) == {"b0-c1-n1", "b0-c1-n2", "b0-c1-n3"}


def test_node_best_fit_uses_exact_free_and_fewest_nodes():
    nodes = [
        node("big", 16, clique="c"),
        node("exact", 8, 4, clique="c"),
        node("half", 8, 0, clique="c"),
    ]
    # 1 x 4: the node left with 0 free ("exact") wins.
    assert place_gang(gang(1, 4), nodes, LEVELS[:1]).nodes == ("exact",)
    # 4 x 4: "big" takes all 4 on one node.
    assert place_gang(gang(4, 4), nodes, LEVELS[:1]).nodes == ("big",) * 4
    # 5 x 4: big takes 4, then the exact node finishes.
    p = place_gang(gang(5, 4), nodes, LEVELS[:1])
    assert p.nodes == ("big",) * 4 + ("exact",)
    assert dict(p.gpus_by_node) == {"big": 16, "exact": 4}


def test_several_replicas_share_a_node():
    p = place_gang(gang(4, 2), fleet(1, 1, 2), LEVELS)
    assert p.nodes == ("b0-c0-n0",) * 4
    assert dict(p.gpus_by_node) == {"b0-c0-n0": 8}


def test_preferred_takes_narrowest_fitting_level():
    p = place_gang(gang(4, mode="Preferred", level=None), fleet(), LEVELS)
    assert (p.level, p.domain) == ("nvlink", "b0-c0")


def test_preferred_goes_wider_then_pool():
    f = fleet()
    p = place_gang(gang(6, mode="Preferred"), f, LEVELS)
    assert (p.level, p.domain) == ("block", "b0")
    assert p.reason.startswith("no nvlink domain fits; best fit: block domain b0")
    # Never split when one domain can hold it: 6 fits a block, so nodes are in one block.
    assert {n.split("-")[0] for n in p.nodes} == {"b0"}
    p = place_gang(gang(12, mode="Preferred"), f, LEVELS)
    assert (p.level, p.domain) == (None, None)
    assert len(p.nodes) == 12 and "no single nvlink or block domain fits" in p.reason
    # Preferred at block skips nvlink as the placement level.
    p = place_gang(gang(2, mode="Preferred", level="block"), f, LEVELS)
    assert (p.level, p.domain) == ("block", "b0")
    # Inside the block it still packs into one clique.
    assert len({n.rsplit("-", 1)[0] for n in p.nodes}) == 1


def test_preferred_unknown_level_tries_all_levels():
    p = place_gang(gang(2, mode="Preferred", level="rack"), fleet(), LEVELS)
    assert (p.level, p.domain) == ("nvlink", "b0-c0")
    assert p.reason.startswith("preferred level 'rack' is not one of this pool's levels (nvlink, block); ")


def test_mode_none_packs_anywhere():
    nodes = use(fleet(), b1_c1_n3=4)
    p = place_gang(gang(1, 4, mode="None"), nodes, LEVELS)
    assert (p.level, p.domain, p.nodes) == (None, None, ("b1-c1-n3",))
    p = place_gang(gang(16, mode="None"), fleet(), LEVELS)
    assert len(set(p.nodes)) == 16


def test_required_without_level_is_rejected():
    with pytest.raises(ValueError):
        GangRequest(2, 8, "Required", None)
    with pytest.raises(ValueError):
        GangRequest(0, 8, "None")
    with pytest.raises(ValueError):
        GangRequest(1, 8, "Sometimes", "nvlink")  # type: ignore[arg-type]


# --- NoFit ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "allocated, request_, level, short, permanent, reason",
    [
        ({"b0_c0_n0": 8, "b0_c1_n0": 8, "b1_c0_n0": 8, "b1_c1_n0": 8}, gang(4), "nvlink", 8, False,
         "needs 32 GPUs (4 x 8) inside one nvlink domain; the roomiest (b0-c0) has room for "
         "3 replicas (24 GPUs free): 8 GPUs short"),
        ({}, gang(5), "nvlink", 8, True,
         "needs 40 GPUs (5 x 8) inside one nvlink domain; the largest (b0-c0) holds 4 replicas "
         "(32 GPUs) even when empty: 8 GPUs short"),
        ({}, gang(1, 16), "nvlink", 16, True,
         "a replica needs 16 GPUs, more than the largest node's 8 allocatable GPUs (gpusPerReplica, plus what "
         "its sidecars and init containers request by the scheduler's rule)"),
        ({}, gang(2, level="rack"), "rack", 16, True,
         "unknown topology level 'rack'; this pool's levels are: nvlink, block"),
        ({}, gang(17, mode="None"), None, 8, True,
         "needs 136 GPUs (17 x 8) anywhere in the pool; even with every node empty the pool "
         "holds 16 replicas (128 GPUs)"),
        ({"b0_c0_n0": 1}, gang(16, mode="None"), None, 8, False,
         "needs 128 GPUs (16 x 8) anywhere in the pool; usable nodes have room for 15 replicas "
         "(120 GPUs): 8 GPUs short"),
        ({"b0_c0_n0": 1}, gang(16, mode="Preferred"), None, 8, False,
         "needs 128 GPUs (16 x 8) anywhere in the pool (no single nvlink or block domain fits); "
         "usable nodes have room for 15 replicas (120 GPUs): 8 GPUs short"),
    ],
)
def test_nofit(allocated, request_, level, short, permanent, reason):
    r = place_gang(request_, use(fleet(), **allocated), LEVELS)
    assert r == NoFit(reason, level, short, permanent)


def test_nofit_edge_cases():
    assert place_gang(gang(1), [], LEVELS).permanent
    # Level exists but no node carries its label.
    r = place_gang(gang(1), [node("a")], LEVELS)
    assert isinstance(r, NoFit) and r.permanent and "no node carries the label" in r.reason
    # Only unusable nodes carry the label: wait.
    r = place_gang(gang(1), [node("a", clique="c", ready=False)], LEVELS)
    assert isinstance(r, NoFit) and not r.permanent and r.gpus_short == 8
    # Fragmented free GPUs do not count: 7 free on each of 4 nodes, 0 whole replicas.
    r = place_gang(gang(1), use(fleet(1, 1, 4), b0_c0_n0=1, b0_c0_n1=1, b0_c0_n2=1, b0_c0_n3=1), LEVELS)
    assert isinstance(r, NoFit) and r.gpus_short == 8 and not r.permanent


# --- usable nodes, avoid_nodes, reserved ------------------------------------------------


@pytest.mark.parametrize("flag", [{"ready": False}, {"schedulable": False}, {"interrupted": True}])
def test_unusable_nodes_skipped(flag):
    nodes = fleet(1, 1, 4)
    nodes[0] = replace(nodes[0], **flag)
    p = place_gang(gang(3), nodes, LEVELS)
    assert "b0-c0-n0" not in p.nodes
    r = place_gang(gang(4), nodes, LEVELS)
    assert isinstance(r, NoFit) and not r.permanent and r.gpus_short == 8


def test_avoid_nodes():
    p = place_gang(gang(3, avoid=("b0-c0-n1",)), fleet(1, 1, 4), LEVELS)
    assert p.nodes == ("b0-c0-n0", "b0-c0-n2", "b0-c0-n3")
    # Avoiding a node in the best clique moves the gang to another clique.
    p = place_gang(gang(4, avoid=("b0-c0-n1",)), fleet(), LEVELS)
    assert p.domain == "b0-c1"


def test_reserved_gpus_are_not_free():
    f = fleet(1, 2, 2)
    p = place_gang(gang(2), f, LEVELS, reserved={"b0-c0-n0": 8})
    assert p.domain == "b0-c1"
    p = place_gang(gang(1, 4), f, LEVELS, reserved={"b0-c1-n1": 4})
    assert p.nodes == ("b0-c1-n1",)  # exactly fills the half-reserved node
    r = place_gang(gang(1), f, LEVELS, reserved={n.name: 1 for n in f})
    assert isinstance(r, NoFit) and not r.permanent


# --- rank order and node affinity -------------------------------------------------------


def test_rank_order_groups_narrow_domains():
    nodes = use(fleet(blocks=2, nvlink_per_block=2, nodes_per_nvlink=2), b0_c0_n0=8, b1_c1_n1=8)
    p = place_gang(gang(6, 4, mode="None"), nodes, LEVELS)
    cliques = [n.rsplit("-", 1)[0] for n in p.nodes]
    # Each clique's ranks are one contiguous run, and nodes are consecutive.
    runs = [c for i, c in enumerate(cliques) if i == 0 or cliques[i - 1] != c]
    assert len(runs) == len(set(runs))
    node_runs = [n for i, n in enumerate(p.nodes) if i == 0 or p.nodes[i - 1] != n]
    assert len(node_runs) == len(set(node_runs))
    assert list(p.nodes) == sorted(p.nodes)  # fleet names sort like their topology path


def test_node_affinity():
    p = place_gang(gang(2), fleet(), LEVELS)
    assert node_affinity(p, 1, LEVELS) == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b0-c0-n1"]}],
                    "matchExpressions": [{"key": CLIQUE, "operator": "In", "values": ["b0-c0"]}],
                }
            ]
        }
    }
    pool = place_gang(gang(2, mode="None"), fleet(), LEVELS)
    terms = node_affinity(pool, 0, LEVELS)["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool.nodes[0]]}]}
    ]
    with pytest.raises(IndexError):
        node_affinity(p, 2, LEVELS)
    with pytest.raises(ValueError):
        node_affinity(p, 0, LEVELS[1:])


# --- admission --------------------------------------------------------------------------


def pending(key, replicas, gpus=8, priority=0, created=0.0, mode="Required", level="nvlink"):
    return PendingGang(key, gang(replicas, gpus, mode, level), priority, created)


def test_queue_order_priority_then_age_then_key():
    queue = [
        pending("late", 4, created=5),
        pending("early", 4, created=1),
        pending("vip", 4, priority=10, created=9),
        pending("b-tie", 4, created=1),
    ]
    assert [p.key for p in queue_order(queue)] == ["vip", "b-tie", "early", "late"]
