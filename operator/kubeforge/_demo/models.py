"""The demo's model-cache step (issue 29): a model kept warm on a node, and a cached start beside
a cold one.

On a few H100 nodes left free after the burst, the step makes a GPUPool of their own
(:data:`POOL`, the nodes by ``kubernetes.io/hostname``) with ``spec.modelCache.keepWarm`` of a
tiny model on 1 node, runs one real node agent a node (:class:`kubeforge.sim.cacheagents.LocalAgents`:
threads of this process, each node's disk a folder) against a local Hugging Face Hub stand-in
(:class:`kubeforge.sim.hub.HubStandIn`, a 256 KiB repository), waits for the warm copy, then
serves the model (``spec.model`` hf://..., pinned to the stand-in's commit) with 2 replicas of 8
GPUs: one fits on the warm node (placement prefers it: Cached), the other goes to another node
(Cold: that node's agent fetches its copy). It prints each node's copies, the pool's ``Models``
column, and each replica's node, weights source and the start time
:mod:`kubeforge.sim.weights` models for a 70B model (kwok runs no engine: the times are the
model's; the placement, the copies and the sources are what the operator and the agents did).
Then it deletes what it made. Every wait is bounded; a failure is a problem of the demo.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from kubeforge.modelcache import short_name
from kubeforge.objects import pod_requests
from kubeforge.sim.cacheagents import LocalAgents
from kubeforge.sim.hub import HubStandIn, make_model_repo
from kubeforge.sim.weights import DEFAULT_TIMES, GB, download_seconds, local_load_seconds, start_seconds

from .kube import wait_until
from .scene import NAMESPACE, DemoResult, say

__all__ = ["LARGE_MODEL_BYTES", "NODES", "POOL", "REPO", "SERVICE", "WAIT_SECONDS", "choose_nodes", "show"]

POOL = "h100-models"
"""The step's GPUPool: a few free nodes of ``h100`` (they stay in ``h100`` too)."""
SERVICE = "tiny-llama"
"""The step's InferenceService (namespace :data:`~kubeforge._demo.scene.NAMESPACE`)."""
REPO = "kubeforge-demo/tiny-llama"
"""The model repository the hub stand-in serves (256 KiB of weights in 2 shards)."""
NODES = 3
"""Nodes of the step's pool: one keeps the model warm, one gets the cold replica, one stays empty."""
WAIT_SECONDS = 90.0
"""Longest wait of each step (the warm copy, both replicas' weights, the clean-up), s."""
LARGE_MODEL_BYTES = 141 * GB
"""A 70B model in BF16 (70.6 B parameters x 2 bytes): the size the printed start times are for."""
GPUS = "nvidia.com/gpu"


def choose_nodes(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], count: int = NODES) -> list[str]:
    """Up to ``count`` schedulable nodes with 8 GPUs and no pod holding one, from the NVLink domain
    (``nvidia.com/gpu.clique``) with the most such nodes (ties: the first domain by name).

    Args:
        nodes: The cluster's Node objects (JSON dicts).
        pods: Every pod (terminating ones included: they hold their GPUs until gone).
    """
    held = {(p.get("spec") or {}).get("nodeName") for p in pods
            if int(pod_requests(p.get("spec") or {}).get(GPUS, 0)) > 0}
    by_domain: dict[str, list[str]] = {}
    for n in nodes:
        name, labels = n["metadata"]["name"], n["metadata"].get("labels") or {}
        if name in held or (n.get("spec") or {}).get("unschedulable") or (n.get("spec") or {}).get("taints"):
            continue
        if str((n.get("status") or {}).get("allocatable", {}).get(GPUS, "0")) != "8":
            continue
        by_domain.setdefault(labels.get("nvidia.com/gpu.clique", ""), []).append(name)
    if not by_domain:
        return []
    best = sorted(by_domain.items(), key=lambda kv: (-len(kv[1]), kv[0]))[0][1]
    return sorted(best)[:count]


def _pool(nodes: list[str], model: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": POOL},
            "spec": {"nodeSelector": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]},
                "modelCache": {"keepWarm": [{"model": model, "nodes": 1}]}}}


def _service(model: dict[str, Any], prometheus_url: str) -> dict[str, Any]:
    return {"apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"pools": [POOL], "gpusPerReplica": 8, "minReplicas": 2, "maxReplicas": 2, "drainSeconds": 0,
                     "model": model,
                     "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                         {"name": "vllm", "image": "vllm/vllm-openai:v0.10.0", "command": ["vllm", "serve"]}]}},
                     "autoscaling": {"prometheusURL": prometheus_url}}}


def _span(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s ({s // 60} min {s % 60:02d} s)"


class _Step:
    """One run of the step: the cluster, the demo's client, what it made."""

    def __init__(self, c: Any, kube: Any, emit: Callable[[str], None], res: DemoResult) -> None:
        self.c, self.kube, self.emit, self.res = c, kube, emit, res
        self.nodes: list[str] = []

    def problem(self, text: str) -> None:
        self.res.problems.append(f"model cache step: {text}")
        say(self.res.problems[-1])

    def apply(self, doc: dict[str, Any]) -> None:
        self.c.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))

    def copies(self, node: str) -> tuple[dict[str, str], dict[str, list[str]]]:
        """(key -> phase of the node's copies, key -> the reasons its spec wants it)."""
        obj = self.kube.get("modelcachenodes", node)
        have = {m["key"]: m["phase"] for m in (obj.get("status") or {}).get("models") or []}
        want = {m["key"]: m.get("reasons") or [] for m in (obj.get("spec") or {}).get("models") or []}
        return have, want

    def groups(self) -> list[dict[str, Any]]:
        return (self.kube.get("inferenceservices", SERVICE, NAMESPACE).get("status") or {}).get("groups") or []

    def wait(self, pred: Callable[[], Any], what: str) -> Any:
        got = wait_until(pred, WAIT_SECONDS)
        if not got:
            self.problem(f"{what}: not after {WAIT_SECONDS:.0f}s")
        return got


def _warm_node(step: _Step) -> str | None:
    """The node whose copy the keepWarm entry asked for, once that copy is Ready."""
    for n in step.nodes:
        have, want = step.copies(n)
        if any("KeepWarm" in r and have.get(k) == "Ready" for k, r in want.items()):
            return n
    return None


def _replicas_done(step: _Step) -> bool:
    """Both groups placed with their weights' source, Loaded, every placed node's copy Ready and the
    pool's Models column counting them."""
    gs = [g for g in step.groups() if g.get("nodes") and (g.get("weights") or {}).get("phase") == "Loaded"]
    if len(gs) != 2:
        return False
    for n in {n for g in gs for n in g["nodes"]}:
        if "Ready" not in step.copies(n)[0].values():
            return False
    summary = (step.kube.get("gpupools", POOL).get("status") or {}).get("modelsSummary") or ""
    return summary.endswith(f" 2/{len(step.nodes)}")


def _print(step: _Step, uri: str, commit: str, warm: str, waited: float) -> None:
    emit = step.emit
    emit(f"  keepWarm copy Ready on {warm} {waited:.1f}s after the pool asked; then InferenceService {SERVICE}: "
         f"2 replicas x 8 GPUs, spec.model {uri} @ {commit[:12]}")
    rows = sorted(step.groups(), key=lambda g: g.get("index", 0))
    for g in rows:
        w = g.get("weights") or {}
        cached = w.get("source") == "Cached"
        emit(f"  replica {g.get('index')}: node {', '.join(g.get('nodes') or [])}, weights {w.get('source')} "
             f"({w.get('phase')}); modelled start of a 70B model {_span(start_seconds(LARGE_MODEL_BYTES, cached))}")
    for n in step.nodes:
        have, want = step.copies(n)
        text = ", ".join(f"{short_name(uri)} {have.get(k, 'Pending')} (wanted: {', '.join(want.get(k) or []) or '-'})"
                         for k in sorted(set(have) | set(want)))
        emit(f"  ModelCacheNode {n}: {text or 'no copy (nothing wanted here)'}")
    for line in step.c.kubectl("get", "gpupool", POOL).stdout.rstrip().splitlines():
        emit(f"  {line}")
    sources = sorted((g.get("weights") or {}).get("source") for g in rows)
    if sources != ["Cached", "Cold"]:
        step.problem(f"expected one Cached and one Cold replica, got {sources}")
    t = DEFAULT_TIMES
    emit(f"  kwok runs no engine: the start times are kubeforge.sim.weights' model for a 70B model in BF16 "
         f"({LARGE_MODEL_BYTES / GB:.0f} GB): cached = imports {t.imports_s:.0f} s + local read "
         f"{local_load_seconds(LARGE_MODEL_BYTES):.0f} s at {t.local_read_bps / GB:g} GB/s + engine init "
         f"{t.engine_init_s:.0f} s; cold adds the download, {download_seconds(LARGE_MODEL_BYTES):.0f} s at "
         f"{t.download_bps / GB:g} GB/s")
    emit("  (rates from llm-d's Qwen3-32B start breakdown and NetEase/Fluid's ~30 s warm 70B start); the placement, "
         "the copies and the sources above are what the operator and the real node agents did")


def _serve(step: _Step, hub: HubStandIn, prometheus_url: str) -> None:
    """Keep the model warm on 1 node, serve it with 2 replicas, print what happened."""
    commit = hub.commit(REPO)
    uri = f"hf://{REPO}"
    model = {"uri": uri, "revision": commit}
    t = time.monotonic()
    step.apply(_pool(step.nodes, model))
    warm = step.wait(lambda: _warm_node(step), "the keepWarm copy Ready")
    if not warm:
        return
    waited = time.monotonic() - t
    step.apply(_service(model, prometheus_url))
    step.wait(lambda: _replicas_done(step), f"{SERVICE}'s 2 replicas Loaded with their nodes' copies Ready")
    _print(step, uri, commit, warm, waited)


def _clean(step: _Step) -> None:
    """Delete the service (and wait for its pods to go), then the pool, and wait until the operator
    wants nothing on the nodes (their ModelCacheNodes go once the agents stopped: :func:`show`)."""
    c = step.c
    c.kubectl("delete", "inferenceservice", SERVICE, "-n", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
    step.wait(lambda: not step.kube.pods(NAMESPACE, f"kubeforge.io/inference-service={SERVICE}", terminating=True)
              and not step.kube.get("inferenceservices", SERVICE, NAMESPACE), f"{SERVICE} and its pods gone")
    c.kubectl("delete", "gpupool", POOL, "--ignore-not-found", "--wait=false", check=False)
    step.wait(lambda: not step.kube.get("gpupools", POOL)
              and all(not any(step.copies(n)[1]) for n in step.nodes), "the nodes' caches wanted nothing")


def _warnings(step: _Step, since: float) -> None:
    """Warning Events since ``since`` (unix seconds): each is a problem, as in the rest of the demo."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since - 1))
    warn = [e for e in step.kube.events(None, "type=Warning")
            if (e.get("lastTimestamp") or e.get("eventTime") or "9") >= stamp]
    lines = [f"{e['involvedObject'].get('kind')} {e['involvedObject'].get('name')}: {e.get('reason')}: "
             f"{e.get('message')}" for e in warn]
    step.emit("  Warning Events during the step: " + ("none" if not lines else str(len(lines))))
    for w in lines[:10]:
        step.emit(f"    {w}")
    step.res.warnings += lines
    if lines:
        step.problem(f"{len(lines)} Warning Events")


def show(c: Any, kube: Any, stack: Any, emit: Callable[[str], None], res: DemoResult) -> None:
    """Run the step (see the module) on cluster ``c``.

    Args:
        c: The :class:`~kubeforge.sim.cluster.Cluster`.
        kube: The demo's :class:`~kubeforge._demo.kube.Kube`.
        stack: The started serving stack: its simulator exports the service's queue (0) and its
            Prometheus scrapes it, so the autoscaler reads a metric and warns of nothing.
        emit: Prints one line of the demo's output.
        res: The demo's result: problems and Warning Events are added to it.
    """
    since = time.time()
    step = _Step(c, kube, emit, res)
    if stack.sim is None or stack.prometheus is None:
        step.problem("the serving stack did not start")
        return
    step.nodes = choose_nodes(kube.nodes(), kube.pods(None, terminating=True))
    if len(step.nodes) < 2:
        step.problem(f"needs 2 free 8-GPU nodes, found {len(step.nodes)}")
        return
    emit(f"Model weights on the nodes (issue 29): GPUPool {POOL} over {len(step.nodes)} free nodes "
         f"({', '.join(step.nodes)}), keepWarm of {REPO} on 1 of them; one node agent a node "
         "(kubeforge.cacheagent, threads here), fetching from a local Hugging Face Hub stand-in")
    folder = Path(tempfile.mkdtemp(prefix="kubeforge-demo-models-"))
    make_model_repo(folder / "hub", REPO, weights_bytes=256 << 10)
    stack.sim.add_service(NAMESPACE, SERVICE)
    try:
        with HubStandIn(folder / "hub") as hub, LocalAgents(str(c.kubeconfig), folder / "disks", hub.url) as agents:
            agents.start(step.nodes)
            try:
                _serve(step, hub, stack.prometheus.url)
            finally:
                _clean(step)
        # the agents stopped: their copies go with the step's folder, so their objects go too (a
        # later run on this cluster then fetches anew instead of trusting a status of gone copies)
        c.kubectl("delete", "modelcachenode", *step.nodes, "--ignore-not-found", "--wait=false", check=False)
        _warnings(step, since)
    finally:
        stack.sim.remove_service(NAMESPACE, SERVICE)
        shutil.rmtree(folder, ignore_errors=True)
    say(f"model cache step done in {time.time() - since:.1f}s")
