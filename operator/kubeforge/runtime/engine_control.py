"""How the operator tells a model server to sleep and wake (warm standby, issue 28, item 3): the
:class:`EngineControl` protocol, handed to the InferenceService reconcile by the
:class:`~kubeforge.runtime.state.Runtime`, as :class:`~kubeforge.runtime.metrics_source.MetricsSource`
hands it its metrics.

vLLM's sleep mode (``docs.vllm.ai``, *Sleep Mode*; ``vllm/entrypoints/serve/sleep/api_router.py``):
``POST /sleep?level=1`` offloads the weights to host memory and frees the KV cache,
``POST /wake_up`` brings them back, ``GET /is_sleeping`` answers ``{"is_sleeping": bool}``. The
routes exist only with ``VLLM_SERVER_DEV_MODE=1`` and the engine started with
``--enable-sleep-mode`` (:mod:`kubeforge.builders.serving` adds both to a service with standby
replicas). ``/sleep`` and ``/wake_up`` answer when done: seconds for tens of GiB (llm-d measured
``wake_up`` at 2.67 s for 61.68 GiB), so they run in the background (:class:`EngineCalls`) and
the reconcile reads ``/is_sleeping`` instead of waiting.

* :class:`HttpEngineControl` talks to the leader pod at ``http://<pod IP>:<port>``; with a
  ``base_url`` (the operator's ``--engine-control-url``) to
  ``<base_url>/engines/<namespace>/<pod>`` instead: the local cluster's model-server simulator
  serves every simulated replica there (kwok's pod IPs reach nothing);
* :class:`FakeEngineControl` answers from memory for tests.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol, runtime_checkable

import httpx

from kubeforge.objects import Pod
from kubeforge.runtime.http_client import LazyHttpClient

__all__ = ["ENGINE_CALL_TIMEOUT", "ENGINE_READ_TIMEOUT", "EngineCalls", "EngineControl", "FakeEngineControl",
           "HttpEngineControl"]

log = logging.getLogger("kubeforge.engine")
ENGINE_READ_TIMEOUT = 2.0
"""Seconds for ``/is_sleeping`` (read every reconcile of a service with standby replicas)."""
ENGINE_CALL_TIMEOUT = 300.0
"""Seconds for ``/sleep`` and ``/wake_up``, which answer when the weights have moved."""


@runtime_checkable
class EngineControl(Protocol):
    """Sleep and wake of one model server (the leader pod of a group, serving on ``port``).

    No method raises on a failed call (only on cancellation): :meth:`sleep` and :meth:`wake`
    return an error text (None when done), :meth:`is_sleeping` None when unknown.
    """

    async def start(self) -> None:
        """Open what the control needs (the operator's start-up)."""

    async def close(self) -> None:
        """Release it (the operator's cleanup)."""

    async def sleep(self, pod: Pod, port: int) -> str | None:
        """``POST /sleep?level=1``; None when the engine answered 2xx."""

    async def wake(self, pod: Pod, port: int) -> str | None:
        """``POST /wake_up``; None when the engine answered 2xx."""

    async def is_sleeping(self, pod: Pod, port: int) -> bool | None:
        """``GET /is_sleeping``'s ``is_sleeping``; None when it cannot be read."""


class HttpEngineControl(LazyHttpClient):
    """:class:`EngineControl` over HTTP, with one client for the process (:class:`LazyHttpClient`).

    Args:
        base_url: Where every engine is reached instead of its pod's IP (the simulator's
            control URL), or None (the pod's IP and the service's port).
        read_timeout: Seconds for ``/is_sleeping``.
        call_timeout: Seconds for ``/sleep`` and ``/wake_up``.
    """

    def __init__(self, base_url: str | None = None, read_timeout: float = ENGINE_READ_TIMEOUT,
                 call_timeout: float = ENGINE_CALL_TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/") if base_url else None
        self.read_timeout, self.call_timeout = read_timeout, call_timeout
        super().__init__()

    def url(self, pod: Pod, port: int, path: str) -> str | None:
        """The URL of ``path`` on ``pod``'s engine, or None (no IP and no base URL)."""
        if self.base_url:
            return f"{self.base_url}/engines/{pod.namespace}/{pod.name}{path}"
        return f"http://{pod.ip}:{port}{path}" if pod.ip else None

    async def _send(self, method: str, pod: Pod, port: int, path: str, timeout: float) -> httpx.Response | str:
        url = self.url(pod, port, path)
        if url is None:
            return "the pod has no IP"
        client = await self.client()
        try:
            return await client.request(method, url, timeout=timeout)
        except httpx.TimeoutException:
            return f"timeout after {timeout:g}s"
        except httpx.HTTPError as e:
            return f"connection failed ({type(e).__name__})"

    async def _call(self, pod: Pod, port: int, path: str) -> str | None:
        r = await self._send("POST", pod, port, path, self.call_timeout)
        if isinstance(r, str):
            return r
        return None if 200 <= r.status_code < 300 else f"HTTP {r.status_code}"

    async def sleep(self, pod: Pod, port: int) -> str | None:
        """See :meth:`EngineControl.sleep`."""
        return await self._call(pod, port, "/sleep?level=1")

    async def wake(self, pod: Pod, port: int) -> str | None:
        """See :meth:`EngineControl.wake`."""
        return await self._call(pod, port, "/wake_up")

    async def is_sleeping(self, pod: Pod, port: int) -> bool | None:
        """See :meth:`EngineControl.is_sleeping`."""
        r = await self._send("GET", pod, port, "/is_sleeping", self.read_timeout)
        if isinstance(r, str) or r.status_code != 200:
            return None
        try:
            value = r.json().get("is_sleeping")
        except (ValueError, AttributeError):
            return None
        return value if isinstance(value, bool) else None


@dataclass
class FakeEngineControl:
    """:class:`EngineControl` for tests: every engine is awake until told to sleep.

    Attributes:
        asleep: Pod names asleep.
        unreachable: Pod names whose engine answers nothing (calls fail, state unknown).
        calls: ``(method, pod name)`` of every call, in order.
    """

    asleep: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def start(self) -> None:
        """See :meth:`EngineControl.start`."""

    async def close(self) -> None:
        """See :meth:`EngineControl.close`."""

    async def sleep(self, pod: Pod, port: int) -> str | None:
        """See :meth:`EngineControl.sleep`."""
        self.calls.append(("sleep", pod.name))
        if pod.name in self.unreachable:
            return "connection failed"
        self.asleep.add(pod.name)
        return None

    async def wake(self, pod: Pod, port: int) -> str | None:
        """See :meth:`EngineControl.wake`."""
        self.calls.append(("wake", pod.name))
        if pod.name in self.unreachable:
            return "connection failed"
        self.asleep.discard(pod.name)
        return None

    async def is_sleeping(self, pod: Pod, port: int) -> bool | None:
        """See :meth:`EngineControl.is_sleeping`."""
        self.calls.append(("is_sleeping", pod.name))
        return None if pod.name in self.unreachable else pod.name in self.asleep


@dataclass
class EngineCalls:
    """The sleeps and wakes in flight, one per pod at a time: a reconcile that asks again while
    one runs adds nothing. When a call ends, ``done`` is called (the runtime queues the service's
    reconcile, which reads ``/is_sleeping``).

    Attributes:
        in_flight: ``pod name -> (what, task)``.
    """

    in_flight: dict[str, tuple[str, asyncio.Task]] = field(default_factory=dict)

    def fire(self, what: str, pod: Pod, call: Callable[[], Awaitable[str | None]], done: Callable[[], None]) -> bool:
        """Start ``call`` (``what``: ``"sleep"`` or ``"wake"``) for ``pod`` unless the same is in
        flight for it; a different call in flight is cancelled first (a wake overrides a sleep).
        Returns whether a call was started."""
        running = self.in_flight.get(pod.name)
        if running is not None and not running[1].done():
            if running[0] == what:
                return False
            running[1].cancel()

        async def run() -> None:
            try:
                error = await call()
                if error:
                    log.warning("%s of %s/%s failed: %s", what, pod.namespace, pod.name, error)
            finally:
                if self.in_flight.get(pod.name, (None, None))[1] is asyncio.current_task():
                    self.in_flight.pop(pod.name, None)
                done()

        self.in_flight[pod.name] = (what, asyncio.get_running_loop().create_task(run()))
        return True

    def cancel_all(self) -> None:
        """Cancel every call in flight (the service is gone)."""
        for _, task in self.in_flight.values():
            task.cancel()
        self.in_flight.clear()
