"""Run the peers' managers as processes against a sim cluster's API server.

Each manager (Kueue, JobSet, LeaderWorkerSet) runs as the binary ``hack/build-peers.sh``
built, with the admin kubeconfig of the cluster (``KUBECONFIG``), leader election off, its
metrics server off, its own certificate management off and its webhook server on a free
loopback port with the certificate from :mod:`e2e.peers._certs`. Its CRDs and webhook
configurations come from :mod:`e2e.peers._manifests`. State and logs live under
``<cluster dir>/peers/``: ``<peer>.yaml`` (its configuration), ``<peer>.log``, ``<peer>.pid``.

Typical use (the order matters: Kueue's JobSet integration needs JobSet's CRD at start)::

    jobset = start_jobset(c)
    kueue = start_kueue(c)
    ...
    stop_peers(c)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubeforge.sim import free_port, stop_pidfile

from ._build import BUILD_HINT, PeersError, peers_bin
from ._certs import kueue_metrics_cert, loopback_cert
from ._kwok import keep_annotated_job_pods_running
from ._manifests import crds, webhook_configurations, webhook_groups

PEERS = ("kueue", "jobset", "lws")
KUEUE_FRAMEWORKS = {"jobset.x-k8s.io/jobset": "jobset.x-k8s.io",
                    "leaderworkerset.x-k8s.io/leaderworkerset": "leaderworkerset.x-k8s.io"}


@dataclass(frozen=True)
class Manager:
    """A running peer manager.

    Attributes:
        peer: ``kueue``, ``jobset`` or ``lws``.
        pid: its process id (the leader of its own process group).
        webhook_port: loopback port of its webhook server.
        health_port: loopback port of its ``/healthz`` and ``/readyz``.
        log: its log file.
    """

    peer: str
    pid: int
    webhook_port: int
    health_port: int
    log: Path


def _state(c) -> Path:
    d = c.dir / "peers"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _bin(bin_dir: Path | None) -> Path:
    b = bin_dir or peers_bin()
    if b is None:
        raise PeersError(BUILD_HINT)
    return b


def _apply(c, objs: list[dict], timeout: float = 120) -> None:
    if objs:
        c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kubeforge-peers", "-f", "-",
                  input="\n---\n".join(yaml.safe_dump(o) for o in objs), timeout=timeout)


def stop_peer(c, peer: str, sig: int = signal.SIGTERM) -> None:
    """Stop one manager started here, if running (``sig``, then SIGKILL after 5 s), and delete
    its webhook configurations so that nothing calls a webhook that is gone."""
    stop_pidfile(_state(c) / f"{peer}.pid", sig)
    if c.running():
        c.kubectl("delete", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-l",
                  f"kubeforge.io/peer={peer}", "--ignore-not-found", check=False)


def stop_peers(c) -> None:
    """Stop every peer manager of cluster ``c`` (LWS, Kueue, then JobSet)."""
    for p in ("lws", "kueue", "jobset"):
        stop_peer(c, p)


def peer_pid(c, peer: str) -> int | None:
    """The pid of a running manager of cluster ``c``, or None."""
    try:
        pid = int((_state(c) / f"{peer}.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def _start(c, peer: str, bin_dir: Path, config: dict, args: list[str], webhook_port: int, health_port: int,
           ca_bundle: str, keep=lambda w: True, timeout: float = 120) -> Manager:
    """Write the configuration, start the binary, wait for ``/readyz``, apply the webhooks."""
    stop_peer(c, peer)
    st = _state(c)
    cfg = st / f"{peer}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    log_path = st / f"{peer}.log"
    log = open(log_path, "ab")
    proc = subprocess.Popen([str(bin_dir / peer), f"--config={cfg}", *args], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, env=c.env(), start_new_session=True)
    (st / f"{peer}.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while True:  # bounded by ``timeout``
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-15:]
            raise PeersError(f"{peer} exited with {proc.returncode} at start; {log_path}:\n" + "\n".join(tail))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_peer(c, peer)
            raise PeersError(f"{peer} not ready after {timeout:.0f}s; see {log_path}")
        time.sleep(0.5)
    _apply(c, webhook_configurations(bin_dir, peer, f"https://127.0.0.1:{webhook_port}", ca_bundle, keep))
    return Manager(peer, proc.pid, webhook_port, health_port, log_path)


def _install_crds(c, bin_dir: Path, peer: str, webhook_port: int, ca_bundle: str) -> None:
    objs = crds(bin_dir, peer, f"https://127.0.0.1:{webhook_port}", ca_bundle)
    _apply(c, objs, timeout=300)
    names = {o["metadata"]["name"] for o in objs}
    deadline = time.monotonic() + 120
    while True:  # bounded; `kubectl wait` fails outright on a CRD whose status has no conditions yet
        items = json.loads(c.kubectl("get", "crd", "-o", "json").stdout)["items"]
        established = {i["metadata"]["name"] for i in items if any(
            x.get("type") == "Established" and x.get("status") == "True" for x in (i.get("status") or {}).get("conditions") or [])}
        if names <= established:
            return
        if time.monotonic() > deadline:
            raise PeersError(f"{peer}'s CRDs not Established after 120s: {sorted(names - established)}")
        time.sleep(0.5)


def _common(c, peer: str, bin_dir: Path | None) -> tuple[Path, Path, str, int, int]:
    b = _bin(bin_dir)
    certs, ca = loopback_cert(c.dir / "peers" / "certs")
    return b, certs, ca, free_port(), free_port()


def start_jobset(c, bin_dir: Path | None = None) -> Manager:
    """Install JobSet's CRD on cluster ``c`` and start its manager (as shipped: client QPS and
    burst 500); returns it when ready. First makes the sim keep Job pods annotated
    :data:`e2e.peers.queues.KWOK_KEEP_RUNNING` Running (:mod:`e2e.peers._kwok`).

    Raises:
        PeersError: not built, or the manager did not become ready.
    """
    b, certs, ca, wh, hp = _common(c, "jobset", bin_dir)
    keep_annotated_job_pods_running(c)  # JobSet's pods are Job pods: kwok would finish them at once
    _install_crds(c, b, "jobset", wh, ca)
    config = {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
              "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
              "webhook": {"port": wh, "host": "127.0.0.1", "certDir": str(certs)},
              "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{hp}"}}
    return _start(c, "jobset", b, config, [], wh, hp, ca)


def start_lws(c, bin_dir: Path | None = None) -> Manager:
    """Install LeaderWorkerSet's CRD on cluster ``c`` and start its manager; returns it when
    ready.

    Raises:
        PeersError: not built, or the manager did not become ready.
    """
    b, certs, ca, wh, hp = _common(c, "lws", bin_dir)
    _install_crds(c, b, "lws", wh, ca)
    c.kubectl("create", "namespace", "lws-system", check=False)
    config = {"apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
              "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
              "webhook": {"port": wh, "host": "127.0.0.1", "certDir": str(certs)},
              "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{hp}"}}
    return _start(c, "lws", b, config, ["--leader-elect=false"], wh, hp, ca)


def start_kueue(c, bin_dir: Path | None = None, frameworks: tuple[str, ...] = ("jobset.x-k8s.io/jobset",),
                log_level: int = 2, qps: float = 50, burst: int = 100) -> Manager:
    """Install Kueue's CRDs on cluster ``c`` and start its manager; returns it when ready.

    The configuration is the shipped one (config/components/manager: client QPS 50 / burst
    100, the same per-kind controller concurrency, ``--zap-log-level=2``) except: only the
    given integrations (their CRDs must be installed first), leader election off, the
    visibility API off (``VisibilityOnDemand=false``: it would need an APIService), the
    metrics server off. TopologyAwareScheduling is on (beta, on by default since v0.14).

    Args:
        c: the cluster.
        bin_dir: the built peers (default: found through ``hack/build-peers.sh --check``).
        frameworks: Kueue integrations to enable (``integrations.frameworks``).
        log_level: ``--zap-log-level`` (the shipped manifests use 2).
        qps, burst: ``clientConnection`` (shipped: 50 / 100).

    Raises:
        PeersError: not built, or the manager did not become ready.
    """
    b, certs, ca, wh, hp = _common(c, "kueue", bin_dir)
    kueue_metrics_cert(certs)
    _install_crds(c, b, "kueue", wh, ca)
    c.kubectl("create", "namespace", "kueue-system", check=False)
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{hp}"}, "metrics": {"bindAddress": "0"},
        "webhook": {"port": wh, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "controller": {"groupKindConcurrency": {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5,
                                                "LocalQueue.kueue.x-k8s.io": 1, "Cohort.kueue.x-k8s.io": 1,
                                                "ClusterQueue.kueue.x-k8s.io": 1,
                                                "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": qps, "burst": burst},
        "integrations": {"frameworks": list(frameworks)},
    }
    groups = {"kueue.x-k8s.io"} | {KUEUE_FRAMEWORKS[f] for f in frameworks if f in KUEUE_FRAMEWORKS}
    return _start(c, "kueue", b, config, [f"--zap-log-level={log_level}", "--feature-gates=VisibilityOnDemand=false"],
                  wh, hp, ca, keep=lambda w: webhook_groups(w) <= groups)


def describe(bin_dir: Path | None = None) -> str:
    """``kueue v0.16.2, jobset v0.10.1, lws v0.7.0`` from the built manifests' module versions."""
    b = _bin(bin_dir)
    out = []
    for p in PEERS:
        f = b / "manifests" / p / ".complete"
        out.append(f.read_text().strip().rsplit("/", 1)[-1] if f.exists() else f"{p} ?")
    return ", ".join(out)


__all__ = ["Manager", "start_jobset", "start_kueue", "start_lws", "stop_peer", "stop_peers", "peer_pid", "describe"]
