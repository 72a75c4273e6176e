"""The status overlay of :class:`kubeforge.runtime.cache.Cache`: the status this process last
wrote for an object, acted on until the index has caught up with that write."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Mapping

from kubeforge.objects import Record
from kubeforge.runtime.cache_expectations import EXPECTATION_TTL


def resource_version(value: str | None) -> int | None:
    """A resourceVersion as an integer (how the API server's watch cache compares them).

    Args:
        value: The resourceVersion as the API server wrote it; ``None`` or ``""`` when absent.

    Returns:
        The integer, or None when there is none or it is not a decimal number.
    """
    try:
        return int(value) if value else None
    except ValueError:
        return None


@dataclass
class _Written:
    written_at: float
    rv: str | None
    status: dict[str, Any]


@dataclass
class StatusOverlay:
    """Our own last status write of each object, until the index shows it.

    A reconcile must never act on a copy older than what this process wrote (that is how two
    jobs could otherwise get the same GPUs). Invariants:

    - :meth:`effective` returns the written status while the index's resourceVersion is lower
      than the written one (compared as integers); once the index reaches or passes it, the
      entry goes and the index is the truth again.
    - Only the index's own record can show that: a record :meth:`effective` handed out (our
      written status and resourceVersion on the index's record) given back to it is returned as
      it is and the entry stays. Taking such a record for the index's once dropped the entry
      while the index still held the version before the write: the next admission round saw a
      placed gang with no placement and gave its GPUs again (64 job workers, a burst of 800
      gangs: 578 placements lost from the ledger for a round, e2e/README-training-bench.md).
    - Versions that cannot be compared (absent, not a number) trust the write for ``ttl``
      seconds, then drop it; comparable ones never time out.
    - A write answered out of order (an older resourceVersion after a newer one) never replaces
      the newer entry; ``remember(key, None)`` (the object is gone) drops it.

    Attributes:
        clock: Monotonic seconds (``time.monotonic`` unless a test or the cache sets one).
        ttl: Seconds a write with an incomparable resourceVersion is trusted.
    """

    clock: Callable[[], float] = time.monotonic
    ttl: float = EXPECTATION_TTL
    _written: dict[Hashable, _Written] = field(default_factory=dict)

    def remember(self, key: Hashable, written: Mapping[str, Any] | None) -> None:
        """Record an object as the API server returned it after our status write.

        Args:
            key: The object's key in the books.
            written: The object the write returned (``metadata.resourceVersion`` and
                ``status`` are read); ``None``: it is gone.
        """
        if written is None:
            self._written.pop(key, None)
            return
        rv = (written.get("metadata") or {}).get("resourceVersion")
        old = self._written.get(key)
        new_rv, old_rv = resource_version(rv), resource_version(old.rv) if old is not None else None
        if old_rv is not None and new_rv is not None and new_rv < old_rv:
            return  # two writes answered out of order: keep the newer one
        self._written[key] = _Written(self.clock(), rv, dict(written.get("status") or {}))

    def own_write(self, key: Hashable, rv: str) -> bool:
        """Whether ``rv`` is the resourceVersion our last status write of ``key`` made (the
        watch event that echoes it): the reconcile that wrote it decided on everything that
        version holds, so the echo needs no reconcile of its own."""
        entry = self._written.get(key)
        return entry is not None and bool(rv) and entry.rv == rv

    def effective(self, key: Hashable, rec: Record) -> Record:
        """``rec`` with the status to act on.

        Args:
            key: The object's key in the books.
            rec: The object as the index holds it.

        Returns:
            ``rec`` itself when nothing newer was written (or the index caught up: the entry
            is dropped then); else a copy with our written status and resourceVersion.
        """
        entry = self._written.get(key)
        if entry is None or rec.status is entry.status:  # nothing written, or our own copy handed back
            return rec
        seen, mine = resource_version(rec.resource_version), resource_version(entry.rv)
        if seen is not None and mine is not None and seen >= mine:
            self._written.pop(key, None)
            return rec
        if seen is None or mine is None:  # not comparable: trust our write for a while
            if self.clock() - entry.written_at > self.ttl:
                self._written.pop(key, None)
                return rec
        return replace(rec, status=entry.status, resource_version=entry.rv or rec.resource_version)

    def forget(self, key: Hashable) -> None:
        """Drop what was written of ``key``."""
        self._written.pop(key, None)
