"""The preemption try's candidates kept across a round's tries, pure (issue 31).

A round gives every waiting gang that does not fit a preemption try
(:func:`~kubeforge.admission.choose_victims`). Each try used to list the running gangs its rules
reach, drop those in flight or protected by ``minRuntimeSeconds``, add up their GPUs ("even every
candidate would not make room") and sort them into the victim order
(:func:`~kubeforge.admission._ordering.victim_order`): O(running gangs) a try, for every try that
reaches them, whether it then finds victims or not (at 256 nodes x 5,000 gangs with
``--preemptible 0.1``, 4.5 of 7.3 s of the written round: e2e/README-scale-bench.md).

What those steps read of a running gang does not move within a round: its victim-order key (the
work it loses is a function of the gang and the round's ``now``), whether ``minRuntimeSeconds``
protects it (the same), its GPUs and priority. What moves is which gangs are in flight (it only
grows within a round: victims taken, gangs admitted) and the gangs appended (admissions).
:class:`VictimIndex` keeps, per round, the stoppable gangs not in flight in the victim order, and
per namespace and priority bound their count and GPUs, brought up to date with each try's
``in_flight`` and the gangs appended since (O(the changes), each O(log running) plus a list
insertion or removal). A try then costs O(namespaces) to refuse, and the ones that search walk
the order only as far as the greedy takes victims.

Same candidates, same order: the order is sorted by ``(key, position in the running list)``,
which is what the stable sort of the candidates (taken in the list's order) gives, and every
subset keeps it (``tests/test_victims_grouped.py`` checks whole rounds both ways).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any, Callable, Iterator, Mapping, Sequence

from kubeforge.admission._snapshot import JobView
from kubeforge.objects import Key

Rules = Mapping[str, tuple[str, int | None] | None]
"""``namespace -> (reason, bound)`` for one try (:data:`kubeforge.admission._running.Rule`'s
answers): the gangs of that namespace strictly below ``bound`` (any when None) may be stopped, for
``reason``; None: none of them."""


class VictimIndex:
    """The stoppable running gangs of one pool for one round, in the victim order.

    Args:
        running: The pool's running gangs (a :class:`~kubeforge.admission.RunningGangs`: it drops
            this index on any change but an append; appends are taken in at the next try).
        order_key: ``gang -> the key victim_order sorts by`` (a tuple; the round's ``now`` and
            ``cost`` bound in).
        gpus: ``gang -> GPUs it frees`` (its nodes times its GPUs per rank, of the pool's resource).
        stoppable: ``gang -> bool``: a parsed spec and not protected by ``minRuntimeSeconds`` at
            the round's ``now``; the rules never reach the others.
    """

    def __init__(self, running: Sequence[JobView], order_key: Callable[[JobView], Any],
                 gpus: Callable[[JobView], int], stoppable: Callable[[JobView], bool]) -> None:
        self._running = running
        self._order_key, self._gpus_of, self._stoppable = order_key, gpus, stoppable
        self._view: tuple[Any, int] | None = None
        self._reset()

    def _reset(self) -> None:
        self._n = 0  # positions of the running list taken in
        self._flight: frozenset[Key] = frozenset()
        self.order: list[tuple[Any, int]] = []  # (order key, position): stoppable, not in flight, ascending
        self._keys: list[Any] = []  # per position: its order key, None when not stoppable
        self._ns: list[str] = []
        self._prio: list[int] = []
        self._gpus: list[int] = []
        self._by_job: dict[Key, list[int]] = {}
        self._groups: dict[str, list[tuple[int, int]]] = {}  # namespace -> (priority, position), stoppable
        self._gone: set[int] = set()  # stoppable positions in flight
        self._sums: dict[str, dict[int | None, list[int]]] = {}  # namespace -> bound -> [count, GPUs] not gone

    def per_view(self, view: Any, f: Callable[[Any], int]) -> int:
        """``f(view)``, kept while the same ``view`` (a frozen pool view: a round's own) is asked
        about: the pool's free GPUs, a walk over its nodes each try otherwise."""
        if self._view is None or self._view[0] is not view:
            self._view = (view, f(view))
        return self._view[1]

    def namespaces(self) -> list[str]:
        """The namespaces with a stoppable gang (those a try asks its rules about)."""
        return list(self._groups)

    def sync(self, in_flight: frozenset[Key]) -> None:
        """Bring the index up to date: the gangs appended since, and ``in_flight`` (the gangs
        being stopped or admitted this round, never candidates). A set that is not a superset of
        the last one starts the index again (never in a round: it only grows there)."""
        if not self._flight <= in_flight:
            self._reset()
        new = in_flight - self._flight if len(in_flight) > len(self._flight) else ()
        self._flight = in_flight
        if self._n < len(self._running):
            for i in range(self._n, len(self._running)):
                self._take(i)
        by_job = self._by_job
        for key in new:
            for p in by_job.get(key, ()):
                self._leave(p)

    def _take(self, i: int) -> None:
        v = self._running[i]
        ok = self._stoppable(v)
        key = self._order_key(v) if ok else None
        ns, prio, g = v.record.namespace, v.record.spec.priority if ok else 0, self._gpus_of(v) if ok else 0  # type: ignore[union-attr]
        self._keys.append(key)
        self._ns.append(ns)
        self._prio.append(prio)
        self._gpus.append(g)
        self._by_job.setdefault(v.key, []).append(i)
        self._n = i + 1
        if not ok:
            return
        insort(self._groups.setdefault(ns, []), (prio, i))
        if v.key in self._flight:
            self._gone.add(i)
            return
        insort(self.order, (key, i))
        self._count(ns, prio, g, 1)

    def _leave(self, p: int) -> None:
        if p in self._gone or self._keys[p] is None:
            return
        self._gone.add(p)
        del self.order[bisect_left(self.order, (self._keys[p], p))]
        self._count(self._ns[p], self._prio[p], self._gpus[p], -1)

    def _count(self, ns: str, prio: int, g: int, sign: int) -> None:
        for bound, got in self._sums.get(ns, {}).items():
            if bound is None or prio < bound:
                got[0] += sign
                got[1] += sign * g

    def below(self, ns: str, bound: int | None) -> list[int]:
        """``[count, GPUs]`` of the stoppable gangs of ``ns`` not in flight and strictly below
        ``bound`` (all when None); kept up to date from then on."""
        by_bound = self._sums.setdefault(ns, {})
        got = by_bound.get(bound)
        if got is None:
            got = [0, 0]
            for prio, p in self._groups.get(ns, ()):
                if bound is not None and prio >= bound:
                    break
                if p not in self._gone:
                    got[0] += 1
                    got[1] += self._gpus[p]
            by_bound[bound] = got
        return got

    def reach(self, rules: Rules, preemptor: Key) -> tuple[int, int]:
        """``(count, GPUs)`` of the candidates a try with ``rules`` reaches, ``preemptor`` (a
        running gang restarting is never its own victim) left out. O(namespaces + its runs)."""
        count = gpus = 0
        for ns, got in rules.items():
            if got is not None:
                c, g = self.below(ns, got[1])
                count += c
                gpus += g
        for p in self._by_job.get(preemptor, ()):
            if self._reached(p, rules):
                count -= 1
                gpus -= self._gpus[p]
        return count, gpus

    def _reached(self, p: int, rules: Rules) -> bool:
        if self._keys[p] is None or p in self._gone:
            return False
        got = rules.get(self._ns[p])
        return got is not None and (got[1] is None or self._prio[p] < got[1])

    def candidates(self, rules: Rules, preemptor: Key, count: int) -> "Candidates":
        """The try's candidates ``(gang, reason)`` in the victim order, as
        :func:`~kubeforge.admission._ordering.victim_order` sorts them; ``count``: how many
        (:meth:`reach`). Walked lazily over the whole order when they are a quarter of it or
        more (a search stops after the victims it needs), else gathered from their namespaces
        and sorted."""
        if 4 * count >= len(self.order):
            return Candidates(lambda: self._walk(rules, preemptor))
        picks = [(self._keys[p], p) for ns, got in rules.items() if got is not None
                 for prio, p in self._groups.get(ns, ()) if (got[1] is None or prio < got[1]) and p not in self._gone]
        picks.sort()
        out = [(self._running[p], rules[self._ns[p]][0]) for _, p in picks]  # type: ignore[index]
        return Candidates(lambda: iter([c for c in out if c[0].key != preemptor]))

    def _walk(self, rules: Rules, preemptor: Key) -> Iterator[tuple[JobView, str]]:
        running, ns_of, prio = self._running, self._ns, self._prio
        for _, p in self.order:
            got = rules.get(ns_of[p])
            if got is None or got[1] is not None and prio[p] >= got[1]:
                continue
            v = running[p]
            if v.key != preemptor:
                yield v, got[0]


class Candidates:
    """A try's candidates, iterable more than once (the search's fallback walks them again)."""

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[], Iterator[tuple[JobView, str]]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[tuple[JobView, str]]:
        return self._make()
