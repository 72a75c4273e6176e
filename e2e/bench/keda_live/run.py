"""One system's run of the compressed trace segment on the sim cluster.

Both systems get the same: a fresh namespace with two 8-GPU kwok nodes of their own, a fresh
model-server simulator (:class:`kubeforge.sim.modelserver.ModelServerSim`, the service's model
time-compressed) scraped every second by a fresh Debian Prometheus, one Ready replica before the
replay starts, the same arrivals, and the same looks every half second (the pods that exist, the
Ready ones, the replicas asked for), for the segment and 20 s after it.

- kubeforge: the operator and the InferenceService of the autoscaling bench's live part
  (:data:`e2e.bench.autoscaling.live.SERVICE`: queue-depth mode on ``VLLMWaiting``, target 4 a
  replica, replicas 1..8, polling 1 s, scale-down window 10 s, -2 every 2 s);
- keda: a Deployment of the same pods and a ScaledObject (:mod:`e2e.bench.keda_live.objects`)
  that KEDA's operator turns into an HPA, which kube-controller-manager runs.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kubeforge.sim.fleet import Fleet
from kubeforge.sim.modelserver import compressed, load_trace, trace_arrivals

from e2e.bench.autoscaling.arrivals import MODEL
from e2e.bench.autoscaling.live import SERVICE
from e2e.bench.keda_live.objects import deployment, scaled_object
from e2e.bench.keda_live.summary import Sample, SystemFigures, system_figures
from e2e.bench.lib.cluster import apply_crds, apply_fleet, make_namespace, start_operator, stop_operator
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.timing import say, wait_until

__all__ = ["NAME", "Segment", "run_system"]

NAME = "chat"
"""The service's name (the InferenceService, or the Deployment and its ScaledObject)."""


@dataclass(frozen=True)
class Segment:
    """What is replayed and how it is judged.

    Attributes:
        trace: the trace CSV.
        start_min, end_min: the trace minutes replayed.
        compression: trace seconds per wall second.
        ttft_slo: TTFT target, trace seconds.
        tail: wall seconds followed after the last arrival.
    """

    trace: Path
    start_min: float = 8.0
    end_min: float = 16.0
    compression: float = 6.0
    ttft_slo: float = 2.0
    tail: float = 20.0

    @property
    def seconds(self) -> float:
        """Wall seconds of the replay."""
        return (self.end_min - self.start_min) * 60 / self.compression


def _nodes(c, api, ns: str) -> list[dict]:
    """Two 8-GPU kwok nodes of the run's own, labelled ``kubeforge.io/test-fleet=<ns>``."""
    f = Fleet.model_validate({"name": ns, "nodePrefix": f"{ns}-", "groups": [
        {"name": "g", "count": 2, "capacityType": "on-demand", "gpu": {"count": 8},
         "labels": {"kubeforge.io/test-fleet": ns}}]})
    return apply_fleet(c, api, f, ready_timeout=120)


def _kubeforge(c, api, ns: str, prom_url: str):
    """Start the operator, create the pool and the InferenceService; returns the reader of
    ``status.desiredReplicas``."""
    from kubernetes import client

    apply_crds(c, ROOT / "crds")
    start_operator(c)
    objs = client.CustomObjectsApi(api)
    objs.create_cluster_custom_object("kubeforge.io", "v1alpha1", "gpupools", {
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": ns},
        "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/test-fleet": ns}}}})
    spec = {**SERVICE, "pools": [ns], "autoscaling": {**SERVICE["autoscaling"], "prometheusURL": prom_url}}
    objs.create_namespaced_custom_object("kubeforge.io", "v1alpha1", ns, "inferenceservices", {
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": NAME, "namespace": ns},
        "spec": spec})

    def asked() -> int | None:
        try:
            svc = objs.get_namespaced_custom_object("kubeforge.io", "v1alpha1", ns, "inferenceservices", NAME,
                                                    _request_timeout=5)
            return int((svc.get("status") or {}).get("desiredReplicas") or 0)
        except Exception:  # noqa: BLE001 - a look that failed counts as unknown
            return None

    return asked


def keda_settings(polling_seconds: int) -> dict:
    """What the KEDA side is given (the ScaledObject's knobs), from kubeforge's live spec."""
    a = SERVICE["autoscaling"]
    return {"threshold": a["targetPerReplica"], "minReplicaCount": SERVICE["minReplicas"],
            "maxReplicaCount": SERVICE["maxReplicas"], "pollingInterval": polling_seconds,
            "scaleDown": a["scaleDown"]}


def _keda(c, api, ns: str, prom_url: str, polling_seconds: int):
    """Create the Deployment (1 replica) and its ScaledObject; returns the reader of the
    Deployment's ``spec.replicas`` (what the HPA sets)."""
    from kubernetes import client

    k = keda_settings(polling_seconds)
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(ns, deployment(ns, NAME, SERVICE["template"], {"kubeforge.io/test-fleet": ns},
                                                     SERVICE["gpusPerReplica"]))
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "keda.sh", "v1alpha1", ns, "scaledobjects",
        scaled_object(ns, NAME, prom_url, k["threshold"], k["minReplicaCount"], k["maxReplicaCount"],
                      k["pollingInterval"], k["scaleDown"]))

    def asked() -> int | None:
        try:
            return int(apps.read_namespaced_deployment(NAME, ns, _request_timeout=5).spec.replicas or 0)
        except Exception:  # noqa: BLE001 - a look that failed counts as unknown
            return None

    return asked


def _follow(sim, ns: str, asked, seg: Segment) -> list[Sample]:
    """Look every half second for the segment and ``seg.tail`` s more."""
    samples, t0 = [], time.monotonic()
    end = t0 + seg.seconds + seg.tail
    next_say = t0 + 15
    while True:  # bounded by ``end``
        now = time.monotonic()
        if now >= end:
            break
        snap = sim.snapshot(ns, NAME)
        samples.append(Sample(now - t0, snap["replicas"], snap["ready"], asked()))
        if now >= next_say:
            s = samples[-1]
            say(f"  t={s.t:5.1f}s asked {s.asked}, pods {s.replicas}, ready {s.ready}, waiting {snap['waiting']}")
            next_say += 15
        time.sleep(max(0.0, 0.5 - (time.monotonic() - now)))
    return samples


def run_system(c, api, system: str, seg: Segment, polling_seconds: int = 1, stack=None) -> SystemFigures:
    """Run the segment under ``system`` (``kubeforge`` or ``keda``; ``stack``: the started
    :class:`~e2e.bench.keda_live.stack.KedaStack`) and return its figures. Cleans up after
    itself (namespace, nodes, pool, operator), whatever happens.

    Raises:
        RuntimeError: the service never had its first Ready replica.
    """
    from kubeforge.sim.modelserver import ModelServerSim
    from kubeforge.sim.prometheus import Prometheus

    ns = f"kl-{system}-{uuid.uuid4().hex[:5]}"
    make_namespace(c, api, ns)
    nodes = _nodes(c, api, ns)
    sim = ModelServerSim(kubeconfig=c.kubeconfig).start()
    prom = Prometheus([sim.target]).start()
    load0 = os.getloadavg()[0]
    try:
        sim.add_service(ns, NAME, compressed(MODEL, seg.compression))
        asked = (_kubeforge(c, api, ns, prom.url) if system == "kubeforge"
                 else _keda(c, api, ns, prom.url, polling_seconds))
        if not wait_until(lambda: asked() == 1 and sim.snapshot(ns, NAME)["ready"] == 1, 120,
                          f"{system}: 1 replica asked for and Ready", 0.5):
            raise RuntimeError(f"{system}: the service never had its first Ready replica (see the logs)")
        arrivals = trace_arrivals(load_trace(seg.trace), MODEL, seg.compression, start=seg.start_min * 60,
                                  end=seg.end_min * 60, offset=sim.clock() + 1)
        say(f"{system}: replaying {len(arrivals)} requests over {seg.seconds:.0f}s (+{seg.tail:.0f}s)")
        sim.replay(ns, NAME, arrivals)
        samples = _follow(sim, ns, asked, seg)
        snap = sim.snapshot(ns, NAME)
        return system_figures(system, len(arrivals), snap["ttfts"], snap["waits"], snap["completed"],
                              snap["aborted"], samples, seg.compression, seg.ttft_slo, (load0, os.getloadavg()[0]))
    finally:
        prom.close()
        sim.stop()
        _clean_up(c, system, ns, nodes)


def _clean_up(c, system: str, ns: str, nodes: list[dict]) -> None:
    """Delete what the run made; stop kubeforge's operator after its run."""
    if system == "kubeforge":
        c.kubectl("delete", "inferenceservice", NAME, "-n", ns, "--ignore-not-found", "--wait=false", check=False)
        stop_operator(c)
        c.kubectl("delete", "gpupool", ns, "--ignore-not-found", "--wait=false", check=False)
    else:
        c.kubectl("delete", "scaledobject", NAME, "-n", ns, "--ignore-not-found", "--wait=false", check=False)
    c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    c.kubectl("delete", "node", *[n["metadata"]["name"] for n in nodes], "--ignore-not-found", "--wait=false",
              check=False)
