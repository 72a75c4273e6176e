"""Child processes of the local cluster's helpers (Prometheus, the activator): wait until one
answers on HTTP, stop one. Bounded waits only."""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_http_ok(proc: subprocess.Popen, url: str, timeout: float) -> bool:
    """Poll ``url`` until it answers 200 (True), the process exits or ``timeout`` seconds pass
    (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds (a process already gone is fine)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
