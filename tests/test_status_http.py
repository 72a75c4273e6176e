"""The status endpoint's HTTP/1.1 layer (kubeforge.runtime.status_http) over real TLS on loopback,
with raw bytes: keep-alive and pipelining in order, chunked bodies, Expect: 100-continue, HTTP/1.0,
the body and header bounds, malformed requests, query strings and unknown paths."""

from __future__ import annotations

import asyncio
import re

from kubeforge.progress import status_path
from test_status_server import JOB, KEY, NS, FakeRuntime, jwt, run, serve

BODY = b'{"step": 1}'


def post_bytes(body: bytes = BODY, version: bytes = b"1.1", extra: bytes = b"", target: bytes | None = None) -> bytes:
    path = target or status_path(NS, JOB).encode()
    return (b"POST " + path + b" HTTP/" + version + b"\r\nHost: x\r\nAuthorization: Bearer " + jwt().encode() +
            b"\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)


async def exchange(port, ctx, data: bytes, answers: int) -> tuple[list[bytes], bytes, bool]:
    """Send ``data``, read ``answers`` status lines; returns them, all bytes read, and whether the
    server then closed."""
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    w.write(data)
    out = b""
    while out.count(b"HTTP/1.1 ") < answers:
        chunk = await asyncio.wait_for(r.read(65536), 10)
        if not chunk:
            break
        out += chunk
    try:
        closed = await asyncio.wait_for(r.read(1), 0.5) == b""
    except asyncio.TimeoutError:
        closed = False
    w.close()
    return re.findall(rb"HTTP/1\.1 \d{3}[^\r]*", out), out, closed


def with_server(check):
    async def go():
        rt = FakeRuntime()
        srv, ctx = await serve(rt)
        try:
            await check(rt, srv, ctx)
        finally:
            await srv.stop()
    run(go())


def test_pipelined_requests_are_answered_in_order_on_a_kept_connection():
    async def check(rt, srv, ctx):
        lines, out, closed = await exchange(srv.port, ctx, post_bytes() * 3 + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 4)
        assert [l.split()[1] for l in lines] == [b"200", b"200", b"200", b"404"] and not closed
        assert rt.reports.accepted == 3 and rt.client.reviews == 1
    with_server(check)


def test_chunked_body_expect_continue_and_http10():
    async def check(rt, srv, ctx):
        chunked = post_bytes(b"").replace(b"Content-Length: 0\r\n", b"Transfer-Encoding: chunked\r\n") + \
            b"5\r\n{\"ste\r\n6\r\np\": 7}\r\n0\r\n\r\n"
        assert (await exchange(srv.port, ctx, chunked, 1))[0][0].startswith(b"HTTP/1.1 200")
        assert rt.reports.get(KEY).step == 7
        lines, out, _ = await exchange(srv.port, ctx, post_bytes(extra=b"Expect: 100-continue\r\n"), 2)
        assert lines[0] == b"HTTP/1.1 100 Continue" and lines[1].startswith(b"HTTP/1.1 200")
        lines, out, closed = await exchange(srv.port, ctx, post_bytes(version=b"1.0"), 1)
        assert lines[0].startswith(b"HTTP/1.1 200") and b"Connection: close" in out and closed
    with_server(check)


def test_bounds_and_malformed_requests_are_answered_and_closed():
    async def check(rt, srv, ctx):
        huge = post_bytes(b"x").replace(b"Content-Length: 1", b"Content-Length: 99999999")
        lines, out, closed = await exchange(srv.port, ctx, huge, 1)
        assert b" 413 " in lines[0] and b"99999999 bytes; at most 16384" in out and closed
        chunked = post_bytes(b"").replace(b"Content-Length: 0\r\n", b"Transfer-Encoding: chunked\r\n") + \
            b"4e20\r\n" + b"x" * 20000 + b"\r\n0\r\n\r\n"
        lines, out, closed = await exchange(srv.port, ctx, chunked, 1)
        assert b" 413 " in lines[0] and b"over 16384 bytes" in out and closed
        lines, out, closed = await exchange(srv.port, ctx, b"POST /x HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n", 1)
        assert b" 400 " in lines[0] and b"headers over" in out and closed
        lines, out, closed = await exchange(srv.port, ctx, b"GARBAGE\r\n\r\n", 1)
        assert b" 400 " in lines[0] and b"malformed HTTP request" in out and closed
        assert rt.reports.get(KEY) is None
    with_server(check)


def test_query_strings_are_ignored_and_other_methods_are_404():
    async def check(rt, srv, ctx):
        target = status_path(NS, JOB).encode() + b"?watch=1"
        assert b" 200 " in (await exchange(srv.port, ctx, post_bytes(target=target), 1))[0][0]
        get = b"GET " + status_path(NS, JOB).encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n"
        lines, out, _ = await exchange(srv.port, ctx, get, 1)
        assert b" 404 " in lines[0] and b"no such endpoint: GET /apis/kubeforge.io" in out
    with_server(check)
