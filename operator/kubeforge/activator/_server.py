"""The activator's HTTP side (aiohttp.web): the proxy port, the metrics/health port, and the
glue between requests, the pure :class:`~kubeforge.activator._hold.RequestBuffer` and the watch.

One request, in order: name its service (``X-Kubeforge-Service`` or Host; 404 when none or
unknown), refuse a loop (508 when it carries the activator's marker), refuse what is over a
bound (413 body, 503 ``--max-requests``), then ask the buffer: forward now, hold (429 with
Retry-After beyond the queue limit), and when held, wait for the one answer the buffer gives it
(released: forward; timed out: 503 with Retry-After). A client that goes away while held is
taken out of the queue at once (the server cancels the handler: ``handler_cancellation``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any, Mapping

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubeforge.api import ENDPOINTS_REPLICAS

from . import _reasons as R
from ._hold import Answer, AnswerKind, Forward, Hold, Reject, RequestBuffer
from ._metrics import ActivatorMetrics
from ._proxy import ForwardSettings, error_response, forward
from ._route import MARKER_HEADER, identify
from ._slices import SERVICE_LABEL, Backend, ServiceKey, SliceView, parse_slice

log = logging.getLogger("kubeforge.activator")


@dataclass(frozen=True)
class ActivatorConfig:
    """Settings of one activator process (the ``kubeforge activator`` flags).

    Attributes:
        max_body_bytes: Largest request body accepted (413 beyond).
        max_requests: Requests held or forwarded at once, all services (503 beyond).
        forward_timeout: Seconds a forward may take, to the response's last byte (504 beyond).
        connect_timeout: Seconds to connect to a backend.
        connect_attempts: Backends tried when connections are refused.
        retry_after: Seconds in ``Retry-After`` of 429 and 503 answers.
        tick: Seconds between expiry passes: nothing is held longer than holdSeconds + tick.
        backend_override: Base URL every forward goes to (local simulator only).
        own_addresses: This pod's IPs: never forwarded to.
        identity: The marker value on forwarded requests (the pod name).
    """

    max_body_bytes: int = 16 * 1024 * 1024
    max_requests: int = 10_000
    forward_timeout: float = 300.0
    connect_timeout: float = 5.0
    connect_attempts: int = 3
    retry_after: int = 10
    tick: float = 0.25
    backend_override: str | None = None
    own_addresses: tuple[str, ...] = ()
    identity: str = "kubeforge-activator"


class Activator:
    """The request buffer of every service, fed by the EndpointSlice watch, served over HTTP.

    Args:
        config: Settings.
        clock: Monotonic seconds (``time.monotonic``; tests may pass their own).
    """

    def __init__(self, config: ActivatorConfig, clock=time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.buffer = RequestBuffer(config.retry_after, config.own_addresses)
        self.metrics = ActivatorMetrics()
        self.synced = False
        self.draining = False
        self.in_flight = 0
        self._waiters: dict[int, asyncio.Future[Answer]] = {}
        self._ids = itertools.count(1)
        self._slices: dict[tuple[str, str], SliceView] = {}
        self._session: aiohttp.ClientSession | None = None
        self._forward = ForwardSettings(timeout=config.forward_timeout, connect_timeout=config.connect_timeout,
                                        attempts=max(1, config.connect_attempts), override=config.backend_override,
                                        identity=config.identity)

    # ------------------------------------------------------------------ slices (the watch)

    def on_list(self, objs: list[Mapping[str, Any]]) -> None:
        """Every slice, from a (re)list: replaces what was known. Marks the activator synced."""
        views = [v for v in map(parse_slice, objs) if v is not None]
        before = dict(self._slices)
        self._slices = {(v.namespace, v.name): v for v in views}
        for v in views:
            self._describe(before.get((v.namespace, v.name)), v)
        self._answer(self.buffer.replace_all(views, self.clock()))
        self._sync_series()
        if not self.synced:
            log.info("listed %d EndpointSlices of %d services; ready", len(views), len(self.buffer.keys()))
        self.synced = True

    def on_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED; others are ignored)."""
        meta = obj.get("metadata") or {}
        at = (meta.get("namespace") or "", meta.get("name") or "")
        if kind == "DELETED":
            old = self._slices.pop(at, None)
            service = (meta.get("labels") or {}).get(SERVICE_LABEL) or (old.service if old else "")
            if service:
                log.info("%s/%s: EndpointSlice %s deleted", at[0], service, at[1])
                self._answer(self.buffer.remove(at[0], at[1], service, self.clock()))
        elif kind in ("ADDED", "MODIFIED"):
            view = parse_slice(obj)
            if view is None:
                return
            old = self._slices.get(at)
            if old is not None and old.service != view.service:
                self._answer(self.buffer.remove(at[0], at[1], old.service, self.clock()))
            self._slices[at] = view
            self._describe(old, view)
            self._answer(self.buffer.apply(view, self.clock()))
        else:
            return
        self._sync_series()

    def _describe(self, old: SliceView | None, new: SliceView) -> None:
        if old is not None and (old.mode, old.addresses, old.port, old.policy) == (new.mode, new.addresses, new.port, new.policy):
            return
        what = (f"{len(new.addresses)} ready address(es)" if new.mode == ENDPOINTS_REPLICAS
                else f"hold {new.policy.hold_seconds:g}s, queue limit {new.policy.queue_limit}")
        log.info("%s/%s: slice %s says %s (%s)", new.namespace, new.service, new.name, new.mode or "<no mode>", what)
        for p in new.problems:
            if old is None or p not in old.problems:
                log.warning("%s/%s: slice %s: %s", new.namespace, new.service, new.name, p)

    def _sync_series(self) -> None:
        keys = set(self.buffer.keys())
        for key in keys:
            self.metrics.service_seen(key)
            self.metrics.held(key, self.buffer.held(key))
        for key in self.metrics.known_services() - keys:
            self.metrics.service_gone(key)

    def _answer(self, answers: list[Answer]) -> None:
        ended: dict[tuple[ServiceKey, AnswerKind], int] = {}
        for a in answers:
            fut = self._waiters.pop(a.rid, None)
            if fut is not None and not fut.done():
                fut.set_result(a)
            elif a.backend is not None:  # nobody waits for it any more: its forward never starts
                self.buffer.done(a.key, a.backend)
            ended[(a.key, a.kind)] = ended.get((a.key, a.kind), 0) + 1
            self.metrics.held(a.key, self.buffer.held(a.key))
        for ((ns, name), kind), n in sorted(ended.items()):
            where = f" to {len(self.buffer.backends((ns, name)))} backend(s)" if kind is AnswerKind.RELEASED else ""
            log.info("%s/%s: %d held request(s) %s%s", ns, name, n, _ENDED[kind], where)

    def flush(self) -> None:
        """Answer every held request 503 (shutting down)."""
        self._answer(self.buffer.flush(self.clock()))

    def expire(self) -> None:
        """One expiry pass (the tick loop calls it every ``tick`` seconds)."""
        self._answer(self.buffer.expire(self.clock()))

    async def tick_loop(self) -> None:
        """Expire held requests every ``config.tick`` seconds, forever."""
        while True:
            await asyncio.sleep(self.config.tick)
            self.expire()

    # ------------------------------------------------------------------ HTTP

    async def start(self) -> None:
        """Open the forwarding client session (call inside the event loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.config.max_requests, limit_per_host=0),
                auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)

    async def close(self) -> None:
        """Close the client session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def proxy_app(self) -> web.Application:
        """The proxy: every method and path, on the service port."""
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(lambda _: self.start())
        app.on_cleanup.append(lambda _: self.close())
        return app

    def health_app(self) -> web.Application:
        """``/metrics``, ``/healthz`` (alive), ``/readyz`` (slices listed, not draining)."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._alive)
        app.router.add_get("/readyz", self._ready)
        return app

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _alive(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _ready(self, _: web.Request) -> web.Response:
        if self.synced and not self.draining:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="draining\n" if self.draining else "EndpointSlices not listed yet\n")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """One proxied request (see the module's docstring for the order of checks)."""
        key, how = identify(request.headers)
        if key is None:
            return error_response(404, R.NO_SERVICE_NAMED, how)
        svc = f"{key[0]}/{key[1]}"
        if MARKER_HEADER in request.headers:
            if self.buffer.known(key):
                self.metrics.count(key, R.FAILED)
            return error_response(508, R.LOOP_DETECTED, f"{svc}: this request already went through activator "
                                  f"{request.headers[MARKER_HEADER]!r}; refusing to forward it in a loop", svc)
        if not self.synced:
            return error_response(503, R.NOT_SYNCED, "the activator has not listed EndpointSlices yet", svc,
                                  self.config.retry_after)
        if not self.buffer.known(key):
            return error_response(404, R.UNKNOWN_SERVICE, f"no InferenceService {svc} is served here "
                                  f"(found by {how}; no EndpointSlice labelled {SERVICE_LABEL}={key[1]} in {key[0]})", svc)
        if request.content_length is not None and request.content_length > self.config.max_body_bytes:
            self.metrics.count(key, R.REJECTED)
            return self._too_large(svc)
        if self.in_flight >= self.config.max_requests:
            self.metrics.count(key, R.REJECTED)
            return error_response(503, R.OVERLOADED, f"the activator holds or forwards {self.in_flight} requests "
                                  f"(--max-requests {self.config.max_requests})", svc, self.config.retry_after)
        self.in_flight += 1
        try:
            return await self._serve(request, key, svc)
        finally:
            self.in_flight -= 1

    def _too_large(self, svc: str) -> web.Response:
        return error_response(413, R.BODY_TOO_LARGE, f"the request body is larger than {self.config.max_body_bytes} "
                              "bytes (--max-body-bytes)", svc)

    async def _serve(self, request: web.Request, key: ServiceKey, svc: str) -> web.StreamResponse:
        rid = next(self._ids)
        adm = self.buffer.arrive(key, rid, self.clock())
        if isinstance(adm, Reject):
            self.metrics.count(key, R.REJECTED)
            return error_response(adm.status, adm.reason, f"{svc} has no ready replica and holds "
                                  f"{self.buffer.held(key)} requests already (queue limit "
                                  f"{self.buffer.policy(key).queue_limit})", svc, adm.retry_after)
        fut: asyncio.Future[Answer] | None = None
        if isinstance(adm, Hold):
            fut = asyncio.get_running_loop().create_future()
            self._waiters[rid] = fut
            self.metrics.held(key, self.buffer.held(key))
        flight = _Flight(adm.backend if isinstance(adm, Forward) else None)
        outcome = R.CANCELLED
        try:
            resp, outcome = await self._admitted(request, key, svc, fut, flight)
            return resp
        finally:
            # Exactly one of: the buffer forgets a request still held, or the backend the
            # buffer counted for it is given back (unless the forward took it over).
            if fut is not None:
                self._waiters.pop(rid, None)
                if not fut.done() or fut.cancelled():
                    if self.buffer.cancel(rid):
                        self.metrics.held(key, self.buffer.held(key))
                elif fut.result().backend is not None and not flight.handed:
                    self.buffer.done(key, fut.result().backend)
            elif flight.backend is not None and not flight.handed:
                self.buffer.done(key, flight.backend)
            self.metrics.count(key, outcome)

    async def _admitted(self, request: web.Request, key: ServiceKey, svc: str, fut: asyncio.Future[Answer] | None,
                        flight: _Flight) -> tuple[web.StreamResponse, str]:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large(svc), R.REJECTED
        if fut is not None:
            answer = await fut
            if answer.kind in (AnswerKind.RELEASED, AnswerKind.TIMED_OUT):
                self.metrics.hold_seconds.labels(*key).observe(answer.held_seconds)
            if answer.kind is AnswerKind.TIMED_OUT:
                return error_response(503, R.HOLD_TIMEOUT, f"{svc} got no ready replica within "
                                      f"{answer.held_seconds:.0f}s (holdSeconds)", svc, self.config.retry_after), R.TIMED_OUT
            if answer.kind is AnswerKind.EVICTED:
                return error_response(429, R.QUEUE_FULL, f"{svc}'s queue limit was lowered to "
                                      f"{self.buffer.policy(key).queue_limit} below the requests held",
                                      svc, self.config.retry_after), R.REJECTED
            if answer.kind is AnswerKind.REMOVED:
                return error_response(503, R.SERVICE_REMOVED, f"{svc}'s EndpointSlice was deleted, or this "
                                      "activator is stopping, while the request was held", svc, self.config.retry_after), R.FAILED
            flight.backend = answer.backend
        assert flight.backend is not None and self._session is not None
        flight.handed = True  # forward() gives every backend it used back to the buffer
        return await forward(self._session, request, body, flight.backend,
                             lambda tried: self.buffer.pick(key, tried),
                             lambda b: self.buffer.done(key, b), self._forward, svc)


_ENDED = {AnswerKind.RELEASED: "released", AnswerKind.TIMED_OUT: "timed out (503)",
          AnswerKind.EVICTED: "evicted (429: queue limit lowered)",
          AnswerKind.REMOVED: "answered 503 (slice deleted or activator stopping)"}


@dataclass
class _Flight:
    backend: Backend | None
    handed: bool = False
