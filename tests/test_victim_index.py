"""The round's :class:`~kubeforge.admission._victim_index.VictimIndex` (issue 31: the preemption
try's candidates kept across a round's tries) gives each try the candidates the try before it
listed, summed and sorted: the same gangs, reasons and order, the same "even every candidate would
not make room" refusals, over a sequence of tries in which gangs go in flight, gangs are appended
and the quota book moves, as in a round. The drop pass (``_prune``) keeps what ``list.remove``
kept. Whole rounds both ways: ``tests/test_victims_grouped.py``.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import kubeforge.admission._victim_index as index_module
import kubeforge.admission._victims as victims_module
from kubeforge.admission import RunningGangs, Victim, checkpoint_age, eligible_victims
from kubeforge.admission._ordering import victim_order
from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME
from kubeforge.objects import rank_gpus
from kubeforge.placement import NodeInfo
from records import NOW, mk_job, view
from test_victims_grouped import NAMESPACES, keyed, random_book, random_gang, removed


def listed(pre, gpus, pool, book, running, taken, in_flight, cost):
    """The try as it was before the index (eligible_victims, the sum, victim_order), or None."""
    got = eligible_victims(pre, gpus, book, list(running), in_flight, NOW)
    if not got:
        return None
    free = sum(n.gpus_free for n in pool.nodes if n.usable) - sum(taken.values())
    if free + sum(len(v.placement.nodes) * rank_gpus(v.record, pool.resource) for v, _ in got) < gpus:
        return None
    return victim_order(got, NOW, cost)


def test_the_kept_order_gives_every_try_what_it_listed(monkeypatch):
    """200 sequences of 25 tries on one RunningGangs (random running gangs, some unparsed, ties
    in the order's key everywhere): between tries gangs go in flight, gangs are appended (some
    already in flight), the book's teams and usage move; now and then ``in_flight`` is not a
    superset of the last (the index starts again). Checkpoint ages and a zero cost (Kueue's)."""
    walked = [0]
    real_walk = index_module.VictimIndex._walk

    def counting(self, *a):
        walked[0] += 1
        return real_walk(self, *a)

    monkeypatch.setattr(index_module.VictimIndex, "_walk", counting)
    rng = random.Random(311)
    tries = refused = chosen = 0
    for seq in range(200):
        cost = checkpoint_age if seq % 2 else (lambda v, now: 0.0)
        min_runtime = rng.choice([0.0, 600.0, 3600.0])
        running = RunningGangs(random_gang(rng, f"r{i}") for i in range(rng.randint(0, 40)))
        pool = SimpleNamespace(resource=DEFAULT_GPU_RESOURCE_NAME, nodes=[
            NodeInfo(name=f"n{i}", labels={}, gpus_allocatable=8, gpus_allocated=rng.choice([0, 4, 8]))
            for i in range(8)])
        in_flight: frozenset = frozenset()
        for t in range(25):
            book = random_book(rng)
            book.min_runtime = min_runtime
            pre = view(mk_job(rng.choice(["w", "r0"]), ns=rng.choice(NAMESPACES), priority=rng.randint(-2, 4)))
            gpus, taken = rng.choice([1, 8, 16, 32, 64]), {"n0": rng.choice([0, 4])}
            want = listed(pre, gpus, pool, book, running, taken, in_flight, cost)
            got = victims_module._candidates(pre, gpus, pool, book, running, taken, in_flight, NOW, cost)
            assert (got is None) == (want is None), (seq, t)
            if got is not None:
                assert keyed(got) == keyed(want) and keyed(got) == keyed(want), (seq, t)  # iterable twice
                chosen += 1
            tries += 1
            refused += want is None and bool(eligible_victims(pre, gpus, book, list(running), in_flight, NOW))
            # What a round changes between tries.
            in_flight |= {v.key for v in running if rng.random() < 0.1}
            for i in range(rng.choice([0, 0, 1, 3])):
                g = random_gang(rng, f"a{t}-{i}")
                running.append(g)
                if rng.random() < 0.5:
                    in_flight |= {g.key}
            if rng.random() < 0.05:
                in_flight = frozenset(k for k in in_flight if rng.random() < 0.5)
    # Both answers and both refusals occur, and both ways of giving the candidates (walked
    # lazily: two walks a try, the candidates are iterated twice; gathered: the rest).
    assert chosen > 500 and refused > 200 and 100 < walked[0] / 2 < chosen - 100, (tries, chosen, refused, walked)


class Need:
    """A search that fits when ``freed`` holds ``need`` GPUs on the nodes it names."""

    def __init__(self, need):
        self.need = need

    def fits_without(self, freed, back):
        return sum(freed.values()) + sum(back.values()) >= self.need

    def give(self, freed, change):
        pass


def test_the_drop_pass_keeps_what_remove_kept():
    """300 random victim lists, with equal victims (the same gang twice: ``remove`` takes the
    first equal one) and victims sharing nodes: the same victims in the same order, the same
    GPUs freed."""
    rng = random.Random(312)
    dropped = 0
    for case in range(300):
        pool = [Victim(("ns", f"v{i}"), "r", float(rng.randint(0, 3)), {f"n{rng.randrange(4)}": rng.choice([4, 8])})
                for i in range(rng.randint(1, 12))]
        chosen = [rng.choice(pool) for _ in range(rng.randint(1, 15))]
        freed: dict[str, int] = {}
        for v in chosen:
            for n, g in v.gpus_by_node.items():
                freed[n] = freed.get(n, 0) + g
        need = rng.randint(1, sum(freed.values()))
        want, want_freed = removed(list(chosen), Need(need), dict(freed))
        got_freed = dict(freed)
        got = victims_module._prune(list(chosen), Need(need), got_freed)
        assert got == want and got_freed == want_freed, case
        dropped += len(chosen) - len(got)
    assert dropped > 300
