"""Warm standby's engine control (issue 28, item 3): the simulator's sleep mode (pure, then over
HTTP), the operator's HTTP EngineControl against it (the local cluster's --engine-control-url)
and against a pod's address, and EngineCalls running one call per pod at a time."""

from __future__ import annotations

import asyncio
import time

import pytest

import builders as b
from kubeforge.runtime.engine_control import EngineCalls, FakeEngineControl, HttpEngineControl
from kubeforge.sim._sleep import EngineSleep, WakeModel
from kubeforge.sim.modelserver import ModelServerSim


def test_the_default_wake_is_3_seconds_for_64_gib_and_scales_with_the_weights():
    assert WakeModel().wake_seconds == 3.0 and WakeModel(weights_gib=16).wake_seconds == 0.75


def test_an_engine_sleeps_and_wakes_after_the_modelled_time():
    e = EngineSleep(WakeModel(seconds_per_64_gib=2.0))
    assert e.is_sleeping("ns", "p", 0.0) is False  # awake after its start
    assert e.sleep("ns", "p", 10.0) == 2.0
    assert e.is_sleeping("ns", "p", 11.0) is False and e.is_sleeping("ns", "p", 12.0) is True
    assert e.sleep("ns", "p", 13.0) == 0.0  # already asleep: at once
    assert e.wake("ns", "p", 20.0) == 2.0
    assert e.is_sleeping("ns", "p", 21.0) is True and e.is_sleeping("ns", "p", 22.0) is False
    assert e.wake("ns", "p", 23.0) == 0.0 and [c[0] for c in e.calls] == ["sleep", "sleep", "wake", "wake"]


LLM = b.InferenceService("llm").ns("ns").record()


def _pod(ip="10.0.0.1"):
    """The leader of group 0 of ``llm`` (pod ``llm-0-0-0``), Running and Ready at ``ip``."""
    return b.ServingPod(LLM).ip(ip).record()


def test_http_engine_control_through_the_simulators_control_url():
    sim = ModelServerSim(ready_replicas=lambda ns, n: 0, wake=WakeModel(seconds_per_64_gib=0.5)).start()
    try:
        async def run():
            ctl = HttpEngineControl(sim.url)
            try:
                assert await ctl.is_sleeping(_pod(), 8000) is False
                t0 = time.monotonic()
                assert await ctl.sleep(_pod(), 8000) is None
                assert time.monotonic() - t0 >= 0.45  # answered once asleep
                assert await ctl.is_sleeping(_pod(), 8000) is True
                assert await ctl.wake(_pod(), 8000) is None
                assert await ctl.is_sleeping(_pod(), 8000) is False
            finally:
                await ctl.close()
        asyncio.run(run())
        assert [(c[0], c[2]) for c in sim.engines.calls] == [("sleep", "llm-0-0-0"), ("wake", "llm-0-0-0")]
    finally:
        sim.stop()


def test_http_engine_control_addresses_the_pod_and_reports_failures_as_data():
    ctl = HttpEngineControl()
    assert ctl.url(_pod(), 8000, "/sleep?level=1") == "http://10.0.0.1:8000/sleep?level=1"
    assert HttpEngineControl("http://127.0.0.1:9/").url(_pod(), 8000, "/wake_up") == \
        "http://127.0.0.1:9/engines/ns/llm-0-0-0/wake_up"

    async def run():
        c = HttpEngineControl("http://127.0.0.1:9", read_timeout=0.5, call_timeout=0.5)  # nothing listens
        try:
            assert await c.is_sleeping(_pod(), 8000) is None
            assert "connection failed" in (await c.sleep(_pod(), 8000) or "")
            assert await HttpEngineControl().wake(_pod(ip=None), 8000) == "the pod has no IP"
        finally:
            await c.close()
    asyncio.run(run())


def test_engine_calls_run_one_call_per_pod_and_a_wake_overrides_a_sleep():
    async def run():
        calls, done = EngineCalls(), []
        gate = asyncio.Event()
        fake = FakeEngineControl()

        async def slow_sleep(p):
            await gate.wait()
            return await fake.sleep(p, 8000)

        p = _pod()
        assert calls.fire("sleep", p, lambda: slow_sleep(p), lambda: done.append("sleep"))
        assert not calls.fire("sleep", p, lambda: slow_sleep(p), lambda: done.append("again"))  # in flight
        assert calls.fire("wake", p, lambda: fake.wake(p, 8000), lambda: done.append("wake"))  # cancels the sleep
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.sleep(0.05)
        assert fake.calls == [("wake", "llm-0-0-0")] and done == ["wake"]  # the cancelled sleep never ran
        assert calls.in_flight == {}
    asyncio.run(run())


@pytest.mark.parametrize("path, want", [
    ("/engines/ns/pod-1/sleep?level=1", ("sleep", "ns", "pod-1")), ("/engines/ns/pod-1/wake_up", ("wake", "ns", "pod-1")),
    ("/metrics", None), ("/engines/ns/pod-1/is_sleeping", None),
])
def test_engine_routes_of_the_simulator(path, want):
    from kubeforge.sim._modelserver_http import engine_route
    assert engine_route("POST", path) == want
