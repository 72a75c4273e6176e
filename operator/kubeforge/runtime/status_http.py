"""The status endpoint's HTTP/1.1 layer: a small server on the event loop's own TLS transport, with
httptools' parser (llhttp, the parser Node.js and aiohttp use; MagicStack's binding, as uvicorn uses).

Why not aiohttp's web server, which it replaced: a report is one small POST answered by one
small JSON, and aiohttp's per-request machinery (a request object, its stream reader and URL,
the router, a response object and its writer) cost about 0.6 ms of CPU per report above the TLS
work, more than the handler (e2e/README-reporting-bench.md). Here a request is a few fields
filled by the parser's callbacks, the handler runs synchronously when it need not wait (a
cached token verdict: every report but a token's first), and the answer is one write.

What it keeps of a web server's duties: HTTP/1.1 keep-alive (as ``http.client``, ``requests``
and aiohttp clients keep their connection) and HTTP/1.0; pipelined requests answered in order;
``Expect: 100-continue``; bounds (the request line and headers at most :data:`MAX_HEAD_BYTES`,
431 beyond; a body over the handler's ``max_body`` is answered 413 without being kept, and the
connection closed; a malformed request 400 and closed); a connection that sends nothing for
:data:`IDLE_SECONDS` (aiohttp's keep-alive default) closed, between requests or in the middle
of one; on :meth:`HttpServer.stop`, answers in
flight are given a moment.
"""

from __future__ import annotations

import asyncio
import collections
import http
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Union

import httptools

log = logging.getLogger("kubeforge.status")

MAX_HEAD_BYTES = 32 * 1024
"""The request line and headers together, at most (a projected token is about 1 KiB)."""
DISCARD_BYTES = 1024 * 1024
"""A body over the limit is read and dropped up to this size (so the client, still sending,
reads its 413); beyond, the connection is answered and closed at once."""
IDLE_SECONDS = 75.0
"""A connection that sends nothing for this long, between requests, is closed."""
MAX_QUEUED = 16
"""Pipelined requests waiting on one connection before it stops reading."""

Answer = tuple[int, bytes, Union[str, None]]
"""An answer: the status code, the JSON body, and a ``Retry-After`` value or None."""


@dataclass(slots=True)
class HttpRequest:
    """One request as received.

    Attributes:
        method: ``b"POST"``...
        url: The request target (path and query), raw bytes.
        headers: Names lower-cased, values as sent (a repeated header: the last one).
        body: The body (empty when it was over the limit: see ``too_large``).
        content_length: The ``Content-Length`` header, or None (chunked, or none).
        too_large: The body was over the server's ``max_body``.
    """

    method: bytes = b""
    url: bytes = b""
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""
    content_length: int | None = None
    too_large: bool = False


Handler = Callable[[HttpRequest], Union[Answer, Awaitable[Answer]]]

_REASONS = {s.value: s.phrase.encode() for s in http.HTTPStatus}


def response_bytes(code: int, body: bytes, retry: str | None = None, close: bool = False) -> bytes:
    """One HTTP/1.1 response, head and JSON body, ready to write."""
    head = b"HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n" % (
        code, _REASONS.get(code, b"Unknown"), len(body))
    if retry:
        head += b"Retry-After: " + retry.encode() + b"\r\n"
    if close:
        head += b"Connection: close\r\n"
    return head + b"\r\n" + body


class HttpServer:
    """Listens and serves ``handler``; see the module docstring.

    Args:
        handler: Called once per complete request; returns an :data:`Answer`, or an awaitable of
            one when it must wait (it is then run as a task, and the connection's next request
            waits for it). It must not raise.
        max_body: The largest body accepted; a larger one reaches the handler with
            ``too_large`` set and an empty body.
        fail: Makes the answer to a request the parser refused: ``fail(code, message)``.
    """

    def __init__(self, handler: Handler, max_body: int, fail: Callable[[int, str], Answer]):
        self.handler = handler
        self.max_body = max_body
        self.fail = fail
        self.connections: set[_Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task | None = None

    async def start(self, host: str, port: int, ssl: Any, backlog: int = 1024) -> int:
        """Listen; returns the bound port (``port`` 0: any free one)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, ssl=ssl, backlog=backlog)
        self._sweeper = asyncio.ensure_future(self._sweep())
        return self._server.sockets[0].getsockname()[1]

    async def stop(self, grace: float = 2.0) -> None:
        """Stop listening, give answers in flight up to ``grace`` seconds, close every connection."""
        if self._server is None:
            return
        self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        busy = [c.task for c in self.connections if c.task is not None]
        if busy:
            await asyncio.wait(busy, timeout=grace)
        for conn in list(self.connections):
            conn.close()
        self._server = None

    async def _sweep(self) -> None:
        """Close the connections that sent nothing for :data:`IDLE_SECONDS` and wait for no answer
        of ours: idle between requests, or stalled in the middle of one (one pass every few seconds)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(IDLE_SECONDS / 8)
            cutoff = loop.time() - IDLE_SECONDS
            for conn in [c for c in self.connections if c.last < cutoff and c.task is None]:
                conn.close()


class _Connection(asyncio.Protocol):
    """One client connection: the parser's callbacks fill :class:`HttpRequest` objects, which are
    answered in order."""

    def __init__(self, server: HttpServer):
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.req = HttpRequest()
        self.chunks: list[bytes] = []
        self.head = 0
        self.size = 0
        self.queue: collections.deque[tuple[HttpRequest, bool]] = collections.deque()
        self.task: asyncio.Task | None = None
        self.closing = False
        self.paused = False
        self.last = self.loop.time()
        self.why = ""

    # --- the transport's side ---

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self.queue.clear()

    def data_received(self, data: bytes) -> None:
        self.last = self.loop.time()
        if self.closing:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.refuse(400, "protocol upgrades are not served here")
        except httptools.HttpParserError as e:
            self.refuse(400, self.why or f"malformed HTTP request: {e}"[:200])

    def close(self) -> None:
        """Close the connection (what was written is sent first)."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def refuse(self, code: int, message: str) -> None:
        """Answer a request the parser refused, and close."""
        if not self.closing:
            c, body, retry = self.server.fail(code, message)
            self.transport.write(response_bytes(c, body, retry, close=True))
        self.close()

    # --- the parser's callbacks ---

    def on_message_begin(self) -> None:
        self.req = HttpRequest()
        self.chunks = []
        self.head = 1
        self.size = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        if self.head <= MAX_HEAD_BYTES:
            self.req.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        if self.head <= MAX_HEAD_BYTES:
            self.req.headers[name.lower()] = value

    def _count(self, n: int) -> None:
        self.head += n
        if self.head > MAX_HEAD_BYTES:
            self.why = f"request line and headers over {MAX_HEAD_BYTES} bytes"
            raise httptools.HttpParserError(self.why)

    def on_headers_complete(self) -> None:
        req = self.req
        req.method = self.parser.get_method()
        length = req.headers.get(b"content-length")
        req.content_length = int(length) if length and length.isdigit() else None
        if req.content_length is not None and req.content_length > self.server.max_body:
            req.too_large = True
            if req.content_length > DISCARD_BYTES:  # not worth reading: answer now and close
                self.queue.append((req, False))
                self._next()
                self.closing = True
                return
        if req.headers.get(b"expect", b"").lower() == b"100-continue" and not req.too_large:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.server.max_body:
            self.req.too_large = True
            self.chunks = []
            if self.size > DISCARD_BYTES:
                self.why = f"report body is over {DISCARD_BYTES} bytes; at most {self.server.max_body} are accepted"
                raise httptools.HttpParserError(self.why)
        elif not self.req.too_large:
            self.chunks.append(chunk)

    def on_message_complete(self) -> None:
        req = self.req
        if not req.too_large:
            req.body = b"".join(self.chunks)
        self.chunks = []
        self.head = 0
        keep = self.parser.should_keep_alive() and not req.too_large
        self.queue.append((req, keep))
        if len(self.queue) >= MAX_QUEUED and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        if self.task is None:
            self._next()

    # --- answering, in order ---

    def _next(self) -> None:
        """Answer the queued requests, synchronously while the handler need not wait."""
        while self.queue and not self.closing:
            req, keep = self.queue.popleft()
            out = self.server.handler(req)
            if inspect.isawaitable(out):
                self.task = asyncio.ensure_future(out)
                self.task.add_done_callback(lambda t, keep=keep: self._done(t, keep))
                return
            self._write(out, keep)
        if self.paused and not self.closing:
            self.paused = False
            self.transport.resume_reading()

    def _done(self, task: asyncio.Task, keep: bool) -> None:
        self.task = None
        if task.cancelled() or self.closing:
            return
        self._write(task.result(), keep)
        self._next()

    def _write(self, out: Answer, keep: bool) -> None:
        code, body, retry = out
        self.transport.write(response_bytes(code, body, retry, close=not keep))
        if not keep:
            self.close()
