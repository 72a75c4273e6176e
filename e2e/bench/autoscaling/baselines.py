"""The baselines' autoscalers (other than Dynamo's, :mod:`~e2e.bench.autoscaling.dynamo`): the
Kubernetes HPA, KEDA + HPA, llm-d's workload-variant autoscaler. Each takes its main knob as an
argument (the equal-attainment sweep's), its documented default otherwise."""

from __future__ import annotations

import math

__all__ = ["Hpa", "KedaHpa", "LlmdSaturation"]


class Hpa:
    """The Kubernetes HPA (autoscaling/v2) on one ``AverageValue`` metric: tolerance,
    ``behavior`` stabilization windows and ``Pods`` / ``Percent`` policies with
    ``selectPolicy: Max``, synced every ``sync`` seconds (kube-controller-manager default 15 s).
    Its first sync records the current count as a recommendation, as kube-controller-manager's
    ``recordInitialRecommendation`` does, so a warm start is held for the scale-down window.
    Source: the HPA algorithm and ``behavior`` defaults of the Kubernetes documentation and
    ``pkg/controller/podautoscaler/horizontal.go``."""

    def __init__(self, lo: int, hi: int, target: float, up_window: float, up_policies, down_window: float,
                 down_policies, sync: float = 15.0, tolerance: float = 0.1):
        self.lo, self.hi, self.target, self.tolerance = lo, hi, target, tolerance
        self.up_window, self.down_window = up_window, down_window
        self.up_policies, self.down_policies = up_policies, down_policies  # [(kind, value, period)]
        self.sync, self.next = sync, 0.0
        self.recs: list[tuple[float, int]] = []
        self.events: list[tuple[float, int]] = []  # (time, signed change)

    def tick(self, now: float, current: int, metric: float | None) -> int | None:
        """One sync: the HPA's desired replicas from ``metric`` (None before the next sync)."""
        if now < self.next or metric is None:
            return None
        self.next = now + self.sync
        if not self.recs:  # the controller's recordInitialRecommendation: the current count, now
            self.recs = [(now, current)]
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
    ``useCachedMetrics: false``). Deletes pods on scale-down (a Deployment). The query sums
    the engines' waiting requests and those the gateway holds (a generous query: the Gateway
    API Inference Extension's flow-control queue is a metric of its own). Knob: ``threshold``
    (waiting requests per replica; default ``Bounds.target``, 4)."""

    drain = False

    def __init__(self, b, threshold: float | None = None):
        threshold = b.target if threshold is None else threshold
        self.name = "KEDA+HPA defaults"
        self.knob = f"threshold {threshold:g}"
        self.hpa = Hpa(b.min_replicas, b.max_replicas, threshold, 0.0, [("Pods", 4, 15.0), ("Percent", 100, 15.0)],
                       300.0, [("Percent", 100, 15.0)])

    def tick(self, now: float, current: int, view) -> int | None:
        """One HPA sync on KEDA's query."""
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

    Knob: ``scale`` multiplies both saturation thresholds and the queue spare trigger
    (``kvCacheThreshold`` ``0.8 x scale``, at most 0.95; ``queueLengthThreshold`` ``5 x scale``;
    ``queueSpareTrigger`` ``3 x scale``, so the trigger stays below the threshold); below 1 it
    scales up earlier.
    """

    drain = False
    KV, QUEUE, KV_SPARE, QUEUE_SPARE, INTERVAL = 0.80, 5, 0.1, 3, 60.0

    def __init__(self, b, hpa: bool = True, scale: float = 1.0):
        self.b, self.next, self.target = b, 0.0, None
        self.KV, self.QUEUE = min(0.95, 0.80 * scale), 5 * scale
        self.QUEUE_SPARE = 3 * scale
        self.knob = f"KV {self.KV:.2f}, queue {self.QUEUE:g}"
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
        """One reconcile (every 60 s), then the HPA's syncs on its published target."""
        if now >= self.next:
            self.next = now + self.INTERVAL
            self.target = max(self.b.min_replicas, min(self.b.max_replicas, self._analyze(now, current, view)))
            if self.hpa is None:
                return self.target
        if self.hpa is not None and self.target is not None:
            return self.hpa.tick(now, current, float(self.target))  # AverageValue 1: desired = the value
        return None
