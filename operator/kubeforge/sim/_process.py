"""Child processes of the local cluster's helpers (Prometheus, the activator, the provisioner,
the IMEX stand-in, operators, the peers): a free loopback port for one, start one detached with
a pid file, wait until one answers on HTTP, stop one. Bounded waits only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http_ok(proc: subprocess.Popen, url: str, timeout: float) -> bool:
    """Poll ``url`` until it answers 200 (True), the process exits or ``timeout`` seconds pass
    (False)."""
    import httpx  # here, not at the top: ``import kubeforge.sim`` (the CLI's) stays light

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


def start_detached(pidfile: Path, logfile: Path, module_args: Sequence[str],
                   env: Mapping[str, str] | None = None) -> int | None:
    """Start ``python -m <module_args>`` in its own session (it outlives this process), output
    appended to ``logfile``, its pid written to ``pidfile``; ``None`` when the process of an
    existing ``pidfile`` is still alive (once per cluster)."""
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text()), 0)
            return None
        except (OSError, ValueError):
            pass
    with open(logfile, "ab") as logf:
        proc = subprocess.Popen([sys.executable, "-m", *module_args], stdout=logf, stderr=logf,
                                stdin=subprocess.DEVNULL, env=dict(env) if env is not None else None,
                                start_new_session=True)
    pidfile.write_text(str(proc.pid))
    return proc.pid


def stop_pidfile(pidfile: Path, sig: int = signal.SIGTERM, grace: float = 5.0) -> None:
    """Send ``sig`` to the process group whose leader's pid ``pidfile`` holds, then (``grace`` > 0)
    wait up to ``grace`` seconds for it to exit and SIGKILL the group after; remove the pid file.
    A missing file or a process already gone is fine."""
    if not pidfile.exists():
        return
    try:
        pid = int(pidfile.read_text())
        os.killpg(pid, sig)
        if grace > 0:
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # OSError once it is gone
                time.sleep(0.1)
            os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    pidfile.unlink(missing_ok=True)
