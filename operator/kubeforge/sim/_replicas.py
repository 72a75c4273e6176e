"""The model-server simulator's replicas and the service that routes to them: continuous
batching on the latency model of :mod:`._latency`, no clock, no I/O.

One **replica** is one vLLM engine (for a multi-node service: one group's leader). It holds:

* a FIFO **waiting** queue (vLLM's ``WAITING`` requests, ``vllm:num_requests_waiting``);
* a **running** set (``vllm:num_requests_running``) of at most ``slots`` requests (vLLM's
  ``--max-num-seqs``) whose KV-cache reservation (prompt + output tokens) fits in
  ``kv_cache_tokens`` (vLLM admits a request only when its blocks are free; one request is
  always admitted into an empty replica). ``vllm:kv_cache_usage_perc`` is the reserved
  fraction.

A **service** routes each arrival to the routable replica with the fewest outstanding
(waiting + running) requests, ties by name (join-the-shortest-queue, as llm-d's endpoint
picker's queue scorer). With no routable replica the request is **held** at the service
(the activator holding it) and dispatched when one becomes routable. Optionally
(``gateway=(queue depth, KV usage)``) the router holds requests while every routable replica
is saturated, and hands the oldest held one to a replica as soon as one is not (late
binding: the Gateway API Inference Extension's flow control, whose saturation detector's
defaults are queue depth 5 and KV cache 0.8); that is close to one shared queue, which the
autoscaler's M/M/c model assumes, and it keeps a cold start's backlog from being stuck on the
first replica. A replica taken out of routing (draining) gets nothing new and finishes what
it has; a replica that disappears (its pod deleted) **aborts** its waiting and running requests.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from ._latency import Done, Request, ServiceModel, Stats, itl_seconds

__all__ = ["Replica", "Service"]


@dataclass
class Replica:
    """One replica's queue and running set at ``time`` (mutable; :meth:`advance` moves it)."""

    name: str
    time: float = 0.0
    routable: bool = True
    waiting: deque = field(default_factory=deque)
    prefilling: list = field(default_factory=list)  # heap of (first-token time, seq, request, start)
    decoding: list = field(default_factory=list)  # heap of (token clock at finish, seq, request, start, first)
    v: float = 0.0  # the token clock
    kv_used: int = 0
    stats: Stats = field(default_factory=Stats)
    _seq: int = 0

    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.decoding)

    def kv_usage(self, model: ServiceModel) -> float:
        """``vllm:kv_cache_usage_perc``: reserved KV fraction (running / slots when unlimited)."""
        if model.kv_cache_tokens > 0:
            return min(1.0, self.kv_used / model.kv_cache_tokens)
        return self.running / model.slots if model.slots else 0.0

    def _admit(self, model: ServiceModel, t: float) -> None:
        cap = model.kv_cache_tokens
        while self.waiting and self.running < model.slots:
            r = self.waiting[0]
            need = r.context + r.tokens
            if cap > 0 and self.running and self.kv_used + need > cap:
                return
            self.waiting.popleft()
            self.kv_used += need
            self._seq += 1
            heapq.heappush(self.prefilling, (t + r.prefill, self._seq, r, t))

    def enqueue(self, model: ServiceModel, r: Request, sink: list, service_stats: Stats | None = None) -> None:
        """``r`` arrives here at ``r.arrival`` (advance the replica to that time first)."""
        self.advance(model, r.arrival, sink, service_stats)
        self.waiting.append(r)
        self._admit(model, self.time)

    def advance(self, model: ServiceModel, until: float, sink: list, service_stats: Stats | None = None) -> None:
        """Move to ``until``, appending each finished request to ``sink`` as a :class:`Done`.

        Exact event order: first tokens, decode completions (on the token clock) and the
        admissions they allow. ``until`` before :attr:`time` does nothing.
        """
        if until <= self.time:
            return
        while True:
            b = len(self.prefilling) + len(self.decoding)
            t_pf = self.prefilling[0][0] if self.prefilling else math.inf
            if self.decoding:
                itl = itl_seconds(model, b)
                t_dc = self.time + max(0.0, self.decoding[0][0] - self.v) * itl
            else:
                itl, t_dc = 0.0, math.inf
            t = t_pf if t_pf <= t_dc else t_dc
            if t > until:
                break
            if self.decoding:
                self.v += (t - self.time) / itl
            self.time = t
            if t_pf <= t_dc:
                _, _, r, start = heapq.heappop(self.prefilling)
                self.stats.first_token(t - r.arrival, t - start)
                if service_stats is not None:
                    service_stats.first_token(t - r.arrival, t - start)
                if r.tokens > 0:
                    self._seq += 1
                    heapq.heappush(self.decoding, (self.v + r.tokens, self._seq, r, start, t))
                else:
                    self._finish(Done(r, self.name, start, t, t), sink, service_stats)
            else:
                _, _, r, start, first = heapq.heappop(self.decoding)
                self._finish(Done(r, self.name, start, first, t, (t - first) / r.tokens), sink, service_stats)
            self._admit(model, t)
        if self.decoding:
            self.v += (until - self.time) / itl_seconds(model, len(self.prefilling) + len(self.decoding))
        self.time = until

    def _finish(self, done: Done, sink: list, service_stats: Stats | None) -> None:
        self.kv_used -= done.request.context + done.request.tokens
        self.stats.finished(done)
        if service_stats is not None:
            service_stats.finished(done)
        sink.append(done)

    def abort_all(self, t: float, sink: list) -> int:
        """The replica disappears at ``t``: everything it holds is aborted; returns how many."""
        n = 0
        for r in self.waiting:
            sink.append(Done(r, self.name, None, None, t, aborted=True))
            n += 1
        for _, _, r, start in self.prefilling:
            sink.append(Done(r, self.name, start, None, t, aborted=True))
            n += 1
        for _, _, r, start, first in self.decoding:
            sink.append(Done(r, self.name, start, first, t, aborted=True))
            n += 1
        self.waiting.clear()
        self.prefilling.clear()
        self.decoding.clear()
        self.kv_used = 0
        self.stats.aborted += n
        return n


class Service:
    """One service's replicas, router and held requests (pure; the caller owns the clock).

    Args:
        model: The replica model (the same for every replica).
        time: Start time, simulated seconds.

    Attributes:
        replicas: ``name -> Replica`` of replicas that exist (routable or draining).
        held: Requests that arrived while no replica was routable, FIFO.
        done: Every :class:`Done` since the caller last cleared it (finished and aborted).
        stats: Service-wide counters (all replicas, removed ones included).
        aborted: Requests aborted because their replica disappeared.
    """

    #: How often held requests are offered to replicas while some are held, simulated s.
    DISPATCH_STEP = 0.1

    def __init__(self, model: ServiceModel, time: float = 0.0, gateway: tuple[int, float] | None = None):
        self.model = model
        self.time = time
        self.gateway = gateway
        self.replicas: dict[str, Replica] = {}
        self.held: deque = deque()
        self.done: list[Done] = []
        self.stats = Stats(scale=model.time_scale)
        self.aborted = 0

    def routable(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.routable]

    def _pick(self) -> Replica | None:
        best = None
        gw = self.gateway
        for rep in self.replicas.values():
            if not rep.routable:
                continue
            if gw is not None and (len(rep.waiting) >= gw[0] or rep.kv_usage(self.model) >= gw[1]):
                continue  # saturated: the gateway keeps the request
            if best is None or (rep.outstanding, rep.name) < (best.outstanding, best.name):
                best = rep
        return best

    def _route(self, r: Request) -> None:
        best = None if self.held else self._pick()  # FIFO: nothing passes a held request
        if best is None:
            self.held.append(r)
        else:
            best.enqueue(self.model, r, self.done, self.stats)

    def _dispatch(self) -> None:
        while self.held:
            best = self._pick()
            if best is None:
                return
            best.enqueue(self.model, self.held.popleft(), self.done, self.stats)

    def _advance_replicas(self, t: float) -> None:
        for rep in self.replicas.values():
            rep.advance(self.model, t, self.done, self.stats)
        self._dispatch()
        self.time = max(self.time, t)

    def advance(self, now: float, arrivals: Iterable[Request] = ()) -> None:
        """Move to ``now``: route each arrival (sorted, at or before ``now``) at its time, then
        advance every replica; held requests are offered to the replicas every
        :data:`DISPATCH_STEP`. Arrivals after ``now`` are the caller's to keep."""
        for r in arrivals:
            if r.arrival > now:
                break
            t = max(r.arrival, self.time)
            while self.held and self.gateway is not None and self.time + self.DISPATCH_STEP < t:
                self._advance_replicas(self.time + self.DISPATCH_STEP)
            self._advance_replicas(t)
            self._route(r)
        while self.held and self.gateway is not None and self.time + self.DISPATCH_STEP < now:
            self._advance_replicas(self.time + self.DISPATCH_STEP)
        self._advance_replicas(now)

    def set_replicas(self, existing: Iterable[str], routable: Iterable[str], now: float) -> int:
        """The replicas that exist and those the Service routes to, as of ``now``.

        Replicas no longer in ``existing`` disappear (their requests are aborted); new names
        start empty; routable ones take new requests, the others (draining, not Ready) only
        finish theirs. Held requests go to the routable replicas at once.

        Returns:
            How many requests were aborted.
        """
        self.advance(now)
        existing, routable = set(existing), set(routable)
        aborted = 0
        for name in [n for n in self.replicas if n not in existing]:
            aborted += self.replicas.pop(name).abort_all(now, self.done)
        for name in sorted(existing):
            rep = self.replicas.get(name)
            if rep is None:
                rep = self.replicas[name] = Replica(name, time=now, stats=Stats(scale=self.model.time_scale))
            rep.routable = name in routable
        self.aborted += aborted
        self.stats.aborted += aborted
        self._dispatch()  # held requests keep their arrival: the hold counts in their TTFT
        return aborted

    @property
    def waiting(self) -> int:
        """Requests waiting: in replicas' queues plus held at the service."""
        return len(self.held) + sum(len(r.waiting) for r in self.replicas.values())

    @property
    def running(self) -> int:
        return sum(r.running for r in self.replicas.values())
