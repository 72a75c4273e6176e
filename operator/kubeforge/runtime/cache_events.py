"""Held Events of :class:`kubeforge.runtime.cache.Cache`: the Events that narrate a status
write, kept until that write answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Iterable

Event = tuple[str, str, str]
"""``(type, reason, message)`` of a Kubernetes Event."""
HeldEvent = tuple[str, str, str, float]
"""``(type, reason, message, decided_at)``: an Event and when it was decided (epoch seconds)."""


@dataclass
class HeldEvents:
    """The Events each status write narrates, held until the write's answer.

    An Event must reach the API server with the transition it narrates, and never without it.
    Invariants:

    - :meth:`hold` keeps a decision's Events; :meth:`take` hands them over once the write is
      on record (or nothing needed writing) and holds them no more; :meth:`drop` discards them
      when the write was refused or superseded (409).
    - Events still held from a write whose answer was lost stay for the next reconcile (which
      no longer sees the transition they narrate), but a newer decision's Event of the same
      type and reason replaces the older one, and moves to the end.
    - :meth:`take` returns them oldest first, each with the time it was decided.
    - Per key: one object's Events are never another's.
    """

    _held: dict[Hashable, dict[tuple[str, str], tuple[str, float]]] = field(default_factory=dict)

    def hold(self, key: Hashable, events: Iterable[Event], now: float) -> None:
        """Keep ``events`` until the status write that puts their decision on record answers.

        Args:
            key: The object's key in the books.
            events: ``(type, reason, message)`` each.
            now: When they were decided (epoch seconds).
        """
        held = self._held.setdefault(key, {})
        for type_, reason, message in events:
            held.pop((type_, reason), None)
            held[(type_, reason)] = (message, now)
        if not held:
            del self._held[key]

    def take(self, key: Hashable) -> list[HeldEvent]:
        """The Events held for ``key`` (``(type, reason, message, decided_at)``, oldest first),
        now that their status is on record; they are no longer held."""
        held = self._held.pop(key, {})
        return [(type_, reason, message, at) for (type_, reason), (message, at) in held.items()]

    def drop(self, key: Hashable) -> None:
        """The write was refused or superseded: what the held Events narrate is not on record."""
        self._held.pop(key, None)
