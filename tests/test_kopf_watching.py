"""kopf's watch inactivity timeout against a late event loop (kubeforge/runtime/kopf_watching.py).

The first test drives kopf's own ``watch_objs`` (only the HTTP stream under it is replaced)
into the race the module describes: an event arrives just before the inactivity deadline, the
rest of that loop pass is busy, and the consumer (kopf's watcher) yields to the loop while it
handles the event. With the timer armed, the consumer's task ends *cancelled*, which kopf's
orchestrator drops without a word. With the operator's settings the same stream is read to its
end. If a kopf release stops holding the timer across its ``yield``, the first test fails and
the setting can go.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import api, watching
from kopf._cogs.structs import references

from kubeforge.runtime.kopf_watching import (
    CLIENT_TIMEOUT,
    INACTIVITY_TIMEOUT,
    SERVER_TIMEOUT,
    configure_watching,
)

RESOURCE = references.Resource(group="kubeforge.io", version="v1alpha1", plural="trainingjobs", namespaced=True)
EVENT = {"type": "ADDED", "object": {"metadata": {"name": "j1", "uid": "u1", "resourceVersion": "2"}}}


def _late_stream(arrive_s: float, busy_s: float):
    """A stand-in for ``kopf._cogs.clients.api.stream``: one event ``arrive_s`` seconds after the
    request, delivered by a loop callback that then keeps the loop busy ``busy_s`` seconds (as
    the rest of a pass does on a loaded operator), then the server's close."""

    async def stream(**_: Any):
        loop = asyncio.get_running_loop()
        data = loop.create_future()

        def data_received() -> None:
            data.set_result(None)
            time.sleep(busy_s)

        loop.call_at(loop.time() + arrive_s, data_received)
        await data
        yield EVENT

    return stream


async def _consume(settings: kopf.OperatorSettings) -> list[str]:
    """Read one ``watch_objs`` request to its end as kopf's watcher does: for a new object it
    awaits ``Scheduler.spawn``, which yields to the loop once (``asyncio.sleep(0)``)."""
    seen = []
    stopper = asyncio.get_running_loop().create_future()
    async for event in watching.watch_objs(settings=settings, resource=RESOURCE, namespace=None,
                                           operator_pause_waiter=stopper):
        seen.append(event["type"])
        await asyncio.sleep(0)
    return seen


@pytest.fixture
def late_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    # The event lands 0.7 s in; the pass that delivers it lasts until 1.2 s, past the 1 s timer
    # below (the margins leave the test 0.3 s of scheduling noise either way).
    monkeypatch.setattr(api, "stream", _late_stream(arrive_s=0.7, busy_s=0.5))


def test_kopf_inactivity_timer_held_across_yield_cancels_the_watcher(late_stream: None) -> None:
    settings = kopf.OperatorSettings()
    settings.watching.inactivity_timeout = 1.0  # kopf's 70 s, scaled to the stand-in stream

    async def run() -> asyncio.Task:
        task = asyncio.create_task(_consume(settings))
        await asyncio.wait({task})
        return task

    task = asyncio.run(run())
    assert task.cancelled(), f"kopf turned the timeout into an end of stream: {task.result()}"


def test_the_operators_settings_read_the_same_stream_to_its_end(late_stream: None) -> None:
    settings = kopf.OperatorSettings()
    configure_watching(settings)
    # The same 1 s scale: the timer sits as far past the stream as INACTIVITY_TIMEOUT does past
    # CLIENT_TIMEOUT, the longest any one watch request can live.
    settings.watching.inactivity_timeout = INACTIVITY_TIMEOUT / CLIENT_TIMEOUT
    assert asyncio.run(_consume(settings)) == ["ADDED"]


def test_configure_watching_bounds_every_request_before_the_inactivity_timer() -> None:
    settings = kopf.OperatorSettings()
    configure_watching(settings)
    w = settings.watching
    assert (w.server_timeout, w.client_timeout) == (SERVER_TIMEOUT, CLIENT_TIMEOUT)
    assert w.server_timeout < w.client_timeout < w.inactivity_timeout
    # A request's events are yielded while it lives (<= CLIENT_TIMEOUT): the timer, rescheduled
    # after each, is at least a whole request away from firing while the watcher holds an event.
    assert w.inactivity_timeout - w.client_timeout >= w.client_timeout
