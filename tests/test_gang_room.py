""":class:`kubeforge.placement.GangRoom` says what :func:`place_gang` says (placed or not) on random
pools as their nodes' allocated GPUs change, for every kind of request it calls exact; the kinds
it does not (``spread_keys``, whole-node ``Preferred`` gangs over several domains) are the ones
where a count is not place_gang's rule (issue 31: the victim search asks it instead of placing)."""

from __future__ import annotations

import random
from dataclasses import replace

from kubeforge.placement import GangRequest, GangRoom, NodeFilter, NodeInfo, Placement, TopologyLevel, place_gang

LEVELS = (TopologyLevel("nvlink", "clique"), TopologyLevel("block", "block"))


def random_nodes(rng: random.Random) -> list[NodeInfo]:
    """4-14 nodes of 4 or 8 GPUs, some unlabelled, not ready, cordoned or interrupted, two zones,
    a few with little memory."""
    nodes = []
    for i in range(rng.randint(4, 14)):
        gpus = rng.choice([8, 8, 4])
        labels = {"zone": rng.choice("ab")}
        if rng.random() < 0.9:
            labels["clique"] = f"c{rng.randrange(3)}"
            labels["block"] = f"b{labels['clique'][1] > '0'}"
        state = rng.choice([{}] * 8 + [{"ready": False}, {"cordoned": True, "schedulable": False},
                                       {"interrupted": True}])
        nodes.append(NodeInfo(name=f"n{i}", labels=labels, gpus_allocatable=gpus,
                              gpus_allocated=rng.choice([0, 0, 2, 4, gpus, gpus + 2]),
                              resources={"memory": rng.choice([64, 512, 512])}, **state))
    return nodes


def random_request(rng: random.Random, names: list[str]) -> GangRequest:
    mode = rng.choice(["Required", "Preferred", "None"])
    level = rng.choice(["nvlink", "block", "rack"]) if mode == "Required" else rng.choice([None, "nvlink", "block", "rack"])
    return GangRequest(
        replicas=rng.randint(1, 6), gpus_per_replica=rng.choice([1, 2, 4, 8, 8]), mode=mode,
        level=None if mode == "None" else level,
        avoid_nodes=frozenset(rng.sample(names, rng.choice([0, 0, 1]))),
        node_filter=NodeFilter.from_pod_spec({"nodeSelector": {"zone": "a"}}) if rng.random() < 0.15 else None,
        needs={"memory": 256} if rng.random() < 0.2 else {},
        one_per_node=rng.random() < 0.2, whole_nodes=rng.random() < 0.25, spare_nodes=rng.choice([0, 1]),
        spread_keys=("zone",) if rng.random() < 0.05 else ())


def placed(request, nodes, reserved) -> bool:
    return isinstance(place_gang(request, nodes, LEVELS, reserved), Placement)


def test_the_room_answers_as_place_gang():
    rng = random.Random(31)
    answers = {True: 0, False: 0}
    inexact = asked = 0
    for case in range(600):
        nodes = random_nodes(rng)
        request = random_request(rng, [n.name for n in nodes])
        reserved = {n.name: rng.choice([0, 0, 2, 4]) for n in nodes}
        room = GangRoom(request, nodes, LEVELS, reserved)
        if not room.exact:
            inexact += 1
            assert request.spread_keys or request.whole_nodes and request.mode == "Preferred", case
            continue
        assert room.fits == placed(request, nodes, reserved), case
        current = {n.name: n for n in nodes}
        for step in range(12):  # give GPUs back and take them again, a few nodes at a time
            changed = [replace(n, gpus_allocated=max(0, n.gpus_allocated + rng.choice([-8, -4, -2, 2, 4])))
                       for n in rng.sample(nodes, rng.randint(1, 3))]
            after = [{**current, **{c.name: c for c in changed}}[n.name] for n in nodes]
            want = placed(request, after, reserved)
            assert room.fits_with(changed) == want, (case, step)
            asked += 1
            answers[want] += 1
            if rng.random() < 0.6:
                room.update(changed)
                current.update({c.name: c for c in changed})
                assert room.fits == want, (case, step)
    # Both answers, many questions, and most requests are ones a count decides.
    assert min(answers.values()) > 500 and asked > 5000 and inexact < 120, (answers, asked, inexact)


def test_a_whole_node_gang_preferring_one_domain_of_several_is_left_to_the_placer():
    """Four free nodes in two cliques of two hold a whole-node Preferred gang of 3 only split over
    both cliques (no count says so), so the room declines; on one clique's nodes it answers."""
    nodes = [NodeInfo(name=f"n{i}", labels={"clique": f"c{i // 2}"}, gpus_allocatable=8, gpus_allocated=0)
             for i in range(4)]
    request = GangRequest(replicas=3, gpus_per_replica=8, mode="Preferred", level="nvlink", whole_nodes=True)
    assert placed(request, nodes, {})
    assert not GangRoom(request, nodes, LEVELS, {}).exact
    one = GangRoom(request, nodes[:2], LEVELS, {})
    assert one.exact and not one.fits and not placed(request, nodes[:2], {})
