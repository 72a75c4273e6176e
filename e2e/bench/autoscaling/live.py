"""The benchmark's live part: the real operator, a real Prometheus and the model-server simulator.

It uses the InferenceService runtime as it is today (a Deployment per service, queue-depth
mode), so it shows the live path works; its figures are not comparable with the simulated
runs. Minutes 8-16 of the trace (quiet, then a burst) are replayed time-compressed 6x
through the simulator (``ModelServerSim``: the replicas are the service's Ready pods on
kwok GPU nodes), scraped every second by Debian's Prometheus, with
``pollingIntervalSeconds: 1`` and a 10 s scale-down window.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from kubeforge.sim.modelserver import compressed, load_trace, percentile, trace_arrivals

from e2e.bench.autoscaling.arrivals import MODEL
from e2e.bench.lib.source import ROOT

__all__ = ["live"]


SERVICE = {"pools": None, "gpusPerReplica": 1, "minReplicas": 1, "maxReplicas": 8,
           "template": {"spec": {"terminationGracePeriodSeconds": 0,
                                 "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.0"}]}},
           "autoscaling": {"prometheusURL": None, "metric": "VLLMWaiting", "targetPerReplica": 4,
                           "pollingIntervalSeconds": 1,
                           "scaleDown": {"stabilizationWindowSeconds": 10, "maxStep": 2, "periodSeconds": 2}}}
"""The live service's spec; ``pools`` and ``prometheusURL`` are filled in per run."""


def live(cluster_name: str, trace_path: Path, compression: float = 6.0, start_min: float = 8, end_min: float = 16) -> int:
    """Run the live part on cluster ``cluster_name`` (started when absent); returns 1 when nothing scaled."""
    from kubernetes import client, config

    from kubeforge.sim.cluster import Cluster
    from kubeforge.sim.modelserver import ModelServerSim
    from kubeforge.sim.prometheus import Prometheus

    seconds = (end_min - start_min) * 60 / compression
    print("\n== LIVE: the real operator (Deployment runtime, queue-depth mode), a real Prometheus, the simulator ==")
    print(f"trace minutes {start_min:g}-{end_min:g} time-compressed {compression:g}x ({seconds:.0f}s); cluster "
          f"{cluster_name}; pollingIntervalSeconds 1, scale-down window 10s, target 4, replicas 1..8, scrape 1s")
    c = Cluster(cluster_name)
    was_running = c.running()
    ns, nodes = _bring_up(c)
    objs = client.CustomObjectsApi(config.new_client_from_config(config_file=c.kubeconfig))
    sim = ModelServerSim(kubeconfig=c.kubeconfig).start()
    prom = Prometheus([sim.target]).start()
    try:
        _create_service(c, sim, ns, prom.url, compression)
        asked = _asked(objs, ns)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (asked() == 1 and sim.snapshot(ns, "chat")["ready"] == 1):
            time.sleep(0.5)
        arrivals = trace_arrivals(load_trace(trace_path), MODEL, compression, start=start_min * 60, end=end_min * 60,
                                  offset=sim.clock() + 1)
        sim.replay(ns, "chat", arrivals)
        return _follow(sim, ns, asked, arrivals, seconds, compression)
    finally:
        prom.close()
        sim.stop()
        _tear_down(c, ns, nodes, was_running)


def _bring_up(c) -> tuple[str, list[dict]]:
    """The cluster (started when absent), the CRDs, the operator, a namespace and two 8-GPU nodes."""
    from kubeforge.sim.fleet import Fleet, node_manifests

    from e2e.bench.lib.cluster import apply_crds, start_operator

    c.up(None, log=lambda m: print(f"[cluster] {m}"))
    apply_crds(c, ROOT / "crds")
    start_operator(c)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", ns)
    f = Fleet.model_validate({"name": "bench", "nodePrefix": f"{ns}-", "groups": [
        {"name": "g", "count": 2, "capacityType": "on-demand", "gpu": {"count": 8},
         "labels": {"kubeforge.io/test-fleet": ns}}]})
    nodes = node_manifests(f)
    c.apply_nodes(nodes)
    return ns, nodes


def _create_service(c, sim, ns: str, prom_url: str, compression: float) -> None:
    """The GPUPool over the two nodes, the simulator's service and the InferenceService ``chat``."""
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": ns},
        "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/test-fleet": ns}}}}))
    sim.add_service(ns, "chat", compressed(MODEL, compression))
    spec = {**SERVICE, "pools": [ns], "autoscaling": {**SERVICE["autoscaling"], "prometheusURL": prom_url}}
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": "chat", "namespace": ns},
        "spec": spec}))


def _asked(objs, ns: str):
    """A reader of ``chat``'s ``status.desiredReplicas`` (None when unreadable)."""
    def asked() -> int | None:
        try:
            svc = objs.get_namespaced_custom_object("kubeforge.io", "v1alpha1", ns, "inferenceservices", "chat")
            return int((svc.get("status") or {}).get("desiredReplicas") or 0)
        except Exception:  # noqa: BLE001
            return None

    return asked


def _follow(sim, ns: str, asked, arrivals: list, seconds: float, compression: float) -> int:
    """Follow the replicas asked for while the replay runs (20 s more), print what happened;
    returns 1 when nothing scaled."""
    cur, patches, top, rep_s, lines = asked() or 1, 0, 0, 0.0, []
    t_start = time.monotonic()
    while time.monotonic() < t_start + seconds + 20:
        time.sleep(0.5)
        a = asked()
        snap = sim.snapshot(ns, "chat")
        if a is not None and a != cur:
            patches += 1
            lines.append(f"  t={time.monotonic() - t_start:5.1f}s replicas {cur} -> {a} "
                         f"(waiting {snap['waiting']}, ready {snap['ready']})")
            cur = a
        top = max(top, cur)
        rep_s += cur * 0.5 * compression  # trace time
    snap = sim.snapshot(ns, "chat")
    waits = [w * compression for w in snap["waits"]]
    print("\n".join(lines) or "  (no scale events)")
    print(f"live: {len(arrivals)} requests, {snap['completed']} completed, {snap['aborted']} aborted; "
          f"queue wait p50 {percentile(waits, 50):.1f}s p95 {percentile(waits, 95):.1f}s (trace time); "
          f"{patches} patches, max {top} replicas, {rep_s / 60:.0f} replica-minutes (trace time)")
    return 0 if patches else 1


def _tear_down(c, ns: str, nodes: list[dict], was_running: bool) -> None:
    """Delete what the run made; stop the operator and the cluster when the run started them."""
    from e2e.bench.lib.cluster import stop_operator

    c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    c.kubectl("delete", "gpupool", ns, "--ignore-not-found", "--wait=false", check=False)
    c.kubectl("delete", "node", *[n["metadata"]["name"] for n in nodes], "--ignore-not-found", "--wait=false",
              check=False)
    if not was_running and not os.environ.get("KUBEFORGE_KEEP_CLUSTER"):
        stop_operator(c)
        c.down(log=lambda m: print(f"[cluster] {m}"))
