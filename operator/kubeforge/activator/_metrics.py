"""The activator's Prometheus metrics (prometheus-client), in a registry of its own so that
several activators can live in one process (tests) and the operator's metrics stay apart.

Label values are bounded: ``namespace`` and ``service`` come only from EndpointSlices the
activator knows (a request naming an unknown service is never counted per service), and
``outcome`` is one of :data:`kubeforge.activator._reasons.OUTCOMES`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ._reasons import OUTCOMES
from ._slices import ServiceKey

HOLD_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 180, 300, 600, 1800, 3600)
"""Seconds: from a replica that was just turning Ready to the longest hold allowed."""


class ActivatorMetrics:
    """The series the activator exports.

    Attributes:
        registry: Their registry (served on the metrics port).
        queue_length: Gauge ``kubeforge_activator_queue_length{namespace,service}``: requests held
            now. The activation signal: the autoscaler adds it to its queue metric so a service
            at zero replicas sees its demand.
        requests: Counter ``kubeforge_activator_requests_total{namespace,service,outcome}``.
        hold_seconds: Histogram ``kubeforge_activator_hold_seconds{namespace,service}``: how
            long each held request waited (released or timed out).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.queue_length = Gauge(
            "kubeforge_activator_queue_length",
            "Requests held now by this activator for a service with no ready replica.",
            ["namespace", "service"], registry=self.registry)
        self.requests = Counter(
            "kubeforge_activator_requests_total",
            "Requests for a known service by outcome (forwarded, rejected, timed_out, failed, cancelled).",
            ["namespace", "service", "outcome"], registry=self.registry)
        self.hold_seconds = Histogram(
            "kubeforge_activator_hold_seconds",
            "Seconds a request was held waiting for a ready replica (released or timed out).",
            ["namespace", "service"], buckets=HOLD_BUCKETS, registry=self.registry)
        self._known: set[ServiceKey] = set()

    def service_seen(self, key: ServiceKey) -> None:
        """Create the service's series at 0 (so a query sees it before its first request)."""
        if key in self._known:
            return
        self._known.add(key)
        self.queue_length.labels(*key).set(0)
        for outcome in OUTCOMES:
            self.requests.labels(*key, outcome)

    def service_gone(self, key: ServiceKey) -> None:
        """Drop the service's gauge (its counters stay, as counters do)."""
        if key in self._known:
            self._known.discard(key)
            self.queue_length.remove(*key)

    def known_services(self) -> set[ServiceKey]:
        """Services whose gauge is exported."""
        return set(self._known)

    def count(self, key: ServiceKey, outcome: str) -> None:
        """One request of ``key`` (a service known when it arrived) ended with ``outcome``."""
        self.requests.labels(*key, outcome).inc()

    def held(self, key: ServiceKey, n: int) -> None:
        """The service holds ``n`` requests now."""
        if key in self._known:
            self.queue_length.labels(*key).set(n)
