"""The local GPU cluster: a real control plane with kwok-simulated GPU nodes.

``up`` creates a kwokctl cluster with the *binary* runtime, pointing kwokctl at our own
binaries for every component (so it never downloads anything), with RBAC and the default
admission plugins on, then:

- installs a default StorageClass (``kubeforge-sim``, provisioner ``kubeforge.io/sim``) and
  starts the sim provisioner (:mod:`kubeforge.sim.provisioner`), which behaves like a CSI
  external-provisioner (parallel workers, a cloud driver's create latency) and gives each PVC a
  hostPath PV, because kube-scheduler will not place a pod whose PVC is unbound and the sim has
  no CSI driver;
- creates the fleet's Node objects, which kwok then keeps Ready and whose pods it runs.

State lives under ``$KUBEFORGE_HOME`` (default ``~/.kubeforge``): ``clusters/<name>/kubeconfig``,
the provisioner's pid and log, and ``bin`` (a link to the binaries).

Heartbeats: kwokctl scales every heartbeat by its ``--heartbeat-factor`` (default 5: kwok's
node leases last 200 s and are renewed about every 50 s, kube-controller-manager's node monitor
runs every 25 s with a 200 s grace period; kwok's node status heartbeat is every 10-20 min).
At 5,000 nodes that is ~100 lease writes a second; ``$KUBEFORGE_SIM_HEARTBEAT_FACTOR`` (e.g. 25:
~20 a second, the load of 1,024 nodes at the default) sets the factor for a cluster created now.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubeforge.sim._process import kubeforge_processes, start_detached, stop_pidfile, stop_pids
from kubeforge.sim.fleet import DRA_NODE_LABEL, Fleet, node_manifests
from kubeforge.sim.tools import ensure_tools

DEFAULT_NAME = "kubeforge"
STORAGE_CLASS = "kubeforge-sim"
HEARTBEAT_FACTOR_ENV = "KUBEFORGE_SIM_HEARTBEAT_FACTOR"


class ClusterError(RuntimeError):
    """A step of bringing the cluster up or down failed; the message says which and why."""


def heartbeat_args(env: dict[str, str] | None = None) -> tuple[str, ...]:
    """kwokctl's ``--heartbeat-factor`` from ``$KUBEFORGE_SIM_HEARTBEAT_FACTOR``; none when unset.

    Raises:
        ClusterError: the value is not a positive number.
    """
    raw = (os.environ if env is None else env).get(HEARTBEAT_FACTOR_ENV, "").strip()
    if not raw:
        return ()
    try:
        factor = float(raw)
    except ValueError:
        factor = 0.0
    if not factor > 0:
        raise ClusterError(f"{HEARTBEAT_FACTOR_ENV}={raw!r}: want a positive number")
    return ("--heartbeat-factor", f"{factor:g}")


def home() -> Path:
    """``$KUBEFORGE_HOME`` or ``~/.kubeforge``."""
    return Path(os.environ.get("KUBEFORGE_HOME", Path.home() / ".kubeforge"))


@dataclass
class Cluster:
    """A handle on one local cluster: its name, kubeconfig and binaries."""

    name: str = DEFAULT_NAME

    @property
    def dir(self) -> Path:
        return home() / "clusters" / self.name

    @property
    def kubeconfig(self) -> str:
        return str(self.dir / "kubeconfig")

    @property
    def bin_dir(self) -> Path:
        return ensure_tools()

    def env(self) -> dict[str, str]:
        """The environment for kubectl/helm/operator subprocesses aimed at this cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = self.kubeconfig
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        # kwokctl keeps its clusters under KWOK_WORKDIR; keep ours beside our other state.
        env["KWOK_WORKDIR"] = str(home() / "kwok")
        return env

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run kubectl against this cluster; text in and out.

        Raises:
            ClusterError: exit code non-zero and ``check``; the message has stderr.
        """
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), *args],
            input=input, capture_output=True, text=True, env=self.env(), timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def _kwokctl(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin_dir / "kwokctl"), "--name", self.name, *args],
            capture_output=True, text=True, env=self.env(), timeout=timeout,
        )

    def audit_log(self) -> Path:
        """Where the API server writes its audit log (with ``audit_policy`` given to :meth:`up`)."""
        return home() / "kwok" / "clusters" / self.name / "logs" / "audit.log"

    def exists(self) -> bool:
        return (home() / "kwok" / "clusters" / self.name).exists()

    def running(self) -> bool:
        """True when the API server answers /readyz."""
        if not Path(self.kubeconfig).exists():
            return False
        proc = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    # --- lifecycle -------------------------------------------------------------------------

    def up(self, fleet: Fleet | None = None, log=print, extra_args: tuple[str, ...] = (),
           audit_policy: str | None = None) -> None:
        """Create (or restart) the cluster and apply ``fleet``; idempotent.

        Args:
            fleet: The nodes to create, if any.
            log: Progress lines.
            extra_args: kwokctl ``--extra-args component=key=value`` for a cluster created
                now (e.g. ``kube-controller-manager=kube-api-qps=100``); an existing cluster
                keeps the arguments it was created with.
            audit_policy: An audit Policy file for a cluster created now: the API server then
                writes its audit log to :meth:`audit_log` (benches read it for server-side times).

        Raises:
            ClusterError: kwokctl failed (its output is in the message).
        """
        b = self.bin_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        link = home() / "bin"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(b)
        if not self.running():
            if self.exists():
                log(f"starting existing cluster {self.name}")
                proc = self._kwokctl("start", "cluster")
            else:
                log(f"creating cluster {self.name} (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)")
                proc = self._kwokctl(
                    "create", "cluster",
                    "--runtime", "binary",
                    "--kube-apiserver-binary", str(b / "kube-apiserver"),
                    "--kube-controller-manager-binary", str(b / "kube-controller-manager"),
                    "--kube-scheduler-binary", str(b / "kube-scheduler"),
                    "--kwok-controller-binary", str(b / "kwok"),
                    "--etcd-binary", str(b / "etcd"),
                    "--kube-authorization=true",
                    "--kube-admission=true",
                    *(f"--extra-args={a}" for a in extra_args),
                    *(("--kube-audit-policy", audit_policy) if audit_policy else ()),
                    *heartbeat_args(),
                    "--wait", "120s",
                )
            if proc.returncode != 0:
                raise ClusterError(f"kwokctl failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
            kc = self._kwokctl("get", "kubeconfig")
            if kc.returncode != 0:
                raise ClusterError(f"kwokctl get kubeconfig failed: {kc.stderr}")
            Path(self.kubeconfig).write_text(kc.stdout)
        self._wait_ready()
        self._storage(log)
        if fleet is not None:
            nodes = node_manifests(fleet)
            self.apply_nodes(nodes)
            log(f"fleet {fleet.name}: {fleet.node_count} nodes")
            if any((n["metadata"]["labels"] or {}).get(DRA_NODE_LABEL) for n in nodes):
                from kubeforge.sim import dra

                dra.install(self, nodes, log=log)

    def _wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.running():
                # The default ServiceAccount appears once kube-controller-manager is up; pods
                # cannot be admitted in a namespace before it exists.
                if self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0:
                    return
            time.sleep(0.5)
        raise ClusterError(f"cluster {self.name} not ready after {timeout:.0f}s")

    def _storage(self, log) -> None:
        sc = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": "kubeforge.io/sim",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(sc))
        pid = start_detached(self.dir / "provisioner.pid", self.dir / "provisioner.log",
                             ["kubeforge.sim.provisioner", "--kubeconfig", self.kubeconfig,
                              "--storage-class", STORAGE_CLASS, "--root", str(self.dir / "volumes")])
        if pid is not None:
            log(f"sim provisioner started (pid {pid})")

    def apply_nodes(self, nodes: list[dict]) -> None:
        """Create or update Node objects (labels, taints and GPU capacity included).

        Uses ``kubectl apply --server-side`` for metadata/spec and a status patch for capacity,
        since the status of an existing Node is only writable through its subresource. The
        status patches go through one in-process client (a kubectl process per node cost about
        a third of a second each on a loaded machine: 11 s for the demo's 32 nodes).
        """
        if not nodes:
            return
        from kubernetes import client, config

        docs = "\n---\n".join(yaml.safe_dump(n) for n in nodes)
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kubeforge-sim", "-f", "-", input=docs, timeout=300)
        api = config.new_client_from_config(config_file=self.kubeconfig)
        try:
            core = client.CoreV1Api(api)
            for n in nodes:
                status = {"status": {"capacity": n["status"]["capacity"], "allocatable": n["status"]["allocatable"]}}
                core.patch_node_status(n["metadata"]["name"], status, _content_type="application/merge-patch+json",
                                       _request_timeout=30)
        finally:
            api.close()

    def down(self, log=print) -> None:
        """Stop the provisioner and delete the cluster (all its state); idempotent.

        Every ``python -m kubeforge...`` process still aimed at this cluster's kubeconfig is
        stopped first (SIGTERM, SIGKILL after 5 s), pid file or not: a test run killed before
        its teardown leaves its operator running, and the next cluster of the same name would
        otherwise be served by two operators (two status-endpoint CAs, doubled preemptions)."""
        for pid in ("provisioner.pid", "imex.pid"):
            stop_pidfile(self.dir / pid, grace=0)
        strays = kubeforge_processes(self.kubeconfig)
        if strays:
            log(f"stopping {len(strays)} kubeforge process(es) left aimed at {self.name}: pids {strays}")
            stop_pids(strays)
        if self.exists():
            proc = self._kwokctl("delete", "cluster")
            if proc.returncode != 0:
                raise ClusterError(f"kwokctl delete cluster failed: {proc.stderr[-2000:]}")
            log(f"cluster {self.name} deleted")
        if Path(self.kubeconfig).exists():
            Path(self.kubeconfig).unlink()
