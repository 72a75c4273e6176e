"""A real Prometheus for the local cluster: Debian's ``prometheus`` binary, run as a child process.

The autoscaling tests and the benchmark need the operator to read the queue through a real
Prometheus (scrape, TSDB, PromQL), not a fake HTTP answer. :class:`Prometheus` writes a config
with one static scrape target (the model-server simulator's ``/metrics``), starts
``/usr/bin/prometheus`` on a free loopback port with a temporary TSDB directory, and waits
(bounded) for ``/-/ready``. ``stop()`` and ``start()`` again simulate an outage.

Where the binary comes from: Debian's ``prometheus`` package (``apt-get install prometheus``),
never a release download. :func:`ensure_prometheus` installs it when missing (root only). The
package may start a system service on :9090; we never use it, and :func:`stop_system_service`
stops one that is not ours.

Scrape settings: ``scrape_interval: 1s`` (the tests use windows of seconds) and
``honor_labels: true``, so the ``namespace`` and ``service`` labels that the simulator puts on
its series survive the scrape, as a ServiceMonitor would have attached them in a real cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from kubeforge.sim._process import stop_process, wait_http_ok

__all__ = ["Prometheus", "PrometheusError", "ensure_prometheus", "find_prometheus", "stop_system_service"]

DEBIAN_BINARY = "/usr/bin/prometheus"


class PrometheusError(RuntimeError):
    """Prometheus could not be installed, started or made ready; the message says why."""


def find_prometheus() -> str | None:
    """The Prometheus binary: ``$KUBEFORGE_PROMETHEUS``, ``/usr/bin/prometheus``, or on PATH."""
    for cand in (os.environ.get("KUBEFORGE_PROMETHEUS"), DEBIAN_BINARY, shutil.which("prometheus")):
        if cand and os.path.exists(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _pgrep(pattern: str) -> list[int]:
    proc = subprocess.run(["pgrep", "-f", pattern], stdout=subprocess.PIPE, text=True, check=False)
    return [int(x) for x in proc.stdout.split()]


def stop_system_service(own: set[int] = frozenset()) -> list[int]:
    """Stop a Prometheus that the Debian package's install started as a service (on :9090).

    Tries ``systemctl stop prometheus`` (absent in most containers), then SIGTERMs any process
    running ``/usr/bin/prometheus`` whose command line has no ``--web.listen-address=127.0.0.1:``
    of ours and whose pid is not in ``own``. Returns the pids it signalled.
    """
    if shutil.which("systemctl"):
        subprocess.run(["systemctl", "stop", "prometheus"], capture_output=True, check=False, timeout=30)
    killed = []
    for pid in _pgrep(DEBIAN_BINARY):
        if pid in own or pid == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if not cmd.startswith(DEBIAN_BINARY) or "kubeforge-prom-" in cmd:
            continue  # not the binary itself, or one of ours (our TSDB dirs carry that prefix)
        try:
            os.kill(pid, signal.SIGTERM)
            killed.append(pid)
        except OSError:
            pass
    return killed


def ensure_prometheus(log=print) -> str:
    """Return the Prometheus binary, installing Debian's package first when missing.

    Raises:
        PrometheusError: not found and not installable (not root, or apt failed).
    """
    found = find_prometheus()
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PrometheusError(
            "prometheus not found: install Debian's package (apt-get install prometheus) "
            "or set KUBEFORGE_PROMETHEUS to a binary"
        )
    log("installing Debian's prometheus package (apt-get install prometheus)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus"]):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False, timeout=900)
        if proc.returncode != 0:
            raise PrometheusError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    stop_system_service()
    found = find_prometheus()
    if not found:
        raise PrometheusError("apt-get install prometheus succeeded but no prometheus binary was found")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_config(targets: list[str], scrape_interval: str = "1s", job: str = "kubeforge-modelserver") -> str:
    """The prometheus.yml text: one job, static targets, ``honor_labels: true``."""
    tgt = ", ".join(f"'{t}'" for t in targets)
    return (
        "global:\n"
        f"  scrape_interval: {scrape_interval}\n"
        f"  evaluation_interval: {scrape_interval}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        f"    scrape_interval: {scrape_interval}\n"
        f"    scrape_timeout: {scrape_interval}\n"
        "    honor_labels: true\n"
        "    static_configs:\n"
        f"      - targets: [{tgt}]\n"
    )


class Prometheus:
    """One Prometheus process scraping the model-server simulator.

    Args:
        targets: ``host:port`` of each ``/metrics`` endpoint, e.g. ``["127.0.0.1:18080"]``.
        port: listen port on 127.0.0.1; a free one when None (kept across ``stop()``/``start()``).
        scrape_interval: Prometheus duration, ``1s`` by default.
        binary: the prometheus binary; found (or installed) when None.

    Use as a context manager, or call ``start()`` / ``stop()``. ``url`` is ``http://127.0.0.1:<port>``.
    """

    def __init__(self, targets: list[str], port: int | None = None, scrape_interval: str = "1s", binary: str | None = None,
                 job: str = "kubeforge-modelserver"):
        self.targets = list(targets)
        self.job = job
        self.port = port or _free_port()
        self.scrape_interval = scrape_interval
        self.binary = binary or ensure_prometheus()
        self.dir = Path(tempfile.mkdtemp(prefix="kubeforge-prom-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30.0) -> "Prometheus":
        """Start the process (no-op when running) and wait until ``/-/ready`` answers 200.

        Raises:
            PrometheusError: it exited, or was not ready within ``timeout`` seconds.
        """
        if self.running:
            return self
        cfg = self.dir / "prometheus.yml"
        cfg.write_text(render_config(self.targets, self.scrape_interval, self.job))
        (self.dir / "data").mkdir(exist_ok=True)
        log = open(self.dir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={cfg}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h",
             "--log.level=warn"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        log.close()
        if wait_http_ok(self.proc, self.url + "/-/ready", timeout):
            return self
        if self.proc.poll() is not None:
            raise PrometheusError(f"prometheus exited with {self.proc.returncode}: {self.log_tail()}")
        self.stop()
        raise PrometheusError(f"prometheus not ready on {self.url} after {timeout}s: {self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout``); the TSDB dir is kept."""
        stop_process(self.proc, timeout)
        self.proc = None

    def close(self) -> None:
        """Stop and remove the temporary directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        p = self.dir / "prometheus.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""

    def query(self, promql: str) -> float | None:
        """One instant query's single value (None on any failure): a helper for tests."""
        from kubeforge.runtime.prometheus_http import query_scalar_sync

        with httpx.Client() as c:
            return query_scalar_sync(c, self.url, promql).value

    def __enter__(self) -> "Prometheus":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
