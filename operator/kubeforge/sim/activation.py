"""The kubeforge activator on the local cluster, for the demo and the tests.

In a real cluster the chart runs ``kubeforge activator`` as a Deployment behind the Service
``kubeforge-system/kubeforge-activator``, and the operator gives a service with no ready replica
that Service's addresses as its endpoints. Here kwok pods have no network: the activator runs as
a local process on loopback, its Service's EndpointSlice lists a placeholder address (an
EndpointSlice may not list loopback), clients send to the process with the service's ``Host``
header, and every forward goes to the model-server simulator (``--backend-override``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubeforge.sim._process import free_port, stop_process, wait_http_ok

LOCAL_ACTIVATOR = ("kubeforge-system", "kubeforge-activator")
"""The activator's Service the sim's operator looks for (``--activator-service``), as the chart
names it: the demo and the tests that hold requests at zero make it exist."""

ACTIVATOR_IP = "10.255.0.1"
"""The placeholder address the activator's EndpointSlice lists (and the process calls its own)."""
ACTIVATOR_PORT = 8012


def activator_objects() -> list[dict[str, Any]]:
    """The namespace, the Service and its EndpointSlice the sim's operator reads."""
    ns, name = LOCAL_ACTIVATOR
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
         "spec": {"ports": [{"name": "http", "port": ACTIVATOR_PORT, "targetPort": ACTIVATOR_PORT}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{name}-sim", "namespace": ns, "labels": {"kubernetes.io/service-name": name}},
         "addressType": "IPv4", "endpoints": [{"addresses": [ACTIVATOR_IP], "conditions": {"ready": True}}],
         "ports": [{"name": "http", "port": ACTIVATOR_PORT, "protocol": "TCP"}]},
    ]


class LocalActivator:
    """``kubeforge activator`` as a child process against a sim cluster.

    Args:
        cluster: The :class:`~kubeforge.sim.cluster.Cluster`.
        backend: Where every forward goes (the model-server simulator's URL).
        log: The process's log file (default ``<cluster dir>/activator.log``).
    """

    def __init__(self, cluster: Any, backend: str, log: Path | None = None):
        self.cluster = cluster
        self.backend = backend
        self.port, self.metrics_port = free_port(), free_port()
        self.log_path = log or cluster.dir / "activator.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """Where clients send requests (with the service's ``Host`` header)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        """``host:port`` of its metrics, for Prometheus."""
        return f"127.0.0.1:{self.metrics_port}"

    def start(self, timeout: float = 30.0) -> "LocalActivator":
        for obj in activator_objects():
            self.cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubeforge", "activator", "--kubeconfig", self.cluster.kubeconfig,
             "--address", "127.0.0.1", "--port", str(self.port), "--metrics-address", "127.0.0.1",
             "--metrics-port", str(self.metrics_port), "--own-address", ACTIVATOR_IP, "--identity", "sim-activator",
             "--retry-after", "2", "--shutdown-grace", "1", "--backend-override", self.backend],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=self.cluster.env(), start_new_session=True)
        if wait_http_ok(self.proc, f"http://127.0.0.1:{self.metrics_port}/readyz", timeout):
            return self
        self.stop()
        raise RuntimeError(f"the activator did not become ready in {timeout:.0f}s (log: {self.log_path})")

    def stop(self) -> None:
        stop_process(self.proc, 15.0)
        self.proc = None

    def __enter__(self) -> "LocalActivator":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
