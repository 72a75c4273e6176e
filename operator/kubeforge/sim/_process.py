"""Child processes of the local cluster's helpers (Prometheus, the activator, the provisioner,
the IMEX stand-in, operators, the peers): a free loopback port for one, start one detached with
a pid file, wait until one answers on HTTP, stop one, find the ones a cluster left behind.
Bounded waits only."""

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


def _ancestors() -> set[int]:
    """This process's pid and its ancestors' (never stopped as strays)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the command's parentheses
        except (OSError, ValueError, IndexError):
            break
    return out


def kubeforge_processes(kubeconfig: str) -> list[int]:
    """Pids of ``python -m kubeforge...`` processes (the operator, the sim provisioner, the
    IMEX stand-in, the workers' stand-ins...) aimed at ``kubeconfig``: by ``KUBECONFIG`` in
    their environment or a ``--kubeconfig`` argument. Read from ``/proc`` (Linux; elsewhere,
    or for another user's processes, nothing is found). This process and its ancestors are
    never listed."""
    mine = _ancestors()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if not any(a == b"-m" and b.startswith(b"kubeforge") for a, b in zip(argv, argv[1:])):
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        target = kubeconfig.encode()
        if b"KUBECONFIG=" + target in env or any(
                a == b"--kubeconfig" and b == target for a, b in zip(argv, argv[1:])):
            found.append(int(entry.name))
    return found


def stop_pids(pids: Sequence[int], grace: float = 5.0) -> None:
    """SIGTERM each of ``pids`` (its whole process group when it leads one), then SIGKILL what
    is left after ``grace`` seconds. Pids already gone are fine."""
    def signal_all(sig: int) -> list[int]:
        alive = []
        for pid in pids:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
                alive.append(pid)
            except OSError:
                pass
        return alive

    alive = signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and not _zombie(p)]
    if alive:
        signal_all(signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
