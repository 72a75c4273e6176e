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
import time

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
    v1 = client.CoreV1Api()
    api = client.ApiClient()
    while True:
        try:
            for pv in v1.list_persistent_volume(label_selector="kubeforge.io/sim-volume=true").items:
                if pv.status.phase in ("Released", "Failed"):
                    v1.delete_persistent_volume(pv.metadata.name)
            for ev in watch.Watch().stream(v1.list_persistent_volume_claim_for_all_namespaces, timeout_seconds=30):
                pvc = api.sanitize_for_serialization(ev["object"])
                if ev["type"] == "DELETED":
                    continue
                spec = pvc.get("spec") or {}
                if spec.get("volumeName") or spec.get("storageClassName") != storage_class:
                    continue
                if pvc["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    v1.create_persistent_volume(pv_for_claim(pvc, storage_class, root))
                    log.info("bound %s/%s", pvc["metadata"]["namespace"], pvc["metadata"]["name"])
                except ApiException as e:
                    if e.status != 409:
                        log.warning("PV for %s/%s: %s", pvc["metadata"]["namespace"], pvc["metadata"]["name"], e.reason)
        except Exception as e:  # keep serving: the API server may restart under us
            log.warning("provisioner loop: %s", e)
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
