"""Assumed placements of :class:`kubeforge.runtime.cache.Cache`: what admission decided and
the status does not show yet (Kueue's assume, ``pkg/cache/scheduler/cache.go``)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator

from kubeforge.admission import AssumedGroup
from kubeforge.objects import Key, PlacementRecord
from kubeforge.runtime.cache_keys import service_key

ASSUME_TTL = 120.0
"""Seconds an assumed placement may wait for its status write before it is dropped. Never
while that write is in flight (:meth:`Assumptions.status_write`): dropped then, its GPUs would
look free to the next admission round while the write puts the placement on record anyway."""


@dataclass
class Assumptions:
    """Placements and replica groups admission gave that no status shows yet; they hold their
    GPUs in every ledger meanwhile.

    The cycle is **assume → write → confirm or forget**. Invariants:

    - :meth:`assume` books a TrainingJob's placement at once (assuming again replaces it and
      restarts its clock); :meth:`assume_group` books one replica group of an
      InferenceService, keyed by ``(service, group index)``.
    - :meth:`status_write` brackets the write that puts them on record: while it is in flight
      nothing of that key expires (a service's write is bracketed under :func:`service_key`).
    - Otherwise an assumption expires ``ttl`` seconds after it was made (or renewed), and an
      expired one is dropped when read, not only hidden.
    - :meth:`unless_placed` drops a placement as soon as a job's effective status shows one
      (the status wins, whatever wrote it); :meth:`confirm` drops it once the written status
      holds it, :meth:`forget` when
      the write was refused or the job went away, :meth:`renew` keeps it another ``ttl`` when
      the write's answer was lost; :meth:`forget_groups` drops the groups a status now shows.

    Attributes:
        clock: Monotonic seconds (``time.monotonic`` unless a test or the cache sets one).
        ttl: Seconds an assumption waits for its write.
    """

    clock: Callable[[], float] = time.monotonic
    ttl: float = ASSUME_TTL
    _placements: dict[Key, tuple[PlacementRecord, float]] = field(default_factory=dict)
    _groups: dict[tuple[Key, int], tuple[AssumedGroup, float]] = field(default_factory=dict)
    _writing: set[Hashable] = field(default_factory=set)

    def _expired(self, writing: Hashable, at: float, now: float) -> bool:
        return writing not in self._writing and now - at > self.ttl

    # --- TrainingJob placements ---------------------------------------------------------------

    def assume(self, key: Key, placement: PlacementRecord) -> None:
        """Admission gave ``key`` this placement: its GPUs are booked in every ledger from now
        on, until :meth:`confirm`, :meth:`forget` or ``ttl`` with no write in flight."""
        self._placements[key] = (placement, self.clock())

    def assumed_for(self, key: Key) -> PlacementRecord | None:
        """The placement assumed for ``key``, None when there is none or it expired (an
        assumption whose status write is in flight never expires: dropped then, its GPUs would
        look free to the next round while the write puts the placement on record anyway)."""
        entry = self._placements.get(key)
        if entry is None:
            return None
        if self._expired(key, entry[1], self.clock()):
            self._placements.pop(key, None)
            return None
        return entry[0]

    def unless_placed(self, key: Key, placed: bool) -> PlacementRecord | None:
        """The placement assumed for ``key`` that holds GPUs given the job's effective status:
        None when that status shows a placement (``placed``: the status wins), and the
        assumption is dropped then: it was written, or it is stale. One kept after a write whose
        answer was lost (renewed, then a 409 on the retry) was once taken for the next attempt's
        admission after a stop whose answer was lost too, and written with no admission round onto
        nodes the old attempt's pods still held (tests/test_runtime_concurrency.py). Else
        :meth:`assumed_for`. The one rule the reconcile and the admission snapshot both read."""
        if placed:
            self.confirm(key)
            return None
        return self.assumed_for(key)

    @contextmanager
    def status_write(self, key: Hashable) -> Iterator[None]:
        """Bracket a status write of ``key`` (a job's key, or a service's :func:`service_key`):
        its assumed placement and groups do not expire while the write is in flight."""
        self._writing.add(key)
        try:
            yield
        finally:
            self._writing.discard(key)

    def renew(self, key: Key) -> None:
        """A write that carried the assumed placement got no answer: the placement may be on
        record already; hold its GPUs another ``ttl``, until the retry or the index says."""
        entry = self._placements.get(key)
        if entry is not None:
            self._placements[key] = (entry[0], self.clock())

    def confirm(self, key: Key) -> None:
        """The status just written holds the assumed placement (the overlay carries it until the
        index does): the assumption has done its work."""
        self._placements.pop(key, None)

    def forget(self, key: Key) -> None:
        """Drop ``key``'s assumed placement: its write was refused, the job is gone, or the
        decision was taken back. Its GPUs are free to the next round."""
        self._placements.pop(key, None)

    # --- InferenceService replica groups ------------------------------------------------------

    def assume_group(self, key: Key, group: AssumedGroup) -> None:
        """Admission gave one of ``key``'s replica groups nodes: they hold its GPUs until the
        service's status shows the group (or ``ttl`` passes with no write)."""
        self._groups[(key, group.index)] = (group, self.clock())

    def groups_of(self, key: Key) -> dict[int, AssumedGroup]:
        """The groups of ``key`` admission placed that its status does not show yet, by index."""
        now = self.clock()
        out = {}
        for (k, index), (g, at) in list(self._groups.items()):
            if k != key:
                continue
            if self._expired(service_key(key), at, now):
                del self._groups[(k, index)]
                continue
            out[index] = g
        return out

    def live_groups(self) -> dict[tuple[Key, int], AssumedGroup]:
        """Every assumed group not expired, ``(service key, index) -> group`` (the admission
        snapshot's); the expired ones are dropped."""
        now = self.clock()
        for gk in [k for k, (_, at) in self._groups.items() if self._expired(service_key(k[0]), at, now)]:
            del self._groups[gk]
        return {k: g for k, (g, _) in self._groups.items()}

    def forget_groups(self, key: Key, indices: list[int]) -> None:
        """The service's status now carries (or dropped) these admitted groups."""
        for i in indices:
            self._groups.pop((key, i), None)

    def forget_service(self, key: Key) -> None:
        """Drop every assumed group of ``key`` (the service was deleted)."""
        for gk in [k for k in self._groups if k[0] == key]:
            del self._groups[gk]
