"""Found by the serving placement bench (``python -m e2e.bench.serving``): a scale-up that comes
back within a minute of a scale-down re-admitted the group index that went, but its pods were not
created for up to 60 s: the pod names (``<service>-<group>-<worker>-<attempt>``) were the same as
the old group's, and the creation expectation of those names (60 s TTL) took them as made.

Fixed two ways: the pods index clears an expectation once it shows the pod (controller-runtime's
CreationObserved), and a re-admitted index gets an attempt past any of its pods still
terminating. tests/test_runtime_properties.py found it too, on the real runtime.
"""

from __future__ import annotations

import time

import pytest

import builders as b
from conftest import apply, get_json, wait_for

pytestmark = pytest.mark.cluster

NAME = "rescale"


def svc(namespace: str, replicas: int) -> dict:
    """``replicas`` one-GPU replicas (min = max) in the namespace's pool, drained at once, pods
    gone at once, autoscaled from a Prometheus that does not answer."""
    return (b.InferenceService(NAME).ns(namespace).without("topology").pools(namespace).gpus(1)
            .spec(minReplicas=replicas, maxReplicas=replicas, drainSeconds=0,
                  autoscaling={"prometheusURL": "http://127.0.0.1:1", "pollingIntervalSeconds": 1})
            .template({"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.6.4", "command": ["vllm", "serve", "m"]}]}})
            .manifest())


def ready_pods(cluster, ns: str) -> list[str]:
    items = get_json(cluster, "pods", "-n", ns, "-l", f"kubeforge.io/inference-service={NAME}")["items"]
    return sorted(p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")
                  and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or []))


def scale(cluster, ns: str, n: int) -> None:
    cluster.kubectl("patch", "inferenceservice", NAME, "-n", ns, "--type=merge", "-p",
                    f'{{"spec":{{"minReplicas":{n},"maxReplicas":{n}}}}}')


def test_a_group_index_reused_within_a_minute_gets_its_pods_at_once(cluster, namespace, fleet):
    fleet(cliques=1, nodes=1, gpus=8)
    apply(cluster, svc(namespace, 1))
    wait_for(lambda: len(ready_pods(cluster, namespace)) == 1, timeout=60, what="1 replica")
    scale(cluster, namespace, 2)
    wait_for(lambda: len(ready_pods(cluster, namespace)) == 2, timeout=30, what="2 replicas")
    scale(cluster, namespace, 1)
    wait_for(lambda: len(ready_pods(cluster, namespace)) == 1, timeout=30, what="back to 1 replica")
    t = time.monotonic()
    scale(cluster, namespace, 2)  # group 1 again, attempt 0: the same pod name as a few seconds ago
    wait_for(lambda: len(ready_pods(cluster, namespace)) == 2, timeout=30,
             what="the re-admitted group's pod (the first scale-up took a few seconds)")
    assert time.monotonic() - t < 30
