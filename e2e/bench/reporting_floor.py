"""Reporting floor bench: what an HTTPS server library costs per request under the status
endpoint's load, with a handler that does nothing (issue 27's endpoint CPU target).

The live bench (:mod:`e2e.bench.reporting`) and the micro bench (:mod:`e2e.bench.reporting_micro`)
measure kubeforge's endpoint; this one measures the layer under it, to tell what a change of
library could buy before any is written:

- **server**: a process of its own on uvloop (as ``kubeforge run``), TLS with an ECDSA P-256
  certificate (as the endpoint's), one POST route shaped like kubeforge's path; the handler reads
  the ``Authorization`` header and the body and answers a fixed ``Status`` of ~170 bytes. Kinds:
  ``aiohttp`` (``web.Application`` with a dynamic route, ``AppRunner(access_log=None)``: what the
  endpoint uses), ``uvicorn`` (httptools' parser, a bare ASGI callable) and ``uvicorn-h11``.
  The uvicorn kinds need ``uvicorn`` and ``httptools`` importable (they are not kubeforge
  dependencies: ``pip install --target DIR uvicorn httptools`` and ``PYTHONPATH=DIR``);
- **load**: this process, ``--jobs`` kept TLS connections, each posting every ``jobs / rate``
  seconds (staggered) with a 1 KiB bearer token and kubeforge's payload, as the live bench's
  workers do.

Prints the server process's CPU per request (``/proc``) over ``--seconds`` after a warm-up, for
each kind in ``--kinds`` in turn (``--rounds`` times, alternating, so the machine's load moves
them alike). Nothing is asserted.

Run: ``.venv/bin/python -m e2e.bench.reporting_floor --kinds aiohttp,uvicorn``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time

from e2e.bench.lib.procs import cpu_seconds
from e2e.bench.lib.stats import pct
from e2e.bench.reporting_micro import read_answer

ROUTE = "/apis/kubeforge.io/v1alpha1/namespaces/{namespace}/trainingjobs/{name}/status"
BODY = b'{"step": 1200, "totalSteps": 1000000, "metrics": {"loss": 0.0866}}'
TOKEN = "eyJ" + "a" * 1000
ANSWER = (b'{"kind": "Status", "apiVersion": "v1", "status": "Success", "message": "report accepted; '
          b'status.progress of TrainingJob rep/j0001 is written within 30s", "code": 200}')
KINDS = ("aiohttp", "uvicorn", "uvicorn-h11")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``)."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.reporting_floor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="aiohttp,uvicorn", help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--jobs", type=int, default=1000, help="kept TLS connections (default 1000)")
    ap.add_argument("--rate", type=float, default=100.0, help="requests a second, all together (default 100)")
    ap.add_argument("--seconds", type=float, default=30.0, help="the measured window per kind (default 30)")
    ap.add_argument("--warm", type=float, default=12.0, help="seconds of load before the window (default 12)")
    ap.add_argument("--rounds", type=int, default=2, help="times each kind is measured, alternating (default 2)")
    ap.add_argument("--serve", nargs=3, metavar=("KIND", "DIR", "PORT"), help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def make_cert(d: str) -> None:
    """A self-signed ECDSA P-256 pair for 127.0.0.1 in ``d`` (``c``, ``k``), by openssl."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", f"{d}/k", "-out", f"{d}/c"], check=True, capture_output=True)


async def _aiohttp(ctx: ssl.SSLContext, port: int) -> None:
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        request.match_info["namespace"], request.headers.get("Authorization")
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json", charset="utf-8")
    app = web.Application(client_max_size=16 * 1024)
    app.router.add_post(ROUTE, handler)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx, backlog=1024).start()
    await asyncio.Event().wait()


async def _uvicorn(ctx: ssl.SSLContext, port: int, http: str) -> None:
    import uvicorn

    path = re.compile(ROUTE.replace("{namespace}", "([^/]+)").replace("{name}", "([^/]+)"))
    headers = [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(len(ANSWER)).encode())]

    async def app(scope, receive, send):
        """A bare ASGI answer: the route matched, the token read, the body read whole."""
        if scope["type"] != "http":
            return
        path.fullmatch(scope["path"]), [v for k, v in scope["headers"] if k == b"authorization"]
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": ANSWER})
    cfg = uvicorn.Config(app, host="127.0.0.1", port=port, http=http, loop="none", lifespan="off", access_log=False,
                         log_config=None, timeout_keep_alive=75, server_header=False, backlog=1024)
    cfg.load()
    cfg.ssl = ctx
    await uvicorn.Server(cfg).serve()


def serve(kind: str, d: str, port: int) -> None:
    """The server process (``--serve``): ``kind`` on uvloop until killed."""
    import uvloop

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(f"{d}/c", f"{d}/k")
    uvloop.run(_aiohttp(ctx, port) if kind == "aiohttp" else
               _uvicorn(ctx, port, "h11" if kind == "uvicorn-h11" else "httptools"))


async def _client(i: int, n: int, reader, writer, port: int, period: float, trips: list[float]) -> None:
    """One kept connection: a report every ``period`` s, read back by its Content-Length."""
    await asyncio.sleep(i * period / n)  # staggered
    req = (f"POST {ROUTE.format(namespace='rep', name=f'j{i:04d}')} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
           f"Accept-Encoding: identity\r\nContent-Type: application/json\r\nAuthorization: Bearer {TOKEN}\r\n"
           f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY
    while True:
        t = time.monotonic()
        writer.write(req)
        await read_answer(reader)
        trips.append(time.monotonic() - t)
        await asyncio.sleep(max(0.0, period - (time.monotonic() - t)))


async def measure(kind: str, args: argparse.Namespace, d: str, port: int) -> str:
    """One kind's window: its server's CPU per request, and the round trips."""
    srv = subprocess.Popen([sys.executable, "-m", "e2e.bench.reporting_floor", "--serve", kind, d, str(port)])
    try:
        ctx = ssl.create_default_context(cafile=f"{d}/c")
        for _ in range(100):
            try:
                conns = [await asyncio.open_connection("127.0.0.1", port, ssl=ctx)]
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            return f"{kind}: the server did not start"
        conns += [await asyncio.open_connection("127.0.0.1", port, ssl=ctx) for _ in range(args.jobs - 1)]
        trips: list[float] = []
        period = args.jobs / args.rate
        tasks = [asyncio.create_task(_client(i, len(conns), r, w, port, period, trips)) for i, (r, w) in enumerate(conns)]
        await asyncio.sleep(args.warm)
        n0, c0, t0 = len(trips), cpu_seconds(srv.pid), time.monotonic()
        await asyncio.sleep(args.seconds)
        n1, c1, t1 = len(trips), cpu_seconds(srv.pid), time.monotonic()
        for t in tasks:
            t.cancel()
        for _, w in conns:
            w.close()
    finally:
        srv.kill()
        srv.wait()
    done, window = n1 - n0, trips[n0:n1]
    return (f"  {kind:12s} {done:6d} requests  {1000 * (c1 - c0) / max(done, 1):6.3f} ms of server CPU a request  "
            f"{100 * (c1 - c0) / (t1 - t0):5.1f} % of one core  round trip p50 {1000 * pct(window, 50):.1f} ms  "
            f"load average {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> int:
    """Run the bench (see the module docstring); 0 unless it could not run."""
    args = parse_args(argv)
    if args.serve:
        serve(args.serve[0], args.serve[1], int(args.serve[2]))
        return 0
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        print(f"unknown kinds: {', '.join(unknown)} (of {', '.join(KINDS)})", file=sys.stderr)
        return 2
    if any(k.startswith("uvicorn") for k in kinds) and not all(importlib.util.find_spec(m) for m in ("uvicorn", "httptools")):
        print("the uvicorn kinds need uvicorn and httptools importable (pip install --target DIR uvicorn httptools; "
              "PYTHONPATH=DIR): measuring aiohttp only", file=sys.stderr)
        kinds = [k for k in kinds if not k.startswith("uvicorn")]
    print(f"Reporting floor bench: {args.jobs} kept TLS connections, {args.rate:g} requests/s, a handler that "
          f"does nothing, windows of {args.seconds:g} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="kubeforge-floor-") as d:
        make_cert(d)
        for r in range(args.rounds):
            for i, kind in enumerate(kinds):
                print(asyncio.run(measure(kind, args, d, 18443 + 10 * r + i)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
