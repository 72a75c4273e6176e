"""Property tests of placement and admission over random fleets and queues."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from examples import examples
from hypothesis import strategies as st

from kubeforge.placement import (
    GangRequest,
    NodeInfo,
    NoFit,
    PendingGang,
    Placement,
    TopologyLevel,
    place_gang,
)

CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
LEVELS = [TopologyLevel("nvlink", CLIQUE), TopologyLevel("block", BLOCK)]
SETTINGS = settings(max_examples=examples(200), deadline=None)


def _node(i, spec):
    block, clique, nested, alloc, used, ready, schedulable, interrupted = spec
    labels = {}
    if block is not None:
        labels[BLOCK] = block
    if clique is not None:
        # Mostly cliques nested in (and named after) their block, sometimes crossing ones.
        labels[CLIQUE] = f"{block}-{clique}" if nested and block else clique
    return NodeInfo(f"n{i:02d}", labels, alloc, min(used, alloc + 2), ready, schedulable, interrupted)


node_specs = st.tuples(
    st.sampled_from(["b0", "b1", "b2", None]),
    st.sampled_from(["c0", "c1", "c2", None]),
    st.sampled_from([True, True, True, False]),
    st.sampled_from([0, 1, 2, 4, 8, 8, 8, 16]),
    st.sampled_from([0, 0, 0, 1, 2, 4, 8, 10]),
    st.sampled_from([True, True, True, False]),
    st.sampled_from([True, True, True, False]),
    st.sampled_from([False, False, False, True]),
)
fleets = st.lists(node_specs, min_size=1, max_size=14).map(
    lambda specs: [_node(i, spec) for i, spec in enumerate(specs)]
)
node_names = st.integers(0, 13).map(lambda i: f"n{i:02d}")


def _request(spec):
    mode, level, replicas, gpus, avoid = spec
    if mode == "None":
        level = None
    elif mode == "Required" and level is None:
        level = "rack"
    return GangRequest(replicas, gpus, mode, level, frozenset(avoid))


gang_requests = st.tuples(
    st.sampled_from(["Required", "Required", "Preferred", "None"]),
    st.sampled_from(["nvlink", "block", None]),
    st.integers(1, 6),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.lists(node_names, max_size=2),
).map(_request)

queues = st.lists(
    st.tuples(gang_requests, st.integers(0, 2), st.integers(0, 5)), min_size=1, max_size=6
).map(lambda items: [PendingGang(f"g{i}", r, p, float(c)) for i, (r, p, c) in enumerate(items)])

scenarios = st.tuples(fleets, st.dictionaries(node_names, st.integers(0, 10), max_size=4), queues)


def slots(nodes, req, reserved):
    """Whole-replica slots per usable node, after reservations."""
    return {
        n.name: max(0, n.gpus_free - reserved.get(n.name, 0)) // req.gpus_per_replica
        for n in nodes
        if n.usable and n.name not in req.avoid_nodes
    }


def domain_room(nodes, req, reserved, level):
    room = Counter()
    by_name = slots(nodes, req, reserved)
    for n in nodes:
        value = n.labels.get(level.node_label)
        if value is not None and n.name in by_name:
            room[value] += by_name[n.name]
    return room


def check_placement(p: Placement, req: GangRequest, nodes, reserved):
    by_name = {n.name: n for n in nodes}
    assert len(p.nodes) == req.replicas
    assert p.gpus == req.gpus
    counts = Counter(p.nodes)
    assert dict(p.gpus_by_node) == {n: k * req.gpus_per_replica for n, k in counts.items()}
    for name, gpus in p.gpus_by_node.items():
        node = by_name[name]
        assert node.usable and name not in req.avoid_nodes
        assert gpus <= max(0, node.gpus_free - reserved.get(name, 0))
    if req.mode == "Required":
        assert p.level == req.level
    if req.mode == "None":
        assert (p.level, p.domain) == (None, None)
    if p.level is not None:
        label = next(lvl.node_label for lvl in LEVELS if lvl.name == p.level)
        assert {by_name[n].labels.get(label) for n in p.nodes} == {p.domain}
    # Ranks: each node, and each run of domain values from the widest level down to any
    # level, is one contiguous run of ranks (so nested domains keep neighbours together).
    keys = [lambda n: n] + [
        lambda n, k=k: tuple(by_name[n].labels.get(lv.node_label) for lv in reversed(LEVELS))[:k]
        for k in range(1, len(LEVELS) + 1)
    ]
    for key in keys:
        values = [key(n) for n in p.nodes]
        runs = [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]
        assert len(runs) == len(set(runs))


@SETTINGS
@given(scenarios)
def test_place_gang_properties(scenario):
    nodes, reserved, queue = scenario
    for pending in queue:
        req = pending.request
        result = place_gang(req, nodes, LEVELS, reserved)
        assert result == place_gang(req, list(reversed(nodes)), LEVELS, reserved)  # order-free
        if isinstance(result, Placement):
            check_placement(result, req, nodes, reserved)
            if req.mode == "Required":
                # Best fit: no fitting domain would leave fewer free GPUs.
                level = next(lv for lv in LEVELS if lv.name == req.level)
                room = domain_room(nodes, req, reserved, level)
                free = Counter()
                for n in nodes:
                    v = n.labels.get(level.node_label)
                    if v is not None and n.usable and n.name not in req.avoid_nodes:
                        free[v] += max(0, n.gpus_free - reserved.get(n.name, 0))
                fits = [d for d, r in room.items() if r >= req.replicas]
                assert min(free[d] for d in fits) == free[result.domain]
            if req.mode == "Preferred" and result.level is None:
                # Never split when some domain of a tried level could hold the gang.
                start = 1 if req.level == "block" else 0
                for level in LEVELS[start:]:
                    assert all(r < req.replicas for r in domain_room(nodes, req, reserved, level).values())
        else:
            assert isinstance(result, NoFit)
            assert result.gpus_short >= 0 and result.reason
            if req.mode == "Required" and req.level in ("nvlink", "block"):
                level = next(lv for lv in LEVELS if lv.name == req.level)
                assert all(r < req.replicas for r in domain_room(nodes, req, reserved, level).values())
                if not result.permanent:
                    best = max(domain_room(nodes, req, reserved, level).values(), default=0)
                    assert result.gpus_short == (req.replicas - best) * req.gpus_per_replica
            elif req.mode != "Required":
                assert sum(slots(nodes, req, reserved).values()) < req.replicas
            if result.permanent and req.level != "rack":
                # Permanent: not even an empty, healthy pool would fit it.
                healthy = [
                    NodeInfo(n.name, n.labels, n.gpus_allocatable, 0) for n in nodes
                ]
                relaxed = GangRequest(req.replicas, req.gpus_per_replica, req.mode, req.level)
                assert isinstance(place_gang(relaxed, healthy, LEVELS), NoFit)

