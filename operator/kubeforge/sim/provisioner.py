"""A tiny PersistentVolume provisioner for the local cluster (sim only, never in production).

kwok simulates nodes, not storage: there is no CSI driver, so a PVC would stay Pending and
kube-scheduler would refuse every pod that mounts it. For each PVC of our StorageClass that
has no volume yet, this creates a hostPath PV pre-bound to it (``claimRef``); the PV
controller in kube-controller-manager then binds the pair. Released PVs are deleted, which
is what ``reclaimPolicy: Delete`` asks of a provisioner.

Run as ``python -m kubeforge.sim.provisioner --kubeconfig PATH``; ``kubeforge sim up`` starts it.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

log = logging.getLogger("kubeforge.sim.provisioner")


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
                     "annotations": {"pv.kubernetes.io/provisioned-by": "kubeforge.io/sim"}},
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


def run(storage_class: str, root: str) -> None:  # pragma: no cover - a long-running loop
    """List, then watch PVCs (resuming from the last resourceVersion, relisting only when the
    watch expires), and make one PV per claim of ``storage_class`` that has no volume. Claims
    already served are remembered by uid, so a relist does not try them again."""
    v1 = client.CoreV1Api()
    api = client.ApiClient()
    served: set[str] = set()
    pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="provision")  # a burst of claims in parallel
    rv = None

    def create(pvc: dict) -> None:
        md = pvc["metadata"]
        try:
            v1.create_persistent_volume(pv_for_claim(pvc, storage_class, root))
            log.info("bound %s/%s", md["namespace"], md["name"])
        except ApiException as e:
            if e.status != 409:
                log.warning("PV for %s/%s: %s", md["namespace"], md["name"], e.reason)
                served.discard(md["uid"])  # try again on its next event
        except Exception as e:  # noqa: BLE001 - no answer (the API server restarting): try again
            # A connection refused or reset is a urllib3 error, not an ApiException. Left
            # uncaught, it died silently in the pool's future with the uid still in `served`,
            # so the relist after the API server came back skipped the claim: Pending forever.
            log.warning("PV for %s/%s: %s; again in 2 s", md["namespace"], md["name"], e)
            served.discard(md["uid"])
            retry = threading.Timer(2.0, serve, (pvc,))  # the PV's name is the claim's: a repeat is a 409
            retry.daemon = True
            retry.start()

    def serve(pvc: dict) -> None:
        md = pvc["metadata"]
        spec = pvc.get("spec") or {}
        if md["uid"] in served or spec.get("volumeName") or spec.get("storageClassName") != storage_class:
            return
        if md.get("deletionTimestamp"):
            return
        if len(served) > 100_000:
            served.clear()
        served.add(md["uid"])
        pool.submit(create, pvc)

    while True:
        try:
            if rv is None:
                for pv in v1.list_persistent_volume(label_selector="kubeforge.io/sim-volume=true").items:
                    if pv.status.phase in ("Released", "Failed"):
                        v1.delete_persistent_volume(pv.metadata.name)
                listing = v1.list_persistent_volume_claim_for_all_namespaces()
                for item in listing.items:
                    serve(api.sanitize_for_serialization(item))
                rv = listing.metadata.resource_version
            for ev in watch.Watch().stream(v1.list_persistent_volume_claim_for_all_namespaces, resource_version=rv,
                                           timeout_seconds=300, allow_watch_bookmarks=True):
                obj = api.sanitize_for_serialization(ev["object"])  # a BOOKMARK comes as a plain dict
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if ev["type"] in ("ADDED", "MODIFIED"):
                    serve(obj)
        except ApiException as e:
            if e.status == 410:  # the resourceVersion expired: list again
                rv = None
                continue
            log.warning("provisioner loop: %s", e.reason)
            rv = None
            time.sleep(1)
        except Exception as e:  # keep serving: the API server may restart under us
            log.warning("provisioner loop: %s", e)
            rv = None
            time.sleep(1)


def main() -> None:  # pragma: no cover
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--storage-class", default="kubeforge-sim")
    p.add_argument("--root", default="/tmp/kubeforge-sim-volumes")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config.load_kube_config(a.kubeconfig)
    run(a.storage_class, a.root)


if __name__ == "__main__":  # pragma: no cover
    main()
