"""The autoscalers the benchmark compares, each as a decision loop over the emulated Prometheus.

Each has ``name``, ``knob`` (the setting it runs with, as printed), ``drain`` (whether its
scale-down drains, kubeforge only), optionally ``gateway`` (its router, see
:mod:`~e2e.bench.autoscaling.replay`) and ``tick(now, current, view) -> int | (int, int) |
None`` (``view``: the replay, with ``view.prom``, ``view.ready()``, ``view.pending()``). What
each reads and how often is what its documentation or code says; the sources are cited on each
class. kubeforge's rows are here; the baselines in :mod:`~e2e.bench.autoscaling.baselines`
(KEDA + HPA, llm-d) and :mod:`~e2e.bench.autoscaling.dynamo`.

**kubeforge's rows** are :class:`KubeforgeSLO` (and :class:`KubeforgeQueue`): ``spec`` adds
InferenceService fields as a user writes them (issue 28's ``standby.replicas``,
``autoscaling.predictive``; the built-in rows are ``sweep.KUBEFORGE_ROWS``), ``overrides`` a
dict of :class:`kubeforge.autoscaling.AutoscalingPolicy` fields applied after the API defaults
(``--policy FIELD=VALUE`` for the main row, ``--kubeforge-row 'NAME:FIELD=VALUE,...'`` for an
extra one). A standby count comes back from ``tick`` as ``(replicas, standby)``
(:func:`standby_of` reads ``Decision.standby``); a predictive row gets the admission rate's
history and the run's longest start as its lead time.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

from kubeforge.api import InferenceServiceSpec
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, DemandHistory, decide

from e2e.bench.autoscaling.baselines import Hpa, KedaHpa, LlmdSaturation
from e2e.bench.autoscaling.dynamo import DynamoLoad

DAY = 86400.0

__all__ = ["Bounds", "DynamoLoad", "Hpa", "KedaHpa", "KubeforgeQueue", "KubeforgeSLO", "LlmdSaturation",
           "SLO", "kubeforge_policy", "standby_of"]


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


def kubeforge_policy(b: Bounds, slo: SLO | None = None, overrides: dict | None = None,
                     spec: dict | None = None) -> tuple[AutoscalingPolicy, float]:
    """The policy kubeforge runs for an InferenceService that sets only ``b`` (and ``slo``).

    Args:
        b: Bounds (``minReplicas``, ``maxReplicas``, ``targetPerReplica``).
        slo: The SLO (``spec.autoscaling.slo``), or None for queue-depth mode.
        overrides: ``AutoscalingPolicy`` fields replaced after ``from_spec`` (``--policy``).
        spec: More InferenceService spec fields, camelCase as a user writes them
            (``{"standby": {"replicas": 1}, "autoscaling": {"predictive": {"mode": "Seasonal"}}}``),
            merged before validation, so their defaults are the API's.

    Returns:
        ``(policy, polling interval s)`` from the API defaults of every other field
        (``AutoscalingPolicy.from_spec``), then ``overrides``.
    """
    auto: dict = {"targetPerReplica": b.target}
    if slo is not None:
        s: dict = {"timeToFirstTokenSeconds": slo.ttft, "percentile": slo.percentile, "windowSeconds": slo.window}
        if slo.itl is not None:
            s["interTokenLatencySeconds"] = slo.itl
        auto = {"slo": s}
    extra = dict(spec or {})
    auto.update(extra.pop("autoscaling", {}))
    spec = InferenceServiceSpec.model_validate({
        "pools": ["bench"], "template": {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}},
        "minReplicas": b.min_replicas, "maxReplicas": b.max_replicas, "autoscaling": auto, **extra,
    })
    policy = AutoscalingPolicy.from_spec(spec)
    if overrides:
        policy = replace(policy, **overrides)
    return policy, float(spec.autoscaling.polling_interval_seconds)


def standby_of(decision) -> int | None:
    """The standby count a decision asks for (``Decision.standby``), None when it carries none."""
    value = getattr(decision, "standby", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _with_standby(d, desired: int) -> int | tuple[int, int]:
    standby = standby_of(d)
    return desired if standby is None else (desired, standby)


class KubeforgeSLO:
    """kubeforge in SLO mode: :func:`kubeforge.autoscaling.decide` on ``read_signals``' signals
    every polling interval (API default 5 s), draining on scale-down.

    Args:
        b: Bounds.
        slo: The run's SLO (attainment is judged against it).
        overrides: Policy fields after the API defaults (the seam, see the module).
        sizing: The TTFT target the policy sizes for (``slo.timeToFirstTokenSeconds``), s;
            default ``slo.ttft``. Below ``slo.ttft`` it is headroom: the equal-attainment
            sweep's knob.
        name: The row's name (default from the SLO).
        spec: More spec fields (``standby``, ``autoscaling.predictive``), see :func:`kubeforge_policy`.
        past: The admission rate a day before the run, ``((t, requests/s), ...)`` with ``t``
            in ``[-1 day, 0)``: yesterday's history for ``predictive.mode: Seasonal``.

    With ``predictive`` on, each decision gets the service's history as the runtime reads it
    (the admission rate over the trend window from the scrapes, yesterday's from ``past``) and
    the lead time the operator would have measured: the run's longest start.
    """

    drain = True

    def __init__(self, b: Bounds, slo: SLO, overrides: dict | None = None, sizing: float | None = None,
                 name: str | None = None, spec: dict | None = None, past: tuple = ()):
        sized = replace(slo, ttft=sizing) if sizing is not None else slo
        self.policy, self.interval = kubeforge_policy(b, sized, overrides, spec)
        self.past, self._past_t = past, [t for t, _ in past]
        self.slo = sized
        self.name = name or f"kubeforge SLO (TTFT p{slo.percentile} <= {slo.ttft:g}s)"
        self.knob = f"sizes for p{slo.percentile} <= {sized.ttft:g}s"
        self.state, self.next, self.last = AutoscalerState(), 0.0, None
        self.concurrency: list[float] = []

    def tick(self, now: float, current: int, view) -> int | tuple[int, int] | None:
        """One poll: ``decide`` on this poll's signals."""
        if now < self.next:
            return None
        self.next = now + self.interval
        signals = view.prom.signals(now, self.slo.window, self.slo.percentile)
        pp = self.policy.predictive
        if pp is None:
            d = decide(self.policy, self.state, current, signals, now)
        else:
            lead = view.starts.longest()
            d = decide(self.policy, self.state, current, signals, now, history=self._history(view, now, pp, lead),
                       lead_seconds=lead)
        self.state, self.last = d.state, d
        sizing = getattr(d, "sizing", None)
        if sizing is not None and sizing.concurrency:
            self.concurrency.append(sizing.concurrency)
        return _with_standby(d, d.desired)

    def _history(self, view, now: float, pp, lead: float) -> DemandHistory:
        """What the runtime's range queries return (``history_ranges``): the trend window's
        admission rate, and yesterday's over the window and the lead (from ``past``)."""
        window = pp.trend_window_seconds
        step = max(15.0, math.ceil((window + lead) / 240))  # the runtime's history_step
        lo = bisect.bisect_left(self._past_t, now - DAY - window)
        hi = bisect.bisect_right(self._past_t, now - DAY + lead)
        day = tuple(self.past[lo:hi])
        return DemandHistory(recent=view.prom.admission_rates(now - window, now, step), day=day)

    def diagnostics(self) -> dict[str, float]:
        """What the replay keeps beside the figures: the per-replica concurrency the queue model
        used (``SLOSizing.concurrency``), p10 and p50 over the decisions."""
        ks = sorted(self.concurrency)
        if not ks:
            return {}
        return {"concurrency p10": ks[len(ks) // 10], "concurrency p50": ks[len(ks) // 2]}


class KubeforgeQueue:
    """kubeforge in queue-depth mode with the API defaults (before issue 14's SLO mode), draining;
    ``target`` replaces ``targetPerReplica`` (the sweep's knob)."""

    drain = True

    def __init__(self, b: Bounds, overrides: dict | None = None, target: float | None = None):
        if target is not None:
            b = replace(b, target=target)
        self.policy, self.interval = kubeforge_policy(b, None, overrides)
        self.name = "kubeforge queue depth (defaults)"
        self.knob = f"targetPerReplica {b.target:g}"
        self.state, self.next = AutoscalerState(), 0.0

    def tick(self, now: float, current: int, view) -> int | None:
        """One poll: ``decide`` on the total queue of the last scrape."""
        if now < self.next:
            return None
        self.next = now + self.interval
        s = view.prom.latest()
        d = decide(self.policy, self.state, current, float(s.waiting) if s else None, now)
        self.state = d.state
        return d.desired
