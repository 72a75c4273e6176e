"""Checkpoint storage modes (issue 31, item 1) on the real control plane, with the operator
running: what each mode puts in the workers (volumes, mounts, environment) as the API server
stored it, that only a claim per job creates a claim, that the operator never deletes a shared
claim, that a missing shared claim or Secret is reported (and the job runs once it exists), and
that the CRD's rules refuse hostile values (the API server's own CEL and patterns).

The shared claim binds through the sim's default StorageClass (``kubeforge-sim``, its
provisioner started with the cluster). kwok runs no kubelet: the pods' volumes and variables are
checked as specified, not as mounted.
"""

from __future__ import annotations

import json

import pytest

from conftest import apply, condition, get_json, job_pods, job_status, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster

SECRET_VALUE = "do-not-copy-me-0123456789"


def shared_claim(cluster, namespace: str, name: str = "fsx") -> None:
    apply(cluster, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
                    "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})


def claims(cluster, namespace: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in get_json(cluster, "pvc", "-n", namespace)["items"])


def env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def running(cluster, namespace: str, job: str, n: int = 2) -> list[dict]:
    return wait_for(lambda: (p := running_pods(cluster, namespace, job)) and len(p) == n and p, timeout=90,
                    what=f"{n} running workers of {job}")


def reported(cluster, namespace: str, job: str, reason: str) -> dict:
    return wait_for(lambda: (c := condition(job_status(cluster, namespace, job), "Admitted"))
                    and c["status"] == "False" and c["reason"] == reason and c, timeout=45,
                    what=f"Admitted=False/{reason} on {job}")


def test_shared_claim_gives_each_job_its_directory_and_creates_no_claim(cluster, namespace, fleet):
    fleet(cliques=1, nodes=4)
    shared_claim(cluster, namespace)
    ck = {"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx"}, "localTier": {"sizeLimit": "50Gi"}}
    for name in ("a", "b"):
        apply(cluster, training_job(name, namespace, checkpoint=ck))
    for name in ("a", "b"):
        for p in running(cluster, namespace, name):
            vols = {v["name"]: v for v in p["spec"]["volumes"]}
            assert vols["checkpoint"]["persistentVolumeClaim"] == {"claimName": "fsx"}
            assert vols["checkpoint-local"]["emptyDir"] == {"sizeLimit": "50Gi"}
            c = p["spec"]["containers"][0]
            mounts = {m["name"]: m for m in c["volumeMounts"]}
            assert mounts["checkpoint"]["subPath"] == f"{namespace}/{name}"
            assert mounts["checkpoint"]["mountPath"] == "/checkpoints"
            assert env(c)["KUBEFORGE_CHECKPOINT_DIR"] == "/checkpoints"
            assert env(c)["KUBEFORGE_LOCAL_CHECKPOINT_DIR"] == "/local-checkpoints"
    assert claims(cluster, namespace) == ["fsx"]  # zero claims per job
    stored = get_json(cluster, "trainingjob", "a", "-n", namespace)["spec"]["checkpoint"]
    assert stored["mode"] == "SharedClaim" and stored["sharedClaim"]["subPathTemplate"] == "{namespace}/{name}"
    cluster.kubectl("delete", "trainingjob", "a", "b", "-n", namespace, "--wait=true", "--timeout=60s")
    assert claims(cluster, namespace) == ["fsx"]  # the user's claim is never deleted


def test_a_missing_shared_claim_is_reported_and_the_job_runs_once_it_exists(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("w", namespace, checkpoint={"mode": "SharedClaim", "sharedClaim": {"claimName": "later"}}))
    c = reported(cluster, namespace, "w", "ClaimNotFound")
    assert "checkpoint.sharedClaim.claimName: PersistentVolumeClaim 'later' does not exist" in c["message"]
    assert job_pods(cluster, namespace, "w") == []  # nothing held while it waits
    shared_claim(cluster, namespace, "later")
    running(cluster, namespace, "w")


def test_object_store_passes_the_uri_and_the_secret_by_reference_with_no_volume(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds", "namespace": namespace},
                    "stringData": {"AWS_ACCESS_KEY_ID": "AKIA" + SECRET_VALUE, "AWS_SECRET_ACCESS_KEY": SECRET_VALUE}})
    ck = {"mode": "ObjectStore", "objectStore": {"uri": "s3://ckpt-bucket/runs", "secretName": "s3-creds",
                                                 "secretKeys": [{"key": "AWS_SECRET_ACCESS_KEY"}]},
          "localTier": {"sizeLimit": "100Gi", "mountPath": "/checkpoints"}}
    apply(cluster, training_job("obj", namespace, checkpoint=ck))
    for p in running(cluster, namespace, "obj"):
        assert [v["name"] for v in p["spec"].get("volumes") or [] if v["name"].startswith("checkpoint")] == \
            ["checkpoint-local"]
        c = p["spec"]["containers"][0]
        e = env(c)
        assert e["KUBEFORGE_CHECKPOINT_URI"] == f"s3://ckpt-bucket/runs/{namespace}/obj"
        assert "KUBEFORGE_CHECKPOINT_DIR" not in e and e["KUBEFORGE_LOCAL_CHECKPOINT_DIR"] == "/checkpoints"
        assert e["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}}
        assert "envFrom" not in c
    assert claims(cluster, namespace) == []
    seen = json.dumps(get_json(cluster, "trainingjob", "obj", "-n", namespace)) + json.dumps(
        get_json(cluster, "events", "-n", namespace)) + (cluster.dir / "operator.log").read_text(errors="replace")
    assert SECRET_VALUE not in seen  # never copied into status, Events or the log


def test_a_missing_secret_is_reported_and_the_job_runs_once_it_exists(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    ck = {"mode": "ObjectStore", "objectStore": {"uri": "gs://ckpt-bucket", "secretName": "gcs-creds"}}
    apply(cluster, training_job("s", namespace, checkpoint=ck,
                                failurePolicy={"backoffSeconds": 2, "maxBackoffSeconds": 4, "maxStartupRetries": 20}))
    c = reported(cluster, namespace, "s", "SecretNotFound")
    assert "checkpoint.objectStore.secretName: Secret 'gcs-creds' does not exist" in c["message"]
    assert job_pods(cluster, namespace, "s") == []  # no pod that would wait in CreateContainerConfigError
    pool = get_json(cluster, "gpupool", namespace)
    wait_for(lambda: ((get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus") or {})
             .get("allocated") == 0, timeout=30, what=f"GPUs released (pool status {pool.get('status')})")
    apply(cluster, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gcs-creds", "namespace": namespace},
                    "stringData": {"GOOGLE_APPLICATION_CREDENTIALS_JSON": "{}"}})
    p = running(cluster, namespace, "s")
    assert p[0]["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "gcs-creds"}}]


@pytest.mark.parametrize("checkpoint, words", [
    ({"mode": "SharedClaim"}, "checkpoint.sharedClaim is set exactly when checkpoint.mode is SharedClaim"),
    ({"objectStore": {"uri": "s3://bucket"}}, "checkpoint.objectStore is set exactly when checkpoint.mode is ObjectStore"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "ftp://bucket/x"}}, "spec.checkpoint.objectStore.uri"),
    ({"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx", "subPathTemplate": "{namespace}/../x"}},
     "must not contain '.' or '..' segments"),
    ({"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx"}, "existingClaimName": "x"},
     "existingClaimName belongs to mode ClaimPerJob"),
    ({"localTier": {"sizeLimit": "1Gi", "mountPath": "/checkpoints"}}, "localTier.mountPath must differ"),
])
def test_the_api_server_refuses_hostile_checkpoints(cluster, namespace, checkpoint, words):
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", check=False,
                          input=json.dumps(training_job("bad", namespace, checkpoint=checkpoint)))
    assert out.returncode != 0 and words in out.stderr, out.stderr
