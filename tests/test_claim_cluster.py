"""The checkpoint claim off the critical path (issue 20), against the real control plane with
the operator running: a gang's pods exist (behind the volume gate, holding their GPUs) before
its claim binds and run once it does; an operator SIGKILLed between the create and the lift
still ends Running; a claim that never binds ends in VolumeNotBound with nothing held; a
WaitForFirstConsumer class is never gated.

The claims here are of a StorageClass whose provisioner nobody runs (``example.com/manual``),
so the test decides when a claim binds: it creates the PV pre-bound to the claim, as an
external provisioner would, and kube-controller-manager's PV controller binds the pair.
"""

from __future__ import annotations

import json
import signal
import threading

import pytest

from conftest import apply, condition, get_json, job_pods, job_status, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster

GATE = "kubeforge.io/checkpoint-claim"


@pytest.fixture
def storage_class(cluster, namespace):
    """A factory of StorageClasses private to this test (deleted afterwards, with the PVs it made)."""
    made: list[tuple[str, str]] = []

    def make(provisioner: str = "example.com/manual", mode: str = "Immediate") -> str:
        name = f"{namespace}-{mode.lower()[:9]}"
        apply(cluster, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                        "provisioner": provisioner, "volumeBindingMode": mode, "reclaimPolicy": "Delete"})
        made.append(("storageclass", name))
        return name

    make.made = made  # type: ignore[attr-defined]
    yield make
    for kind, name in reversed(made):
        cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)


def provision(cluster, namespace: str, claim: str, storage_class: str, made: list) -> None:
    """Do what an external provisioner does: a PV pre-bound to the claim (its uid in claimRef)."""
    pvc = get_json(cluster, "pvc", claim, "-n", namespace)
    name = f"pv-{namespace}-{claim}"[:63]
    apply(cluster, {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": pvc["spec"]["accessModes"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": storage_class,
                 "hostPath": {"path": f"/tmp/kubeforge-test-volumes/{name}", "type": "DirectoryOrCreate"},
                 "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace,
                              "name": claim, "uid": pvc["metadata"]["uid"]}},
    })
    made.append(("pv", name))


def claim_phase(cluster, namespace: str, claim: str) -> str | None:
    out = cluster.kubectl("get", "pvc", claim, "-n", namespace, "-o", "jsonpath={.status.phase}", check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def gated_pods(cluster, namespace: str, job: str, n: int) -> list[dict] | None:
    pods = job_pods(cluster, namespace, job)
    ok = len(pods) == n and all([g["name"] for g in p["spec"].get("schedulingGates") or []] == [GATE]
                                and not p["spec"].get("nodeName") for p in pods)
    return pods if ok else None


def pool_allocated(cluster, pool: str) -> int | None:
    return ((get_json(cluster, "gpupool", pool).get("status") or {}).get("gpus") or {}).get("allocated")


def test_gang_pods_exist_before_the_claim_binds_and_run_once_it_does(cluster, namespace, fleet, storage_class):
    fleet(cliques=1, nodes=2)
    sc = storage_class()
    apply(cluster, training_job("early", namespace, checkpoint={"storageClassName": sc}))
    wait_for(lambda: gated_pods(cluster, namespace, "early", 2), timeout=60, what="both pods created behind the gate")
    assert claim_phase(cluster, namespace, "early-checkpoint") == "Pending"
    st = job_status(cluster, namespace, "early")
    assert condition(st, "Admitted")["status"] == "True" and st.get("phase") == "Pending"
    wait_for(lambda: pool_allocated(cluster, namespace) == 16, timeout=30, what="the gang's GPUs held while it waits")
    provision(cluster, namespace, "early-checkpoint", sc, storage_class.made)
    wait_for(lambda: len(running_pods(cluster, namespace, "early")) == 2, timeout=60, what="running once the claim is Bound")
    assert all(not p["spec"].get("schedulingGates") for p in job_pods(cluster, namespace, "early"))
    wait_for(lambda: job_status(cluster, namespace, "early").get("phase") == "Running", timeout=30)


def test_operator_killed_between_create_and_lift_still_ends_running(cluster, namespace, fleet, storage_class):
    from kubeforge.demo import start_operator, stop_operator

    fleet(cliques=1, nodes=2)
    sc = storage_class()
    apply(cluster, training_job("crash", namespace, checkpoint={"storageClassName": sc}))
    wait_for(lambda: gated_pods(cluster, namespace, "crash", 2), timeout=60, what="both pods created behind the gate")
    stop_operator(cluster, sig=signal.SIGKILL)  # between the create and the lift
    try:
        provision(cluster, namespace, "crash-checkpoint", sc, storage_class.made)
        wait_for(lambda: claim_phase(cluster, namespace, "crash-checkpoint") == "Bound", timeout=60, what="claim Bound")
        assert gated_pods(cluster, namespace, "crash", 2), "nobody but the operator lifts the gate"
    finally:
        start_operator(cluster)
    wait_for(lambda: len(running_pods(cluster, namespace, "crash")) == 2, timeout=90,
             what="the restarted operator lifts the gate (gated pods + Bound claim)")
    st = wait_for(lambda: (s := job_status(cluster, namespace, "crash")).get("phase") == "Running" and s, timeout=30)
    assert st["restarts"] == {"failures": 0, "preemptions": 0, "startupFailures": 0}
    assert sorted(p["metadata"]["name"] for p in job_pods(cluster, namespace, "crash")) == \
        ["crash-worker-0-0", "crash-worker-1-0"]  # the same pods: nothing recreated


def test_claim_that_never_binds_ends_in_volume_not_bound_holding_nothing(cluster, namespace, fleet, storage_class):
    fleet(cliques=1, nodes=2)
    sc = storage_class()
    apply(cluster, training_job("never", namespace, startupTimeoutSeconds=15, checkpoint={"storageClassName": sc},
                                failurePolicy={"maxStartupRetries": 0}))
    wait_for(lambda: gated_pods(cluster, namespace, "never", 2), timeout=60, what="pods behind the gate")
    st = wait_for(lambda: (s := job_status(cluster, namespace, "never")).get("phase") == "Failed" and s,
                  timeout=90, what="the startup timeout")
    adm = condition(st, "Admitted")
    assert adm["reason"] == "VolumeNotBound" and "never-checkpoint is Pending" in adm["message"], adm
    assert condition(st, "Failed")["reason"] == "StartupRetryLimitExceeded"
    wait_for(lambda: not [p for p in job_pods(cluster, namespace, "never") if not p["metadata"].get("deletionTimestamp")],
             timeout=60, what="the gated pods deleted")
    wait_for(lambda: pool_allocated(cluster, namespace) == 0, timeout=30, what="no GPU held")


def test_wait_for_first_consumer_class_is_never_gated(cluster, namespace, fleet, storage_class, k8s):
    """Its claim binds only once kube-scheduler put a pod on a node (the sim provisioner waits
    for ``volume.kubernetes.io/selected-node``, as the external-provisioner does): a gate would
    deadlock it."""
    from kubernetes import client, watch

    fleet(cliques=1, nodes=2)
    sc = storage_class(provisioner="kubeforge.io/sim", mode="WaitForFirstConsumer")
    seen_gated: list[str] = []
    stop = threading.Event()

    def record() -> None:
        w = watch.Watch()
        for ev in w.stream(client.CoreV1Api(k8s).list_namespaced_pod, namespace, timeout_seconds=90):
            if ev["object"].spec.scheduling_gates:
                seen_gated.append(ev["object"].metadata.name)
            if stop.is_set():
                w.stop()

    t = threading.Thread(target=record, daemon=True)
    t.start()
    apply(cluster, training_job("wffc", namespace, checkpoint={"storageClassName": sc}))
    wait_for(lambda: len(running_pods(cluster, namespace, "wffc")) == 2, timeout=90, what="running with a WFFC claim")
    stop.set()
    assert claim_phase(cluster, namespace, "wffc-checkpoint") == "Bound"
    pvc = get_json(cluster, "pvc", "wffc-checkpoint", "-n", namespace)
    assert pvc["metadata"]["annotations"].get("volume.kubernetes.io/selected-node"), json.dumps(pvc["metadata"])
    assert seen_gated == [], f"pods created gated with a WaitForFirstConsumer class: {seen_gated}"
