"""LeaderWorkerSet on a sim cluster: install it, create an LWS, wait for its pods.

For baselines that compare kubeforge's serving groups with the real LWS (e.g. the serving
placement bench: multi-node replicas kept inside one NVLink domain by LWS's
``leaderworkerset.sigs.k8s.io/exclusive-topology`` annotation, which LWS's pod webhook turns
into pod (anti-)affinity that kube-scheduler enforces)::

    from e2e.peers import lws
    lws.install(c)                                   # CRD, webhooks, manager (once per cluster)
    c.kubectl("apply", "-f", "-", input=json.dumps(lws.leader_worker_set(
        "llama", "bench", size=2, gpus=8, exclusive_topology="nvidia.com/gpu.clique")))
    pods = lws.wait_for_pods(c, "bench", "llama", count=2, timeout=120)
    lws.uninstall(c)                                 # stops the manager, removes its webhooks

LWS runs leaders as a StatefulSet and each group's workers as another (kube-controller-manager
creates the pods); every pod carries ``leaderworkerset.sigs.k8s.io/name`` and
``.../group-index`` and ``.../worker-index`` labels.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ._build import PeersError
from .stack import Manager, start_lws, stop_peer

API = "leaderworkerset.x-k8s.io/v1"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
GPU = "nvidia.com/gpu"


def install(c, bin_dir: Path | None = None) -> Manager:
    """Install LWS's CRD and webhooks on cluster ``c`` and start its manager (built by
    ``hack/build-peers.sh``); returns the running manager.

    Raises:
        PeersError: not built (the message says how to build), or it did not start.
    """
    return start_lws(c, bin_dir)


def uninstall(c) -> None:
    """Stop the LWS manager of cluster ``c`` and delete its webhook configurations (the CRD and
    any LWS objects stay)."""
    stop_peer(c, "lws")


def leader_worker_set(name: str, namespace: str, size: int, gpus: int = 0, replicas: int = 1,
                      exclusive_topology: str | None = None, image: str = "example.com/vllm:1",
                      startup_policy: str = "LeaderCreated", labels: dict[str, str] | None = None,
                      node_selector: dict[str, str] | None = None) -> dict:
    """A LeaderWorkerSet: ``replicas`` groups of ``size`` pods (one leader, ``size - 1`` workers).

    Args:
        name, namespace: the LWS's.
        size: pods per group (``leaderWorkerTemplate.size``), at least 1.
        gpus: ``nvidia.com/gpu`` requested and limited by every pod (0: none).
        replicas: groups.
        exclusive_topology: a node label (e.g. ``nvidia.com/gpu.clique``); when set, each group
            gets a domain of its own (annotation ``leaderworkerset.sigs.k8s.io/exclusive-topology``).
        image: the container image (the sim runs nothing).
        startup_policy: ``LeaderCreated`` or ``LeaderReady``.
        labels: extra labels of the LWS and its pods.
        node_selector: the pods' ``nodeSelector`` (e.g. to keep them on one fleet).

    Raises:
        ValueError: ``size`` or ``replicas`` below 1, or ``gpus`` negative.
    """
    if size < 1 or replicas < 1 or gpus < 0:
        raise ValueError(f"size {size} and replicas {replicas} must be at least 1, gpus {gpus} not negative")
    res = {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}} if gpus else {}
    pod = {"metadata": {"labels": dict(labels or {})},
           "spec": {"terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "server", "image": image, "resources": res}]}}
    if node_selector:
        pod["spec"]["nodeSelector"] = dict(node_selector)
    md: dict = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if exclusive_topology:
        md["annotations"] = {EXCLUSIVE_TOPOLOGY: exclusive_topology}
    return {"apiVersion": API, "kind": "LeaderWorkerSet", "metadata": md,
            "spec": {"replicas": replicas, "startupPolicy": startup_policy,
                     "leaderWorkerTemplate": {"size": size, "restartPolicy": "RecreateGroupOnPodRestart",
                                              "workerTemplate": pod}}}


def pods_of(c, namespace: str, name: str) -> list[dict]:
    """The pods of LWS ``name`` (by label ``leaderworkerset.sigs.k8s.io/name``)."""
    out = c.kubectl("get", "pods", "-n", namespace, "-l", f"{NAME_LABEL}={name}", "-o", "json").stdout
    return json.loads(out)["items"]


def wait_for_pods(c, namespace: str, name: str, count: int, timeout: float = 120) -> list[dict]:
    """Wait (at most ``timeout`` s) until LWS ``name`` has ``count`` pods bound to nodes
    (``spec.nodeName``) and return them.

    Raises:
        PeersError: fewer bound pods at the deadline (the message has the counts).
    """
    deadline = time.monotonic() + timeout
    pods: list[dict] = []
    while time.monotonic() < deadline:
        pods = pods_of(c, namespace, name)
        bound = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
        if len(bound) >= count:
            return bound
        time.sleep(0.5)
    bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
    raise PeersError(f"LeaderWorkerSet {namespace}/{name}: {bound} of {count} pods bound after {timeout:.0f}s "
                     f"({len(pods)} created)")
