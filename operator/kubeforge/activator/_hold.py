"""Pure: the activator's decisions. No I/O, no clock: every method takes ``now`` (seconds on a
monotonic clock) and returns typed outcomes; the server turns them into HTTP answers.

Per service (namespace, InferenceService) the :class:`RequestBuffer` keeps the service's
EndpointSlices (normally one), a FIFO of held requests and the outstanding forwards per backend.

Invariants (tested in ``tests/test_activator_hold.py``, with hypothesis):

* every request that :meth:`RequestBuffer.arrive` admits gets exactly one :class:`Answer` later
  (released, timed out, evicted, removed) unless :meth:`RequestBuffer.cancel` took it back first;
* a service never has more held requests than its queue limit;
* a request is never held past its deadline (arrival + holdSeconds) once :meth:`expire` ran at
  or after it: with a tick every T seconds, nothing is held longer than holdSeconds + T;
* while a service has a usable backend nothing of it is held: the moment one appears every held
  request is released, in arrival order;
* an address that is an activator (``own_addresses``, or listed by any ``activator`` slice) is
  never a backend: a forward can never come back to an activator.

Backend choice is least outstanding forwards, ties broken round robin (the order the slice
lists them, starting after the last pick): new requests go where the fewest are in flight, so a
replica that just became Ready is not flooded while another one idles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable

from kubeforge.api import ENDPOINTS_REPLICAS

from . import _reasons as R
from ._slices import Backend, HoldPolicy, ServiceKey, SliceView


@dataclass(frozen=True)
class Forward:
    """Admission outcome: forward now to ``backend`` (one outstanding forward is counted on it
    until :meth:`RequestBuffer.done`)."""

    backend: Backend


@dataclass(frozen=True)
class Hold:
    """Admission outcome: held until a replica is Ready, at most until ``deadline``."""

    deadline: float


@dataclass(frozen=True)
class Reject:
    """Admission outcome: answer at once with ``status`` (404, 429), ``reason`` (a constant of
    :mod:`kubeforge.activator._reasons`) and ``Retry-After: retry_after`` seconds when set."""

    status: int
    reason: str
    retry_after: int | None = None


Admission = Forward | Hold | Reject


class AnswerKind(str, Enum):
    """How a held request ends."""

    RELEASED = "Released"
    """A backend is usable: forward to :attr:`Answer.backend`."""
    TIMED_OUT = "TimedOut"
    """Held until its deadline: 503 with Retry-After (reason HoldTimeout)."""
    EVICTED = "Evicted"
    """The queue limit was lowered below the held count: the newest beyond it get 429."""
    REMOVED = "Removed"
    """The service's last EndpointSlice was deleted, or the activator is stopping: 503 with
    Retry-After (ServiceRemoved)."""


@dataclass(frozen=True)
class Answer:
    """The one answer to a held request.

    Attributes:
        rid: The request's id (given to :meth:`RequestBuffer.arrive`).
        key: Its service.
        kind: How it ends.
        held_seconds: Seconds from arrival to this answer.
        backend: Where to forward it (RELEASED only; counted outstanding until ``done``).
    """

    rid: int
    key: ServiceKey
    kind: AnswerKind
    held_seconds: float
    backend: Backend | None = None


@dataclass
class _Held:
    arrived: float
    deadline: float


@dataclass
class _Service:
    slices: dict[str, SliceView] = field(default_factory=dict)
    held: dict[int, _Held] = field(default_factory=dict)  # insertion order is arrival order
    deadlines_sorted: bool = True
    last_deadline: float = float("-inf")
    backends: tuple[Backend, ...] = ()
    policy: HoldPolicy = HoldPolicy()
    cursor: int = 0
    outstanding: dict[Backend, int] = field(default_factory=dict)


class RequestBuffer:
    """Held requests and backends of every service the activator knows.

    Args:
        retry_after: Seconds for the ``Retry-After`` of 429 answers.
        own_addresses: This activator's own addresses (its pod IP): never a backend.
    """

    def __init__(self, retry_after: int, own_addresses: Iterable[str] = ()) -> None:
        self.retry_after = retry_after
        self._own = frozenset(own_addresses)
        self._services: dict[ServiceKey, _Service] = {}
        self._where: dict[int, ServiceKey] = {}
        self._holding: set[ServiceKey] = set()
        self._activator_ips: frozenset[str] = self._own

    # ---------------------------------------------------------------- reading

    def known(self, key: ServiceKey) -> bool:
        """Whether the service has an EndpointSlice."""
        return key in self._services

    def keys(self) -> list[ServiceKey]:
        """Every known service, sorted."""
        return sorted(self._services)

    def held(self, key: ServiceKey) -> int:
        """Requests held now for the service (0 when unknown)."""
        s = self._services.get(key)
        return len(s.held) if s else 0

    def held_total(self) -> int:
        """Requests held now, all services."""
        return len(self._where)

    def backends(self, key: ServiceKey) -> tuple[Backend, ...]:
        """The service's usable backends (ready replica addresses that are not activators)."""
        s = self._services.get(key)
        return s.backends if s else ()

    def policy(self, key: ServiceKey) -> HoldPolicy:
        """The service's hold policy (the defaults when unknown)."""
        s = self._services.get(key)
        return s.policy if s else HoldPolicy()

    def activator_addresses(self) -> frozenset[str]:
        """Addresses never forwarded to: our own and every ``activator`` slice's."""
        return self._activator_ips

    # ---------------------------------------------------------------- slices

    def apply(self, view: SliceView, now: float) -> list[Answer]:
        """A slice was added or changed. Returns the answers it causes (releases when the
        service gained a usable backend, evictions when its queue limit went down)."""
        self._services.setdefault(view.key, _Service()).slices[view.name] = view
        return self._refresh(now, {view.key})

    def remove(self, namespace: str, name: str, service: str, now: float) -> list[Answer]:
        """A slice was deleted. When it was the service's last, every held request of the
        service is answered REMOVED and the service is forgotten."""
        key = (namespace, service)
        s = self._services.get(key)
        if s is None or s.slices.pop(name, None) is None:
            return []
        if s.slices:
            return self._refresh(now, {key})
        answers = [Answer(rid, key, AnswerKind.REMOVED, now - h.arrived) for rid, h in s.held.items()]
        for a in answers:
            del self._where[a.rid]
        self._holding.discard(key)
        del self._services[key]
        return answers + self._refresh(now, set())

    def replace_all(self, views: Iterable[SliceView], now: float) -> list[Answer]:
        """A fresh list of every slice (after a relist): slices not in it are removed."""
        fresh: dict[tuple[str, str], SliceView] = {(v.namespace, v.name): v for v in views}
        answers: list[Answer] = []
        for key, s in list(self._services.items()):
            for name, v in list(s.slices.items()):
                if (key[0], name) not in fresh or fresh[(key[0], name)].service != v.service:
                    answers += self.remove(key[0], name, v.service, now)
        for v in fresh.values():
            self._services.setdefault(v.key, _Service()).slices[v.name] = v
        return answers + self._refresh(now, {v.key for v in fresh.values()})

    def flush(self, now: float) -> list[Answer]:
        """Answers REMOVED every held request (the activator is shutting down); the slices stay."""
        answers = []
        for key in sorted(self._holding):
            s = self._services[key]
            answers += [Answer(rid, key, AnswerKind.REMOVED, now - h.arrived) for rid, h in s.held.items()]
            s.held.clear()
            s.deadlines_sorted, s.last_deadline = True, float("-inf")
        self._holding.clear()
        self._where.clear()
        return answers

    def _refresh(self, now: float, touched: set[ServiceKey]) -> list[Answer]:
        ips = self._own | frozenset(a for s in self._services.values() for v in s.slices.values()
                                    if v.mode != ENDPOINTS_REPLICAS for a in v.addresses)
        if ips != self._activator_ips:
            self._activator_ips = ips
            touched = set(self._services)  # which addresses are usable changed everywhere
        answers: list[Answer] = []
        for key in sorted(touched):
            s = self._services.get(key)
            if s is None:
                continue
            views = [s.slices[n] for n in sorted(s.slices)]
            seen: dict[Backend, None] = {}
            for v in views:
                if v.mode == ENDPOINTS_REPLICAS:
                    seen.update((b, None) for b in v.backends() if b.ip not in ips)
            s.backends = tuple(seen)
            # the activator slice's annotations; a replicas slice's own when it has them
            s.policy = next((v.policy for v in views if v.mode != ENDPOINTS_REPLICAS),
                            views[0].policy if views else HoldPolicy())
            if s.backends:
                answers += self._release(key, s, now)
            elif len(s.held) > s.policy.queue_limit:
                evict = list(s.held)[s.policy.queue_limit:]
                for rid in evict:
                    answers.append(Answer(rid, key, AnswerKind.EVICTED, now - s.held.pop(rid).arrived))
                    del self._where[rid]
        return answers

    def _release(self, key: ServiceKey, s: _Service, now: float) -> list[Answer]:
        answers = []
        for rid, h in s.held.items():
            answers.append(Answer(rid, key, AnswerKind.RELEASED, now - h.arrived, self._pick(s, ())))
            del self._where[rid]
        s.held.clear()
        s.deadlines_sorted, s.last_deadline = True, float("-inf")
        self._holding.discard(key)
        return answers

    # ---------------------------------------------------------------- requests

    def arrive(self, key: ServiceKey, rid: int, now: float) -> Admission:
        """A request for ``key`` arrived.

        Returns:
            :class:`Forward` when the service has a usable backend; :class:`Hold` while it has
            none and fewer than its queue limit are held; :class:`Reject` 429 (QueueFull, with
            Retry-After) beyond the limit, 404 (UnknownService) for a service without slice.

        Raises:
            ValueError: ``rid`` is held already.
        """
        s = self._services.get(key)
        if s is None:
            return Reject(404, R.UNKNOWN_SERVICE)
        if s.backends:
            return Forward(self._pick(s, ()))
        if len(s.held) >= s.policy.queue_limit:
            return Reject(429, R.QUEUE_FULL, self.retry_after)
        if rid in self._where:
            raise ValueError(f"request {rid} is held already")
        deadline = now + s.policy.hold_seconds
        if deadline < s.last_deadline:
            s.deadlines_sorted = False
        s.last_deadline = max(s.last_deadline, deadline)
        s.held[rid] = _Held(now, deadline)
        self._where[rid] = key
        self._holding.add(key)
        return Hold(deadline)

    def cancel(self, rid: int) -> bool:
        """The client of a held request went away: forget it. Returns whether it was held
        (False: it was answered already, or never held)."""
        key = self._where.pop(rid, None)
        if key is None:
            return False
        s = self._services[key]
        del s.held[rid]
        if not s.held:
            self._holding.discard(key)
            s.deadlines_sorted, s.last_deadline = True, float("-inf")
        return True

    def expire(self, now: float) -> list[Answer]:
        """Answers TIMED_OUT every held request whose deadline is at or before ``now``. Costs
        the number of expired requests while deadlines are in arrival order (a constant
        holdSeconds), the held count of a service otherwise."""
        answers: list[Answer] = []
        for key in sorted(self._holding):
            s = self._services[key]
            gone = []
            for rid, h in s.held.items():
                if h.deadline <= now:
                    gone.append(rid)
                elif s.deadlines_sorted:
                    break
            for rid in gone:
                answers.append(Answer(rid, key, AnswerKind.TIMED_OUT, now - s.held.pop(rid).arrived))
                del self._where[rid]
            if not s.held:
                self._holding.discard(key)
                s.deadlines_sorted, s.last_deadline = True, float("-inf")
        return answers

    # ---------------------------------------------------------------- forwards

    def pick(self, key: ServiceKey, exclude: Iterable[Backend] = ()) -> Backend | None:
        """Another backend for a forward whose backend refused the connection (least
        outstanding, round robin on ties), counted outstanding; None when there is none."""
        s = self._services.get(key)
        return self._pick(s, frozenset(exclude)) if s else None

    def _pick(self, s: _Service, exclude: Iterable[Backend]) -> Backend | None:
        n = len(s.backends)
        best: tuple[int, int] | None = None
        for off in range(n):
            i = (s.cursor + off) % n
            b = s.backends[i]
            if b in exclude:
                continue
            load = s.outstanding.get(b, 0)
            if best is None or load < best[0]:
                best = (load, i)
        if best is None:
            return None
        b = s.backends[best[1]]
        s.cursor = (best[1] + 1) % n
        s.outstanding[b] = s.outstanding.get(b, 0) + 1
        return b

    def done(self, key: ServiceKey, backend: Backend) -> None:
        """A forward to ``backend`` ended (answered, failed or cancelled)."""
        s = self._services.get(key)
        if s is None or backend not in s.outstanding:
            return
        s.outstanding[backend] -= 1
        if s.outstanding[backend] <= 0:
            del s.outstanding[backend]

    def outstanding(self, key: ServiceKey) -> dict[Backend, int]:
        """Forwards in flight per backend of the service."""
        s = self._services.get(key)
        return dict(s.outstanding) if s else {}
