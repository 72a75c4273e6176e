"""Hand-offs of :class:`kubeforge.runtime.cache.Cache`: what one loop sees and another object's
reconcile acts on (waiting reasons, create refusals, preemptions)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kubeforge.lifecycle import CreateError
from kubeforge.objects import Key

NOMINATION_TTL = 600.0
"""Seconds GPUs stay promised to a preemptor while its victims checkpoint and stop; then it
may preempt again (a victim whose pods never go away must not hold it forever)."""

Wait = tuple[str, str]
"""``(reason, message)`` of a gang that admission left waiting."""


def _changed(old: Mapping[Key, Any], new: Mapping[Key, Any]) -> list[Key]:
    """The keys of ``new`` whose value is not the one in ``old``."""
    return [k for k, v in new.items() if old.get(k) != v]


@dataclass
class HandOffs:
    """Notes from where something is seen (the admission round, a failed create) to the
    reconcile that acts on it, one per object.

    Invariants:

    - **Waits.** Each round's waiting gangs replace the last round's whole
      (:meth:`hand_waits`, :meth:`hand_serving_waits`): a key the round left out waits no more;
      only the keys whose reason or message changed are returned, for their reconcile to
      write. :meth:`stop_waiting` ends one key's wait at once (admission placed it).
    - **Create refusals** stay until :meth:`clear_create_error` (a new attempt or placement
      is on record); a newer refusal replaces the older.
    - **Nominations.** GPUs promised to a preemptor count for ``nomination_ttl`` seconds, and
      only while the round still lists it as preempting (:meth:`keep_nominations`).
    - **Stop requests** stay until :meth:`stop_done` (the stop is on record); every victim with
      one counts as being preempted.
    - **Unsettled releases** (:meth:`release_unsettled`): the pods a release meant to delete by
      name when neither its status write's answer nor the read-back came, until a reconcile
      settles them (:meth:`settle_release`).

    Attributes:
        clock: Monotonic seconds (``time.monotonic`` unless a test or the cache sets one).
        nomination_ttl: Seconds a nomination holds its GPUs.
    """

    clock: Callable[[], float] = time.monotonic
    nomination_ttl: float = NOMINATION_TTL
    _waiting: dict[Key, Wait] = field(default_factory=dict)
    _last_wait_write: dict[Key, float] = field(default_factory=dict)
    _serving_waits: dict[Key, Wait] = field(default_factory=dict)
    _create_errors: dict[Key, CreateError] = field(default_factory=dict)
    _nominations: dict[Key, tuple[str, dict[str, int], float]] = field(default_factory=dict)
    _stop_requests: dict[Key, tuple[str, str, float]] = field(default_factory=dict)
    _unsettled: dict[Key, tuple[int, int, tuple[str, ...]]] = field(default_factory=dict)

    # --- waiting gangs ------------------------------------------------------------------------

    def hand_waits(self, waiting: Mapping[Key, Wait]) -> list[Key]:
        """The round's waiting gangs, ``key -> (reason, message)``, replacing the last round's;
        returns the keys whose reason or message changed (their reconcile writes it)."""
        changed = _changed(self._waiting, waiting)
        self._waiting = dict(waiting)
        return changed

    def wait_of(self, key: Key) -> Wait | None:
        """Why admission left ``key`` waiting in the last round, ``(reason, message)``."""
        return self._waiting.get(key)

    def stop_waiting(self, key: Key) -> None:
        """``key`` was placed: it no longer waits."""
        self._waiting.pop(key, None)

    def wait_written(self, key: Key, now: float) -> None:
        """``key``'s waiting reason was written to its status at ``now`` (epoch seconds)."""
        self._last_wait_write[key] = now

    def last_wait_write(self, key: Key) -> float:
        """When ``key``'s waiting reason was last written (epoch seconds; 0 never)."""
        return self._last_wait_write.get(key, 0.0)

    def hand_serving_waits(self, waits: Mapping[Key, Wait]) -> list[Key]:
        """As :meth:`hand_waits`, for InferenceServices whose replica groups wait."""
        changed = _changed(self._serving_waits, waits)
        self._serving_waits = dict(waits)
        return changed

    def serving_wait_of(self, key: Key) -> Wait | None:
        """Why ``key``'s replica groups wait, ``(reason, message)``, from the last round."""
        return self._serving_waits.get(key)

    # --- create refusals ----------------------------------------------------------------------

    def create_refused(self, key: Key, error: CreateError) -> None:
        """A create for ``key`` was refused for good (422, 403...): its next decision releases
        the GPUs and says why (:class:`~kubeforge.lifecycle.CreateError`)."""
        self._create_errors[key] = error

    def create_error(self, key: Key) -> CreateError | None:
        """The refusal :meth:`create_refused` handed to ``key``'s next decision."""
        return self._create_errors.get(key)

    def clear_create_error(self, key: Key) -> None:
        """A new attempt or placement is on record: the old refusal no longer applies."""
        self._create_errors.pop(key, None)

    # --- preemption: nominations and stop requests --------------------------------------------

    def nominate(self, key: Key, pool: str, gpus_by_node: Mapping[str, int]) -> None:
        """GPUs promised to the preemptor ``key`` while its victims stop (for at most
        ``nomination_ttl`` seconds): no other gang takes them meanwhile."""
        self._nominations[key] = (pool, dict(gpus_by_node), self.clock())

    def keep_nominations(self, live: Iterable[Key]) -> None:
        """Drop every nomination but those of ``live`` (preemptors still waiting for victims)."""
        keep = set(live)
        for key in [k for k in self._nominations if k not in keep]:
            del self._nominations[key]

    def nominations(self) -> dict[Key, tuple[str, dict[str, int]]]:
        """The nominations younger than ``nomination_ttl``, ``preemptor -> (pool, GPUs by
        node)`` (the admission snapshot's)."""
        now = self.clock()
        return {k: (pool, by_node) for k, (pool, by_node, at) in self._nominations.items()
                if now - at < self.nomination_ttl}

    def request_stop(self, victim: Key, reason: str, message: str, lost_gpu_seconds: float) -> None:
        """Ask ``victim``'s reconcile to stop it (preempted: ``reason`` and ``message`` go to its
        status and Event; ``lost_gpu_seconds``: the work since its last checkpoint)."""
        self._stop_requests[victim] = (reason, message, lost_gpu_seconds)

    def stop_request(self, key: Key) -> Wait | None:
        """``(reason, message)`` of the stop asked of ``key``, None when none is."""
        entry = self._stop_requests.get(key)
        return entry[:2] if entry is not None else None

    def stop_done(self, key: Key) -> None:
        """The stop is on record (a new attempt), or ``key`` holds nothing left to stop."""
        self._stop_requests.pop(key, None)

    def preempting(self) -> frozenset[Key]:
        """Every victim with a stop request (the admission snapshot's)."""
        return frozenset(self._stop_requests)

    # --- releases whose write is unknown --------------------------------------------------------

    def release_unsettled(self, key: Key, resource_version: str, attempt: int, names: Iterable[str]) -> None:
        """A status write that released ``key``'s placement of attempt ``attempt``, decided from
        the job's version ``resource_version``, meant to delete the pods ``names``; it got no answer, nor did its
        read-back, so it may be on record. Only that plan knew the names (a plan decided from the
        released status does not): they wait here for the next reconcile (:meth:`unsettled_release`)."""
        self._unsettled[key] = (int(resource_version or 0), attempt, tuple(names))

    def unsettled_release(self, key: Key) -> tuple[int, int, tuple[str, ...]] | None:
        """``(resource version decided from, attempt released, pod names)`` of ``key``'s release
        whose write is unknown, or None."""
        return self._unsettled.get(key)

    def settle_release(self, key: Key) -> None:
        """``key``'s unknown release is settled: its pods are being deleted, or a newer version
        of the job still holds the placement, so it never landed."""
        self._unsettled.pop(key, None)

    # --- forgetting ---------------------------------------------------------------------------

    def forget(self, key: Key) -> None:
        """Drop every hand-off of TrainingJob ``key`` (it was deleted)."""
        for book in (self._create_errors, self._waiting, self._last_wait_write, self._nominations,
                     self._stop_requests, self._unsettled):
            book.pop(key, None)  # type: ignore[attr-defined]

    def forget_service(self, key: Key) -> None:
        """Drop the hand-offs of InferenceService ``key`` (it was deleted)."""
        self._serving_waits.pop(key, None)
