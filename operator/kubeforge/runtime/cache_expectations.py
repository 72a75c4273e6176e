"""Expectations of :class:`kubeforge.runtime.cache.Cache`: creates and deletes this process
sent that the index does not show yet (controller-runtime's ``ControllerExpectations``, the
Job controller's expectations)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

EXPECTATION_TTL = 60.0
"""Seconds an expectation (a create or delete not yet seen in the index) is trusted."""

_Book = dict[Hashable, dict[str, float]]


@dataclass
class Expectations:
    """Creates and deletes sent and not seen yet, name by name, per owner.

    A reconcile that runs before the watch catches up must not create or delete the same
    objects again. Invariants:

    - Two books, creates and deletes, apart: a name expected in one is not pending in the other.
    - A name is pending from :meth:`expect_created` / :meth:`expect_deleted` until it is
      observed (:meth:`created_observed` / :meth:`deleted_observed`: the index shows it, or
      the write failed) or ``ttl`` seconds pass, name by name; expecting it again renews it.
    - An expired name is dropped when it is read, not only hidden.
    - Books are per owner key: one owner's names are never another's.

    Attributes:
        clock: Monotonic seconds (``time.monotonic`` unless a test or the cache sets one).
        ttl: Seconds an expectation is trusted.
    """

    clock: Callable[[], float] = time.monotonic
    ttl: float = EXPECTATION_TTL
    _created: _Book = field(default_factory=dict)
    _deleted: _Book = field(default_factory=dict)

    def _expect(self, book: _Book, key: Hashable, names: Iterable[str]) -> None:
        now = self.clock()
        book.setdefault(key, {}).update({n: now for n in names})

    def _pending(self, book: _Book, key: Hashable) -> set[str]:
        entries = book.get(key)
        if not entries:
            return set()
        now = self.clock()
        for n in [n for n, t in entries.items() if now - t > self.ttl]:
            del entries[n]
        return set(entries)

    def expect_created(self, key: Hashable, names: Iterable[str]) -> None:
        """Objects ``key``'s reconcile is creating now (pods, claims, domains; a gate lift as
        ``ungate:<pod>``): not made again while the index does not show them."""
        self._expect(self._created, key, names)

    def expect_deleted(self, key: Hashable, names: Iterable[str]) -> None:
        """Objects ``key``'s reconcile is deleting now (pods; a domain as
        ``computedomain:<name>``): never taken for someone else's deletion, never deleted twice."""
        self._expect(self._deleted, key, names)

    def pending_creates(self, key: Hashable) -> set[str]:
        """Creates of ``key`` sent and not seen yet (younger than ``ttl``)."""
        return self._pending(self._created, key)

    def pending_deletes(self, key: Hashable) -> set[str]:
        """Deletes of ``key`` sent and not seen yet (younger than ``ttl``)."""
        return self._pending(self._deleted, key)

    def created_observed(self, key: Hashable, name: str) -> None:
        """The index showed ``name``, or its create failed: the expectation goes
        (controller-runtime's ``CreationObserved``). Left to its TTL, a name reused later (a
        group index added back after a scale-down) would be taken as created for a minute and
        never made."""
        entries = self._created.get(key)
        if entries is not None:
            entries.pop(name, None)

    def deleted_observed(self, key: Hashable, name: str) -> None:
        """The delete of ``name`` failed (or was seen): decided again on the next look."""
        entries = self._deleted.get(key)
        if entries is not None:
            entries.pop(name, None)

    def forget(self, key: Hashable) -> None:
        """Drop every expectation of ``key`` (it was deleted)."""
        self._created.pop(key, None)
        self._deleted.pop(key, None)
