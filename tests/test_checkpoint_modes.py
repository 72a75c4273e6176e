"""Checkpoint storage modes (issue 31, item 1), pure: the API's union, the pods each mode makes,
that a v0.1 job's pods and hash do not change, what admission and the lifecycle wait for in
each mode, the Secret check before the pods, and the refusals of hostile values.

Modes: ClaimPerJob (the default, 0.1's flat fields), SharedClaim (a directory per job in one
claim, the mount's subPath), ObjectStore (a URI in the env, credentials from a Secret, no
volume); localTier (an emptyDir or a generic ephemeral volume) in any of them.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json

import pytest
from pydantic import ValidationError

import builders
from kubeforge.admission import plan_admission
from kubeforge.api import Checkpoint, CheckpointMode, TrainingJobSpec
from kubeforge.builders.checkpoint import build_pvc, checkpoint_claim, checkpoint_env
from kubeforge.builders.training import build_worker_pod, spec_hash
from kubeforge.lifecycle import CreateError, claim_wait
from kubeforge.objects import (
    SECRET_NOT_FOUND, PlacementRecord, checkpoint_claim_name, checkpoint_path, checkpoint_uri, owns_checkpoint_claim,
    record_from_k8s,
)
from kubeforge.placement import TopologyLevel
from kubeforge.runtime.checkpoint_secrets import METADATA_ONLY, SecretCheck
from kubeforge.runtime.client import ApiError
from records import NOW, NS, mk_job, mk_node, mk_pool, snapshot
import training_builders as tb

SHARED = {"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx"}}
STORE = {"mode": "ObjectStore", "objectStore": {"uri": "s3://ckpt-bucket/runs", "secretName": "s3-creds"}}
PLACEMENT = PlacementRecord(pool="h100", nodes=("n0", "n1"), level="nvlink", domain="a", reason="fit")


def body(checkpoint=None, name="llm", ns="team-a", uid="u-1", containers=None, volumes=None):
    """A 2 x 8-GPU TrainingJob in pool ``h100`` (a trainer with env and a data mount, a sidecar),
    topology and priority left to their defaults, ``checkpoint`` its ``spec.checkpoint`` (None:
    none): the manifest with a uid and generation 1, as the operator reads it."""
    m = (builders.TrainingJob(name).ns(ns).without("topology", "priority").pools("h100").replicas(2).gpus(8)
         .template({"spec": {"containers": containers or [
             {"name": "trainer", "image": "pytorch:2", "env": [{"name": "A", "value": "1"}],
              "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
             {"name": "sidecar", "image": "s:1"}], "volumes": volumes or [{"name": "data", "emptyDir": {}}]}})
         .checkpoint(checkpoint).manifest())
    m["metadata"].update(uid=uid, generation=1)
    return m


def record(checkpoint=None, **kw):
    b = body(checkpoint, **kw)
    b["metadata"]["uid"] += hashlib.sha256(json.dumps(b["spec"], sort_keys=True).encode()).hexdigest()[:8]
    rec = record_from_k8s(TrainingJobSpec, b)
    assert rec.spec is not None, rec.spec_error
    return rec


def pod(rec, **kw):
    kw.setdefault("last_checkpoint", {"step": 5, "path": "/checkpoints/step-5"})
    return build_worker_pod(rec, rank=1, attempt=2, placement=PLACEMENT,
                            levels=(TopologyLevel("nvlink", "nvidia.com/gpu.clique"),), **kw)


def env(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def containers(p):
    return {c["name"]: c for c in p["spec"]["containers"]}


# ------------------------------------------------------------------------------- upgrades


V0_1_POD_SHA256 = "0875a477d8e9f3b4b06b530f408283c0719cfed3a5c628ac5e24326ad048a440"
"""sha256 of the canonical JSON of :func:`test_a_v0_1_job_gets_the_pods_v0_1_made`'s pod as the
builders of tag v0.1.0 (and of the tree before the modes) made it (same spec, rank, attempt,
placement and last checkpoint)."""


def test_a_v0_1_job_gets_the_pods_v0_1_made():
    # A job written for 0.1 (flat fields, no mode) is mode ClaimPerJob: its pods are byte for byte
    # those 0.1 made, so an upgrade changes nothing in a running gang (no new pod, no restart).
    rec = record_from_k8s(TrainingJobSpec, body(
        {"size": "100Gi", "accessModes": ["ReadWriteMany"], "mountPath": "/checkpoints"}))
    assert rec.spec.checkpoint.mode == CheckpointMode.CLAIM_PER_JOB
    got = hashlib.sha256(json.dumps(pod(rec), sort_keys=True).encode()).hexdigest()
    assert got == V0_1_POD_SHA256


def test_the_checkpoint_is_not_part_of_the_gangs_hash():
    # spec_hash leaves spec.checkpoint out: a new field with a default there restarts nothing at
    # upgrade, and a mode changed on a running job applies at its next start.
    base = body({"size": "100Gi"})
    hashes = set()
    for ck in ({"size": "100Gi"}, {"size": "100Gi", "mode": "ClaimPerJob"}, SHARED, STORE,
               {"localTier": {"sizeLimit": "100Gi"}}):
        b = copy.deepcopy(base)
        b["spec"]["checkpoint"] = ck
        hashes.add(spec_hash(record_from_k8s(TrainingJobSpec, {**b, "metadata": {**b["metadata"], "uid": ""}})))
    assert len(hashes) == 1


# ------------------------------------------------------------------------------- the API


@pytest.mark.parametrize("checkpoint, mode", [
    (None, "ClaimPerJob"),
    ({}, "ClaimPerJob"),
    ({"existingClaimName": "mine"}, "ClaimPerJob"),
    (SHARED, "SharedClaim"),
    ({**SHARED, "sharedClaim": {"claimName": "fsx", "subPathTemplate": "teams/{namespace}/jobs/{name}-{uid}"}},
     "SharedClaim"),
    (STORE, "ObjectStore"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "gs://b-1.x_y"}}, "ObjectStore"),
    ({**STORE, "localTier": {"sizeLimit": "200Gi", "mountPath": "/checkpoints"}}, "ObjectStore"),
    ({"localTier": {"sizeLimit": "200Gi", "storageClassName": "local-nvme"}}, "ClaimPerJob"),
])
def test_modes_parse(checkpoint, mode):
    assert record(checkpoint).spec.checkpoint.mode.value == mode


@pytest.mark.parametrize("checkpoint, words", [
    ({"mode": "SharedClaim"}, "sharedClaim is set exactly when"),
    ({"sharedClaim": {"claimName": "fsx"}}, "sharedClaim is set exactly when"),
    ({"mode": "ObjectStore"}, "objectStore is set exactly when"),
    ({**SHARED, "objectStore": STORE["objectStore"]}, "objectStore is set exactly when"),
    ({**SHARED, "existingClaimName": "mine"}, "existingClaimName belongs to mode ClaimPerJob"),
    ({"mode": "Lustre"}, "mode"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "http://bucket/x"}}, "uri"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "file:///etc"}}, "uri"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "S3://Bucket/x"}}, "uri"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "s3://"}}, "uri"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "s3://bkt", "secretKeys": [{"key": "k"}]}}, "needs"),
    ({"mode": "ObjectStore", "objectStore": {"uri": "s3://bkt", "pathTemplate": "../other"}}, "'..' segments"),
    ({"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx", "subPathTemplate": "a/../../etc"}}, "segments"),
    ({"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx", "subPathTemplate": "/abs/{name}"}}, "subPath"),
    ({"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx", "subPathTemplate": "{namespace}/{secret}"}}, "subPath"),
    ({"mode": "SharedClaim", "sharedClaim": {"claimName": "fsx", "subPathTemplate": "./x"}}, "segments"),
    ({"mode": "SharedClaim", "sharedClaim": {"claimName": "Not_A_Name"}}, "claimName"),
    ({"localTier": {"sizeLimit": "1Gi", "mountPath": "/checkpoints"}}, "must differ"),
    ({"localTier": {"sizeLimit": "1Gi", "mountPath": "scratch"}}, "absolute"),
    ({"localTier": {"sizeLimit": "lots"}}, "quantity"),
    ({"localTier": {}}, "sizeLimit"),
])
def test_hostile_values_are_refused(checkpoint, words):
    with pytest.raises(ValidationError) as e:
        Checkpoint.model_validate(checkpoint)
    assert words.lower() in str(e.value).lower()


# ------------------------------------------------------------------------------- the pods


def test_shared_claim_mounts_the_jobs_directory_and_creates_no_claim():
    rec = record(SHARED)
    p = pod(rec)
    assert {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "fsx"}} in p["spec"]["volumes"]
    for c in containers(p).values():
        assert {"name": "checkpoint", "mountPath": "/checkpoints", "subPath": "team-a/llm"} in c["volumeMounts"]
        assert env(c)["KUBEFORGE_CHECKPOINT_DIR"] == "/checkpoints"
        assert "KUBEFORGE_CHECKPOINT_URI" not in env(c)
    ck = rec.spec.checkpoint
    assert not owns_checkpoint_claim(ck) and checkpoint_claim(rec) == "fsx" == checkpoint_claim_name("llm", ck)


def test_shared_claim_template_variables():
    rec = record({**SHARED, "sharedClaim": {"claimName": "fsx", "subPathTemplate": "ckpt/{namespace}-{name}/{uid}"}})
    mount = next(m for m in pod(rec)["spec"]["containers"][0]["volumeMounts"] if m["name"] == "checkpoint")
    assert mount["subPath"] == f"ckpt/team-a-llm/{rec.uid}"
    assert checkpoint_path("{namespace}/{name}", "ns", "job", "u") == "ns/job"


def test_object_store_has_no_volume_and_hands_the_uri_and_the_secret_by_reference():
    rec = record({**STORE, "objectStore": {**STORE["objectStore"], "uri": "s3://ckpt-bucket/runs/"}})
    p = pod(rec, last_checkpoint={"step": 5, "path": "s3://ckpt-bucket/runs/team-a/llm/step-5"})
    assert [v["name"] for v in p["spec"]["volumes"]] == ["data"]
    for c in containers(p).values():
        e = env(c)
        assert e["KUBEFORGE_CHECKPOINT_URI"] == "s3://ckpt-bucket/runs/team-a/llm"
        assert "KUBEFORGE_CHECKPOINT_DIR" not in e
        assert e["KUBEFORGE_LAST_CHECKPOINT_PATH"] == "s3://ckpt-bucket/runs/team-a/llm/step-5"
        assert c["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
        assert not any(m["name"] == "checkpoint" for m in c.get("volumeMounts") or [])
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert checkpoint_claim(rec) is None and not owns_checkpoint_claim(rec.spec.checkpoint)
    assert checkpoint_uri("gs://b/", "x/y") == "gs://b/x/y"


def test_object_store_picks_secret_keys():
    store = {**STORE["objectStore"], "secretKeys": [{"key": "id", "env": "AWS_ACCESS_KEY_ID"}, {"key": "AWS_REGION"}]}
    c = containers(pod(record({**STORE, "objectStore": store})))["trainer"]
    assert "envFrom" not in c
    assert env(c)["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-creds", "key": "id"}}
    assert env(c)["AWS_REGION"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_REGION"}}
    assert env(c)["A"] == "1"  # the template's own variables stay


def test_object_store_without_a_secret_adds_no_credentials():
    c = containers(pod(record({"mode": "ObjectStore", "objectStore": {"uri": "gs://bkt"}})))["trainer"]
    assert "envFrom" not in c and env(c)["KUBEFORGE_CHECKPOINT_URI"] == "gs://bkt/team-a/llm"


def test_object_store_leaves_the_templates_own_checkpoint_volume_alone():
    vols = [{"name": "checkpoint", "emptyDir": {}}]
    cs = [{"name": "trainer", "image": "i", "volumeMounts": [{"name": "checkpoint", "mountPath": "/mine"}]}]
    p = pod(record(STORE, containers=cs, volumes=vols))
    assert p["spec"]["volumes"] == vols and p["spec"]["containers"][0]["volumeMounts"] == cs[0]["volumeMounts"]


@pytest.mark.parametrize("tier, source", [
    ({"sizeLimit": "200Gi"}, {"emptyDir": {"sizeLimit": "200Gi"}}),
    ({"sizeLimit": "200Gi", "storageClassName": "local-nvme", "mountPath": "/nvme"},
     {"ephemeral": {"volumeClaimTemplate": {
         "metadata": {"labels": {"app.kubernetes.io/managed-by": "kubeforge", "kubeforge.io/job-name": "llm"}},
         "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-nvme",
                  "resources": {"requests": {"storage": "200Gi"}}}}}}),
])
@pytest.mark.parametrize("durable", [{}, SHARED, STORE])
def test_local_tier(tier, source, durable):
    rec = record({**durable, "localTier": tier})
    p = pod(rec)
    path = tier.get("mountPath", "/local-checkpoints")
    assert {"name": "checkpoint-local", **source} in p["spec"]["volumes"]
    for c in containers(p).values():
        assert {"name": "checkpoint-local", "mountPath": path} in c["volumeMounts"]
        assert env(c)["KUBEFORGE_LOCAL_CHECKPOINT_DIR"] == path
        # the durable tier is still there, and still what the workload resumes from
        assert ("KUBEFORGE_CHECKPOINT_URI" in env(c)) == (durable is STORE)
        assert ("KUBEFORGE_CHECKPOINT_DIR" in env(c)) == (durable is not STORE)
    assert list(checkpoint_env(rec))[-1] == "KUBEFORGE_LOCAL_CHECKPOINT_DIR"


def test_only_a_claim_per_job_makes_a_claim():
    assert build_pvc(record({}))["metadata"]["name"] == "llm-checkpoint"
    for ck in ({"existingClaimName": "mine"}, SHARED, STORE):
        assert not owns_checkpoint_claim(record(ck).spec.checkpoint)


# ------------------------------------------------------------------------------- the decisions


@pytest.mark.parametrize("checkpoint", [SHARED, STORE, {**STORE, "localTier": {"sizeLimit": "1Gi",
                                                                               "storageClassName": "nvme"}}])
def test_no_claim_to_create_or_wait_for(checkpoint):
    j = tb.job(2, status=tb.admitted(2), checkpoint=checkpoint)
    assert claim_wait(j, None, "Immediate") is None
    p = tb.plan(j, [], tb.nodes(2), claim_wait=None)
    assert p.create_ranks == [0, 1] and not p.ensure_claim and not p.volume_gate


def test_a_claim_per_job_is_still_made_and_waited_for():
    j = tb.job(2, status=tb.admitted(2))
    assert claim_wait(j, None, "Immediate")
    assert tb.plan(j, [], tb.nodes(2), claim_wait="pending").ensure_claim


@pytest.mark.parametrize("checkpoint, claims, classes, reason, words", [
    (SHARED, {}, set(), "ClaimNotFound", "checkpoint.sharedClaim.claimName: PersistentVolumeClaim 'fsx'"),
    (SHARED, {("elsewhere", "fsx"): "Bound"}, set(), "ClaimNotFound", "does not exist in namespace"),
    (SHARED, {(NS, "fsx"): "Bound"}, set(), None, ""),
    (SHARED, {(NS, "fsx"): "Pending"}, set(), None, ""),   # exists: binding it is kube-scheduler's business
    (STORE, {}, set(), None, ""),                          # no claim at all
    ({**STORE, "localTier": {"sizeLimit": "1Gi", "storageClassName": "nvme"}}, {}, set(), "StorageClassNotFound",
     "checkpoint.localTier.storageClassName: StorageClass 'nvme'"),
    ({**STORE, "localTier": {"sizeLimit": "1Gi", "storageClassName": "nvme"}}, {}, {"nvme"}, None, ""),
    ({"storageClassName": "fast"}, {}, set(), "StorageClassNotFound", "checkpoint.storageClassName"),
])
def test_admission_waits_for_storage_that_cannot_work(checkpoint, claims, classes, reason, words):
    j = mk_job("j", checkpoint=checkpoint)
    plan = plan_admission(snapshot([mk_pool("p")], [mk_node("n0", 8)], jobs=[j], storage_classes=classes,
                                   claims=claims), NOW)
    if reason is None:
        assert plan.admit and not plan.wait
    else:
        assert not plan.admit and [w.reason for w in plan.wait] == [reason] and words in plan.wait[0].message


def test_a_missing_secret_is_a_startup_failure_that_names_it():
    st = tb.admitted(2)
    j = tb.job(2, status=st, checkpoint=STORE)
    err = CreateError(0, "Secret", "s3-creds", 404, 'secrets "s3-creds" not found')
    p = tb.plan(j, [], tb.nodes(2), create_error=err)
    adm = next(c for c in p.status["conditions"] if c["type"] == "Admitted")
    assert adm["status"] == "False" and adm["reason"] == SECRET_NOT_FOUND
    assert "checkpoint.objectStore.secretName: Secret 's3-creds' does not exist" in adm["message"]
    assert p.release and p.startup_failure == SECRET_NOT_FOUND
    assert any(e[1] == SECRET_NOT_FOUND for e in p.events)


# ------------------------------------------------------------------------------- the Secret check


class FakeClient:
    def __init__(self, codes):
        self.codes = list(codes)
        self.calls = []

    async def request(self, method, path, *args, **kw):
        self.calls.append((method, path, kw.get("accept")))
        code = self.codes.pop(0)
        if code != 200:
            raise ApiError(code, {404: "NotFound", 403: "Forbidden", 503: "ServiceUnavailable"}[code], "x")


def test_secret_check_asks_for_metadata_only_and_remembers_what_it_found():
    check, client = SecretCheck(), FakeClient([404, 200, 404])
    run = asyncio.run
    assert run(check.missing(client, "ns", "creds", 0.0)).code == 404
    assert run(check.missing(client, "ns", "creds", 1.0)) is None     # created meanwhile
    assert run(check.missing(client, "ns", "creds", 30.0)) is None    # believed, not asked
    assert run(check.missing(client, "ns", "creds", 61.0)).code == 404  # asked again: deleted
    assert client.calls == [("GET", "/api/v1/namespaces/ns/secrets/creds", METADATA_ONLY)] * 3


def test_secret_check_without_the_right_to_ask_lets_the_pods_be_made():
    check, client = SecretCheck(), FakeClient([403, 404])
    assert asyncio.run(check.missing(client, "ns", "creds", 0.0)) is None
    assert asyncio.run(check.missing(client, "ns", "other", 10.0)) is None  # not asked again for a while
    assert len(client.calls) == 1
    assert asyncio.run(check.missing(client, "ns", "other", 400.0)).code == 404


def test_secret_check_without_an_answer_raises_for_the_work_queue():
    with pytest.raises(ApiError):
        asyncio.run(SecretCheck().missing(FakeClient([503]), "ns", "creds", 0.0))
