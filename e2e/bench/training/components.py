"""What the control plane and the operator say about a phase, besides the audit log:
kube-controller-manager's and kube-scheduler's own ``/metrics`` before and after (the PV
controller's ``claims`` work queue, one worker, its client-side rate limiter, kube-scheduler's
attempts by result: the profile of where a claim's time goes), the operator's admission-round
and reconcile durations, and a py-spy profile of the operator's event loop (``--py-spy``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from e2e.bench.lib.metrics import fetch_samples

__all__ = ["STAGES", "WANTED", "ComponentMetrics", "OperatorProfile", "bucket_quantile", "component_port", "report_profile",
           "scrape", "scrape_operator", "summarise_stacks"]

WANTED = {
    "kube-controller-manager": re.compile(r'^(workqueue_(adds_total|work_duration_seconds_(sum|count)|'
                                          r'queue_duration_seconds_(sum|count))\{name="(claims|volumes)"\}|'
                                          r'rest_client_rate_limiter_duration_seconds_(sum|count)\{.*\})$'),
    "kube-scheduler": re.compile(r'^(scheduler_schedule_attempts_total\{.*\}|'
                                 r'scheduler_(pod_scheduling_sli|scheduling_attempt)_duration_seconds_(sum|count)\{.*\})$'),
}


def component_port(pid: int | None) -> int | None:
    """``--secure-port`` of a control-plane process, from its command line."""
    try:
        for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
            if a.startswith(b"--secure-port="):
                return int(a.split(b"=", 1)[1])
    except (OSError, ValueError, TypeError):
        pass
    return None


def scrape(port: int | None, component: str) -> dict[str, float]:
    """The samples of :data:`WANTED` from ``https://127.0.0.1:<port>/metrics`` (kwokctl lets
    /metrics through without credentials); {} when unreadable."""
    if not port:
        return {}
    return fetch_samples(f"https://127.0.0.1:{port}/metrics", WANTED[component], insecure_tls=True)


class ComponentMetrics:
    """Scrapes kube-controller-manager and kube-scheduler now; :meth:`finish` returns the deltas.

    Args:
        pids: pid by component name (``kube-controller-manager``, ``kube-scheduler``).
    """

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.ports = {k: component_port(p) for k, p in pids.items()}
        self.before = {k: scrape(p, k) for k, p in self.ports.items()}

    def finish(self) -> dict[str, dict[str, float]]:
        """The samples' growth since the constructor (those that moved), by component."""
        out = {}
        for k, port in self.ports.items():
            after = scrape(port, k)
            out[k] = {m: v - self.before[k].get(m, 0.0) for m, v in after.items() if v - self.before[k].get(m, 0.0)}
        return out


class OperatorProfile:
    """``py-spy record`` of the operator for the phase (``--nonblocking``: the operator is never
    paused), summarised as where its main thread spends its samples: idle in the event loop's
    ``select`` (waiting for the API server) or running which kubeforge function.

    Args:
        pid: the operator's pid.
        out: where to write the raw (collapsed) stacks.
    """

    def __init__(self, pid: int | None, out: Path) -> None:
        import shutil
        import subprocess

        self.out = out
        self.proc = None
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if pid and Path(exe).exists():
            self.proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "50", "--nonblocking", "--idle",
                                          "--format", "raw", "--output", str(out)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finish(self) -> dict | None:
        """Stop recording (SIGINT makes py-spy write its file) and summarise it."""
        import signal

        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a py-spy that hangs is killed; no profile then
            self.proc.kill()
            return None
        if not self.out.exists():
            return None
        return summarise_stacks(self.out.read_text(errors="replace"))


_ENTRY = re.compile(r"kubeforge/(__main__|cli)\.py:")
"""Frames every main-thread sample passes through (the process's entry), left out of ``top``."""


def summarise_stacks(raw: str) -> dict:
    """py-spy's raw (collapsed) stacks of the operator, ``frame (file:line);...;frame count`` per
    line, summed for its main thread: ``{"total": samples, "idle": samples waiting in the event
    loop, "top": [(kubeforge function, samples)] (the 8 largest, inclusive)}``.

    The main thread is the one under ``kubeforge/__main__.py``, or under asyncio's ``_run_once``
    (kopf's and the client's helper threads are neither). Idle is a sample whose innermost Python
    frame is the loop waiting: asyncio's ``select`` in selectors.py, or under uvloop (whose loop is
    C, so no Python frame sits below it) kopf's ``run`` that entered the loop. The operator runs
    on uvloop by default since 2026-11-27; before this rule only asyncio's frames were recognised,
    and a uvloop profile summed to nothing."""
    total = idle = 0
    funcs: dict[str, int] = {}
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        frames = stack.split(";")
        if not any(f.startswith("_run_once (") or "kubeforge/__main__.py" in f for f in frames):
            continue
        total += count
        leaf = frames[-1]
        if leaf.startswith("select (selectors.py") or leaf.startswith("run (kopf/_core/reactor/running.py"):
            idle += count
            continue
        seen = set()
        for f in frames:
            if "kubeforge/" in f and f not in seen and not _ENTRY.search(f):
                seen.add(f)
                name = f.split(" (")[0] + " (" + f.split("kubeforge/")[-1].split(":")[0] + ")"
                funcs[name] = funcs.get(name, 0) + count
    return {"total": total, "idle": idle, "top": sorted(funcs.items(), key=lambda kv: -kv[1])[:8]}


OPERATOR_WANTED = re.compile(r'^kubeforge_((admission_round|reconcile)_duration_seconds_(sum|count)'
                             r'|(watch_event_delay|admission_wait_time|admission_write_delay)_seconds_(bucket|sum|count)'
                             r'|max_concurrent_reconciles)(\{.*\})?$')
STAGES = (("kubeforge_watch_event_delay_seconds", "created -> the operator's watch sees it (creationTimestamp: +0-1 s)"),
          ("kubeforge_admission_wait_time_seconds", "seen -> the admission round admits it"),
          ("kubeforge_admission_write_delay_seconds", "admitted -> the placement written to status"))
"""The operator's admission stages (kubeforge/runtime/admission_latency.py), in order."""


def bucket_quantile(samples: dict[str, float], name: str, q: float) -> float | None:
    """The ``q`` quantile (0-1) of histogram ``name`` from its cumulative ``_bucket`` samples
    in ``samples`` (label sets summed per ``le``), interpolated linearly within the bucket as
    Prometheus' ``histogram_quantile`` does; None without observations. A quantile in the
    ``+Inf`` bucket is the largest finite bound."""
    by_le: dict[float, float] = {}
    for k, v in samples.items():
        if k.startswith(name + "_bucket"):
            le = re.search(r'le="([^"]+)"', k)
            if le:
                b = float(le.group(1))
                by_le[b] = by_le.get(b, 0.0) + v
    if not by_le or max(by_le.values()) <= 0:
        return None
    bounds = sorted(by_le)
    total = by_le[bounds[-1]]
    rank, prev_b, prev_n = q * total, 0.0, 0.0
    for b in bounds:
        n = by_le[b]
        if n >= rank:
            if b == float("inf"):
                return prev_b
            return prev_b + (b - prev_b) * ((rank - prev_n) / (n - prev_n) if n > prev_n else 1.0)
        prev_b, prev_n = b, n
    return prev_b


def scrape_operator(port: int | None) -> dict[str, float]:
    """The operator's admission-round and reconcile duration sums and counts ({} if unreadable)."""
    if not port:
        return {}
    return fetch_samples(f"http://127.0.0.1:{port}/metrics", OPERATOR_WANTED)


def report_profile(p: dict | None, op: dict[str, float] | None = None) -> None:
    """Print :meth:`OperatorProfile.finish`'s summary and the operator's round and reconcile times."""
    if op:
        def mean(prefix: str) -> tuple[float, int]:
            s_ = sum(v for k, v in op.items() if k.startswith(prefix + "_sum"))
            n = sum(v for k, v in op.items() if k.startswith(prefix + "_count"))
            return s_ / max(1, n), int(n)
        rnd, n_rnd = mean("kubeforge_admission_round_duration_seconds")
        rec, n_rec = mean('kubeforge_reconcile_duration_seconds')
        workers = next((f"{v:.0f}" for k, v in op.items() if k.startswith("kubeforge_max_concurrent_reconciles")
                        and 'controller="trainingjobs"' in k), "an unknown number")
        print(f"  profile: the operator ran {n_rnd} admission rounds of {1000 * rnd:.0f} ms on average (each followed by "
              f"as long a yield, at most 1 s) and {n_rec} reconciles of {1000 * rec:.0f} ms on average ({workers} at a time)")
        for name, what in STAGES:
            p50, p95 = bucket_quantile(op, name, 0.5), bucket_quantile(op, name, 0.95)
            n = sum(v for k, v in op.items() if k.startswith(name + "_count"))
            if p50 is not None:
                print(f"  stage: {what}: p50 {p50:.2f} s, p95 {p95:.2f} s ({n:.0f} gangs; from the operator's histogram buckets)")
    if not p or not p["total"]:
        return
    busy = p["total"] - p["idle"]
    print(f"  profile: the operator's event loop (py-spy, {p['total']} samples at 50 Hz): idle, waiting for the API "
          f"server, {100 * p['idle'] / p['total']:.0f}%; busy {100 * busy / p['total']:.0f}%, of which (inclusive):")
    for name, n in p["top"]:
        print(f"    {100 * n / p['total']:5.1f}%  {name}")
