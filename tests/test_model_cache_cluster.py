"""The node model caches wired end to end on the real control plane (issue 29): the session
operator (``--model-cache``) writes ModelCacheNode specs, real node agents
(:class:`kubeforge.cacheagent.CacheAgent`, one a node, through the real API server) fetch the
model from a local Hugging Face Hub stand-in with ``huggingface_hub``, and placement, the pods and
the statuses follow what the agents report.

Each node's disk is a directory of its own here: the agents run on one machine, so
:class:`kubeforge.sim.cacheagents.NodeDiskApi` (started by :class:`~kubeforge.sim.cacheagents.LocalAgents`)
points each node's ``spec.hostPath`` at ``<tmp>/<node>`` (on a real cluster
every node has its own disk at the pool's path). Everything else is what ships. Every wait is
bounded.
"""

from __future__ import annotations

import pytest

pytest.importorskip("huggingface_hub")

from conftest import apply, get_json, training_job, wait_for  # noqa: E402

pytestmark = pytest.mark.cluster

REPO = "kubeforge-test/tiny-llama"
NAME = "chat"


@pytest.fixture
def hub(tmp_path):
    from kubeforge.sim.hub import HubStandIn, make_model_repo

    make_model_repo(tmp_path / "hub", REPO, weights_bytes=256 << 10)
    with HubStandIn(tmp_path / "hub") as h:
        yield h


@pytest.fixture
def agents(cluster, hub, tmp_path):
    """Start one agent a node: ``agents(nodes)``; stopped after the test."""
    from kubeforge.sim.cacheagents import LocalAgents

    with LocalAgents(str(cluster.kubeconfig), tmp_path / "disks", hub.url, interval=0.5) as local:
        yield local.start


def service(namespace: str, commit: str, replicas: int) -> dict:
    return {
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "pools": [namespace], "gpusPerReplica": 4, "minReplicas": replicas, "maxReplicas": replicas,
            "drainSeconds": 0, "model": {"uri": f"hf://{REPO}", "revision": commit},
            "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.10.0", "command": ["vllm", "serve"]}]}},
            "autoscaling": {"prometheusURL": "http://127.0.0.1:1", "pollingIntervalSeconds": 1},
        },
    }


def copies(cluster, node: str) -> dict[str, str]:
    """key -> phase of the node's copies (its ModelCacheNode status), {} when none."""
    out = cluster.kubectl("get", "modelcachenode", node, "-o", "json", check=False)
    if out.returncode != 0:
        return {}
    import json

    return {m["key"]: m["phase"] for m in (json.loads(out.stdout).get("status") or {}).get("models") or []}


def groups(cluster, ns: str) -> list[dict]:
    return (get_json(cluster, "inferenceservice", NAME, "-n", ns).get("status") or {}).get("groups") or []


def test_a_model_is_kept_warm_preferred_by_placement_and_fetched_once_per_node(cluster, namespace, fleet, hub,
                                                                               agents):
    from kubeforge.api import ModelSource
    from kubeforge.modelcache import cache_key

    commit = hub.commit(REPO)
    model = {"uri": f"hf://{REPO}", "revision": commit}
    key = cache_key(ModelSource.model_validate(model), namespace)
    nodes = fleet(cliques=1, nodes=2, gpus=8)
    agents(nodes)
    # a 2-GPU job makes one node the fuller one: the pool's one keepWarm copy goes to the emptiest
    apply(cluster, training_job("busy", namespace, replicas=1, gpus=2, mode="None", level=None))
    busy = wait_for(lambda: (get_json(cluster, "trainingjob", "busy", "-n", namespace).get("status") or {})
                    .get("placement", {}).get("nodes"), timeout=60, what="the job placed")[0]
    warm = next(n for n in nodes if n != busy)
    cluster.kubectl("patch", "gpupool", namespace, "--type=merge", "-p",
                    '{"spec":{"modelCache":{"keepWarm":[{"model":%s,"nodes":1}]}}}' % __import__("json").dumps(model))
    wait_for(lambda: copies(cluster, warm).get(key) == "Ready", timeout=90, what=f"the keepWarm copy Ready on {warm}")
    assert copies(cluster, busy) == {}  # one node asked, one fetched

    # one replica: placed where the weights are (the emptier node; a packing placement would take the fuller)
    apply(cluster, service(namespace, commit, replicas=1))
    first = wait_for(lambda: [g for g in groups(cluster, namespace) if g.get("nodes")], timeout=60,
                     what="the replica placed")[0]
    assert first["nodes"] == [warm]
    assert wait_for(lambda: (groups(cluster, namespace)[0].get("weights") or {}).get("source"), timeout=30,
                    what="weights in status") == "Cached"
    pod = wait_for(lambda: get_json(cluster, "pods", "-n", namespace, "-l", f"kubeforge.io/inference-service={NAME}")
                   ["items"], timeout=60, what="the replica's pod")[0]
    main = pod["spec"]["containers"][0]
    assert any(m["mountPath"] == "/mnt/models" and m.get("readOnly") and m.get("subPath") == key
               for m in main.get("volumeMounts") or [])
    assert "--model" in " ".join(main.get("command", []) + main.get("args", []))
    assert [c["name"] for c in pod["spec"].get("initContainers") or []] == ["kubeforge-weights"]

    # three replicas of 4 GPUs: the warm node holds two, the third goes to the busy node and starts
    # cold (never waits): its node is asked for the copy and fetches it once
    cluster.kubectl("patch", "inferenceservice", NAME, "-n", namespace, "--type=merge", "-p",
                    '{"spec":{"minReplicas":3,"maxReplicas":3}}')
    cold = wait_for(lambda: [g for g in groups(cluster, namespace) if g.get("nodes") == [busy]
                             and g.get("weights")], timeout=60, what="a replica on the busy node")[0]
    assert cold["weights"]["source"] == "Cold"  # admission's view when it placed it, however fast the copy came
    wait_for(lambda: copies(cluster, busy).get(key) == "Ready", timeout=90, what="the cold node's copy Ready")
    wait_for(lambda: (get_json(cluster, "gpupool", namespace).get("status") or {}).get("modelsSummary")
             == "tiny-llama 2/2", timeout=30, what="the pool's Models column")
    spec = get_json(cluster, "modelcachenode", warm)["spec"]
    assert [set(m["reasons"]) for m in spec["models"]] == [{"Placed", "KeepWarm"}]
    # each weight file was served once per node: two nodes, each file's bytes twice
    shards = {p: n for p, n in hub.served.items() if p.endswith(".safetensors")}
    assert len(shards) == 2 and all(n == 2 * (128 << 10) for n in shards.values()), shards
