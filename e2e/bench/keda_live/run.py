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
from e2e.bench.keda_live.summary import Sample, SystemFigures, by_arrival, system_figures
from e2e.bench.lib.cluster import apply_crds, apply_fleet, make_namespace, start_operator, stop_operator
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.timing import say, wait_until

__all__ = ["MODES", "NAME", "SCALE_UP", "SLO_WINDOW_DEFAULT", "Segment", "kubeforge_spec", "note_conditions", "run_system",
           "slo_spec"]

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


SCALE_UP = {
    "spec": None,
    "hpa-default": {"stabilizationWindowSeconds": 0, "maxStep": 4, "periodSeconds": 15},
}
"""kubeforge's ``autoscaling.scaleUp`` per ``--kubeforge-scale-up``: ``spec`` leaves the live
spec's (:data:`e2e.bench.autoscaling.live.SERVICE`: none, so kubeforge's default of 1 per 10 s,
lifted in panic mode); ``hpa-default`` is the Kubernetes HPA's default scale-up, which the KEDA
side runs with (no stabilization, at most max(100 %, 4 pods) per 15 s): with replicas 1..8 that
is exactly 4 pods per 15 s (from n <= 4 replicas both allow n + 4; from n >= 4 both reach 8)."""


MODES = ("queue", "slo")
"""kubeforge's autoscaling mode per ``--kubeforge-mode``: ``queue``, the live SERVICE's
queue-depth mode (``VLLMWaiting``, 4 a replica, the KEDA side's signal and threshold); ``slo``,
its latency SLO mode sized for the attainment's own TTFT target (:func:`slo_spec`)."""

#: kubeforge's API default ``slo.windowSeconds`` and its least allowed value, s.
SLO_WINDOW_DEFAULT, SLO_WINDOW_MIN = 60, 10


def slo_spec(ttft_trace_seconds: float, compression: float, percentile: int = 99,
             window_trace_seconds: float = SLO_WINDOW_DEFAULT) -> dict:
    """``autoscaling.slo`` for the TTFT target the attainment is judged against, on the wall clock
    of a replay compressed ``compression`` times.

    The simulator runs the compressed replica on the wall clock: its
    ``vllm:time_to_first_token_seconds`` (and every other latency and rate kubeforge reads) is in
    wall seconds, a trace second being ``1 / compression`` of one, and the bench multiplies the
    TTFTs by ``compression`` before judging them against ``ttft_trace_seconds``. So the target is
    ``ttft_trace_seconds / compression`` (2 s of trace time: 0.333 s at 6x), and the window of the
    measured rates and percentiles, ``window_trace_seconds`` of trace time (the API's default 60 s,
    as the autoscaling bench's SLO row runs at trace speed), is ``window_trace_seconds /
    compression`` wall seconds, at least the API's 10 (10 at 6x: ten 1 s scrapes).

    Args:
        ttft_trace_seconds: the TTFT target, trace seconds (> 0).
        compression: trace seconds per wall second (> 0).
        percentile: the percentile the target is for (the autoscaling bench's SLO row: 99).
        window_trace_seconds: the window, trace seconds.

    Returns:
        ``{"timeToFirstTokenSeconds", "percentile", "windowSeconds"}``.

    Raises:
        ValueError: a target or compression that is not positive.
    """
    if not ttft_trace_seconds > 0 or not compression > 0:
        raise ValueError(f"need a positive TTFT target and compression, got {ttft_trace_seconds}, {compression}")
    return {"timeToFirstTokenSeconds": round(ttft_trace_seconds / compression, 6), "percentile": int(percentile),
            "windowSeconds": max(SLO_WINDOW_MIN, int(round(window_trace_seconds / compression)))}


def kubeforge_spec(pool: str, prom_url: str, scale_up: str = "spec", slo: dict | None = None) -> dict:
    """The InferenceService's spec: the live SERVICE on ``pool``, reading ``prom_url``, with
    ``autoscaling.scaleUp`` as :data:`SCALE_UP` says for ``scale_up``; with ``slo`` (an
    ``autoscaling.slo``, :func:`slo_spec`) in SLO mode instead of queue depth (no
    ``targetPerReplica``, which the API refuses beside ``slo``; bounds, polling and scale-down
    as before).

    Raises:
        KeyError: ``scale_up`` is not one of :data:`SCALE_UP`.
    """
    auto = {**SERVICE["autoscaling"], "prometheusURL": prom_url}
    if SCALE_UP[scale_up] is not None:
        auto["scaleUp"] = dict(SCALE_UP[scale_up])
    if slo is not None:
        auto.pop("targetPerReplica", None)
        auto["slo"] = dict(slo)
    return {**SERVICE, "pools": [pool], "autoscaling": auto}


def _decisions(c):
    """A reader of the operator's ``kubeforge_autoscaler_decisions_total`` (all directions), or None."""
    import urllib.request

    from e2e.bench.lib.cluster import operator_metrics_port
    from e2e.bench.lib.metrics import parse_counter

    port = operator_metrics_port(c)

    def read() -> float | None:
        if port is None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        return sum(parse_counter(text, "kubeforge_autoscaler_decisions_total").values())

    return read


def _kubeforge(c, api, ns: str, prom_url: str, scale_up: str = "spec", slo: dict | None = None):
    """Start the operator, create the pool and the InferenceService; returns the look: ``(asked:
    status.desiredReplicas, seen: status.lastMetricValue, decisions: the operator's counter)``.
    The look's ``notes`` lists ``(monotonic s, message)`` each time the ``ScalingActive`` message
    (the decision's sentence: SLO mode's queue model with its numbers) or ``SLOMet``'s changed."""
    from kubernetes import client

    apply_crds(c, ROOT / "crds")
    start_operator(c)
    objs = client.CustomObjectsApi(api)
    objs.create_cluster_custom_object("kubeforge.io", "v1alpha1", "gpupools", {
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": ns},
        "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/test-fleet": ns}}}})
    objs.create_namespaced_custom_object("kubeforge.io", "v1alpha1", ns, "inferenceservices", {
        "apiVersion": "kubeforge.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": NAME, "namespace": ns},
        "spec": kubeforge_spec(ns, prom_url, scale_up, slo)})
    decisions = _decisions(c)
    notes: list[tuple[float, str]] = []

    def look() -> tuple[int | None, float | None, float | None]:
        try:
            svc = objs.get_namespaced_custom_object("kubeforge.io", "v1alpha1", ns, "inferenceservices", NAME,
                                                    _request_timeout=5)
            st = svc.get("status") or {}
            seen = st.get("lastMetricValue")
            asked, seen = int(st.get("desiredReplicas") or 0), None if seen is None else float(seen)
            note_conditions(notes, st.get("conditions") or [])
        except Exception:  # noqa: BLE001 - a look that failed counts as unknown
            asked, seen = None, None
        return asked, seen, decisions()

    look.notes = notes  # type: ignore[attr-defined]
    return look


def note_conditions(notes: list[tuple[float, str]], conditions: list[dict]) -> None:
    """Append ``(now, "ScalingActive: ...; SLOMet: ...")`` to ``notes`` when it differs from the last."""
    by_type = {c.get("type"): c for c in conditions if isinstance(c, dict)}
    parts = [f"{t}: {by_type[t].get('message', '')}" for t in ("ScalingActive", "SLOMet") if t in by_type]
    text = " | ".join(parts)
    if text and (not notes or notes[-1][1] != text):
        notes.append((time.monotonic(), text))


def keda_settings(polling_seconds: int) -> dict:
    """What the KEDA side is given (the ScaledObject's knobs), from kubeforge's live spec."""
    a = SERVICE["autoscaling"]
    return {"threshold": a["targetPerReplica"], "minReplicaCount": SERVICE["minReplicas"],
            "maxReplicaCount": SERVICE["maxReplicas"], "pollingInterval": polling_seconds,
            "scaleDown": a["scaleDown"]}


def _keda(c, api, ns: str, prom_url: str, polling_seconds: int):
    """Create the Deployment (1 replica) and its ScaledObject; returns the look: ``(asked: the
    Deployment's spec.replicas, which the HPA sets, seen: the queue the HPA last read, None)``."""
    from kubernetes import client

    k = keda_settings(polling_seconds)
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(ns, deployment(ns, NAME, SERVICE["template"], {"kubeforge.io/test-fleet": ns},
                                                     SERVICE["gpusPerReplica"]))
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "keda.sh", "v1alpha1", ns, "scaledobjects",
        scaled_object(ns, NAME, prom_url, k["threshold"], k["minReplicaCount"], k["maxReplicaCount"],
                      k["pollingInterval"], k["scaleDown"]))

    scaling = client.AutoscalingV2Api(api)

    def look() -> tuple[int | None, float | None, None]:
        try:
            asked = int(apps.read_namespaced_deployment(NAME, ns, _request_timeout=5).spec.replicas or 0)
        except Exception:  # noqa: BLE001 - a look that failed counts as unknown
            return None, None, None
        return asked, _hpa_seen(scaling, ns), None

    return look


def _hpa_seen(scaling, ns: str) -> float | None:
    """The queue the HPA last read: its External metric's average value times its current replicas."""
    from kubernetes.utils import parse_quantity

    try:
        st = scaling.read_namespaced_horizontal_pod_autoscaler(f"keda-hpa-{NAME}", ns, _request_timeout=5).status
        avg = st.current_metrics[0].external.current.average_value
        return float(parse_quantity(avg)) * (st.current_replicas or 0)
    except Exception:  # noqa: BLE001 - no HPA yet, no metric yet: unknown
        return None


def _follow(sim, ns: str, look, seg: Segment) -> list[Sample]:
    """Look every half second for the segment and ``seg.tail`` s more."""
    samples, t0 = [], time.monotonic()
    end = t0 + seg.seconds + seg.tail
    next_say = t0 + 15
    while True:  # bounded by ``end``
        now = time.monotonic()
        if now >= end:
            break
        snap = sim.snapshot(ns, NAME)
        asked, seen, decisions = look()
        samples.append(Sample(now - t0, snap["replicas"], snap["ready"], asked, snap["waiting"], seen, decisions))
        if now >= next_say:
            s = samples[-1]
            say(f"  t={s.t:5.1f}s asked {s.asked}, pods {s.replicas}, ready {s.ready}, waiting {snap['waiting']}")
            next_say += 15
        time.sleep(max(0.0, 0.5 - (time.monotonic() - now)))
    return samples


def run_system(c, api, system: str, seg: Segment, polling_seconds: int = 1, stack=None,
               scale_up: str = "spec", slo: dict | None = None) -> SystemFigures:
    """Run the segment under ``system`` (``kubeforge`` or ``keda``; ``stack``: the started
    :class:`~e2e.bench.keda_live.stack.KedaStack`; ``scale_up``: kubeforge's scale-up, a key of
    :data:`SCALE_UP`; ``slo``: kubeforge's ``autoscaling.slo``, None for queue-depth mode) and
    return its figures. Cleans up after itself (namespace, nodes, pool, operator), whatever
    happens.

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
        look = (_kubeforge(c, api, ns, prom.url, scale_up, slo) if system == "kubeforge"
                else _keda(c, api, ns, prom.url, polling_seconds))
        if not wait_until(lambda: look()[0] == 1 and sim.snapshot(ns, NAME)["ready"] == 1, 120,
                          f"{system}: 1 replica asked for and Ready", 0.5):
            raise RuntimeError(f"{system}: the service never had its first Ready replica (see the logs)")
        base = sim.clock() + 1  # the segment's start on the simulator's clock
        arrivals = trace_arrivals(load_trace(seg.trace), MODEL, seg.compression, start=seg.start_min * 60,
                                  end=seg.end_min * 60, offset=base)
        say(f"{system}: replaying {len(arrivals)} requests over {seg.seconds:.0f}s (+{seg.tail:.0f}s)")
        sim.replay(ns, NAME, arrivals)
        t0 = time.monotonic()
        samples = _follow(sim, ns, look, seg)
        snap = sim.snapshot(ns, NAME)
        f = system_figures(system, len(arrivals), snap["ttfts"], snap["waits"], snap["completed"],
                           snap["aborted"], samples, seg.compression, seg.ttft_slo, (load0, os.getloadavg()[0]),
                           float(SERVICE["autoscaling"]["targetPerReplica"]))
        f.notes = [(round((t - t0) * seg.compression, 1), m) for t, m in getattr(look, "notes", [])]
        f.by_arrival = by_arrival([(r.arrival - base) * seg.compression for r in arrivals],
                                  [(a - base) * seg.compression for a, x in zip(snap.get("arrivals", []), snap["ttfts"])
                                   if x * seg.compression <= seg.ttft_slo])
        return f
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
