"""Tests of the pure manifest builders (kubeforge.builders.training, .serving, .common).

Records are built from dicts the way the operator builds them (``record_from_k8s``: the spec
parsed once, the API defaults applied there).
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from kubeforge.api import TrainingJobSpec
from kubeforge.builders.common import owner_reference
from kubeforge.objects import condition, conditions_equal, parse_time, rfc3339, set_condition
from kubeforge.builders.serving import (
    build_endpoint_slice, build_group_pod, build_service, serving_hash,
)
from kubeforge.builders.training import (
    MASTER_PORT, build_pvc, build_worker_pod, build_workers_service, checkpoint_claim,
)
from kubeforge.objects import (
    ASSIGNED_NODE, GROUP_INDEX, JOB_NAME, WORKER_INDEX, GroupRecord, MANAGED_BY, POOL_LABEL, REPLICA_INDEX, RESTART_ATTEMPT, ROLE_LABEL,
    SERVICE_NAME, TEMPLATE_HASH, WORKERS_SERVICE, PlacementRecord, group_hostname, leader_address, master_address,
    pod_from_k8s, pvc_name, record_from_k8s, slice_name, worker_hostname, worker_pod_name,
)
from kubeforge.placement import TopologyLevel

import builders

NAME, NS = "llm", "team-a"
NODES = ("n0", "n1", "n2", "n3")
CLIQUE = "nvidia.com/gpu.clique"
LEVELS = (TopologyLevel("nvlink", CLIQUE), TopologyLevel("block", "cloud.google.com/gce-topology-block"))
PLACEMENT = PlacementRecord(pool="h100", nodes=NODES, level="nvlink", domain="nvl-a", reason="best fit")


def get_condition(conditions, type_):
    """The condition of ``type_`` in a conditions list (kubeforge.objects.condition reads a status)."""
    return condition({"conditions": conditions}, type_)


def _with_images(containers):
    return [{"image": "img:1", **c} for c in containers]


def job_body(replicas=4, gpus=8, containers=None, checkpoint=None, template_extra=None, **spec_overrides):
    ck = {"size": "10Gi", "accessModes": ["ReadWriteMany"], "mountPath": "/checkpoints", "deletionPolicy": "Retain"}
    ck.update(checkpoint or {})
    tspec = {"containers": _with_images(containers) if containers is not None else
             [{"name": "trainer", "image": "pytorch:2", "env": [{"name": "USER_VAR", "value": "1"}]}]}
    tspec.update(template_extra or {})
    return (builders.TrainingJob(NAME).ns(NS).uid(None).resource_version(None).pools("h100").replicas(replicas)
            .gpus(gpus).topology("Required", "nvlink").checkpoint(ck)
            .spec(failurePolicy={"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600,
                                 "preemptionsBeforeFallback": 2}, suspend=False)
            .template({"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}, "spec": tspec})
            .spec(**spec_overrides).body())


def record(body):
    """The record of ``body``; a distinct uid per distinct spec (specs are parsed once per uid
    and generation)."""
    body = copy.deepcopy(body)
    body["metadata"].setdefault("uid", "uid-" + hashlib.sha256(json.dumps(body["spec"], sort_keys=True).encode()).hexdigest()[:10])
    return record_from_k8s(TrainingJobSpec, body)


def job(*args, **kw):
    rec = record(job_body(*args, **kw))
    assert rec.spec is not None, rec.spec_error
    return rec


def worker(rec=None, rank=1, attempt=0, **kw):
    kw.setdefault("placement", PLACEMENT)
    kw.setdefault("levels", LEVELS)
    return build_worker_pod(rec or job(), rank=rank, attempt=attempt, **kw)


def container(pod_, name):
    return next(c for c in pod_["spec"]["containers"] if c["name"] == name)


def env_of(c):
    return {e["name"]: e.get("value") for e in c.get("env") or []}


def owner(rec, kind="TrainingJob", name=NAME):
    return {"apiVersion": "kubeforge.io/v1alpha1", "kind": kind, "name": name, "uid": rec.uid,
            "controller": True, "blockOwnerDeletion": True}


def pin(node, domain="nvl-a"):
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    if domain:
        term["matchExpressions"] = [{"key": CLIQUE, "operator": "In", "values": [domain]}]
    return term


# --------------------------------------------------------------------------- names


def test_names():
    assert WORKERS_SERVICE == "kubeforge-workers"  # one headless Service per namespace (was one per job)
    assert pvc_name(NAME) == "llm-checkpoint"
    assert worker_hostname(NAME, 3) == "llm-worker-3"
    assert worker_pod_name(NAME, 3, 2) == "llm-worker-3-2"
    assert master_address(NAME, NS) == "llm-worker-0.kubeforge-workers.team-a.svc"


# --------------------------------------------------------------------------- worker pod: GPUs


@pytest.mark.parametrize(
    "containers, gpu_container",
    [
        ([{"name": "trainer"}], "trainer"),
        ([{"name": "sidecar"}, {"name": "trainer"}], "trainer"),
        ([{"name": "log"}, {"name": "pytorch"}], "pytorch"),
        ([{"name": "main"}, {"name": "sidecar"}], "main"),
    ],
)
def test_gpu_request_and_limit_on_trainer_or_first_container(containers, gpu_container):
    p = worker(job(gpus=4, containers=containers), gpu_resource="nvidia.com/gpu")
    for c in p["spec"]["containers"]:
        res = c.get("resources") or {}
        if c["name"] == gpu_container:
            assert res["limits"]["nvidia.com/gpu"] == "4"
            assert res["requests"]["nvidia.com/gpu"] == "4"
        else:
            assert "nvidia.com/gpu" not in (res.get("limits") or {})
            assert "nvidia.com/gpu" not in (res.get("requests") or {})
    # what the ledger will read back from the pod: the gang's GPUs, once
    assert pod_from_k8s(p).requests == {"nvidia.com/gpu": 4}


def test_gpu_resource_name_and_user_resources_kept():
    containers = [{"name": "trainer", "resources": {"limits": {"memory": "100Gi", "nvidia.com/gpu": "1"},
                                                    "requests": {"cpu": "8"}}}]
    p = worker(job(gpus=8, containers=containers), gpu_resource="amd.com/gpu")
    res = container(p, "trainer")["resources"]
    assert res["limits"] == {"memory": "100Gi", "nvidia.com/gpu": "1", "amd.com/gpu": "8"}
    assert res["requests"] == {"cpu": "8", "amd.com/gpu": "8"}


def test_template_without_containers_is_refused_by_the_model():
    # Rule changed on purpose: the builder used to add a default "trainer" container; the API
    # now refuses such a template up front (before any GPUs are reserved for it).
    rec = record(job_body(containers=[]))
    assert rec.spec is None and "containers" in rec.spec_error
    no_image = record(job_body(containers=[{"name": "trainer", "image": ""}]))
    assert no_image.spec is None and "image" in no_image.spec_error


# --------------------------------------------------------------------------- worker pod: env


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_torchrun_env(rank):
    p = worker(job(replicas=4, gpus=8), rank=rank, attempt=2)
    env = env_of(container(p, "trainer"))
    master = f"{NAME}-worker-0.kubeforge-workers.{NS}.svc"
    assert env["PET_NNODES"] == "4"
    assert env["PET_NPROC_PER_NODE"] == "8"
    assert env["PET_NODE_RANK"] == str(rank)
    assert env["PET_MASTER_ADDR"] == master
    assert env["PET_MASTER_PORT"] == str(MASTER_PORT) == "29500"
    assert env["WORLD_SIZE"] == "4"
    assert env["RANK"] == str(rank)
    assert env["MASTER_ADDR"] == master
    assert env["MASTER_PORT"] == "29500"
    assert env["KUBEFORGE_CHECKPOINT_DIR"] == "/checkpoints"
    assert env["KUBEFORGE_RESTART_ATTEMPT"] == "2"
    assert "KUBEFORGE_LAST_CHECKPOINT_PATH" not in env


def test_user_env_kept_and_operator_values_win():
    containers = [{"name": "trainer", "env": [{"name": "USER_VAR", "value": "1"}, {"name": "RANK", "value": "99"},
                                              {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
                  {"name": "sidecar", "env": [{"name": "SIDE", "value": "y"}]}]
    p = worker(job(containers=containers), rank=2)
    trainer = container(p, "trainer")
    env = env_of(trainer)
    assert env["USER_VAR"] == "1" and env["RANK"] == "2"
    assert [e for e in trainer["env"] if e["name"] == "SECRET"][0]["valueFrom"]["secretKeyRef"]["name"] == "s"
    assert sum(1 for e in trainer["env"] if e["name"] == "RANK") == 1
    side = env_of(container(p, "sidecar"))
    assert side["SIDE"] == "y" and side["RANK"] == "2"


def test_last_checkpoint_env():
    p = worker(last_checkpoint={"step": 1200, "path": "/checkpoints/step-1200"})
    env = env_of(container(p, "trainer"))
    assert env["KUBEFORGE_LAST_CHECKPOINT_PATH"] == "/checkpoints/step-1200"
    assert env["KUBEFORGE_LAST_CHECKPOINT_STEP"] == "1200"
    env = env_of(container(worker(last_checkpoint={"step": 0, "path": ""}), "trainer"))
    assert env["KUBEFORGE_LAST_CHECKPOINT_STEP"] == "0" and "KUBEFORGE_LAST_CHECKPOINT_PATH" not in env


# --------------------------------------------------------------------------- worker pod: checkpoint volume


@pytest.mark.parametrize(
    "checkpoint, claim, mount",
    [
        ({}, "llm-checkpoint", "/checkpoints"),
        ({"mountPath": "/ckpt"}, "llm-checkpoint", "/ckpt"),
        ({"existingClaimName": "shared-fs"}, "shared-fs", "/checkpoints"),
    ],
)
def test_checkpoint_volume_and_mount(checkpoint, claim, mount):
    extra = {"volumes": [{"name": "data", "emptyDir": {}}, {"name": "checkpoint", "emptyDir": {}}]}
    containers = [{"name": "trainer", "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                                       {"name": "checkpoint", "mountPath": "/old"}]}]
    rec = job(containers=containers, checkpoint=checkpoint, template_extra=extra)
    p = worker(rec)
    vols = {v["name"]: v for v in p["spec"]["volumes"]}
    assert vols["checkpoint"] == {"name": "checkpoint", "persistentVolumeClaim": {"claimName": claim}}
    assert "data" in vols and len(p["spec"]["volumes"]) == 2
    mounts = container(p, "trainer")["volumeMounts"]
    assert {"name": "data", "mountPath": "/data"} in mounts
    assert [m for m in mounts if m["name"] == "checkpoint"] == [{"name": "checkpoint", "mountPath": mount}]
    assert env_of(container(p, "trainer"))["KUBEFORGE_CHECKPOINT_DIR"] == mount
    assert checkpoint_claim(rec) == claim


# --------------------------------------------------------------------------- worker pod: spec, metadata


def test_no_scheduling_gate():
    # Rule changed on purpose: workers are created already placed and ungated (the 0.1 gang
    # gate kubeforge.io/gang is gone); admission reserved their GPUs before they exist.
    for rank in range(4):
        p = worker(rank=rank)
        assert "schedulingGates" not in p["spec"]
        assert not pod_from_k8s(p).gated


def test_pod_spec_basics():
    rec = job()
    p = worker(rec, rank=2, attempt=1)
    s = p["spec"]
    assert s["restartPolicy"] == "Never"
    assert s["hostname"] == "llm-worker-2"
    assert s["subdomain"] == WORKERS_SERVICE
    assert s["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [pin("n2")]}}}
    assert p["metadata"]["name"] == "llm-worker-2-1"
    assert p["metadata"]["namespace"] == NS
    assert p["metadata"]["ownerReferences"] == [owner(rec)]
    assert p["metadata"]["annotations"] == {"note": "x", ASSIGNED_NODE: "n2"}
    for c in s["containers"]:
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_restart_policy_overrides_template():
    p = worker(job(template_extra={"restartPolicy": "OnFailure"}))
    assert p["spec"]["restartPolicy"] == "Never"


def test_labels():
    p = worker(rank=3, attempt=5, placement=PlacementRecord("h100-spot", NODES, "nvlink", "nvl-a"))
    labels = p["metadata"]["labels"]
    assert labels["team"] == "a"
    assert labels[JOB_NAME] == NAME
    assert labels[REPLICA_INDEX] == "3"
    assert labels[RESTART_ATTEMPT] == "5"
    assert labels[POOL_LABEL] == "h100-spot"  # always the placement's pool now (there is always one)
    assert labels[MANAGED_BY] == "kubeforge"
    assert labels[ROLE_LABEL] == "worker"
    v = pod_from_k8s(p)  # the index reads back what the builder wrote
    assert (v.job, v.rank, v.attempt, v.pool, v.assigned) == (NAME, 3, 5, "h100-spot", "n3")


@pytest.mark.parametrize(
    "template_tolerations, pool_tolerations",
    [
        ([], []),
        ([], [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        ([{"key": "team", "operator": "Equal", "value": "a"}],
         [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "spot", "operator": "Exists"}]),
    ],
)
def test_pool_tolerations_appended(template_tolerations, pool_tolerations):
    p = worker(job(template_extra={"tolerations": template_tolerations}), tolerations=pool_tolerations)
    assert p["spec"]["tolerations"] == template_tolerations + pool_tolerations


def test_job_record_not_mutated_and_pods_independent():
    rec = job(template_extra={"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "tolerations": [{"key": "t", "operator": "Exists"}]})
    snapshot = rec.spec.model_dump(mode="json")
    a = worker(rec, rank=0, tolerations=[{"key": "pool", "operator": "Exists"}])
    b = worker(rec, rank=1)
    assert rec.spec.model_dump(mode="json") == snapshot
    a["spec"]["containers"][0]["env"].append({"name": "X", "value": "y"})
    a["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"].append({"key": "k", "operator": "Exists"})
    assert "X" not in env_of(b["spec"]["containers"][0])
    assert rec.spec.model_dump(mode="json") == snapshot
    assert b["spec"]["tolerations"] == [{"key": "t", "operator": "Exists"}]


def test_rank_outside_the_placement_is_refused():
    with pytest.raises(IndexError):
        worker(rank=4)


# --------------------------------------------------------------------------- worker pod: node affinity


def test_pin_is_anded_into_every_template_term_and_preferences_are_kept():
    preferred = [{"weight": 1, "preference": {"matchExpressions": [{"key": "fast", "operator": "Exists"}]}}]
    template_affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}]},
            ]},
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    p = worker(job(template_extra={"affinity": template_affinity}), rank=1)
    aff = p["spec"]["affinity"]
    assert aff["podAntiAffinity"] == template_affinity["podAntiAffinity"]
    assert aff["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    terms = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    name_pin = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    domain = {"key": CLIQUE, "operator": "In", "values": ["nvl-a"]}
    assert terms == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, domain], "matchFields": [name_pin]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}, name_pin],
         "matchExpressions": [domain]},
    ]
    # terms are ORed: every one of them carries the pin, so whichever matches, it is the node
    assert all(name_pin in t["matchFields"] and domain in t["matchExpressions"] for t in terms)


@pytest.mark.parametrize(
    "placement, levels, expected",
    [
        (PLACEMENT, LEVELS, pin("n1")),
        (PlacementRecord("h100", NODES, "block", "b0"), LEVELS,
         {"matchFields": pin("n1")["matchFields"],
          "matchExpressions": [{"key": "cloud.google.com/gce-topology-block", "operator": "In", "values": ["b0"]}]}),
        (PLACEMENT, (), pin("n1", domain=None)),                        # a pool edit dropped the level: pin only
        (PlacementRecord("h100", NODES, None, None), LEVELS, pin("n1", domain=None)),  # placed pool-wide
    ],
)
def test_pin_by_node_name_and_domain_label(placement, levels, expected):
    p = worker(rank=1, placement=placement, levels=levels)
    assert p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [expected]}


# --------------------------------------------------------------------------- workers Service, PVC


def test_workers_service_is_headless_per_namespace_and_selects_every_worker():
    s = build_workers_service(NS)
    assert s["kind"] == "Service" and s["apiVersion"] == "v1"
    assert s["metadata"]["name"] == WORKERS_SERVICE and s["metadata"]["namespace"] == NS
    assert s["metadata"]["labels"] == {MANAGED_BY: "kubeforge"}
    # It serves every job of the namespace: no single job owns it (rule changed: was one owned Service per job).
    assert "ownerReferences" not in s["metadata"]
    assert s["spec"]["clusterIP"] == "None"
    assert s["spec"]["publishNotReadyAddresses"] is True
    assert s["spec"]["selector"] == {MANAGED_BY: "kubeforge", ROLE_LABEL: "worker"}
    assert s["spec"]["ports"] == [{"name": "rendezvous", "port": 29500, "targetPort": 29500}]
    # every worker of every job matches the selector; serving replicas do not
    for rec in (job(), record(job_body(replicas=2) | {"metadata": {"name": "other", "namespace": NS, "generation": 1}})):
        labels = worker(rec, rank=1)["metadata"]["labels"]
        assert s["spec"]["selector"].items() <= labels.items()
    # a one-pod serving replica does not; a multi-node group's pods do (LWS_LEADER_ADDRESS resolves through it)
    one = GroupRecord(index=0, pool="h100", nodes=("n0",), gpus_per_pod=2)
    assert not s["spec"]["selector"].items() <= group_pod(svc_record(), 0, group=one, pods=1)["metadata"]["labels"].items()
    multi = svc_record(gpus=None, parallelism={"tensor": 8, "pipeline": 2})
    assert s["spec"]["selector"].items() <= group_pod(multi, 1)["metadata"]["labels"].items()


@pytest.mark.parametrize("policy, owned", [("Retain", False), ("Delete", True), (None, False)])
def test_pvc_owner_reference_only_for_delete(policy, owned):
    body = job_body(checkpoint={"size": "50Gi", "accessModes": ["ReadWriteOnce"], "storageClassName": "fast"})
    if policy is None:
        body["spec"]["checkpoint"].pop("deletionPolicy")  # the default is Retain
    else:
        body["spec"]["checkpoint"]["deletionPolicy"] = policy
    rec = record(body)
    pvc = build_pvc(rec)
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert pvc["metadata"]["name"] == "llm-checkpoint" and pvc["metadata"]["namespace"] == NS
    assert pvc["metadata"]["labels"] == {MANAGED_BY: "kubeforge", JOB_NAME: NAME}
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert pvc["spec"]["storageClassName"] == "fast"
    if owned:
        assert pvc["metadata"]["ownerReferences"] == [owner(rec)]
    else:
        assert "ownerReferences" not in pvc["metadata"]


def test_pvc_defaults():
    body = job_body()
    body["spec"]["checkpoint"] = {}
    pvc = build_pvc(record(body))
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in pvc["spec"]
    assert "ownerReferences" not in pvc["metadata"]


# --------------------------------------------------------------------------- common


def test_owner_reference():
    assert owner_reference("TrainingJob", NAME, "u-1") == {
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "TrainingJob", "name": NAME, "uid": "u-1",
        "controller": True, "blockOwnerDeletion": True}
    ref = owner_reference("InferenceService", "chat", "u-2", controller=False)
    assert ref["apiVersion"] == "kubeforge.io/v1alpha1" and ref["kind"] == "InferenceService"
    assert ref["controller"] is False and ref["blockOwnerDeletion"] is True


@pytest.mark.parametrize(
    "ts, text",
    [(0, "1970-01-01T00:00:00Z"), (1_800_000_000, "2027-01-15T08:00:00Z"), (1_700_000_000.9, "2023-11-14T22:13:20Z")],
)
def test_rfc3339_and_parse_time(ts, text):
    assert rfc3339(ts) == text
    assert parse_time(text) == float(int(ts))


@pytest.mark.parametrize("value", [None, ""])
def test_parse_time_empty(value):
    assert parse_time(value) is None


def test_parse_time_offsets_and_fractions():
    assert parse_time("2027-01-15T09:00:00+01:00") == 1_800_000_000
    assert parse_time("2027-01-15T08:00:00.500000Z") == 1_800_000_000.5


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    "old_status, new_status, expect_time",
    [
        (None, True, NOW),        # new condition
        ("True", True, 100.0),    # unchanged: time kept
        ("False", False, 100.0),
        ("False", True, NOW),     # changed: time moves
        ("True", "False", NOW),
        ("Unknown", "Unknown", 100.0),
    ],
)
def test_set_condition_transition_time(old_status, new_status, expect_time):
    conds = [{"type": "Other", "status": "True", "reason": "R", "message": "", "lastTransitionTime": rfc3339(50)}]
    if old_status is not None:
        conds.append({"type": "Ready", "status": old_status, "reason": "Old", "message": "old",
                      "lastTransitionTime": rfc3339(100), "observedGeneration": 1})
    snapshot = copy.deepcopy(conds)
    out = set_condition(conds, "Ready", new_status, "New", "msg", NOW, 7)
    assert conds == snapshot  # input not mutated
    c = get_condition(out, "Ready")
    assert c["status"] == (new_status if isinstance(new_status, str) else ("True" if new_status else "False"))
    assert c["reason"] == "New" and c["message"] == "msg" and c["observedGeneration"] == 7
    assert c["lastTransitionTime"] == rfc3339(expect_time)
    assert [x["type"] for x in out] == ["Other", "Ready"]
    assert get_condition(out, "Other") == snapshot[0]


def test_set_condition_sorted_truncated_and_no_generation():
    out = set_condition([], "Zeta", True, "R", "m", NOW)
    out = set_condition(out, "Alpha", False, "R", "x" * 40000, NOW)
    assert [c["type"] for c in out] == ["Alpha", "Zeta"]
    assert len(get_condition(out, "Alpha")["message"]) == 32768
    assert "observedGeneration" not in get_condition(out, "Zeta")
    assert get_condition(out, "Missing") is None
    assert set_condition(None, "A", True, "R", "m", NOW)[0]["type"] == "A"


@pytest.mark.parametrize(
    "change, equal",
    [({}, True), ({"lastTransitionTime": rfc3339(NOW + 5)}, True), ({"message": "other"}, False),
     ({"status": "False"}, False), ({"observedGeneration": 8}, False), ({"reason": "X"}, False)],
)
def test_conditions_equal_ignores_only_the_transition_time(change, equal):
    a = set_condition([], "Ready", True, "R", "m", NOW, 7)
    b = [{**a[0], **change}]
    assert conditions_equal(a, b) == equal
    assert conditions_equal(None, []) and not conditions_equal(a, None)


# --------------------------------------------------------------------------- serving


def svc_record(gpus=2, port=8000, containers=None, template_extra=None, name="chat", **spec_extra):
    tspec = {"containers": containers or [{"name": "vllm", "image": "vllm/vllm-openai:v0.6",
                                           "command": ["vllm", "serve", "meta-llama/Llama-3.1-405B"]}],
             **(template_extra or {})}
    svc = (builders.InferenceService(name).ns("ml").pools("h100").gpus(gpus).spec(port=port, **spec_extra)
           .template({"metadata": {"labels": {"app": "chat"}}, "spec": tspec}))
    spec = svc.body()["spec"]  # a distinct uid per distinct spec (specs are parsed once per uid and generation)
    return svc.uid("u-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]).record()


GROUP = GroupRecord(index=3, attempt=2, pool="h100", nodes=("n0", "n1"), gpus_per_pod=8, level="nvlink", domain="nvl-a")


def group_pod(rec, worker, **kw):
    kw.setdefault("pods", 2)
    kw.setdefault("gpus_per_pod", 8)
    return build_group_pod(rec, group=kw.pop("group", GROUP), worker=worker, template_hash="h1", levels=LEVELS,
                           tolerations=[{"key": "gpu", "operator": "Exists"}], **kw)


def test_group_pods_are_pinned_named_labelled_and_get_the_lws_environment():
    rec = svc_record(gpus=None, parallelism={"tensor": 8, "pipeline": 2})
    for w in (0, 1):
        p = group_pod(rec, w)
        md, spec = p["metadata"], p["spec"]
        assert md["name"] == f"chat-3-{w}-2"
        assert md["labels"][SERVICE_NAME] == "chat" and md["labels"][GROUP_INDEX] == "3"
        assert md["labels"][WORKER_INDEX] == str(w) and md["labels"][RESTART_ATTEMPT] == "2"
        assert md["labels"][ROLE_LABEL] == "worker"  # in the namespace's headless Service (DNS)
        assert md["annotations"][ASSIGNED_NODE] == GROUP.nodes[w] and md["annotations"][TEMPLATE_HASH] == "h1"
        assert md["ownerReferences"][0]["kind"] == "InferenceService"
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert all({"key": "metadata.name", "operator": "In", "values": [GROUP.nodes[w]]} in t["matchFields"] for t in terms)
        main = spec["containers"][0]
        env = {e["name"]: e["value"] for e in main["env"]}
        assert env == {"LWS_LEADER_ADDRESS": "chat-3.kubeforge-workers.ml", "LWS_GROUP_SIZE": "2",
                       "LWS_WORKER_INDEX": str(w), "KUBEFORGE_GROUP_INDEX": "3"}
        assert main["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert spec["hostname"] == ("chat-3" if w == 0 else "chat-3-1") and spec["subdomain"] == WORKERS_SERVICE
        assert {"key": "gpu", "operator": "Exists"} in spec["tolerations"]


def test_vllm_leader_starts_ray_and_serves_with_the_parallel_flags_and_workers_join_it():
    rec = svc_record(gpus=None, parallelism={"tensor": 8, "pipeline": 2})
    lead = group_pod(rec, 0)["spec"]["containers"][0]
    assert lead["command"] == ["/bin/sh", "-c"]
    script = lead["args"][0]
    assert script.startswith("ray start --head --port=6379 && ")
    assert "-ge 2 ]" in script  # waits for the group's 2 ray nodes
    assert script.endswith("exec vllm serve meta-llama/Llama-3.1-405B --tensor-parallel-size 8 "
                           "--pipeline-parallel-size 2 --distributed-executor-backend ray")
    assert any(p.get("containerPort") == 8000 for p in lead["ports"])
    worker = group_pod(rec, 1)["spec"]["containers"][0]
    assert worker["args"] == ["exec ray start --address=chat-3.kubeforge-workers.ml:6379 --block"]


def test_sglang_pods_all_run_the_server_with_their_rank():
    rec = svc_record(gpus=None, parallelism={"tensor": 8, "pipeline": 2}, engine="sglang",
                     containers=[{"name": "sglang", "image": "lmsysorg/sglang:v0.4",
                                  "command": ["python3", "-m", "sglang.launch_server", "--model-path", "m"]}])
    for w in (0, 1):
        args = group_pod(rec, w)["spec"]["containers"][0]["args"][0]
        assert f"--node-rank {w}" in args and "--nnodes 2" in args and "--tp-size 8" in args
        assert "--dist-init-addr chat-3.kubeforge-workers.ml:5000" in args


def test_a_one_pod_replica_keeps_its_command_and_has_no_hostname():
    rec = svc_record(gpus=2)
    one = GroupRecord(index=0, pool="h100", nodes=("n0",), gpus_per_pod=2)
    spec = group_pod(rec, 0, group=one, pods=1, gpus_per_pod=2)["spec"]
    assert spec["containers"][0]["command"] == ["vllm", "serve", "meta-llama/Llama-3.1-405B"]
    assert "hostname" not in spec and "subdomain" not in spec


def test_long_service_names_get_valid_hostnames():
    name = "a" * 63
    for w in (0, 5):
        h = group_hostname(name, 12, w)
        assert len(h) <= 63 and h.endswith(f"-12" if w == 0 else "-12-5")
    assert leader_address(name, 12, "ns").startswith(group_hostname(name, 12, 0) + ".")


def test_serving_hash_moves_with_what_the_pods_are_made_of():
    a, b = svc_record(gpus=2), svc_record(gpus=4)
    assert serving_hash(a) != serving_hash(b) and serving_hash(a) == serving_hash(svc_record(gpus=2))


def test_the_service_has_no_selector_and_the_slice_lists_ready_leaders_or_the_activator():
    rec = svc_record()
    svc = build_service(rec)
    assert "selector" not in svc["spec"] and svc["spec"]["ports"][0]["name"] == "http"
    sl = build_endpoint_slice(rec, leaders=[("chat-0-0-0", "10.0.0.5", "n0")], activator=["10.9.0.1"], activator_port=8012)
    assert sl["metadata"]["name"] == slice_name("chat") == "kubeforge-chat"
    assert sl["metadata"]["labels"]["kubernetes.io/service-name"] == "chat"
    assert sl["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "kubeforge.io"
    assert sl["metadata"]["labels"]["kubeforge.io/endpoints"] == "replicas"
    assert sl["endpoints"][0]["addresses"] == ["10.0.0.5"] and sl["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP"}]
    zero = build_endpoint_slice(rec, activator=["10.9.0.1"], activator_port=8012)
    assert zero["metadata"]["labels"]["kubeforge.io/endpoints"] == "activator" and zero["ports"][0]["port"] == 8012
    assert zero["metadata"]["annotations"] == {"kubeforge.io/activation-hold-seconds": "300",
                                               "kubeforge.io/activation-queue-limit": "1000"}
    none = build_endpoint_slice(rec)
    assert none["endpoints"] == [] and none["metadata"]["labels"]["kubeforge.io/endpoints"] == "replicas"
