"""The status endpoint's handler alone, in-process: CPU per accepted report with no TLS, no
socket and no HTTP parsing (``StatusServer.dispatch`` on ready-made requests, every token's
verdict cached), so a change to the handler is measured in seconds, more precisely than the
micro bench (:mod:`e2e.bench.reporting_micro`) can on a shared machine. It prints the best of
``--repeat`` passes; run the old and the new code alternately (``PYTHONPATH``) to compare.

Run: ``.venv/bin/python -m e2e.bench.reporting_handler``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from e2e.bench.reporting_fakes import fake_runtime
from e2e.bench.reporting_micro import NS, body_of, job_name, token


async def measure(jobs: int, passes: int, repeat: int) -> float:
    """Best seconds of CPU per report over ``repeat`` runs of ``passes`` reports from every job."""
    from kubeforge.progress import Buckets, TokenBucket, status_path
    from kubeforge.runtime.status_http import HttpRequest
    from kubeforge.runtime.status_server import StatusServer

    srv = StatusServer(fake_runtime(jobs, NS), "127.0.0.1:0")
    srv.auth.reviews = TokenBucket(1e9, 1e9)  # every token reviewed at once in the warm-up
    srv.buckets = Buckets(1e9, 1e9)  # no 429 in the loop: every report goes the whole way
    exp = time.time() + 7200
    reqs = []
    for i in range(jobs):
        body = body_of(i, 1, False)
        reqs.append(HttpRequest(method=b"POST", url=status_path(NS, job_name(i)).encode(), body=body,
                                headers={b"host": b"x", b"authorization": f"Bearer {token(i, exp)}".encode()},
                                content_length=len(body)))
    for req in reqs:  # warm-up: each token's review
        out = srv.dispatch(req)
        if not isinstance(out, tuple):
            await out
    best = float("inf")
    for _ in range(repeat):
        c = time.process_time()
        for _ in range(passes):
            for req in reqs:
                srv.dispatch(req)
        best = min(best, (time.process_time() - c) / (passes * jobs))
    return best


def main(argv: list[str] | None = None) -> int:
    """Print the handler's CPU per report."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.reporting_handler", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=2, help="reports from every job per run")
    ap.add_argument("--repeat", type=int, default=5, help="runs; the best is printed")
    args = ap.parse_args(argv)
    best = asyncio.run(measure(args.jobs, args.passes, args.repeat))
    print(f"status handler: {best * 1e6:.1f} us of CPU per accepted report (best of {args.repeat} runs of "
          f"{args.passes * args.jobs} reports, in-process, no TLS or HTTP)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
