"""The model's weights in a serving pod (issue 29): a ``pvc://`` claim mounted directly, a cached
scheme from the node's copy behind an init container, nothing when the pool caches nothing, and
the engine flag (vLLM ``--model``, SGLang ``--model-path``) added once. Pure: builders only."""

from __future__ import annotations

import json

import builders as b
import pytest

from kubeforge.api import ModelCachePolicy, ModelSource
from kubeforge.builders.model import names_flag
from kubeforge.builders.serving import build_group_pod, serving_hash
from kubeforge.modelcache import READY_MARKER, cache_key
from kubeforge.objects import GroupRecord

COMMIT = "0123456789abcdef0123456789abcdef01234567"
HF = {"uri": "hf://meta-llama/Llama-3.1-8B", "revision": COMMIT, "sizeBytes": 16_000_000_000}
S3 = {"uri": "s3://models/llama", "credentialsSecret": "s3-creds-7f3a"}
PVC = {"uri": "pvc://weights/llama/8b"}
CACHE = ModelCachePolicy(hostPath="/data/models")
ONE = GroupRecord(index=0, attempt=0, pool="p", nodes=("n0",), gpus_per_pod=1)
TWO = GroupRecord(index=1, attempt=0, pool="p", nodes=("n0", "n1"), gpus_per_pod=8)
VLLM = ["vllm", "serve"]


def service(model=HF, command=VLLM, engine=None, args=None, multi=False, **spec):
    """A service of one vLLM container (image ``vllm/vllm-openai``) with ``spec.model``; an empty
    ``command`` leaves it out (the image's entrypoint)."""
    container = {"name": "vllm", "image": "vllm/vllm-openai:v0.9"}
    if command:
        container["command"] = command
    if args is not None:
        container["args"] = args
    svc = b.InferenceService("chat").ns("ml").template({"spec": {"containers": [container]}})
    if model is not None:
        svc = svc.spec(model=model)
    if engine is not None:
        svc = svc.spec(engine=engine)
    if multi:
        svc = svc.gpus(None).spec(parallelism={"tensor": 8, "pipeline": 2})
    return svc.spec(**spec).record()


def pod(rec, worker=0, group=ONE, model_cache=CACHE):
    return build_group_pod(rec, group=group, worker=worker, pods=len(group.nodes), gpus_per_pod=group.gpus_per_pod,
                           template_hash="h", model_cache=model_cache)


def main_of(p):
    return p["spec"]["containers"][0]


def words(container):
    return list(container.get("command") or []) + list(container.get("args") or [])


def test_a_pvc_model_mounts_the_claim_read_only_with_its_path_and_no_init_container():
    p = pod(service(PVC), model_cache=None)  # a claim needs no node cache
    assert {"name": "kubeforge-model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} \
        in p["spec"]["volumes"]
    assert main_of(p)["volumeMounts"] == [{"name": "kubeforge-model", "mountPath": "/mnt/models", "readOnly": True,
                                           "subPath": "llama/8b"}]
    assert "initContainers" not in p["spec"]
    assert words(main_of(p)) == VLLM + ["--model", "/mnt/models"]


def test_a_pvc_model_without_a_path_mounts_the_whole_claim_at_its_mount_path():
    p = pod(service({"uri": "pvc://weights", "mountPath": "/models"}))
    (mount,) = main_of(p)["volumeMounts"]
    assert mount == {"name": "kubeforge-model", "mountPath": "/models", "readOnly": True}
    assert "subPath" not in mount and words(main_of(p))[-2:] == ["--model", "/models"]


def test_a_cached_model_mounts_the_node_cache_behind_an_init_container_that_waits_for_the_marker():
    rec = service(HF)
    key = cache_key(ModelSource(**HF), "ml")
    p = pod(rec)
    assert {"name": "kubeforge-model-cache", "hostPath": {"path": "/data/models", "type": "DirectoryOrCreate"}} \
        in p["spec"]["volumes"]
    (wait,) = p["spec"]["initContainers"]
    assert wait["name"] == "kubeforge-weights" and wait["image"] == "vllm/vllm-openai:v0.9"
    marker = f"/kubeforge-cache/{key}/{READY_MARKER}"
    assert wait["command"] == ["/bin/sh", "-c", f"until [ -f {marker} ]; do sleep 2; done"]
    assert wait["volumeMounts"] == [{"name": "kubeforge-model-cache", "mountPath": "/kubeforge-cache",
                                     "readOnly": True}]
    assert wait["resources"]["requests"] == wait["resources"]["limits"] == {"cpu": "10m", "memory": "16Mi"}
    assert "securityContext" not in wait
    # the main container binds the copy itself (subPath <key>), read-only, when it starts
    assert main_of(p)["volumeMounts"] == [{"name": "kubeforge-model-cache", "mountPath": "/mnt/models",
                                           "readOnly": True, "subPath": key}]
    assert words(main_of(p)) == VLLM + ["--model", "/mnt/models"]


def test_the_key_is_the_cache_key_of_the_model_and_the_namespace_of_the_service():
    key = cache_key(ModelSource(**S3), "ml")
    assert key != cache_key(ModelSource(**S3), "other")  # a model with a Secret is shared within its namespace
    p = pod(service(S3))
    assert main_of(p)["volumeMounts"][0]["subPath"] == key
    assert f"/kubeforge-cache/{key}/" in p["spec"]["initContainers"][0]["command"][2]


@pytest.mark.parametrize("model", [HF, S3, {"uri": "gs://b/m"}, {"uri": "oci://r.io/m@sha256:" + "a" * 64}])
def test_without_a_cache_policy_a_cached_model_is_not_mounted_and_no_flag_is_added(model):
    rec = service(model)
    p = pod(rec, model_cache=None)
    assert "initContainers" not in p["spec"] and not p["spec"].get("volumes")
    assert "volumeMounts" not in main_of(p) and words(main_of(p)) == VLLM
    assert p == pod(service(None), model_cache=None) | {"metadata": p["metadata"]}  # as without spec.model


def test_the_credentials_secret_never_reaches_the_pod():
    for worker, group in ((0, ONE), (0, TWO), (1, TWO)):
        text = json.dumps(pod(service(S3, multi=group is TWO), worker, group))
        assert "s3-creds-7f3a" not in text and "kubeforge-model-cache" in text


@pytest.mark.parametrize("given", [["--model", "/w"], ["--model=/w"], ["--model_path_is_not_it", "--model", "/w"]])
def test_a_command_that_names_its_model_by_flag_is_left_alone(given):
    p = pod(service(HF, args=given))
    assert main_of(p)["args"] == given and main_of(p)["command"] == VLLM
    assert main_of(p)["volumeMounts"][0]["mountPath"] == "/mnt/models"  # still mounted


def test_a_shell_script_is_not_edited():
    script = ["/bin/bash", "-ec", "pip list && vllm serve"]
    main = main_of(pod(service(HF, command=script)))
    assert words(main) == script and main["volumeMounts"][0]["mountPath"] == "/mnt/models"


def test_the_model_flag_is_added_once():
    main = main_of(pod(service(HF)))
    assert words(main).count("--model") == 1
    again = b.InferenceService("chat").ns("ml").spec(model=HF).template(
        {"spec": {"containers": [{**main, "volumeMounts": []}]}}).record()
    assert words(main_of(pod(again))).count("--model") == 1  # a template built from our pod: not twice


def test_vllms_positional_model_is_replaced_by_the_mount_and_keeps_its_served_name():
    main = main_of(pod(service(HF, command=["vllm", "serve", "meta-llama/Llama-3.1-8B", "--port", "8000"])))
    assert main["command"] == ["vllm", "serve", "/mnt/models", "--port", "8000"]  # vLLM prefers the tag to --model
    assert main["args"] == ["--served-model-name", "meta-llama/Llama-3.1-8B"]
    named = main_of(pod(service(HF, command=VLLM, args=["m", "--served-model-name", "chat"])))
    assert named["command"] == VLLM and named["args"] == ["/mnt/models", "--served-model-name", "chat"]


def test_the_multi_node_leader_serves_the_mount_and_ray_workers_mount_it_without_a_flag():
    rec = service(HF, multi=True)
    lead, worker = pod(rec, 0, TWO), pod(rec, 1, TWO)
    script = main_of(lead)["args"][0]
    assert main_of(lead)["command"] == ["/bin/sh", "-c"] and script.startswith("ray start --head")
    assert "exec vllm serve --model /mnt/models --tensor-parallel-size 8" in script
    assert main_of(worker)["args"] == ["exec ray start --address=chat-1.kubeforge-workers.ml:6379 --block"]
    key = cache_key(ModelSource(**HF), "ml")
    for p in (lead, worker):  # every pod of the group waits for its node's copy and mounts it (a worker loads shards)
        assert main_of(p)["volumeMounts"][0]["subPath"] == key
        assert p["spec"]["initContainers"][0]["name"] == "kubeforge-weights"
    assert not names_flag(words(main_of(worker)), ["--model"])


def test_with_the_images_entrypoint_one_pod_gets_the_flag_and_a_group_is_left_alone():
    one = main_of(pod(service(HF, command=[])))
    assert "command" not in one and one["args"] == ["--model", "/mnt/models"]  # to the entrypoint (vllm serve)
    rec = service(HF, command=[], multi=True)  # engine_command writes no start script without a command
    for w in (0, 1):
        main = main_of(pod(rec, w, TWO))
        assert "command" not in main and "args" not in main
        assert main["volumeMounts"][0]["mountPath"] == "/mnt/models"


def test_sglang_gets_model_path_on_every_pod_and_keeps_its_own():
    sglang = ["python3", "-m", "sglang.launch_server"]
    one = main_of(pod(service(HF, command=sglang, engine="sglang")))
    assert one["args"] == ["--model-path", "/mnt/models"] and "--model" not in words(one)
    rec = service(HF, command=sglang, engine="sglang", multi=True)
    for w in (0, 1):
        script = main_of(pod(rec, w, TWO))["args"][0]
        assert script.count("--model-path /mnt/models") == 1 and f"--node-rank {w}" in script
    own = main_of(pod(service(HF, command=sglang + ["--model-path", "/w"], engine="sglang")))
    assert words(own) == sglang + ["--model-path", "/w"]


def test_engine_none_mounts_the_weights_and_adds_no_flag():
    main = main_of(pod(service(HF, command=["./serve.sh"], engine="none")))
    assert main["volumeMounts"][0]["mountPath"] == "/mnt/models"
    assert words(main) == ["./serve.sh"]


def test_the_template_keeps_its_other_volumes_and_init_containers():
    tpl = {"spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                    "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9", "command": VLLM,
                                    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}]}}
    p = pod(b.InferenceService("chat").ns("ml").spec(model=HF).template(tpl).record())
    assert [c["name"] for c in p["spec"]["initContainers"]] == ["setup", "kubeforge-weights"]
    assert [v["name"] for v in p["spec"]["volumes"]] == ["shm", "kubeforge-model-cache"]
    assert [m["name"] for m in main_of(p)["volumeMounts"]] == ["shm", "kubeforge-model-cache"]


def test_serving_hash_moves_with_the_model_and_not_without_one():
    plain, llama = service(None), service(HF)
    assert serving_hash(plain) == serving_hash(service(None))
    assert serving_hash(llama) == serving_hash(service(HF))
    assert serving_hash(llama) != serving_hash(plain)
    assert serving_hash(llama) != serving_hash(service({**HF, "revision": "f" * 40}))
    assert serving_hash(llama) != serving_hash(service({**HF, "mountPath": "/models"}))


def test_names_flag_reads_both_spellings_and_never_a_longer_flag():
    assert names_flag(["vllm", "serve", "--model=/w"], ["--model"])
    assert names_flag(["/bin/sh", "-c", "vllm serve --model /w"], ["--model"])
    assert names_flag(["launch", "--model_path", "/w"], ["--model-path"])
    assert not names_flag(["vllm", "serve", "--model-impl", "vllm", "--served-model-name", "x"], ["--model"])
    assert not names_flag(["launch", "--model-path", "/w"], ["--model"])
