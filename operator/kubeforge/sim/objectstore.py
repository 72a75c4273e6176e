"""A local S3-compatible server for tests and the demo: moto's server mode (``moto[server]`` from
PyPI) on loopback, run from a virtual environment of its own (issue 29).

Why its own environment: moto needs botocore, and botocore wants ``python-dateutil<3`` while the
``kubernetes`` client the operator uses wants ``>=3``; installed beside the operator, pip would
downgrade the client. So :func:`ensure_moto` builds ``~/.cache/kubeforge/moto-venv`` once (under a
file lock, from PyPI) and :class:`MotoServer` runs its ``moto_server`` as a process.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

MOTO_REQUIREMENT = "moto[server]>=5.1"
VENV = Path(os.environ.get("KUBEFORGE_MOTO_VENV") or Path.home() / ".cache" / "kubeforge" / "moto-venv")


class ObjectStoreError(RuntimeError):
    """moto's server could not be installed or started."""


def ensure_moto(venv: Path = VENV, log=print) -> str:
    """The ``moto_server`` program, installing ``moto[server]`` into ``venv`` first when missing.

    Raises:
        ObjectStoreError: the environment could not be made (no network, pip failed).
    """
    server = venv / "bin" / "moto_server"
    if server.exists():
        return str(server)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / ".moto-venv.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if server.exists():
            return str(server)
        log(f"installing {MOTO_REQUIREMENT} into {venv} (once)")
        for cmd in ([sys.executable, "-m", "venv", str(venv)],
                    [str(venv / "bin" / "pip"), "install", "-q", MOTO_REQUIREMENT]):
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900,
                                  check=False)
            if proc.returncode != 0:
                raise ObjectStoreError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    if not server.exists():
        raise ObjectStoreError(f"{MOTO_REQUIREMENT} installed but {server} is missing")
    return str(server)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """moto's S3-compatible server on ``127.0.0.1`` (any keys accepted); ``url`` is its endpoint.

    Args:
        program: The ``moto_server`` program (:func:`ensure_moto`).
        timeout: Seconds to wait for it to answer.
    """

    def __init__(self, program: str, timeout: float = 60.0) -> None:
        self.program, self.timeout = program, timeout
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MotoServer":
        """Start it and wait until it answers.

        Raises:
            ObjectStoreError: it exited or did not answer within ``timeout``.
        """
        self.proc = subprocess.Popen([self.program, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ObjectStoreError(f"moto_server exited with {self.proc.returncode}")
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
                return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise ObjectStoreError(f"moto_server did not answer on {self.url} within {self.timeout:.0f}s")

    def stop(self) -> None:
        """Stop it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "MotoServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
