"""Profile the operator during a training bench: py-spy samples it, this prints the flame summary.

Runs the training bench (``python -m e2e.bench.training``, ``--phases kubeforge`` unless told otherwise; every other
argument is passed on) and, once its kubeforge phase starts submitting (the operator's start-up,
mostly imports, is left out), attaches ``py-spy record --format raw`` to the operator
(``<cluster dir>/operator.pid``; on-CPU samples only, the default: time spent waiting is not
counted) until the bench ends, then prints, from the collapsed stacks:

- the share of samples by area (kopf's machinery, kubernetes_asyncio / aiohttp, JSON, pydantic,
  kubeforge's admission core, runtime, builders, logging, asyncio's loop...): the frame
  nearest the leaf that belongs to an area names it;
- the top functions by self share (the leaf frame) and by inclusive share (anywhere on the
  stack, counted once per sample).

The raw stacks stay in ``--out`` (default ``/tmp/kubeforge-operator.pyspy.txt``): feed them to
any flame graph tool. py-spy comes from PyPI (``pip install py-spy``; ``make profile-training``
installs it) and needs ptrace on the operator (root, or ``kernel.yama.ptrace_scope`` 0).

Run: ``.venv/bin/python -m e2e.bench.profile_operator --cluster kf-prof [bench args...]``
(``make profile-training``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from e2e.bench.lib.source import ROOT

# Areas, most specific first: (name, regex on "function (file:line)").
AREAS = [
    ("kubeforge admission (pure)", r"kubeforge/admission/"),
    ("kubeforge placement (pure)", r"kubeforge/placement/"),
    ("kubeforge lifecycle (pure)", r"kubeforge/lifecycle/"),
    ("kubeforge builders (pure)", r"kubeforge/builders/"),
    ("kubeforge objects / api models", r"kubeforge/(objects|api)/"),
    ("kubeforge runtime", r"kubeforge/runtime/"),
    ("kubeforge other", r"kubeforge/"),
    ("pydantic", r"pydantic"),
    ("kopf", r"[(/]kopf/"),
    ("kubernetes_asyncio", r"kubernetes_asyncio/"),
    ("aiohttp / HTTP", r"aiohttp/|yarl/|multidict/|http/"),
    ("JSON", r"[(/]json/|json\.py|orjson"),
    ("logging", r"[(/]logging/"),
    ("prometheus_client", r"prometheus_client/"),
    ("ssl / sockets", r"ssl\.py|socket|selectors\.py"),
    ("asyncio event loop", r"asyncio/"),
]


def area_of(stack: list[str]) -> str:
    """The area of the frame nearest the leaf that belongs to one (``other`` if none)."""
    for frame in reversed(stack):
        for name, rx in AREAS:
            if re.search(rx, frame):
                return name
    return "other"


def func(frame: str) -> str:
    """``function (path:line)`` -> ``function (dir/file.py)``, shortened for the table."""
    m = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if not m:
        return frame
    return f"{m.group(1)} ({'/'.join(m.group(2).split('/')[-2:])})"


def summarize(raw: Path, top: int) -> str:
    """The flame summary of py-spy's raw (collapsed) output as text."""
    total = 0
    areas: Counter = Counter()
    self_: Counter = Counter()
    incl: Counter = Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack_s, _, n = line.rpartition(" ")
        if not stack_s or not n.isdigit():
            continue
        n = int(n)
        stack = [f for f in stack_s.split(";") if f and not f.startswith(("process ", "thread "))]
        if not stack:
            continue
        total += n
        areas[area_of(stack)] += n
        self_[func(stack[-1])] += n
        for f in {func(f) for f in stack}:
            incl[f] += n
    if not total:
        return "no samples"
    out = [f"{total} samples", "", "by area (the frame nearest the leaf that belongs to one):"]
    out += [f"  {100 * n / total:5.1f}%  {a}" for a, n in areas.most_common()]
    out += ["", f"top {top} functions by self share:"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in self_.most_common(top)]
    out += ["", f"top {top} functions by inclusive share (the entry points, on 90 % of the stacks or more, left out):"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in [x for x in incl.most_common() if x[1] < 0.9 * total][:top]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the training bench under py-spy and print the summary (or only summarize ``--out``)."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.profile_operator", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="kubeforge-profile")
    ap.add_argument("--out", default="/tmp/kubeforge-operator.pyspy.txt", help="py-spy's raw stacks")
    ap.add_argument("--rate", type=int, default=50, help="samples per second")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--summary-only", action="store_true", help="only summarize an existing --out")
    args, bench_args = ap.parse_known_args(argv)
    out = Path(args.out)
    if args.summary_only:
        print(summarize(out, args.top))
        return 0
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        raise SystemExit("py-spy not found: pip install py-spy (make profile-training installs it)")
    from kubeforge.sim.cluster import Cluster

    out.parent.mkdir(parents=True, exist_ok=True)  # py-spy does not make it, and says nothing when it cannot write
    pidfile = Cluster(args.cluster).dir / "operator.pid"
    pidfile.unlink(missing_ok=True)
    if "--phases" not in bench_args:
        bench_args += ["--phases", "kubeforge"]
    bench = subprocess.Popen([sys.executable, "-m", "e2e.bench.training", "--cluster", args.cluster, *bench_args],
                             cwd=ROOT, stderr=subprocess.PIPE, text=True, bufsize=1)
    phase = threading.Event()

    def echo() -> None:  # the bench's progress lines, and the moment its kubeforge phase submits
        for line in bench.stderr:  # ends when the bench exits
            sys.stderr.write(line)
            if "kubeforge: creating" in line:
                phase.set()

    threading.Thread(target=echo, daemon=True).start()
    spy = None
    while bench.poll() is None:  # bounded by the bench's own phase timeouts
        if spy is None and phase.is_set() and pidfile.exists():
            pid = pidfile.read_text().strip()
            spy = subprocess.Popen([pyspy, "record", "--pid", pid, "--format", "raw", "--rate", str(args.rate),
                                    "--output", str(out), "--nonblocking"], stdout=subprocess.DEVNULL)
            print(f"[profile] py-spy attached to the operator (pid {pid})", file=sys.stderr, flush=True)
        time.sleep(0.5)
    if spy is not None:
        spy.wait(timeout=60)
    if not out.exists():
        print(f"no profile written to {out} (did the operator start? is py-spy allowed to attach: ptrace?)")
        return 1
    print(f"\nOPERATOR PROFILE (py-spy, {args.rate} Hz, on-CPU samples, raw stacks in {out})")
    print(summarize(out, args.top))
    return bench.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
