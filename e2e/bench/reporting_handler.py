"""The status endpoint's handler alone, old code against new in ONE process, interleaved.

The reporting micro bench (:mod:`e2e.bench.reporting_micro`) measures a report end to end (TLS,
aiohttp, the handler) to about +-6 % on the shared machine: a change to the handler worth a
few hundredths of a millisecond does not show there. This bench runs
:meth:`~kubeforge.runtime.status_server.StatusServer.handle` directly, with a stand-in request
(match info, headers, body) and the micro bench's fakes (1,000 Running jobs, their tokens
already reviewed, no rate limit), for two copies of kubeforge in the same process: the working
tree's and an export of older code (``git archive REV operator | tar -x -C DIR``), renamed
``kubeforge_old`` in a temporary folder so both import side by side. Rounds of ``--reports``
reports alternate between them (the order flipped every round), so the machine's load moves
both alike; it prints each copy's min, p25 and median microseconds per report. Every answer
must be 200. Nothing is asserted beyond that.

Run::

    git archive HEAD operator | tar -x -C /tmp/old
    .venv/bin/python -m e2e.bench.reporting_handler /tmp/old/operator --rounds 80
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from e2e.bench.reporting_fakes import fake_runtime
from e2e.bench.reporting_micro import NS, body_of, job_name, token


class Request:
    """What the handler reads of an aiohttp request."""

    __slots__ = ("match_info", "headers", "content_length", "_body")

    def __init__(self, name: str, header: str, body: bytes):
        self.match_info = {"namespace": NS, "name": name}
        self.headers = CIMultiDictProxy(CIMultiDict({"Authorization": header, "Content-Type": "application/json"}))
        self.content_length = len(body)
        self._body = body

    async def read(self) -> bytes:
        """The body."""
        return self._body


def old_copy(operator_dir: str) -> str:
    """A temporary folder with ``operator_dir``'s ``kubeforge`` as ``kubeforge_old`` (its imports
    and its prometheus registry its own); the folder to put on ``sys.path``."""
    root = Path(tempfile.mkdtemp(prefix="kf-old-"))
    pkg = root / "kubeforge_old"
    shutil.copytree(Path(operator_dir) / "kubeforge", pkg)
    for f in pkg.rglob("*.py"):
        text = re.sub(r"\b(from|import) kubeforge\b", r"\1 kubeforge_old", f.read_text())
        if f.name == "metrics.py":  # the same metric names in the default registry would clash
            text = re.sub(r"^from prometheus_client import .*$", "from prometheus_client import Counter as _C, "
                          "Gauge as _G, Histogram as _H, CollectorRegistry, start_http_server\n_R = CollectorRegistry()\n"
                          "def Counter(*a, **k): return _C(*a, registry=_R, **k)\n"
                          "def Gauge(*a, **k): return _G(*a, registry=_R, **k)\n"
                          "def Histogram(*a, **k): return _H(*a, registry=_R, **k)", text, count=1, flags=re.M)
        f.write_text(text)
    return str(root)


def drive(coro: Any) -> Any:
    """Run a handler call that never suspends (every token's verdict is cached); its answer."""
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value
    raise RuntimeError("the handler suspended: a token was not cached")


async def server(pkg: str, jobs: int, headers: list[str]) -> Any:
    """A leading StatusServer of package ``pkg`` on the fakes, every token reviewed, no rate limit."""
    ss = importlib.import_module(f"{pkg}.runtime.status_server")
    progress = importlib.import_module(f"{pkg}.progress")
    book = importlib.import_module(f"{pkg}.runtime.status_book")
    rt = fake_runtime(jobs, NS)
    rt.reports = book.ReportBook()
    srv = ss.StatusServer(rt, "127.0.0.1:0")
    srv.auth.reviews = progress.TokenBucket(1e9, 1e9)
    for i in range(jobs):
        await srv.handle(Request(job_name(i), headers[i], body_of(i, 1, False)), False)
    srv.buckets = progress.Buckets(1e9, 1e9)
    return srv


async def bench(args: argparse.Namespace) -> dict[str, list[float]]:
    """Microseconds per report, per round, per copy."""
    sys.path.insert(0, old_copy(args.old))
    exp = time.time() + 7200
    headers = ["Bearer " + token(i, exp) for i in range(args.jobs)]
    servers = {"old": await server("kubeforge_old", args.jobs, headers),
               "new": await server("kubeforge", args.jobs, headers)}
    times: dict[str, list[float]] = {"old": [], "new": []}
    k = 0
    for rnd in range(args.rounds):
        for name in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
            reqs = [Request(job_name(j % args.jobs), headers[j % args.jobs], body_of(j % args.jobs, 2 + j // args.jobs,
                                                                                       False))
                    for j in range(k, k + args.reports)]
            handle = servers[name].handle
            t = time.perf_counter()
            for r in reqs:
                code = drive(handle(r, False)).status
                if code != 200:
                    raise RuntimeError(f"{name}: answered {code}")
            times[name].append((time.perf_counter() - t) / args.reports * 1e6)
        k += args.reports
    return times


def main(argv: list[str] | None = None) -> int:
    """Run it (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.reporting_handler", description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="the operator folder of an export of older code (holding kubeforge/)")
    ap.add_argument("--jobs", type=int, default=1000, help="jobs (tokens, pods) reporting in turn (default 1000)")
    ap.add_argument("--reports", type=int, default=2000, help="reports per round and copy (default 2000)")
    ap.add_argument("--rounds", type=int, default=60, help="rounds, each copy once per round (default 60)")
    args = ap.parse_args(argv)
    times = asyncio.run(bench(args))
    print(f"Status handler, {args.jobs} jobs, {args.rounds} rounds x {args.reports} reports, interleaved; "
          f"us per report (min / p25 / median):")
    for name, ts in times.items():
        ts.sort()
        print(f"  {name}: {ts[0]:.1f} / {ts[len(ts) // 4]:.1f} / {statistics.median(ts):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
