"""The prometheusURL policy (kubeforge.runtime.prometheus_urls): an InferenceService's
``prometheusURL`` cannot reach the API server, by name, by IP literal, by hidden credentials or
by a name that resolves to it, and an allow-list narrows what may be read (issue 18, whose other
tests are in tests/test_admission_ledger.py).
"""

from __future__ import annotations

import asyncio

import pytest

from kubeforge.runtime.prometheus_urls import resolved_refusal, url_allowed, url_refusal

API = frozenset({"10.96.0.1:443", "127.0.0.1:6443"})


@pytest.mark.parametrize("url, allow, refused", [
    ("http://prometheus-operated.monitoring.svc:9090", (), False),
    ("http://prometheus.monitoring.svc.cluster.local:9090/prom", (), False),
    ("http://10.0.0.5:9090", (), True),                      # IP literal: only when allow-listed
    ("http://metadata.google.internal", (), True),           # not an in-cluster Service
    ("https://kubernetes.default.svc", (), True),            # the API server by name
    ("https://kubernetes.default.svc.cluster.local/api", (), True),
    ("https://10.96.0.1:443", ("https://10.96.0.1",), True),  # allow-listed or not
    ("http://p.monitoring.svc:9090@kubernetes.default.svc", (), True),  # credentials / a hidden host
    ("http://127.0.0.1:9090", ("http://127.0.0.1:",), False),  # the local sim's Prometheus
    ("https://127.0.0.1:6443", ("http://127.0.0.1:", "https://127.0.0.1:"), True),  # its API server
    ("http://prometheus.monitoring.svc:9090", ("http://other.svc:9090",), True),
    ("file:///etc/passwd", (), True),
])
def test_prometheus_urls(url, allow, refused):
    assert bool(url_refusal(url, allow, API)) is refused


@pytest.mark.parametrize("url, allowed, ok", [
    ("http://prom.monitoring:9090", (), True),
    ("http://prom.monitoring:9090", ("http://prom.monitoring:9090",), True),
    ("http://prom.monitoring:9090/prometheus", ("http://prom.monitoring:9090",), True),
    ("http://prom.monitoring:90901", ("http://prom.monitoring:9090",), False),
    ("http://kubernetes.default.svc/api", ("http://prom.monitoring:9090",), False),
    ("http://169.254.169.254/latest/meta-data", ("http://prom.monitoring:9090",), False),
])
def test_url_allow_list(url, allowed, ok):
    assert url_allowed(url, allowed) is ok


def test_a_name_resolving_to_the_api_server_is_refused():
    assert asyncio.run(resolved_refusal("http://localhost:6443", {"127.0.0.1:6443"}))
    assert asyncio.run(resolved_refusal("http://127.0.0.1:9090", {"127.0.0.1:6443"})) is None  # the sim's Prometheus
