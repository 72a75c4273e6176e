"""Tests of the pure manifest builders (kubeforge.builders.training, kubeforge.builders.common)."""

from __future__ import annotations

import copy

import pytest

from kubeforge.builders.common import (
    ASSIGNED_NODE,
    GANG_GATE,
    JOB_NAME,
    POOL_LABEL,
    REPLICA_INDEX,
    RESTART_ATTEMPT,
    get_condition,
    owner_reference,
    parse_time,
    rfc3339,
    set_condition,
)
from kubeforge.builders.training import (
    MASTER_PORT,
    build_pvc,
    build_service,
    build_worker_pod,
    checkpoint_claim,
    pod_name,
    pvc_name,
    service_name,
    worker_hostname,
)

NAME, NS, UID = "llm", "team-a", "uid-1234"
NODES = ["n0", "n1", "n2", "n3"]
AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}


def job(replicas=4, gpus=8, containers=None, checkpoint=None, template_extra=None, **spec_overrides):
    ck = {"size": "10Gi", "accessModes": ["ReadWriteMany"], "mountPath": "/checkpoints", "deletionPolicy": "Retain"}
    ck.update(checkpoint or {})
    tspec = {"containers": containers if containers is not None else
             [{"name": "trainer", "image": "pytorch:2", "env": [{"name": "USER_VAR", "value": "1"}]}]}
    tspec.update(template_extra or {})
    spec = {
        "pools": ["h100"], "replicas": replicas, "gpusPerReplica": gpus,
        "topology": {"mode": "Required", "level": "nvlink"}, "checkpoint": ck,
        "failurePolicy": {"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600, "preemptionsBeforeFallback": 2},
        "suspend": False, "priority": 0,
        "template": {"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}, "spec": tspec},
    }
    spec.update(spec_overrides)
    return {"apiVersion": "kubeforge.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1}, "spec": spec}


def worker(body=None, rank=1, attempt=0, **kw):
    kw.setdefault("nodes", NODES)
    kw.setdefault("affinity", AFFINITY)
    return build_worker_pod(body or job(), rank=rank, attempt=attempt, **kw)


def container(pod_, name):
    return next(c for c in pod_["spec"]["containers"] if c["name"] == name)


def env_of(c):
    return {e["name"]: e.get("value") for e in c.get("env") or []}


OWNER = {"apiVersion": "kubeforge.io/v1alpha1", "kind": "TrainingJob", "name": NAME, "uid": UID,
         "controller": True, "blockOwnerDeletion": True}


# --------------------------------------------------------------------------- names


def test_names():
    assert service_name(NAME) == NAME
    assert pvc_name(NAME) == "llm-checkpoint"
    assert worker_hostname(NAME, 3) == "llm-worker-3"
    assert pod_name(NAME, 3, 2) == "llm-worker-3-2"


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


def test_gpu_resource_name_and_user_resources_kept():
    containers = [{"name": "trainer", "resources": {"limits": {"memory": "100Gi", "nvidia.com/gpu": "1"},
                                                    "requests": {"cpu": "8"}}}]
    p = worker(job(gpus=8, containers=containers), gpu_resource="amd.com/gpu")
    res = container(p, "trainer")["resources"]
    assert res["limits"] == {"memory": "100Gi", "nvidia.com/gpu": "1", "amd.com/gpu": "8"}
    assert res["requests"] == {"cpu": "8", "amd.com/gpu": "8"}


def test_default_container_when_template_has_none():
    p = worker(job(containers=[]))
    assert [c["name"] for c in p["spec"]["containers"]] == ["trainer"]
    assert p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


# --------------------------------------------------------------------------- worker pod: env


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_torchrun_env(rank):
    p = worker(job(replicas=4, gpus=8), rank=rank, attempt=2)
    env = env_of(container(p, "trainer"))
    master = f"{NAME}-worker-0.{NAME}.{NS}.svc"
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
    body = job(containers=containers, checkpoint=checkpoint, template_extra=extra)
    p = worker(body)
    vols = {v["name"]: v for v in p["spec"]["volumes"]}
    assert vols["checkpoint"] == {"name": "checkpoint", "persistentVolumeClaim": {"claimName": claim}}
    assert "data" in vols and len(p["spec"]["volumes"]) == 2
    mounts = container(p, "trainer")["volumeMounts"]
    assert {"name": "data", "mountPath": "/data"} in mounts
    assert [m for m in mounts if m["name"] == "checkpoint"] == [{"name": "checkpoint", "mountPath": mount}]
    assert env_of(container(p, "trainer"))["KUBEFORGE_CHECKPOINT_DIR"] == mount
    assert checkpoint_claim(body) == claim


# --------------------------------------------------------------------------- worker pod: spec, metadata


@pytest.mark.parametrize("gated", [True, False])
def test_scheduling_gate(gated):
    p = worker(gated=gated)
    if gated:
        assert p["spec"]["schedulingGates"] == [{"name": GANG_GATE}] == [{"name": "kubeforge.io/gang"}]
    else:
        assert "schedulingGates" not in p["spec"]


def test_pod_spec_basics():
    p = worker(rank=2, attempt=1)
    s = p["spec"]
    assert s["restartPolicy"] == "Never"
    assert s["hostname"] == "llm-worker-2"
    assert s["subdomain"] == "llm"
    assert s["affinity"] == AFFINITY
    assert p["metadata"]["name"] == "llm-worker-2-1"
    assert p["metadata"]["namespace"] == NS
    assert p["metadata"]["ownerReferences"] == [OWNER]
    assert p["metadata"]["annotations"] == {"note": "x", ASSIGNED_NODE: "n2"}
    for c in s["containers"]:
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_restart_policy_overrides_template():
    p = worker(job(template_extra={"restartPolicy": "OnFailure"}))
    assert p["spec"]["restartPolicy"] == "Never"


def test_labels():
    p = worker(rank=3, attempt=5, pool="h100-spot")
    labels = p["metadata"]["labels"]
    assert labels["team"] == "a"
    assert labels[JOB_NAME] == NAME
    assert labels[REPLICA_INDEX] == "3"
    assert labels[RESTART_ATTEMPT] == "5"
    assert labels[POOL_LABEL] == "h100-spot"
    assert labels["app.kubernetes.io/managed-by"] == "kubeforge"
    assert POOL_LABEL not in worker(pool=None)["metadata"]["labels"]


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


def test_job_body_not_mutated_and_pods_independent():
    body = job()
    snapshot = copy.deepcopy(body)
    a = worker(body, rank=0)
    b = worker(body, rank=1)
    assert body == snapshot
    a["spec"]["containers"][0]["env"].append({"name": "X", "value": "y"})
    assert "X" not in env_of(b["spec"]["containers"][0])


# --------------------------------------------------------------------------- service, PVC


def test_service_is_headless_and_publishes_not_ready():
    s = build_service(job())
    assert s["kind"] == "Service" and s["apiVersion"] == "v1"
    assert s["metadata"]["name"] == NAME and s["metadata"]["namespace"] == NS
    assert s["metadata"]["ownerReferences"] == [OWNER]
    assert s["spec"]["clusterIP"] == "None"
    assert s["spec"]["publishNotReadyAddresses"] is True
    assert s["spec"]["selector"] == {JOB_NAME: NAME}
    assert s["spec"]["ports"][0]["port"] == 29500


@pytest.mark.parametrize("policy, owned", [("Retain", False), ("Delete", True), (None, False)])
def test_pvc_owner_reference_only_for_delete(policy, owned):
    ck = {"size": "50Gi", "accessModes": ["ReadWriteOnce"], "storageClassName": "fast"}
    body = job(checkpoint=ck)
    if policy is None:
        body["spec"]["checkpoint"].pop("deletionPolicy")
    else:
        body["spec"]["checkpoint"]["deletionPolicy"] = policy
    pvc = build_pvc(body)
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert pvc["metadata"]["name"] == "llm-checkpoint" and pvc["metadata"]["namespace"] == NS
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert pvc["spec"]["storageClassName"] == "fast"
    if owned:
        assert pvc["metadata"]["ownerReferences"] == [OWNER]
    else:
        assert "ownerReferences" not in pvc["metadata"]


def test_pvc_defaults():
    body = job()
    body["spec"]["checkpoint"] = {}
    pvc = build_pvc(body)
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in pvc["spec"]


# --------------------------------------------------------------------------- common


def test_owner_reference():
    assert owner_reference(job()) == OWNER
    body = job()
    body.pop("apiVersion")
    assert owner_reference(body, controller=False)["apiVersion"] == "kubeforge.io/v1alpha1"
    assert owner_reference(body, controller=False)["controller"] is False


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


def test_serving_pods_wait_behind_the_admission_gate_and_release_narrows_affinity():
    from kubeforge.builders.inference import build_deployment
    from kubeforge.handlers.inference import _release_patch

    svc = {"apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService",
           "metadata": {"name": "chat", "namespace": "ns", "uid": "u1"},
           "spec": {"gpusPerReplica": 2, "port": 8000, "template": {"spec": {"containers": [{"name": "vllm", "image": "v"}]}}}}
    dep = build_deployment(svc, replicas=1, node_selector={"matchLabels": {"pool": "h100"}}, pool="h100")
    pod_spec = dep["spec"]["template"]["spec"]
    assert pod_spec["schedulingGates"] == [{"name": "kubeforge.io/admission"}]
    pod = {"metadata": {"annotations": {}}, "spec": {"affinity": pod_spec["affinity"]}}
    ops = _release_patch(pod, "node-7")
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields"
    assert {"op": "add", "path": base, "value": [{"key": "metadata.name", "operator": "In", "values": ["node-7"]}]} in ops
    assert {"op": "add", "path": "/metadata/annotations", "value": {"kubeforge.io/assigned-node": "node-7"}} in ops
    assert ops[-1] == {"op": "remove", "path": "/spec/schedulingGates"}
    # No affinity at all: one term is set (allowed while gated).
    ops = _release_patch({"metadata": {"annotations": {"a": "b"}}, "spec": {}}, "n1")
    assert ops[0]["path"] == "/spec/affinity" and ops[1]["path"] == "/metadata/annotations/kubeforge.io~1assigned-node"
