"""The autoscalers the benchmark compares, each as a decision loop over the emulated Prometheus.

Each has ``name``, ``drain`` (whether its scale-down drains, kubeforge only) and
``tick(now, current, view) -> int | None`` (``view``: the replay, with ``view.prom``,
``view.ready()``, ``view.pending()``). What each reads and how often is what its
documentation says; the sources are cited on each class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kubeforge.api import InferenceServiceSpec
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, decide

__all__ = ["Bounds", "DynamoLoad", "Hpa", "KedaHpa", "KubeforgeQueue", "KubeforgeSLO", "LlmdSaturation",
           "SLO", "kubeforge_policy"]


@dataclass(frozen=True)
class Bounds:
    """What every autoscaler is given: replica bounds and the queue-depth target.

    Attributes:
        min_replicas: Fewest replicas (``spec.minReplicas``; KEDA ``minReplicaCount``), >= 1.
        max_replicas: Most replicas (``spec.maxReplicas``; KEDA ``maxReplicaCount``; llm-d's
            HPA ``maxReplicas``; Dynamo's GPU budget, one GPU group per replica).
        target: Waiting requests per replica for the queue-depth autoscalers
            (``autoscaling.targetPerReplica``, KEDA ``threshold``).
    """

    min_replicas: int = 1
    max_replicas: int = 16
    target: float = 4.0


@dataclass(frozen=True)
class SLO:
    """The latency target of a run: TTFT within ``ttft`` seconds for ``percentile`` % of requests."""

    ttft: float = 2.0
    percentile: int = 99
    itl: float | None = None
    window: int = 60


def kubeforge_policy(b: Bounds, slo: SLO | None = None, overrides: dict | None = None) -> tuple[AutoscalingPolicy, float]:
    """The policy kubeforge runs for an InferenceService that sets only ``b`` (and ``slo``).

    Returns:
        ``(policy, polling interval s)`` from the API defaults of every other field
        (``AutoscalingPolicy.from_spec``), then ``overrides`` (``--policy``).
    """
    auto: dict = {"targetPerReplica": b.target}
    if slo is not None:
        s: dict = {"timeToFirstTokenSeconds": slo.ttft, "percentile": slo.percentile, "windowSeconds": slo.window}
        if slo.itl is not None:
            s["interTokenLatencySeconds"] = slo.itl
        auto = {"slo": s}
    spec = InferenceServiceSpec.model_validate({
        "pools": ["bench"], "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}},
        "minReplicas": b.min_replicas, "maxReplicas": b.max_replicas, "autoscaling": auto,
    })
    policy = AutoscalingPolicy.from_spec(spec)
    if overrides:
        policy = replace(policy, **overrides)
    return policy, float(spec.autoscaling.polling_interval_seconds)


class KubeforgeSLO:
    """kubeforge in SLO mode: :func:`kubeforge.autoscaling.decide` on ``read_signals``' signals
    every polling interval (API default 5 s), draining on scale-down."""

    drain = True

    def __init__(self, b: Bounds, slo: SLO, overrides: dict | None = None):
        self.policy, self.interval = kubeforge_policy(b, slo, overrides)
        self.slo = slo
        self.name = f"kubeforge SLO (TTFT p{slo.percentile} <= {slo.ttft:g}s)"
        self.state, self.next, self.last = AutoscalerState(), 0.0, None

    def tick(self, now: float, current: int, view) -> int | None:
        if now < self.next:
            return None
        self.next = now + self.interval
        d = decide(self.policy, self.state, current, view.prom.signals(now, self.slo.window, self.slo.percentile), now)
        self.state, self.last = d.state, d
        return d.desired


class KubeforgeQueue:
    """kubeforge in queue-depth mode with the API defaults (before issue 14's SLO mode), draining."""

    drain = True

    def __init__(self, b: Bounds, overrides: dict | None = None):
        self.policy, self.interval = kubeforge_policy(b, None, overrides)
        self.name = "kubeforge queue depth (defaults)"
        self.state, self.next = AutoscalerState(), 0.0

    def tick(self, now: float, current: int, view) -> int | None:
        if now < self.next:
            return None
        self.next = now + self.interval
        s = view.prom.latest()
        d = decide(self.policy, self.state, current, float(s.waiting) if s else None, now)
        self.state = d.state
        return d.desired


class Hpa:
    """The Kubernetes HPA (autoscaling/v2) on one ``AverageValue`` metric: tolerance,
    ``behavior`` stabilization windows and ``Pods`` / ``Percent`` policies with
    ``selectPolicy: Max``, synced every ``sync`` seconds (kube-controller-manager default 15 s).
    Source: the HPA algorithm and ``behavior`` defaults of the Kubernetes documentation."""

    def __init__(self, lo: int, hi: int, target: float, up_window: float, up_policies, down_window: float,
                 down_policies, sync: float = 15.0, tolerance: float = 0.1):
        self.lo, self.hi, self.target, self.tolerance = lo, hi, target, tolerance
        self.up_window, self.down_window = up_window, down_window
        self.up_policies, self.down_policies = up_policies, down_policies  # [(kind, value, period)]
        self.sync, self.next = sync, 0.0
        self.recs: list[tuple[float, int]] = []
        self.events: list[tuple[float, int]] = []  # (time, signed change)

    def tick(self, now: float, current: int, metric: float | None) -> int | None:
        if now < self.next or metric is None:
            return None
        self.next = now + self.sync
        ratio = metric / (self.target * current) if current else math.inf
        rec = current if current and abs(ratio - 1) <= self.tolerance else math.ceil(metric / self.target - 1e-9)
        rec = max(self.lo, min(self.hi, rec))
        keep = max(self.up_window, self.down_window)
        self.recs = [(t, r) for t, r in self.recs if t > now - keep] + [(now, rec)]
        up = min([r for t, r in self.recs if t > now - self.up_window] + [rec])
        down = max([r for t, r in self.recs if t > now - self.down_window] + [rec])
        desired = current
        if desired < up:
            desired = up
        if desired > down:
            desired = down
        if desired > current:
            limits = []
            for kind, value, period in self.up_policies:
                start = current - sum(c for t, c in self.events if t > now - period)
                limits.append(start + value if kind == "Pods" else math.ceil(start * (1 + value / 100)))
            desired = min(desired, max(limits))
        elif desired < current:
            limits = []
            for kind, value, period in self.down_policies:
                start = current - sum(c for t, c in self.events if t > now - period)
                limits.append(start - value if kind == "Pods" else math.ceil(start * (1 - value / 100)))
            desired = max(desired, min(limits))
        desired = max(self.lo, min(self.hi, desired))
        if desired != current:
            self.events = [(t, c) for t, c in self.events if t > now - 1800] + [(now, desired - current)]
        return desired


class KedaHpa:
    """KEDA's Prometheus scaler (``sum(vllm:num_requests_waiting)``, ``AverageValue``
    threshold, ``pollingInterval`` 30 s) feeding an HPA with its defaults: sync 15 s,
    tolerance 0.1, scale-up ``max(4 pods, 100%) / 15 s`` with no window, scale-down window
    300 s and ``100% / 15 s``; the HPA reads the metric live at each sync (KEDA's default,
    ``useCachedMetrics: false``). Deletes pods on scale-down (a Deployment)."""

    drain = False

    def __init__(self, b: Bounds):
        self.name = "KEDA+HPA defaults"
        self.hpa = Hpa(b.min_replicas, b.max_replicas, b.target, 0.0, [("Pods", 4, 15.0), ("Percent", 100, 15.0)],
                       300.0, [("Percent", 100, 15.0)])

    def tick(self, now: float, current: int, view) -> int | None:
        s = view.prom.latest()
        return self.hpa.tick(now, current, float(s.waiting) if s else None)


class LlmdSaturation:
    """llm-d's workload-variant autoscaler (WVA), saturation analyzer (V1), with its
    documented defaults: ``kvCacheThreshold`` 0.80, ``queueLengthThreshold`` 5,
    ``kvSpareTrigger`` 0.1, ``queueSpareTrigger`` 3, per-replica peaks over the last minute,
    one analysis per reconcile (typically 60 s) (llm-d-workload-variant-autoscaler
    ``docs/saturation-analyzer.md``, ``deploy/configmap-saturation-scaling.yaml``).

    Per reconcile: replicas with KV < 0.8 and queue < 5 are non-saturated; scale up (+1) when
    none is, or when their mean spare KV (0.8 - kv) < 0.1 or mean spare queue (5 - q) < 3;
    scale down (-1) when at least 2 are non-saturated and the load spread over one fewer
    still leaves the spares at or above the triggers. It counts pending replicas (its docs:
    "to avoid excessive scale-up"): no scale-up while one is starting. The target is
    published as a metric; with ``hpa=True`` an HPA applies it with the WVA chart's default
    ``behavior`` (stabilization 240 s both ways, 10 pods / 150 s; ``docs/integrations/
    hpa-integration.md``), else it is applied directly. Deletes pods on scale-down.
    """

    drain = False
    KV, QUEUE, KV_SPARE, QUEUE_SPARE, INTERVAL = 0.80, 5, 0.1, 3, 60.0

    def __init__(self, b: Bounds, hpa: bool = True):
        self.b, self.next, self.target = b, 0.0, None
        self.name = "llm-d WVA saturation" + (" + HPA (chart defaults)" if hpa else " (applied directly)")
        self.hpa = Hpa(b.min_replicas, b.max_replicas, 1.0, 240.0, [("Pods", 10, 150.0)], 240.0,
                       [("Pods", 10, 150.0)]) if hpa else None

    def _analyze(self, now: float, current: int, view) -> int:
        peaks = view.prom.pod_peaks(now, 60.0)
        non_sat = [(kv, q) for kv, q in peaks.values() if kv < self.KV and q < self.QUEUE]
        up = not non_sat
        if non_sat:
            spare_kv = sum(self.KV - kv for kv, _ in non_sat) / len(non_sat)
            spare_q = sum(self.QUEUE - q for _, q in non_sat) / len(non_sat)
            up = spare_kv < self.KV_SPARE or spare_q < self.QUEUE_SPARE
        if up:
            return current if view.pending() else current + 1
        if len(non_sat) >= 2:
            rest = len(non_sat) - 1
            kv_after = sum(kv for kv, _ in non_sat) / rest
            q_after = sum(q for _, q in non_sat) / rest
            if self.KV - kv_after >= self.KV_SPARE and self.QUEUE - q_after >= self.QUEUE_SPARE:
                return current - 1
        return current

    def tick(self, now: float, current: int, view) -> int | None:
        if now >= self.next:
            self.next = now + self.INTERVAL
            self.target = max(self.b.min_replicas, min(self.b.max_replicas, self._analyze(now, current, view)))
            if self.hpa is None:
                return self.target
        if self.hpa is not None and self.target is not None:
            return self.hpa.tick(now, current, float(self.target))  # AverageValue 1: desired = the value
        return None


class DynamoLoad:
    """NVIDIA Dynamo's load-based planner for aggregated (decode) workers, with its
    documented defaults: metrics pulled every 1 s, a decision every ``adjustment-interval``
    30 s on the average KV-cache utilization of the interval: above
    ``decode-kv-scale-up-threshold`` 0.9 one more worker, below
    ``decode-kv-scale-down-threshold`` 0.5 one fewer; at most one change per interval;
    no scale-down for 3 intervals after adding a worker (``NEW_DECODE_WORKER_GRACE_PERIOD``);
    no decision while a worker is being added (Dynamo ``docs/architecture/load_planner.md``,
    0.2-0.3). Its GPU budget (default 8) is set to ``maxReplicas`` here. On Kubernetes the
    planner changes the graph's replica count: a pod is deleted (its requests aborted).
    """

    drain = False
    UP, DOWN, INTERVAL, PULL, GRACE = 0.9, 0.5, 30.0, 1.0, 3

    def __init__(self, b: Bounds):
        self.b = b
        self.name = "Dynamo planner (load, defaults)"
        self.next, self.next_pull, self.samples, self.no_down_until = 30.0, 0.0, [], -1.0

    def tick(self, now: float, current: int, view) -> int | None:
        if now >= self.next_pull:
            self.next_pull = now + self.PULL
            s = view.prom.latest()
            if s is not None and s.kv is not None:
                self.samples.append(s.kv)
        if now < self.next:
            return None
        self.next = now + self.INTERVAL
        samples, self.samples = self.samples, []
        if view.pending() or not samples:
            return None
        kv = sum(samples) / len(samples)
        if kv > self.UP and current < self.b.max_replicas:
            self.no_down_until = now + self.GRACE * self.INTERVAL
            return current + 1
        if kv < self.DOWN and current > self.b.min_replicas and now >= self.no_down_until:
            return current - 1
        return None
