"""runtime/model_caches.py and the serving reconcile's part of the node caches (issue 29), on the
fake API server (tests/fakekube.py) with the real index handlers: the ModelCacheNode specs the
pool loop writes, a refusal reported once and not sent again, a gone node's object deleted, the
pods' mount, and the Warning when the caches are off."""

from __future__ import annotations

import asyncio
import logging

from fakekube import settle, small_cluster
from kubeforge.objects import MODEL_NOT_MOUNTED
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.pools import PoolPasses, refresh_pools
from records import NS, service_body, submitted

SHA = "0123456789abcdef0123456789abcdef01234567"
MODEL = {"uri": "hf://meta-llama/Llama-3.1-8B", "revision": SHA}


async def _cluster(model_cache: bool, monkeypatch):
    kube = await small_cluster(2)
    kube.use_clock(monkeypatch)
    kube.rt.options.model_cache = model_cache
    await kube.client_create("InferenceService", submitted(service_body(
        "chat", gpus=8, minReplicas=1, maxReplicas=1, model=MODEL,
        autoscaling={"prometheusURL": "http://prometheus.monitoring.svc:9090"})))
    await settle(kube)
    return kube


def test_the_pool_loop_asks_the_replicas_node_for_its_model_and_the_pod_mounts_it(monkeypatch):
    async def go():
        kube = await _cluster(True, monkeypatch)
        (group,) = kube.get("InferenceService", NS, "chat")["status"]["groups"]
        await refresh_pools(kube.rt, PoolPasses(), kube.now)
        (obj,) = kube.items("ModelCacheNode")
        assert obj["metadata"]["name"] == group["nodes"][0]
        assert [m["reasons"] for m in obj["spec"]["models"]] == [["Placed"]]
        writes = kube.writes
        await refresh_pools(kube.rt, PoolPasses(last={"p": kube.get("GPUPool", "", "p")["status"]}), kube.now)
        assert kube.writes == writes  # nothing changed: nothing written
        (pod,) = kube.items("Pod")
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["kubeforge-weights"]
        # the agent reports the copy Ready: the pool counts it
        obj["status"] = {"models": [{"key": obj["spec"]["models"][0]["key"], "phase": "Ready", "progressPercent": 100}]}
        await kube.put("ModelCacheNode", obj)
        await refresh_pools(kube.rt, PoolPasses(), kube.now)
        assert kube.get("GPUPool", "", "p")["status"]["modelsSummary"] == "Llama-3.1-8B 1/2"
        # the node goes away: its object with it
        await kube.remove("Node", "", group["nodes"][0])
        await refresh_pools(kube.rt, PoolPasses(), kube.now)
        assert [o["metadata"]["name"] for o in kube.items("ModelCacheNode")] == []

    asyncio.run(go())


def test_a_refused_spec_is_logged_once_and_not_sent_again(monkeypatch, caplog):
    async def go():
        kube = await _cluster(True, monkeypatch)
        sent = []

        async def refuse(kind, namespace, body):
            sent.append(kind)
            raise ApiError(403, "Forbidden", "modelcachenodes is forbidden")

        monkeypatch.setattr(kube.rt.client, "create", refuse)
        refused: dict[str, str] = {}
        with caplog.at_level(logging.ERROR, logger="kubeforge.modelcache"):
            for _ in range(3):
                await refresh_pools(kube.rt, PoolPasses(refused=refused), kube.now)
        assert sent == ["ModelCacheNode"] and len(refused) == 1
        assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1

    asyncio.run(go())


def test_without_the_caches_nothing_is_written_or_mounted_and_a_warning_says_so(monkeypatch):
    async def go():
        kube = await _cluster(False, monkeypatch)
        await refresh_pools(kube.rt, PoolPasses(), kube.now)
        assert kube.items("ModelCacheNode") == []
        (pod,) = kube.items("Pod")
        assert not pod["spec"].get("initContainers")
        await settle(kube)
        warned = [e for e in kube.rt.events.posted if e[2] == MODEL_NOT_MOUNTED]
        assert len(warned) == 1 and "--model-cache" in warned[0][3]

    asyncio.run(go())
