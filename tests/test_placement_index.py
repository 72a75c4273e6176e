"""The pool's placement index (issue 31, scale): within one admission round the candidates and
each domain's totals are kept from gang to gang and refreshed only on the nodes whose promised
GPUs changed, instead of :func:`place_gang` looking at every node for every gang.

Proof that it changes nothing:

- :class:`PoolIndex` against :func:`place_gang` on random fleets (taints, cordons, unready and
  interrupted nodes, missing labels, node resources) and random gangs (every mode, unknown and
  repeated levels, whole nodes with spares, one per node, spread keys, node filters, needs,
  tolerations, avoided nodes), while GPUs are promised and released between gangs: the same
  answer, reasons and errors included, at every step;
- whole admission rounds decided with the index and without it
  (``AdmissionRules(index_fits=False)``: :func:`place_gang` for every gang), whose plans must be
  equal: the scale bench's cold, written and release rounds, crowded rounds (preemptions, a
  nominated gang using its nomination, Backfill reservations, StrictFIFO, serving groups,
  Required and Preferred topology), taints and tolerations, node filters and needs, DRA pools
  (whole free nodes of a clique).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

import kubeforge.admission._round as round_module
import kubeforge.placement._fit as fit_module
from e2e.bench.lib.replay import T0
from e2e.bench.lib.traces import ALIBABA_PODS, default_trace
from e2e.bench.scale.workload import fleet as scale_fleet, gangs, job_views, pool as scale_pool, snapshot as scale_snapshot
from kubeforge.admission import AdmissionMemo, AdmissionRules, QueueingStrategy, plan_admission
from kubeforge.api import GPUPoolSpec
from kubeforge.objects import Taint, record_from_k8s
from kubeforge.placement import (
    GangRequest, NodeFilter, NodeInfo, PoolIndex, TopologyLevel, place_gang, with_paths,
)
from records import CLIQUE, NOW, mk_job, mk_node, mk_pool, mk_service, pool_body, snapshot
from test_dra import dra_pool, dra_snapshot, rack
from test_fit_memo import REQUIRED, crowded_queue, digest, pool as backfill_pool

BLOCK = "cloud.google.com/gce-topology-block"
ZONE = "topology.kubernetes.io/zone"
NVLINK, IB = TopologyLevel("nvlink", CLIQUE), TopologyLevel("block", BLOCK)
LEVEL_SETS = [(NVLINK, IB), (NVLINK,), (IB,), (), (NVLINK, TopologyLevel("other", CLIQUE))]
TOLERATE = ({"key": "dedicated", "operator": "Exists"},)


def random_fleet(rng: random.Random) -> list[NodeInfo]:
    """2-40 nodes of 0-16 GPUs, some used, unready, interrupted, cordoned or tainted, in cliques
    of 1-6 nodes and blocks of 1-4 cliques (some labels missing), some with a zone and CPUs."""
    nodes = []
    for i in range(rng.randint(2, 40)):
        clique = i // rng.choice([1, 2, 4, 6])
        labels = {CLIQUE: f"c{clique}", BLOCK: f"b{clique // rng.choice([1, 2, 4])}", ZONE: rng.choice("ab")}
        for key in (CLIQUE, BLOCK, ZONE):
            if rng.random() < 0.08:
                del labels[key]
        alloc = rng.choice([0, 4, 8, 8, 8, 16])
        tainted = rng.random() < 0.1
        nodes.append(NodeInfo(
            f"n{i:02d}", labels, alloc, min(alloc + 2, rng.choice([0, 0, 0, 1, 2, 4, 8, 10])),
            ready=rng.random() > 0.05, schedulable=not tainted and rng.random() > 0.05,
            interrupted=rng.random() < 0.05, cordoned=rng.random() < 0.03,
            taints=(Taint("dedicated", "x"),) if tainted else (),
            resources={"cpu": rng.choice([2000, 96000])} if rng.random() < 0.3 else {}))
    return nodes


def random_request(rng: random.Random, names: list[str]) -> GangRequest:
    mode = rng.choice(["Required", "Required", "Preferred", "Preferred", "None"])
    level = rng.choice(["nvlink", "block", "rack", None])
    if mode == "Required" and level is None:
        level = "nvlink"
    whole = rng.random() < 0.15
    return GangRequest(
        rng.randint(1, 6), rng.choice([1, 2, 4, 8, 16]), mode, level if mode != "None" else None,
        avoid_nodes=frozenset(rng.sample(names, rng.randint(0, 2))) if rng.random() < 0.3 else frozenset(),
        tolerations=TOLERATE if rng.random() < 0.3 else (),
        node_filter=NodeFilter(((ZONE, "a"),)) if rng.random() < 0.1 else None,
        needs={"cpu": 4000} if rng.random() < 0.1 else {},
        one_per_node=rng.random() < 0.15, spread_keys=(ZONE,) if rng.random() < 0.1 else (),
        whole_nodes=whole, spare_nodes=rng.randint(0, 2) if whole else 0)


def answer(place, request):
    try:
        return place(request)
    except ValueError as e:
        return ("ValueError", str(e))


@pytest.mark.parametrize("seed", range(150))
def test_the_index_answers_as_place_gang_while_gpus_are_promised_and_released(seed):
    rng = random.Random(seed)
    nodes = random_fleet(rng)
    levels = rng.choice(LEVEL_SETS)
    if rng.random() < 0.5 and len({lv.node_label for lv in levels}) == len(levels):
        nodes = with_paths(nodes, levels)  # the pool view's cached paths
    names = [n.name for n in nodes]
    shapes = [random_request(rng, names) for _ in range(6)]  # a few kinds, many gangs of each
    reserved: dict[str, int] = {}
    index = PoolIndex(nodes, levels, reserved)
    for _ in range(40):
        request = rng.choice(shapes) if rng.random() < 0.8 else random_request(rng, names)
        got = answer(index.place, request)
        assert got == answer(lambda r: place_gang(r, nodes, levels, dict(reserved)), request), (seed, request)
        event = rng.random()
        if hasattr(got, "gpus_by_node") and event < 0.7:
            changes = dict(got.gpus_by_node)  # admitted: its GPUs promised
        elif event < 0.85:  # a release (a nomination used, a reservation dropped), below zero too
            changes = {n: -rng.randint(1, 8) for n in rng.sample(names, rng.randint(1, 2))}
        elif event < 0.95:  # many nodes at once, and a node of another pool of the resource
            changes = {n: rng.randint(-2, 8) for n in rng.sample(names, rng.randint(1, len(names)))}
            changes["elsewhere"] = 4
        else:
            changes = {}
        for n, g in changes.items():
            reserved[n] = reserved.get(n, 0) + g
        index.changed(changes)


# ----------------------------------------------------------------- whole rounds, both ways

NIC = "example.com/nic"


def two_level_pool(max_reservations: int):
    """Pool ``p`` with levels nvlink and block, ``max_reservations`` for Backfill, and the
    toleration of its own nodes' taint."""
    body = pool_body("p", levels=[("nvlink", CLIQUE), ("block", BLOCK)],
                     tolerations=[{"key": "gpu-team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}])
    body["spec"]["reservations"] = {"maxReservations": max_reservations}
    rec = record_from_k8s(GPUPoolSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec



def both(snap, now, memo_on=None, memo_off=None, **rules):
    """The round with the index and without (each chain with its own cross-round memo)."""
    on = plan_admission(snap, now, memo_on, AdmissionRules(**rules))
    off = plan_admission(snap, now, memo_off, AdmissionRules(index_fits=False, **rules))
    return digest(on), digest(off)


@pytest.fixture
def indexed(monkeypatch) -> list[int]:
    """Counts the gangs the round placed through a pool's index (so no test here passes idle)."""
    count = [0]
    real = round_module.PoolIndex.place

    def counting(self, request):
        count[0] += 1
        return real(self, request)

    monkeypatch.setattr(round_module.PoolIndex, "place", counting)
    return count


@pytest.mark.parametrize("nodes, jobs", [(32, 400), (24, 600), (128, 300)])
def test_the_scale_bench_rounds_decide_the_same_with_and_without_the_index(indexed, nodes, jobs):
    """Cold, written and release rounds of the scale bench (trace gangs, Preferred nvlink,
    16 namespaces, QoS priorities): a crowded fleet, and one where every gang fits."""
    batch = gangs(default_trace(ALIBABA_PODS), jobs, seed=7)
    views = job_views(batch)
    fleet_nodes, pool_rec = scale_fleet(nodes), scale_pool()
    memo_on, memo_off = AdmissionMemo(), AdmissionMemo()
    on, off = both(scale_snapshot(fleet_nodes, pool_rec, views), T0, memo_on, memo_off)
    assert on == off and on["admit"] and indexed[0] >= len(on["admit"])
    by_key = {(g.namespace, g.name): g for g in batch}
    placed_nodes = {a.key: a.placement.nodes for a in on["admit"]}
    views.update(job_views([by_key[k] for k in placed_nodes], placed_nodes))
    on, off = both(scale_snapshot(fleet_nodes, pool_rec, views), T0 + 5, memo_on, memo_off)
    assert on == off
    done = next(iter(placed_nodes))
    views.update(job_views([by_key[done]], finished=frozenset([done])))
    on, off = both(scale_snapshot(fleet_nodes, pool_rec, views), T0 + 15, memo_on, memo_off)
    assert on == off


@pytest.mark.parametrize("queueing", [None, QueueingStrategy.BEST_EFFORT_FIFO, QueueingStrategy.STRICT_FIFO,
                                      QueueingStrategy.BACKFILL])
@pytest.mark.parametrize("memo_fits", [True, False])
def test_a_crowded_round_decides_the_same_with_and_without_the_index(indexed, queueing, memo_fits):
    """Preemptions, Backfill reservations and backfilled gangs, StrictFIFO, Required and
    Preferred gangs, serving groups placed after the gangs; then the next round, where the
    preemptors use their nominations."""
    nodes, jobs = crowded_queue()
    svc = mk_service("s", gpus=4, status={"desiredReplicas": 2})
    snap = snapshot([backfill_pool()], nodes, jobs=jobs, services=[svc])
    on, off = both(snap, NOW, queueing=queueing, memo_fits=memo_fits)
    assert on == off and indexed[0]
    assert queueing == QueueingStrategy.STRICT_FIFO or (on["preempt"] and on["admit"])
    first = plan_admission(snap, NOW, rules=AdmissionRules(queueing=queueing))
    for p in first.preempt:
        snap.nominations[p.key] = (p.pool, dict(p.gpus_by_node))
    on, off = both(snap, NOW + 1, queueing=queueing, memo_fits=memo_fits)
    assert on == off


@pytest.mark.parametrize("seed", range(12))
def test_random_rounds_decide_the_same_with_and_without_the_index(indexed, seed):
    """Random queues over a fleet of two blocks of cliques with taints, a cordon and an unready
    node: gangs with Required / Preferred / no topology, tolerations, node selectors, CPU
    requests, one rank per node; random priorities, teams, ages, time limits; each strategy."""
    rng = random.Random(seed)
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    owned = [{"key": "gpu-team", "value": "ml", "effect": "NoSchedule"}]  # the pool tolerates it
    nodes = [mk_node(f"c{c}-{i}", gpus=rng.choice([4, 8, 8]),
                     labels={CLIQUE: f"c{c}", BLOCK: f"b{c // 2}", ZONE: "ab"[i % 2]},
                     taints=(taint if rng.random() < 0.15 else []) + (owned if rng.random() < 0.3 else []),
                     ready=rng.random() > 0.05, unschedulable=rng.random() < 0.05,
                     extra={NIC: rng.choice([1, 4])})
             for c in range(6) for i in range(3)]
    pools = [two_level_pool(rng.choice([1, 2, 4]))]
    tolerate = {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}],
                         "containers": [{"name": "t", "image": "x"}]}}
    zone_a = {"spec": {"nodeSelector": {ZONE: "a"}, "containers": [{"name": "t", "image": "x",
                                                                     "resources": {"limits": {NIC: "2"}}}]}}
    shapes = [dict(replicas=2, gpus=8, topology=REQUIRED), dict(replicas=1, gpus=8), dict(replicas=3, gpus=4),
              dict(replicas=2, gpus=2, topology={"mode": "Preferred", "level": "nvlink"}),
              dict(replicas=4, gpus=4, topology={"mode": "Required", "level": "block"}),
              dict(replicas=2, gpus=4, template=tolerate), dict(replicas=2, gpus=2, template=zone_a)]
    jobs = []
    for i in range(60):
        extra = {"maxRunSeconds": rng.choice([120, 600, 7200])} if rng.random() < 0.3 else {}
        jobs.append(mk_job(f"w{i:02d}", created=NOW - rng.randint(10, 5000), priority=rng.choice([-6, 0, 10]),
                           ns=rng.choice(["team-a", "team-b"]), **rng.choice(shapes), **extra))
    queueing = rng.choice([None, QueueingStrategy.BEST_EFFORT_FIFO, QueueingStrategy.STRICT_FIFO,
                           QueueingStrategy.BACKFILL])
    snap = snapshot(pools, nodes, jobs=jobs)
    memo_on, memo_off = AdmissionMemo(), AdmissionMemo()
    on, off = both(snap, NOW, memo_on, memo_off, queueing=queueing)
    assert on == off and indexed[0]
    running = {a.key: a for a in on["admit"]}
    later = snapshot(pools, nodes, jobs=[j for j in jobs if (j.namespace, j.name) not in running])
    on, off = both(later, NOW + 60, memo_on, memo_off, queueing=queueing)
    assert on == off


def test_dra_rounds_of_whole_clique_nodes_decide_the_same_with_and_without_the_index(indexed):
    """A DRA pool of two NVL racks: multi-node NVLink gangs take whole free nodes of a clique
    (spares left), single-node gangs share nodes; and a device-plugin pool beside it."""
    pools = [dra_pool("p"), mk_pool("q", selector={"matchLabels": {"grp": "dp"}})]
    dp = [mk_node(f"d{i}", labels={"grp": "dp", CLIQUE: f"d{i // 2}"}) for i in range(4)]
    jobs = [mk_job(f"g{i}", replicas=r, gpus=4, pools=("p", "q"), created=NOW - 100 + i,
                   topology={"mode": "Required", "level": "nvlink"} if r > 1 else None)
            for i, r in enumerate([16, 1, 4, 1, 8, 2, 16, 1, 3])]
    snap = dra_snapshot(pools, rack(2, 18) + dp, jobs=jobs)
    on, off = both(snap, NOW)
    assert on == off and indexed[0]
    in_racks = [a for a in on["admit"] if a.pool == "p"]
    assert any(len(set(a.placement.nodes)) > 1 for a in in_racks) and len(in_racks) >= 4


def test_the_index_is_not_used_against_reservations_and_can_be_turned_off(indexed):
    """A gang that Backfill reservations hold against is placed by place_gang on ``taken`` plus
    the reservations (the index follows ``taken`` only); ``index_fits=False`` never builds one."""
    nodes, jobs = crowded_queue()
    snap = snapshot([backfill_pool()], nodes, jobs=jobs)
    plan_admission(snap, NOW, rules=AdmissionRules(index_fits=False))
    assert indexed[0] == 0
    plan = plan_admission(snap, NOW, rules=AdmissionRules(queueing=QueueingStrategy.BACKFILL))
    assert plan.reservations and indexed[0]


def test_repeated_levels_raise_as_place_gang_does():
    nodes = [NodeInfo("a", {CLIQUE: "c"}, 8, 0)]
    levels = (NVLINK, replace(IB, node_label=CLIQUE))
    with pytest.raises(ValueError, match="node labels must be unique"):
        PoolIndex(nodes, levels, {}).place(GangRequest(1, 1, "None"))


# ----------------------------------------------------------------- carried across rounds

def next_round_nodes(rng: random.Random, nodes: list[NodeInfo], reserved: dict[str, int]) -> list[NodeInfo]:
    """The pool view of a later round: as ``pool_view`` reuses one, the same records except the
    nodes whose GPUs held changed (promises that became pods, pods that ended), replaced."""
    out = []
    for n in nodes:
        if reserved.get(n.name, 0) > 0 and rng.random() < 0.7:
            n = replace(n, gpus_allocated=min(n.gpus_allocatable, n.gpus_allocated + reserved[n.name]))
        elif n.gpus_allocated and rng.random() < 0.1:
            n = replace(n, gpus_allocated=rng.randint(0, n.gpus_allocated - 1))
        out.append(n)
    return out


@pytest.mark.parametrize("seed", range(120))
def test_an_index_carried_into_later_rounds_answers_as_place_gang_on_their_nodes(seed):
    """Three rounds in a row through one index, rebased between them onto the next round's
    node records and its own promises (empty, or a nomination), as AdmissionMemo carries it."""
    rng = random.Random(seed)
    nodes = random_fleet(rng)
    levels = rng.choice(LEVEL_SETS)
    if rng.random() < 0.5 and len({lv.node_label for lv in levels}) == len(levels):
        nodes = with_paths(nodes, levels)
    names = [n.name for n in nodes]
    shapes = [random_request(rng, names) for _ in range(5)]
    reserved: dict[str, int] = {}
    index = PoolIndex(nodes, levels, reserved)
    for rnd in range(3):
        if rnd:
            nodes = next_round_nodes(rng, nodes, reserved)
            reserved = {n: rng.randint(1, 4) for n in rng.sample(names, 1)} if rng.random() < 0.3 else {}
            carried = index.rebase(nodes, levels, reserved)
            # it carries unless the round replaced more than a quarter of the records
            assert carried or sum(a is not b for a, b in zip(index.nodes, nodes)) * 4 >= len(nodes)
            if not carried:
                index = PoolIndex(nodes, levels, reserved)
        for _ in range(15):
            request = rng.choice(shapes) if rng.random() < 0.85 else random_request(rng, names)
            got = answer(index.place, request)
            assert got == answer(lambda r: place_gang(r, nodes, levels, dict(reserved)), request), (seed, rnd, request)
            if hasattr(got, "gpus_by_node"):
                for n, g in got.gpus_by_node.items():
                    reserved[n] = reserved.get(n, 0) + g
                index.changed(got.gpus_by_node)


def test_an_index_is_not_carried_over_other_levels_nodes_or_labels():
    nodes = [NodeInfo(f"n{i}", {CLIQUE: f"c{i // 2}"}, 8, 0) for i in range(8)]
    index = PoolIndex(nodes, (NVLINK,), {})
    index.place(GangRequest(2, 8, "Required", "nvlink"))
    relabelled = [replace(nodes[0], labels={CLIQUE: "c9"}), *nodes[1:]]
    cordoned = [replace(nodes[0], cordoned=True, schedulable=False), *nodes[1:]]
    assert not index.rebase(nodes, (NVLINK, IB), {})
    assert not index.rebase(nodes[:-1], (NVLINK,), {})
    assert not index.rebase([*nodes[:-1], NodeInfo("other", {CLIQUE: "c3"}, 8, 0)], (NVLINK,), {})
    assert not index.rebase(relabelled, (NVLINK,), {})
    assert not index.rebase(cordoned, (NVLINK,), {})
    assert index.rebase([replace(nodes[0], gpus_allocated=8), *nodes[1:]], (NVLINK,), {})


@pytest.fixture
def rebased(monkeypatch) -> list[bool]:
    """What every PoolIndex.rebase of the rounds answered."""
    out: list[bool] = []
    real = round_module.PoolIndex.rebase

    def recording(self, *args):
        out.append(real(self, *args))
        return out[-1]

    monkeypatch.setattr(round_module.PoolIndex, "rebase", recording)
    return out


def test_the_scale_bench_chain_carries_the_index_from_round_to_round(indexed, rebased):
    """The release round (same node objects, one gang's nodes freer) rebases the index of the
    round before rather than build one, and decides as rounds without it. (The written round
    builds anew: the cold round filled more than a quarter of the fleet.)"""
    batch = gangs(default_trace(ALIBABA_PODS), 300, seed=7)
    views = job_views(batch)
    fleet_nodes, pool_rec = scale_fleet(64), scale_pool()
    memo_on, memo_off = AdmissionMemo(), AdmissionMemo()
    on, off = both(scale_snapshot(fleet_nodes, pool_rec, views), T0, memo_on, memo_off)
    assert on == off and not rebased
    by_key = {(g.namespace, g.name): g for g in batch}
    placed_nodes = {a.key: a.placement.nodes for a in on["admit"]}
    views.update(job_views([by_key[k] for k in placed_nodes], placed_nodes))
    on, off = both(scale_snapshot(fleet_nodes, pool_rec, views), T0 + 5, memo_on, memo_off)
    done = next(iter(placed_nodes))
    views.update(job_views([by_key[done]], finished=frozenset([done])))
    on2, off2 = both(scale_snapshot(fleet_nodes, pool_rec, views), T0 + 15, memo_on, memo_off)
    assert (on, on2) == (off, off2) and rebased == [False, True]


# ----------------------------------------------------------------- domain choice, skipping

def exhaustive_choose(slots, free, members, narrower, replicas, gpus):
    """The rank key's definition, with nodes chosen in every domain that ties for the fewest
    GPUs left: the best is the least (GPUs left, nodes touched, domain name)."""
    need = replicas * gpus
    fit = [name for name, n in slots.items() if n >= replicas]
    if not fit:
        return None, 0, slots
    least = min(free[name] - need for name in fit)
    entries = []
    for name in fit:
        if free[name] - need == least:
            choice = fit_module._place_within(members(name), narrower, replicas, gpus)
            entries.append(((least, len(choice), name), name, choice, free[name], members(name)))
    return min(entries, key=lambda e: e[0]), len(fit), slots


@pytest.mark.parametrize("seed", range(150))
def test_skipping_tied_domains_that_cannot_win_chooses_what_trying_them_all_does(seed, monkeypatch):
    rng = random.Random(seed)
    nodes = random_fleet(rng)
    levels = rng.choice(LEVEL_SETS[:3])
    names = [n.name for n in nodes]
    reserved = {n: rng.randint(0, 4) for n in rng.sample(names, rng.randint(0, len(names) // 2))}
    requests = [random_request(rng, names) for _ in range(8)]
    got = [answer(lambda r: place_gang(r, nodes, levels, reserved), r) for r in requests]
    monkeypatch.setattr(fit_module, "choose_domain", exhaustive_choose)
    assert got == [answer(lambda r: place_gang(r, nodes, levels, reserved), r) for r in requests]


def test_on_an_empty_fleet_nodes_are_chosen_in_one_tied_domain_not_in_all(monkeypatch):
    nodes = [NodeInfo(f"n{i:03d}", {CLIQUE: f"c{i // 8:02d}"}, 8, 0) for i in range(80)]
    calls = []
    real = fit_module._place_within
    monkeypatch.setattr(fit_module, "_place_within", lambda *a: calls.append(a) or real(*a))
    result = place_gang(GangRequest(2, 4, "Required", "nvlink"), nodes, (NVLINK,))
    assert result.domain == "c00" and len(calls) == 1  # 10 domains tie; the first holds it on one node
