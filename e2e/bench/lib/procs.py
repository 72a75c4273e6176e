"""Processes the benches watch: CPU seconds and RSS from /proc, liveness, the operator's log.

Linux only (/proc); every reader answers NaN (or False) for a process that is gone.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["RssSampler", "alive", "cpu_seconds", "log_digest", "log_lines_since", "rss_mib"]


def cpu_seconds(pid: int | None) -> float:
    """User+system CPU seconds of a live process (Linux /proc/<pid>/stat), NaN when unreadable."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")


def rss_mib(pid: int | None, field_name: str = "VmRSS") -> float:
    """``VmRSS`` (or another ``Vm*`` line, e.g. ``VmHWM``) of /proc/<pid>/status in MiB; NaN if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError, TypeError):
        pass
    return float("nan")


def alive(pid: int | None) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return st[0] != "Z"
    except (OSError, IndexError, TypeError):
        return False


class RssSampler:
    """Samples a process's RSS in a background thread; keeps the peak and the last value.

    Args:
        pid: the process.
        interval: seconds between samples.
    """

    def __init__(self, pid: int | None, interval: float = 0.5) -> None:
        self.pid, self.interval = pid, interval
        self.peak = float("nan")
        self.last = float("nan")
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():  # bounded by stop(), which every caller reaches in a finally
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> float:
        """Take one sample now and return it (MiB)."""
        v = rss_mib(self.pid)
        if v == v:  # not NaN
            self.last = v
            self.peak = v if self.peak != self.peak else max(self.peak, v)
            self.samples += 1
        return v

    def start(self) -> "RssSampler":
        """Start sampling; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (bounded join) and take a last sample."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()


def log_lines_since(path: Path, offset: int) -> list[str] | None:
    """The lines a log got after byte ``offset`` (this run's: logs are appended to), or None
    when there is no log."""
    if not path.exists():
        return None
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def log_digest(lines: list[str]) -> dict:
    """Counts of error, traceback and warning lines, and the exception line ending each traceback."""
    bad = [ln for ln in lines if any(w in ln for w in ("ERROR", "Traceback", "Exception", "CRITICAL"))]
    exc = []
    for i, ln in enumerate(lines):
        if ln.startswith("Traceback"):
            for nxt in lines[i + 1:i + 400]:  # bounded: a traceback is a few dozen lines
                if nxt and not nxt.startswith((" ", "\t", "Traceback", "During handling", "The above")):
                    exc.append(nxt)
                    break
    return {"log_lines": len(lines), "log_errors": len(bad), "log_warnings": sum(1 for ln in lines if "WARNING" in ln),
            "log_samples": (exc + [b for b in bad if not b.startswith("Traceback")])[:6]
            + [w for w in lines if "WARNING" in w][:2]}
