"""KEDA on a sim cluster: its CRDs, its operator and its metrics adapter as local processes.

The binaries and CRDs come from ``hack/build-keda.sh`` (``~/.cache/kubeforge/bin/keda-vX/``).
Both processes run with the cluster's admin kubeconfig (``KUBECONFIG``), namespace ``keda``,
leader election and KEDA's own certificate rotation off, every port on loopback:

- the operator: the ScaledObject controller (it makes the HPA) and the gRPC metrics service
  the adapter asks (mutual TLS with a CA and a certificate for 127.0.0.1 made here with openssl);
- the adapter: the ``external.metrics.k8s.io`` aggregated API, registered through an
  ExternalName Service (:mod:`e2e.bench.keda_live.objects` says why that is how the API
  server reaches a loopback adapter).

kube-controller-manager's HPA controller reads the metric through the API server, as on any
cluster. Logs: ``<cluster dir>/keda/{operator,adapter}.log``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubeforge.sim import free_port, stop_pidfile

from e2e.bench.keda_live.objects import KEDA_NAMESPACE, api_service, metrics_service

__all__ = ["BUILD_HINT", "KEDA_VERSION", "KedaError", "KedaStack", "keda_bin"]

KEDA_VERSION = os.environ.get("KEDA_VERSION", "2.21.0")
BUILD_HINT = "KEDA is not built: run `make bench-keda-live` or `bash hack/build-keda.sh` (Go module proxy; long)"
_ROOT = Path(__file__).resolve().parents[3]


class KedaError(RuntimeError):
    """KEDA is not built, or a part of it did not start; the message says which and why."""


def keda_bin() -> Path | None:
    """The directory ``hack/build-keda.sh`` built into, when both binaries and the CRDs are there."""
    proc = subprocess.run(["bash", str(_ROOT / "hack" / "build-keda.sh"), "--check"], capture_output=True, text=True,
                          check=False, timeout=60)
    return Path(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise KedaError("openssl not found (Debian package openssl): needed for KEDA's gRPC certificates")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise KedaError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()[-500:]}")


def grpc_certs(directory: Path) -> Path:
    """Make (once) ``ca.crt``, ``tls.crt``, ``tls.key`` under ``directory``: KEDA's operator serves
    its gRPC metrics service with them and the adapter presents the same certificate as a client
    (mutual TLS, both against ``ca.crt``), so it is for server and client auth, 127.0.0.1."""
    directory.mkdir(parents=True, exist_ok=True)
    if not all((directory / f).exists() for f in ("ca.crt", "tls.crt", "tls.key")):
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
                 "-subj", "/CN=kubeforge-keda-ca", cwd=directory)
        _openssl("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1", cwd=directory)
        (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                           "extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n")
        _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", "tls.crt", "-days", "3650", "-extfile", "san.ext", cwd=directory)
    return directory


@dataclass
class KedaStack:
    """KEDA's two processes against cluster ``c`` (a :class:`kubeforge.sim.cluster.Cluster`).

    Attributes:
        c: the cluster.
        bin_dir: where the binaries and ``crds/`` are.
        grpc_port, adapter_port: loopback ports of the operator's gRPC service and the adapter.
    """

    c: object
    bin_dir: Path
    grpc_port: int = 0
    adapter_port: int = 0

    @property
    def dir(self) -> Path:
        d = self.c.dir / "keda"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _env(self) -> dict[str, str]:
        return {**self.c.env(), "POD_NAMESPACE": KEDA_NAMESPACE, "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NAMESPACE,
                "WATCH_NAMESPACE": ""}

    def _spawn(self, what: str, args: list[str]) -> int:
        stop_pidfile(self.dir / f"{what}.pid")
        log = open(self.dir / f"{what}.log", "ab")
        proc = subprocess.Popen([str(self.bin_dir / f"keda-{what}"), *args], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, env=self._env(), start_new_session=True)
        (self.dir / f"{what}.pid").write_text(str(proc.pid))
        return proc.pid

    def _alive(self, what: str) -> None:
        try:
            os.kill(int((self.dir / f"{what}.pid").read_text()), 0)
        except (OSError, ValueError):
            tail = (self.dir / f"{what}.log").read_text(errors="replace").splitlines()[-15:]
            raise KedaError(f"keda-{what} exited; {self.dir / f'{what}.log'}:\n" + "\n".join(tail)) from None

    def install(self) -> None:
        """Apply KEDA's CRDs (server-side) and wait until Established; create namespace ``keda``."""
        docs = [yaml.safe_load(p.read_text()) for p in sorted((self.bin_dir / "crds").glob("*.yaml"))]
        self.c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kubeforge-keda", "-f", "-",
                       input="\n---\n".join(yaml.safe_dump(d) for d in docs if d), timeout=300)
        names = {d["metadata"]["name"] for d in docs if d}
        deadline = time.monotonic() + 120
        while True:  # bounded; `kubectl wait` fails outright on a CRD whose status has no conditions yet
            items = json.loads(self.c.kubectl("get", "crd", "-o", "json").stdout)["items"]
            established = {i["metadata"]["name"] for i in items if any(
                x.get("type") == "Established" and x.get("status") == "True"
                for x in (i.get("status") or {}).get("conditions") or [])}
            if names <= established:
                break
            if time.monotonic() > deadline:
                raise KedaError(f"KEDA's CRDs not Established after 120s: {sorted(names - established)}")
            time.sleep(0.5)
        self.c.kubectl("create", "namespace", KEDA_NAMESPACE, check=False)

    def start(self, timeout: float = 180) -> None:
        """Start the operator and the adapter, register the aggregated API and wait (at most
        ``timeout`` s) until it is Available.

        Raises:
            KedaError: a process exited, or the APIService did not become Available.
        """
        certs = grpc_certs(self.dir / "certs")
        self.grpc_port, self.adapter_port = free_port(), free_port()
        self._spawn("operator", [
            "--leader-elect=false", "--enable-cert-rotation=false", f"--cert-dir={certs}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}", f"--health-probe-bind-address=127.0.0.1:{free_port()}",
            f"--metrics-service-bind-address=127.0.0.1:{self.grpc_port}", "--zap-log-level=info",
            "--enable-webhook-patching=false", "--enable-apiservice-patching=false"])
        kc = self.c.kubeconfig
        self._spawn("adapter", [
            f"--secure-port={self.adapter_port}", "--bind-address=127.0.0.1", f"--cert-dir={certs}",
            f"--tls-cert-file={certs / 'tls.crt'}", f"--tls-private-key-file={certs / 'tls.key'}",
            f"--client-ca-file={self._kwok_ca()}", f"--metrics-service-address=127.0.0.1:{self.grpc_port}",
            f"--port={free_port()}", f"--lister-kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--zap-log-level=info"])
        self.c.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List",
             "items": [metrics_service(self.adapter_port), api_service(self.adapter_port)]}))
        deadline = time.monotonic() + timeout
        while True:  # bounded by ``timeout``
            self._alive("operator")
            self._alive("adapter")
            out = self.c.kubectl("get", "apiservice", "v1beta1.external.metrics.k8s.io", "-o", "json", check=False)
            if out.returncode == 0:
                conds = (json.loads(out.stdout).get("status") or {}).get("conditions") or []
                avail = next((x for x in conds if x.get("type") == "Available"), {})
                if avail.get("status") == "True":
                    return
            if time.monotonic() > deadline:
                raise KedaError(f"the APIService v1beta1.external.metrics.k8s.io is not Available after "
                                f"{timeout:.0f}s: {avail.get('reason')}: {avail.get('message')}; logs in {self.dir}")
            time.sleep(1.0)

    def _kwok_ca(self) -> Path:
        """kwok's CA certificate (it signed the front-proxy client certificate the aggregator uses)."""
        kc = yaml.safe_load(Path(self.c.kubeconfig).read_text())
        cluster = (kc.get("clusters") or [{}])[0].get("cluster") or {}
        if cluster.get("certificate-authority"):
            return Path(cluster["certificate-authority"])
        data = cluster.get("certificate-authority-data")
        if not data:
            raise KedaError(f"{self.c.kubeconfig} names no CA: the adapter cannot trust the aggregator")
        p = self.dir / "kwok-ca.crt"
        p.write_bytes(base64.b64decode(data))
        return p

    def stop(self) -> None:
        """Unregister the aggregated API, stop both processes (SIGTERM, then SIGKILL after 5 s)."""
        if self.c.running():
            self.c.kubectl("delete", "apiservice", "v1beta1.external.metrics.k8s.io", "--ignore-not-found",
                           check=False)
        for what in ("adapter", "operator"):
            stop_pidfile(self.dir / f"{what}.pid")
