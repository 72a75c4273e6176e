"""The running gangs of one pool, grouped for the preemption try, pure.

A round gives every waiting gang that does not fit a preemption try
(:func:`~kubeforge.admission.choose_victims`), and the rules let it stop only running gangs of
its own team with a lower priority, or of a borrowing team (any priority, or only lower: the
pool's ``reclaimQuota``). Walking every running gang for every waiting gang made the written and
release rounds O(waiting x running): at 256 nodes and 3,000 queued gangs, 23.2 of 29.4 s profiled
(e2e/README-scale-bench.md). :class:`RunningGangs` keeps them grouped by namespace (a team is a
set of namespaces, looked up in the pool's quota book at each try) and sorted by priority inside
a group, so a try meets only the gangs its rules can reach: O(namespaces + reachable gangs).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Callable, Iterable, Iterator, Sequence

from kubeforge.admission._snapshot import JobView

Rule = Callable[[str], tuple[str, int | None] | None]
"""``namespace -> (reason, bound)``: the running gangs of that namespace a preemptor may stop,
with the reason; ``bound`` is the priority they must be strictly below (None: any priority).
None: none of them."""


class _Group:
    """The running gangs of one namespace: ``(priority, position in the RunningGangs list)``,
    ascending."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def below(self, bound: int | None) -> list[tuple[int, int]]:
        """The entries whose priority is strictly below ``bound`` (all when None); a group is
        never empty, so its lowest priority answers most tries without a search."""
        entries = self.entries
        if bound is None:
            return entries
        return [] if entries[0][0] >= bound else entries[:bisect_left(entries, (bound,))]


class RunningGangs(list):
    """A list of running gangs (:class:`~kubeforge.admission.JobView`, those holding a placement
    in one pool) that also keeps them grouped by namespace and sorted by priority, for
    :func:`reachable`. A plain list in every other respect: the index follows appends lazily (the
    gangs added since the last look are indexed on the next one) and any other change drops it, to
    be built again on the next look. Gangs without a parsed spec are never reachable (the rules
    need a priority)."""

    def __init__(self, gangs: Iterable[JobView] = ()) -> None:
        super().__init__(gangs)
        self._drop()

    def _drop(self) -> None:
        self._indexed = 0
        self._groups: dict[str, _Group] = {}
        self._kept: dict[Any, Any] = {}

    def kept(self, key: Any, make: Callable[[], Any]) -> Any:
        """What ``make()`` built for this list under ``key`` (hashable), built on the first ask:
        a structure over the gangs (the round's :class:`~kubeforge.admission._victim_index.VictimIndex`)
        that follows appends itself and is dropped, like the groups, on any other change. At most
        four are kept (a round asks with one key a pool)."""
        got = self._kept.get(key)
        if got is None:
            if len(self._kept) >= 4:
                self._kept.clear()
            got = self._kept[key] = make()
        return got

    def groups(self) -> dict[str, _Group]:
        """Namespace -> its gangs, sorted by priority; brought up to date with the list first (the
        gangs appended since are added to their groups, each group sorted again: a sorted run and
        an appended one, which the sort merges in linear time)."""
        grown: set[str] = set()
        for i in range(self._indexed, len(self)):
            v = self[i]
            spec = v.record.spec
            if spec is not None:
                ns = v.record.namespace
                g = self._groups.get(ns)
                if g is None:
                    g = self._groups[ns] = _Group()
                g.entries.append((spec.priority, i))
                grown.add(ns)
        for ns in grown:
            self._groups[ns].entries.sort()
        self._indexed = len(self)
        return self._groups

    def __reduce__(self) -> tuple:
        return RunningGangs, (list(self),)  # a copy (copy, deepcopy, pickle) indexes its own gangs

    # Every list method that may reorder or remove gangs drops the index (appends keep it).
    def __setitem__(self, *args: Any) -> None:
        self._drop()
        super().__setitem__(*args)

    def __delitem__(self, *args: Any) -> None:
        self._drop()
        super().__delitem__(*args)

    def __imul__(self, n: Any) -> "RunningGangs":
        self._drop()
        return super().__imul__(n)

    def insert(self, *args: Any) -> None:
        self._drop()
        super().insert(*args)

    def remove(self, *args: Any) -> None:
        self._drop()
        super().remove(*args)

    def pop(self, *args: Any) -> Any:
        self._drop()
        return super().pop(*args)

    def sort(self, *args: Any, **kw: Any) -> None:
        self._drop()
        super().sort(*args, **kw)

    def reverse(self) -> None:
        self._drop()
        super().reverse()

    def clear(self) -> None:
        self._drop()
        super().clear()


def reachable(running: Sequence[JobView], rule: Rule) -> Iterator[tuple[JobView, str]]:
    """The running gangs ``rule`` lets a preemptor stop, ``(gang, reason)`` in ``running``'s
    order. Through the groups of a :class:`RunningGangs` (O(namespaces + the gangs yielded, times
    log of that for their order)); any other sequence is walked whole (O(running)). The same gangs
    in the same order either way (``tests/test_victims_grouped.py``)."""
    if isinstance(running, RunningGangs):
        picks: list[tuple[int, str]] = []
        for ns, group in running.groups().items():
            got = rule(ns)
            if got is not None and (entries := group.below(got[1])):
                reason = got[0]
                picks.extend((i, reason) for _, i in entries)
        picks.sort()
        return ((running[i], reason) for i, reason in picks)
    return _walk(running, rule)


def _walk(running: Sequence[JobView], rule: Rule) -> Iterator[tuple[JobView, str]]:
    rules: dict[str, tuple[str, int | None] | None] = {}
    for v in running:
        spec = v.record.spec
        if spec is None:
            continue
        ns = v.record.namespace
        got = rules[ns] if ns in rules else rules.setdefault(ns, rule(ns))
        if got is not None and (got[1] is None or spec.priority < got[1]):
            yield v, got[0]
