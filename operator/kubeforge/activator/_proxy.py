"""Forwarding one request to a backend with aiohttp's client, the response streamed back.

The request's method, path, query, headers (less hop-by-hop ones, see
:func:`kubeforge.activator._route.forward_headers`) and body go to ``http://<ip>:<port>`` (or
to the ``--backend-override`` URL, Host header unchanged); the status, headers and body come
back chunk by chunk as they arrive (server-sent events of a streaming completion included), not
decompressed. A backend that refuses the connection (nothing was sent) is replaced by another
one, up to ``attempts`` in all; once anything was sent a failure is final: 502 before the
response began, 504 past the timeout, a cut connection after it began.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from . import _reasons as R
from ._route import forward_headers, response_headers
from ._slices import Backend

log = logging.getLogger("kubeforge.activator")

DROP_FROM_FORWARD = frozenset({"content-length", "expect", "host"})
"""Request headers re-made for the forward: Content-Length (the body was read whole), Expect
(100-continue was answered already) and Host (sent explicitly, unchanged)."""
NO_AUTO_HEADERS = frozenset({"Accept", "Accept-Encoding", "User-Agent", "Content-Type"})
"""Headers aiohttp's client would add that the client did not send: not added."""


def error_response(status: int, reason: str, message: str, service: str | None = None,
                   retry_after: int | None = None) -> web.Response:
    """A JSON error answer: ``{"reason": ..., "message": ..., "service": "ns/name"}``, with
    ``Retry-After`` when given."""
    body = {"reason": reason, "message": message}
    if service:
        body["service"] = service
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return web.Response(status=status, text=json.dumps(body) + "\n", content_type="application/json",
                        headers=headers)


@dataclass(frozen=True)
class ForwardSettings:
    """How forwards are made.

    Attributes:
        timeout: Seconds for a whole forward (connect, send, the response to its last byte).
        connect_timeout: Seconds to open the connection to a backend.
        attempts: Backends tried when connections are refused (>= 1).
        override: Send every forward to this base URL instead of the backend's address (the
            local simulator's pods have fake IPs); the Host header is kept.
        identity: The activator's marker value.
    """

    timeout: float
    connect_timeout: float
    attempts: int
    override: str | None
    identity: str


async def forward(session: aiohttp.ClientSession, request: web.Request, body: bytes, backend: Backend,
                  pick: Callable[[list[Backend]], Backend | None], done: Callable[[Backend], None],
                  settings: ForwardSettings, service: str) -> tuple[web.StreamResponse, str]:
    """Forwards ``request`` (its body already read) to ``backend``, then to others ``pick``
    returns while connections are refused.

    Args:
        session: The client session (no cookie jar, no decompression).
        request: The client's request.
        body: Its body.
        backend: The first backend (counted outstanding by the caller's buffer).
        pick: Returns another backend not in the list given, counted outstanding, or None.
        done: Called once for every backend tried, when its forward ends.
        settings: Timeouts, attempts, override, marker.
        service: ``namespace/name``, for error bodies and logs.

    Returns:
        (the response sent to the client, the outcome: FORWARDED or FAILED).
    """
    tried = [backend]
    peer = request.remote
    headers = CIMultiDict((k, v) for k, v in forward_headers(request.headers.items(), peer, settings.identity)
                          if k.lower() not in DROP_FROM_FORWARD)
    if request.headers.get("Host"):
        headers["Host"] = request.headers["Host"]
    has_body = body or "Content-Length" in request.headers or "Transfer-Encoding" in request.headers
    timeout = aiohttp.ClientTimeout(total=settings.timeout, sock_connect=settings.connect_timeout)
    current: Backend | None = backend
    try:
        while current is not None:
            base = (settings.override or current.url).rstrip("/")
            url = URL(base + request.rel_url.raw_path_qs, encoded=True)
            resp: web.StreamResponse | None = None
            try:
                async with session.request(request.method, url, headers=headers, data=body if has_body else None,
                                           allow_redirects=False, timeout=timeout,
                                           skip_auto_headers=NO_AUTO_HEADERS) as up:
                    resp = web.StreamResponse(status=up.status, reason=up.reason,
                                              headers=CIMultiDict(response_headers(up.headers.items())))
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                    return resp, R.FORWARDED
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
                log.info("%s: backend %s refused the connection (%s)", service, current.url, e)
                nxt = pick(list(tried)) if len(tried) < settings.attempts else None
                if nxt is None:
                    return error_response(502, R.BACKEND_UNREACHABLE,
                                          f"no backend of {service} accepted a connection ({len(tried)} tried)",
                                          service), R.FAILED
                tried.append(nxt)
                current = nxt
            except (asyncio.TimeoutError, aiohttp.ClientError) as e:
                if resp is not None and resp.prepared:
                    log.info("%s: forward to %s broke off after the response began: %r", service, current.url, e)
                    if request.transport is not None:
                        request.transport.close()  # the client sees a cut response, never a complete one
                    return resp, R.FAILED
                if isinstance(e, asyncio.TimeoutError):
                    return error_response(504, R.BACKEND_TIMEOUT,
                                          f"{service}: the backend did not answer within {settings.timeout:g}s",
                                          service), R.FAILED
                return error_response(502, R.BACKEND_UNREACHABLE, f"{service}: the backend broke off: {e}",
                                      service), R.FAILED
        raise AssertionError("unreachable")
    finally:
        for b in tried:
            done(b)
