"""A PersistentVolume provisioner for the local cluster that behaves like a CSI external-provisioner
(sim only, never in production).

kwok simulates nodes, not storage: there is no CSI driver, so a PVC would stay Pending and
kube-scheduler would refuse every pod that mounts it. This process does what the
external-provisioner sidecar (``registry.k8s.io/sig-storage/csi-provisioner``) does in front of
a cloud block-storage driver, with a hostPath PV in place of the cloud volume:

- **Which claims**: those the PV controller handed to this provisioner, i.e. annotated
  ``volume.kubernetes.io/storage-provisioner`` (or the beta key) with ``kubeforge.io/sim``,
  unbound, not being deleted; for a ``WaitForFirstConsumer`` class only once kube-scheduler
  chose a node (``volume.kubernetes.io/selected-node``). This is sig-storage-lib-external-
  provisioner's ``shouldProvision``: with an ``Immediate`` class the PV controller annotates
  the claim as soon as it sees it, so provisioning starts after that first PV-controller pass,
  as in a real cluster.
- **Parallel workers**: at most ``--worker-threads`` volumes in flight, default 100: the
  external-provisioner's own default (``cmd/csi-provisioner/csi-provisioner.go``:
  ``flag.Uint("worker-threads", 100, "Number of provisioner worker threads, in other words nr.
  of simultaneous CSI calls.")``). A claim beyond them waits for a free worker.
- **Per-volume latency** (:class:`CreateLatency`): ``CreateVolume`` of the AWS EBS CSI driver
  returns once EC2 reports the volume ``available``; its authors measured "the median/p99 time
  until volume creation is ~1.5/~4 seconds" (us-west-2 and ap-south-1) and poll
  ``DescribeVolumes`` 1.25 s after the create, then after 0.5, 0.75, 1.125, 1.7, 2.5 and 3 s
  (kubernetes-sigs/aws-ebs-csi-driver ``pkg/cloud/cloud.go``, ``volumeWaitParameters``). Each
  claim's creation time is drawn from the log-normal with that median and p99 (seeded by the
  claim's uid, so a rerun draws the same), and the volume is reported at the first poll after
  it: median 1.75 s, p95 3.6 s, never under 1.25 s.
- Then the PV, pre-bound to the claim (``claimRef`` with its uid), as the external-provisioner
  creates it; kube-controller-manager's PV controller binds the pair (claim ``volumeName``,
  both ``Bound``). Released PVs are deleted (``reclaimPolicy: Delete``).

Not modelled: the provisioner's Events (``Provisioning``, ``ProvisioningSucceeded``: written
asynchronously, they gate nothing) and its client-side rate limit (``--kube-api-qps`` 5 /
``--kube-api-burst`` 10 by default; drivers run at scale raise them, and one PV write per
claim stays well under even the default's burst at the bench's pace).

Run as ``python -m kubeforge.sim.provisioner --kubeconfig PATH``; ``kubeforge sim up`` starts it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Callable, Mapping

from kubernetes import client, config
from kubernetes.client.rest import ApiException

log = logging.getLogger("kubeforge.sim.provisioner")

PROVISIONER = "kubeforge.io/sim"
"""The ``provisioner`` of the sim's StorageClasses."""
WORKER_THREADS = 100
"""external-provisioner's ``--worker-threads`` default."""
ANN_PROVISIONER = ("volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner")
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
P99_Z = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class CreateLatency:
    """How long one volume takes to create, from the AWS EBS CSI driver's published figures.

    Attributes:
        median: Median seconds until the cloud volume exists (EBS: ~1.5 s).
        p99: 99th percentile (EBS: ~4 s); with ``median`` it fixes a log-normal.
        first_poll: Seconds before the driver first asks whether it exists (EBS: 1.25 s).
        poll: Next poll intervals: ``poll * factor**k`` capped at ``cap`` (EBS: 0.5 s, 1.5, 3 s).
        factor: See ``poll``.
        cap: See ``poll``.

    ``median <= 0`` means no latency at all (the volume is created at once).
    """

    median: float = 1.5
    p99: float = 4.0
    first_poll: float = 1.25
    poll: float = 0.5
    factor: float = 1.5
    cap: float = 3.0

    def created_after(self, u: float) -> float:
        """Seconds until the volume exists for the uniform draw ``u`` in (0, 1)."""
        if self.median <= 0:
            return 0.0
        sigma = math.log(max(self.p99, self.median) / self.median) / P99_Z
        return self.median * math.exp(sigma * NormalDist().inv_cdf(min(max(u, 1e-9), 1 - 1e-9)))

    def reported_after(self, u: float) -> float:
        """Seconds until the driver sees it: the first poll at or after :meth:`created_after`
        (bounded: 200 polls, over 10 minutes)."""
        if self.median <= 0:
            return 0.0
        t, step, due = self.first_poll, self.poll, self.created_after(u)
        for _ in range(200):
            if t >= due:
                break
            t += step
            step = min(step * self.factor, self.cap)
        return t

    def for_claim(self, uid: str) -> float:
        """:meth:`reported_after` for a draw seeded by the claim's uid (the same on a rerun)."""
        u = (int(hashlib.sha256(uid.encode()).hexdigest()[:13], 16) + 0.5) / 16 ** 13
        return self.reported_after(u)


def should_provision(pvc: Mapping[str, Any], binding_mode: Callable[[str], str | None], name: str = PROVISIONER) -> bool:
    """Whether the claim is this provisioner's to serve now (see the module docstring).

    Args:
        pvc: The claim as the API returns it (camelCase).
        binding_mode: ``volumeBindingMode`` of a StorageClass by name (None: unknown).
        name: This provisioner's name.
    """
    md = pvc.get("metadata") or {}
    spec = pvc.get("spec") or {}
    ann = md.get("annotations") or {}
    if spec.get("volumeName") or md.get("deletionTimestamp"):
        return False
    if not any(ann.get(k) == name for k in ANN_PROVISIONER):
        return False
    if binding_mode(spec.get("storageClassName") or "") == "WaitForFirstConsumer":
        return bool(ann.get(ANN_SELECTED_NODE))
    return True


def pv_for_claim(pvc: dict, storage_class: str, root: str) -> dict:
    """The PV manifest bound to ``pvc`` (a PVC dict as the API returns it, camelCase)."""
    md = pvc["metadata"]
    digest = hashlib.sha1(md["uid"].encode()).hexdigest()[:10]
    size = ((pvc.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"sim-{md['namespace']}-{md['name']}"[:50] + f"-{digest}",
                     "labels": {"kubeforge.io/sim-volume": "true"},
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": pvc["spec"].get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": storage_class,
            "volumeMode": pvc["spec"].get("volumeMode") or "Filesystem",
            "hostPath": {"path": f"{root}/{md['namespace']}/{md['name']}", "type": "DirectoryOrCreate"},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": md["namespace"], "name": md["name"], "uid": md["uid"]},
        },
    }


class Provisioner:  # pragma: no cover - a long-running loop against a cluster
    """The watch loop and its workers (see the module docstring)."""

    def __init__(self, api: client.ApiClient, root: str, workers: int, latency: CreateLatency):
        self.v1 = client.CoreV1Api(api)
        self.storage = client.StorageV1Api(api)
        self.root = root
        self.latency = latency
        self.served: set[str] = set()
        self.lock = threading.Lock()
        self.modes: dict[str, str | None] = {}
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="provision")

    def binding_mode(self, name: str) -> str | None:
        """A StorageClass's ``volumeBindingMode``, read once per class (None if it is absent)."""
        if name not in self.modes:
            try:
                sc = json.loads(self.storage.read_storage_class(name, _preload_content=False).data)
                self.modes[name] = sc.get("volumeBindingMode") or "Immediate"
            except ApiException as e:
                if e.status != 404:
                    raise
                return None
        return self.modes[name]

    def serve(self, pvc: dict) -> None:
        """Hand a claim to a worker unless it is not ours or is already in hand."""
        uid = pvc["metadata"]["uid"]
        with self.lock:
            if uid in self.served or not should_provision(pvc, self.binding_mode):
                return
            if len(self.served) > 100_000:
                self.served.clear()
            self.served.add(uid)
        self.pool.submit(self.create, pvc)

    def create(self, pvc: dict) -> None:
        """One worker: wait out the volume's creation, then create its PV."""
        md = pvc["metadata"]
        time.sleep(self.latency.for_claim(md["uid"]))
        try:
            self.v1.create_persistent_volume(pv_for_claim(pvc, pvc["spec"].get("storageClassName") or "", self.root),
                                             _preload_content=False)
            log.info("provisioned %s/%s", md["namespace"], md["name"])
        except ApiException as e:
            if e.status != 409:
                log.warning("PV for %s/%s: %s", md["namespace"], md["name"], e.reason)
                with self.lock:
                    self.served.discard(md["uid"])  # try again on its next event
        except Exception as e:  # noqa: BLE001 - no answer (the API server restarting): try again
            # A connection refused or reset is a urllib3 error, not an ApiException. Left
            # uncaught, it died silently in the pool's future with the uid still served, so the
            # relist after the API server came back skipped the claim: Pending forever.
            log.warning("PV for %s/%s: %s; again in 2 s", md["namespace"], md["name"], e)
            with self.lock:
                self.served.discard(md["uid"])
            retry = threading.Timer(2.0, self.serve, (pvc,))  # the PV's name is the claim's: a repeat is a 409
            retry.daemon = True
            retry.start()

    def run(self) -> None:
        """List, then watch claims as raw JSON (resuming from the last resourceVersion,
        relisting only when the watch expires or fails); delete Released PVs on each list."""
        rv = None
        while True:
            try:
                if rv is None:
                    pvs = json.loads(self.v1.list_persistent_volume(label_selector="kubeforge.io/sim-volume=true",
                                                                    _preload_content=False).data)
                    for pv in pvs["items"]:
                        if (pv.get("status") or {}).get("phase") in ("Released", "Failed"):
                            self.v1.delete_persistent_volume(pv["metadata"]["name"], _preload_content=False)
                    self.modes.clear()
                    listing = json.loads(self.v1.list_persistent_volume_claim_for_all_namespaces(
                        _preload_content=False).data)
                    for item in listing["items"]:
                        self.serve(item)
                    rv = listing["metadata"]["resourceVersion"]
                rv = self._watch(rv)
            except ApiException as e:
                log.warning("provisioner loop: %s", e.reason)
                rv = None
                time.sleep(1)
            except Exception as e:  # noqa: BLE001 - keep serving: the API server may restart under us
                log.warning("provisioner loop: %s", e)
                rv = None
                time.sleep(1)

    def _watch(self, rv: str) -> str | None:
        """One watch of at most 300 s from ``rv``; returns where to resume (None: relist)."""
        resp = self.v1.list_persistent_volume_claim_for_all_namespaces(
            watch=True, resource_version=rv, timeout_seconds=300, allow_watch_bookmarks=True,
            _preload_content=False, _request_timeout=(10, 330))
        buf = b""
        try:
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":  # 410 Gone: the resourceVersion expired
                        return None
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self.serve(obj)
        finally:
            resp.release_conn()
        return rv


def main() -> None:  # pragma: no cover
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--storage-class", default="kubeforge-sim",
                   help="ignored (claims are served by their provisioner annotation); kept for old callers")
    p.add_argument("--root", default="/tmp/kubeforge-sim-volumes")
    p.add_argument("--worker-threads", type=int, default=WORKER_THREADS,
                   help="volumes created at once (external-provisioner's --worker-threads, default 100)")
    p.add_argument("--create-latency-median", type=float, default=CreateLatency.median,
                   help="median seconds to create a volume (AWS EBS: 1.5); 0: no latency")
    p.add_argument("--create-latency-p99", type=float, default=CreateLatency.p99,
                   help="99th percentile seconds to create a volume (AWS EBS: 4)")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    cfg = client.Configuration()
    config.load_kube_config(a.kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = 16
    latency = CreateLatency(median=a.create_latency_median, p99=a.create_latency_p99)
    log.info("serving claims of provisioner %s: %d workers, create latency median %.2fs p99 %.2fs",
             PROVISIONER, a.worker_threads, latency.median, latency.p99)
    Provisioner(client.ApiClient(cfg), a.root, a.worker_threads, latency).run()


if __name__ == "__main__":  # pragma: no cover
    main()
