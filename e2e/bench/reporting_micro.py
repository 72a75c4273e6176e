"""Reporting micro bench: the operator CPU one progress report costs, in a minute, no cluster.

The live bench (:mod:`e2e.bench.reporting`, ~12 minutes on a cluster) measures issue 27's target
end to end; this one isolates its biggest part, the status endpoint, so a change to it can be
measured in a minute and profiled:

- **server**: a process of its own running the REAL :class:`~kubeforge.runtime.status_server.StatusServer`
  (HTTPS with its real ECDSA P-256 certificate, aiohttp, the real handler, token cache, rate
  limit, schema, report book, prometheus counter) on uvloop as ``kubeforge run`` does
  (``--loop asyncio``: Python's loop), wired to fakes for what needs the API server: TokenReviews
  answered at once, a cache of ``--jobs`` Running TrainingJobs with one live worker pod each, and
  a work queue whose due "reconcile" only stamps ``status.progress.lastReportTime`` (what the
  real write changes for the endpoint; the write's own cost, ~5 a second, is not measured here);
- **load**: this process, ``--jobs`` kept TLS connections (one per job, as :mod:`kubeforge.workload`
  keeps its ``http.client`` connection), each posting every ``jobs / rate`` seconds, staggered:
  kubeforge's payload built by :func:`kubeforge.workload.payload` (step, totalSteps, loss; a
  checkpoint every 10th report) with the headers ``http.client`` sends and a projected-token-sized
  JWT, or Kubeflow Trainer's (``--kubeflow-share``).

After a warm-up (every token's first TokenReview, at the endpoint's real bound of 50 a second),
it measures ``--seconds`` and prints the server process's CPU (``/proc``) per report and as a
share of one core at the rate, the round trip p50 / p95 and the answers by code. ``--py-spy
FILE`` records the server with py-spy during the window (``--py-spy-format raw`` gives collapsed
stacks, summarised by :mod:`e2e.bench.reporting_profile`). Nothing is asserted.

Run: ``.venv/bin/python -m e2e.bench.reporting_micro`` (1,000 jobs, 100 reports/s, 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import ssl
import subprocess
import sys
import time

from e2e.bench.lib.procs import cpu_seconds
from e2e.bench.lib.stats import pct

NS = "rep"
AUDIENCE = "kubeforge.io"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``--help``)."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.reporting_micro", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000, help="jobs, one kept TLS connection each (default 1000)")
    ap.add_argument("--rate", type=float, default=100.0, help="reports a second, all jobs together (default 100)")
    ap.add_argument("--seconds", type=float, default=30.0, help="the measured window (default 30)")
    ap.add_argument("--kubeflow-share", type=float, default=0.0,
                    help="share of jobs posting Kubeflow Trainer's payload to its path (default 0)")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="the server's event loop")
    ap.add_argument("--py-spy", default="", help="record the server with py-spy during the window into this file")
    ap.add_argument("--py-spy-format", default="flamegraph", help="py-spy's --format (flamegraph, raw, speedscope)")
    ap.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def job_name(i: int) -> str:
    """Job ``i``'s name."""
    return f"j{i:04d}"


def token(i: int, exp: float) -> str:
    """A JWT shaped and sized as a projected ServiceAccount token bound to job ``i``'s worker pod
    (RS256: a 342-character signature); the fake TokenReview accepts it."""
    def enc(o: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(o, separators=(",", ":")).encode()).rstrip(b"=").decode()
    pod = f"{job_name(i)}-worker-0-1"
    uid = "0b6e6c1e-5f0a-4d4e-9c1b-%012d" % i
    claims = {"aud": [AUDIENCE], "exp": int(exp), "iat": int(exp) - 3600, "iss": "https://kubernetes.default.svc.cluster.local",
              "jti": uid, "kubernetes.io": {"namespace": NS, "node": {"name": f"rep-n-{i // 8}", "uid": uid},
                                            "pod": {"name": pod, "uid": uid},
                                            "serviceaccount": {"name": "default", "uid": uid}},
              "nbf": int(exp) - 3600, "sub": f"system:serviceaccount:{NS}:default"}
    sig = base64.urlsafe_b64encode(os.urandom(256)).rstrip(b"=").decode()
    return f"{enc({'alg': 'RS256', 'kid': 'x' * 43})}.{enc(claims)}.{sig}"


# --- the server process ---------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """The server process: the endpoint on loopback; one JSON line (port, CA) on stdout, then it
    serves until stdin closes."""
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if args.loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(_serve(args))
    else:
        asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> None:
    from e2e.bench.reporting_fakes import fake_runtime
    from kubeforge.runtime.status_server import StatusServer

    rt = fake_runtime(args.jobs, NS)
    srv = StatusServer(rt, "127.0.0.1:0")
    await srv.start()
    print(json.dumps({"port": srv.port, "ca": rt.status_ca}), flush=True)
    loop, closed = asyncio.get_running_loop(), asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), lambda: os.read(sys.stdin.fileno(), 4096) or closed.set())
    await closed.wait()  # until the parent closes our stdin (no thread: the profile shows none)
    loop.remove_reader(sys.stdin.fileno())
    await srv.stop()
    sys.stderr.write(f"server: {rt.reports.accepted} reports accepted, {rt.client.reviews} TokenReviews, "
                     f"{rt.jobs.writes} progress writes\n")


# --- the load (this process) ----------------------------------------------------------------------


def body_of(i: int, n: int, kubeflow: bool) -> bytes:
    """Job ``i``'s ``n``-th report body (kubeforge's: :func:`kubeforge.workload.payload`)."""
    from kubeforge.workload import payload

    step = 100 * n
    loss = round(3.0 / (n ** 0.5), 4)
    if kubeflow:
        return json.dumps({"trainerStatus": {
            "progressPercentage": min(100, step // 10_000), "estimatedRemainingSeconds": 86_400 - n,
            "metrics": [{"name": "loss", "value": str(loss)}, {"name": "learning_rate", "value": "2e-05"}],
            "lastUpdatedTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}).encode()
    ck = (step, f"/checkpoints/step-{step}") if n % 10 == 0 else None
    return json.dumps(payload(step, 1_000_000, ck, {"loss": loss})).encode()


class Load:
    """``jobs`` kept connections posting at ``rate`` in all; ``samples`` of (monotonic time, code,
    round trip seconds)."""

    def __init__(self, port: int, ca: str, args: argparse.Namespace):
        from kubeforge.progress import status_path

        self.port, self.args = port, args
        self.ctx = ssl.create_default_context(cadata=ca)
        exp = time.time() + 7200
        kf = int(args.jobs * args.kubeflow_share)
        self.jobs = [(status_path(NS, job_name(i), kubeflow=i < kf), token(i, exp), i < kf) for i in range(args.jobs)]
        self.samples: list[tuple[float, int, float]] = []
        self.warm: set[int] = set()
        self.stop = False

    async def run(self) -> None:
        """Every job's connection, until :attr:`stop`."""
        await asyncio.gather(*(self._job(i) for i in range(len(self.jobs))))

    async def _job(self, i: int) -> None:
        path, tok, kubeflow = self.jobs[i]
        period = len(self.jobs) / self.args.rate
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAccept-Encoding: identity\r\n"
                f"Content-Type: application/json\r\nAuthorization: Bearer {tok}\r\nContent-Length: ").encode()
        await asyncio.sleep(period * i / len(self.jobs))
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=self.ctx, server_hostname="127.0.0.1")
        n = 0
        next_at = time.monotonic()
        while not self.stop:
            n += 1
            body = body_of(i, n, kubeflow)
            t = time.monotonic()
            writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
            code, retry = await read_answer(reader)
            self.samples.append((t, code, time.monotonic() - t))
            if code == 200:
                self.warm.add(i)
            next_at = t + (retry if code == 429 and i not in self.warm else period)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        writer.close()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, float]:
    """One HTTP/1.1 answer: its code and Retry-After (seconds, 0 when absent)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    code = int(lines[0].split()[1])
    length, retry = 0, 0.0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.lower()
        if name == "content-length":
            length = int(value)
        elif name == "retry-after":
            retry = float(value)
    await reader.readexactly(length)
    return code, retry


async def drive(port: int, ca: str, pid: int, args: argparse.Namespace) -> dict:
    """Warm up, then measure the window; the figures."""
    load = Load(port, ca, args)
    task = asyncio.ensure_future(load.run())
    t0 = time.monotonic()
    while len(load.warm) < args.jobs and time.monotonic() - t0 < 300 and not task.done():
        await asyncio.sleep(0.5)
    await asyncio.sleep(len(load.jobs) / args.rate)  # one more period: every connection in its steady pace
    warmup = time.monotonic() - t0
    spy = _py_spy(pid, args)
    c0, w0, me0 = cpu_seconds(pid), time.monotonic(), _self_cpu()
    await asyncio.sleep(args.seconds)
    c1, w1, me1 = cpu_seconds(pid), time.monotonic(), _self_cpu()
    load.stop = True
    if spy is not None:
        spy.wait(timeout=120)
    task.cancel()
    inside = [(c, d) for t, c, d in load.samples if w0 <= t < w1]
    codes: dict[int, int] = {}
    for c, _ in inside:
        codes[c] = codes.get(c, 0) + 1
    return {"cpu": c1 - c0, "seconds": w1 - w0, "codes": codes, "trips": [d for _, d in inside], "warmup": warmup,
            "load_cpu": me1 - me0, "loadavg": os.getloadavg()[0]}


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _py_spy(pid: int, args: argparse.Namespace) -> subprocess.Popen | None:
    """py-spy recording the server for the window (it samples 100 times a second)."""
    if not args.py_spy:
        return None
    exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
    cmd = [exe, "record", "--pid", str(pid), "-d", str(int(args.seconds)), "-r", "100", "-o", args.py_spy,
           "-f", args.py_spy_format] + (["--native"] if args.native else ["--nonblocking"])
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sys.stderr)


def print_figures(args: argparse.Namespace, f: dict) -> None:
    """The figures, one block."""
    n = sum(f["codes"].values())
    per = f["cpu"] / n * 1000 if n else float("nan")
    share = per / 1000 * args.rate * 100
    print(f"\nReporting micro bench: the status endpoint in one process ({args.loop}), {args.jobs} kept TLS "
          f"connections, {args.rate:g} reports/s offered, kubeflow share {args.kubeflow_share:g}, window "
          f"{f['seconds']:.0f} s (warm-up {f['warmup']:.0f} s)")
    print(f"  answered: {', '.join(f'{c} x {k}' for k, c in sorted(f['codes'].items())) or 'none'} "
          f"({n / f['seconds']:.1f}/s)")
    print(f"  server CPU: {f['cpu']:.2f} s = {per:.3f} ms per report = {share:.1f} % of one core at "
          f"{args.rate:g} reports/s (measured {f['cpu'] / f['seconds'] * 100:.1f} %)")
    print(f"  round trip p50 {pct(f['trips'], 50) * 1000:.1f} ms, p95 {pct(f['trips'], 95) * 1000:.1f} ms; "
          f"load process CPU {f['load_cpu'] / f['seconds'] * 100:.1f} % of one core; "
          f"load average (1 min) {f['loadavg']:.1f}")


def main(argv: list[str] | None = None) -> int:
    """Run the bench (see the module docstring); 0 unless it could not run."""
    args = parse_args(argv)
    if args.serve:
        serve(args)
        return 0
    cmd = [sys.executable, "-m", "e2e.bench.reporting_micro", "--serve", "--jobs", str(args.jobs), "--loop", args.loop]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            print("the server did not start", file=sys.stderr)
            return 1
        hello = json.loads(line)
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            figures = runner.run(drive(hello["port"], hello["ca"], proc.pid, args))
        print_figures(args, figures)
        return 0
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


if __name__ == "__main__":
    raise SystemExit(main())
