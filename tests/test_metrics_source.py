"""kubeforge.runtime.metrics_source: the MetricsSource the Runtime owns and hands to the
InferenceService reconcile (issue 30.2, after the HPA's ``metrics.MetricsClient`` and its
``fake_client.go``): what one decision reads through it (:func:`read_queue`), the fake, the
Prometheus source's one HTTP client, and the pure core left without I/O."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

import kubeforge.autoscaling
import kubeforge.runtime.inference as inference
from fakekube import small_cluster
from kubeforge.autoscaling import Signals
from kubeforge.autoscaling import reasons as scaling
from kubeforge.autoscaling.prometheus import DEFAULT_QUERIES, HELD_QUERY, render_query
from kubeforge.objects import NORMAL, SCALED
from kubeforge.runtime.inference import reconcile_service
from kubeforge.runtime.metrics_source import FakeMetrics, MetricsSource, PrometheusSource, read_queue
from kubeforge.runtime.state import Runtime
from records import NS, mk_service, service_body, submitted

URL = "http://prometheus.monitoring.svc:9090"  # an in-cluster Service: allowed by default
SGLANG = render_query(DEFAULT_QUERIES["SGLangQueue"], NS, "chat")
HELD = render_query(HELD_QUERY, NS, "chat")


def chat(*, ready: int = 0, **autoscaling):
    return mk_service("chat", autoscaling={"prometheusURL": URL, **autoscaling},
                      status={"readyReplicas": ready} if ready else None)


def test_both_sources_are_metrics_sources():
    assert isinstance(FakeMetrics(), MetricsSource) and isinstance(PrometheusSource(), MetricsSource)


def test_vllm_signals_are_one_read_and_the_queue_is_waiting_plus_held():
    fake = FakeMetrics(signals_of={(NS, "chat"): Signals(time=100.0, waiting=3.0, held=2.0)})
    q, sig = asyncio.run(read_queue(fake, chat()))
    assert (q.value, q.time, q.error) == (5.0, 100.0, None) and sig is not None and sig.queue == 5.0
    assert fake.calls == [("signals", URL, f"{NS}/chat")]


def test_slo_mode_reads_the_signals_at_the_specs_percentile_and_window():
    seen = {}

    class Recording(FakeMetrics):
        async def signals(self, url, namespace, service, *, percentile=90.0, window_seconds=60.0):
            seen.update(percentile=percentile, window=window_seconds)
            return await super().signals(url, namespace, service, percentile=percentile, window_seconds=window_seconds)

    rec = chat(slo={"timeToFirstTokenSeconds": 2, "percentile": 99, "windowSeconds": 30})
    q, sig = asyncio.run(read_queue(Recording(), rec))
    assert seen == {"percentile": 99, "window": 30}
    assert sig is not None and q.value is None and q.error == "no series"  # nothing scraped: held as no data


def test_a_one_number_queue_adds_the_held_requests_while_no_replica_is_ready():
    """Issue 32.4: an SGLang (or Custom) queue has no series once the last pod is gone; the
    activator's held requests are read too (a second query, only then) and bring it back."""
    fake = FakeMetrics()
    fake.set_scalar(HELD, 3.0, time=50.0)
    q, sig = asyncio.run(read_queue(fake, chat(metric="SGLangQueue")))
    assert (q.value, q.error, sig) == (3.0, None, None)
    assert [c[2] for c in fake.calls] == [SGLANG, HELD]
    fake.set_scalar(SGLANG, 4.0, time=51.0)
    q, _ = asyncio.run(read_queue(fake, chat(metric="SGLangQueue")))
    assert q.value == 7.0


def test_a_one_number_queue_is_read_alone_with_a_ready_replica_or_when_it_counts_the_held_itself():
    fake = FakeMetrics()
    fake.set_scalar(SGLANG, 4.0)
    q, _ = asyncio.run(read_queue(fake, chat(ready=1, metric="SGLangQueue")))
    assert q.value == 4.0 and [c[2] for c in fake.calls] == [SGLANG]
    own = "sum(my_queue{service='{name}'}) + sum(kubeforge_activator_queue_length{service='{name}'})"
    fake = FakeMetrics()
    asyncio.run(read_queue(fake, chat(metric="Custom", query=own)))
    assert [c[2] for c in fake.calls] == [render_query(own, NS, "chat")]


def test_the_fake_answers_like_a_prometheus_that_scraped_nothing_else():
    fake = FakeMetrics()
    q = asyncio.run(fake.scalar(URL, "sum(nothing)"))
    assert q.empty and q.value is None and q.error == "empty result"
    sig = asyncio.run(fake.signals(URL, NS, "other"))
    assert sig.queue is None and "queue" in sig.absent and {"waiting", "held"} <= set(sig.absent)
    assert asyncio.run(fake.in_flight_by_pod(URL, NS, "other")) is None


def test_the_prometheus_source_owns_one_client_opened_and_closed_with_the_runtime():
    async def go():
        a, b = Runtime(), Runtime()
        assert isinstance(a.metrics, PrometheusSource) and a.metrics is not b.metrics
        src = a.metrics
        await src.start()
        client = src._client
        await src.start()
        assert client is not None and src._client is client  # once
        await src.close()
        assert client.is_closed and src._client is None
        await src.close()  # twice is fine

    asyncio.run(go())
    assert not hasattr(inference, "_http") and not hasattr(inference, "_http_client")  # no module global


def test_the_reconcile_reads_through_the_runtimes_source_and_the_plan_writes_the_whole_status(monkeypatch):
    """A service at zero with an SGLang queue: the fake's held requests scale it to one; the
    status (desiredReplicas, lastMetricValue, ScalingActive) and the Scaled Event come from the
    plan, written and posted by the reconcile."""

    async def go():
        kube = await small_cluster()
        kube.use_clock(monkeypatch)
        fake = FakeMetrics()
        fake.set_scalar(HELD, 3.0, time=kube.now)
        kube.rt.metrics = fake
        await kube.client_create("InferenceService", submitted(service_body(
            "chat", minReplicas=0, maxReplicas=2,
            autoscaling={"prometheusURL": URL, "metric": "SGLangQueue", "targetPerReplica": 4})))
        await reconcile_service(kube.rt, (NS, "chat"))
        st = kube.get("InferenceService", NS, "chat")["status"]
        assert st["desiredReplicas"] == 1 and st["lastMetricValue"] == 3.0 and st["lastScaleDirection"] == "Up"
        active = next(c for c in st["conditions"] if c["type"] == scaling.SCALING_ACTIVE)
        assert (active["status"], active["reason"]) == ("True", scaling.VALID_METRIC_FOUND)
        assert st["url"] == f"http://chat.{NS}.svc:8000"  # the API's default port
        posted = [(t, r) for n, t, r, _ in kube.rt.events.posted if n == "chat"]  # type: ignore[attr-defined]
        assert posted[0] == (NORMAL, SCALED)
        assert [c[2] for c in fake.calls] == [SGLANG, HELD]

    asyncio.run(go())


def test_a_refused_url_is_never_asked(monkeypatch):
    async def go():
        kube = await small_cluster()
        kube.use_clock(monkeypatch)
        fake = FakeMetrics()
        kube.rt.metrics = fake
        await kube.client_create("InferenceService", submitted(service_body(
            "chat", minReplicas=1, maxReplicas=2, autoscaling={"prometheusURL": "http://127.0.0.1:1"})))
        await reconcile_service(kube.rt, (NS, "chat"))
        st = kube.get("InferenceService", NS, "chat")["status"]
        active = next(c for c in st["conditions"] if c["type"] == scaling.SCALING_ACTIVE)
        assert active["status"] == "False" and "in-cluster Service URL" in active["message"]
        assert fake.calls == []

    asyncio.run(go())


_IO = {"httpx", "socket", "asyncio", "aiohttp", "requests", "urllib.request", "http", "ssl", "subprocess"}


@pytest.mark.parametrize("path", sorted(Path(kubeforge.autoscaling.__file__).parent.glob("*.py")),
                         ids=lambda p: p.name)
def test_the_autoscaling_core_imports_no_io(path):
    """``kubeforge.autoscaling`` is pure, like ``placement``: its requests are the runtime's."""
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    assert not {m for m in names if m in _IO or m.split(".")[0] in _IO}, names
