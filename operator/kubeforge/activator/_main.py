"""``kubeforge activator``: the process. Two aiohttp servers (the proxy port; the metrics and
health port), the EndpointSlice watch and the expiry tick, in one event loop.

On SIGTERM the activator reports not ready (``/readyz`` 503: the activator Service, and through
the operator every ``activator`` slice, drop it), keeps serving for up to ``shutdown_grace``
seconds while anything is held or in flight, then answers what is still held 503 with
Retry-After and stops.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web

from ._server import Activator, ActivatorConfig
from ._watch import api_client, watch_slices

log = logging.getLogger("kubeforge.activator")


async def serve(config: ActivatorConfig, *, address: str, port: int, metrics_address: str, metrics_port: int,
                kubeconfig: str | None, shutdown_grace: float, stop: asyncio.Event | None = None) -> None:
    """Runs the activator until SIGTERM/SIGINT (or ``stop`` is set).

    Args:
        config: The activator's settings.
        address: Address the proxy port binds.
        port: The proxy port (the ``http`` port of the activator Service).
        metrics_address: Address of the metrics and health port.
        metrics_port: Port of ``/metrics``, ``/healthz``, ``/readyz``.
        kubeconfig: A kubeconfig file, or None (in-cluster, else ``$KUBECONFIG``).
        shutdown_grace: Seconds to keep serving after the stop signal while requests are held
            or in flight.
        stop: Set to stop (tests); SIGTERM and SIGINT set it too.
    """
    act = Activator(config)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    health = web.AppRunner(act.health_app(), access_log=None)
    proxy = web.AppRunner(act.proxy_app(), access_log=None, handler_cancellation=True)
    await health.setup()
    await proxy.setup()
    api = await api_client(kubeconfig)
    tasks = [asyncio.create_task(watch_slices(api, act), name="endpointslice-watch"),
             asyncio.create_task(act.tick_loop(), name="expiry-tick")]
    try:
        await web.TCPSite(health, metrics_address, metrics_port).start()
        await web.TCPSite(proxy, address, port).start()
        log.info("activator %s serving on %s:%d (metrics and health on %s:%d)%s", config.identity, address, port,
                 metrics_address, metrics_port,
                 f"; every forward goes to {config.backend_override} (simulator only)" if config.backend_override else "")
        await stop.wait()
        act.draining = True
        log.info("stopping: not ready; serving what is held or in flight for up to %.0fs", shutdown_grace)
        deadline = loop.time() + shutdown_grace
        while act.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.2)
        act.flush()
        await asyncio.sleep(0)  # let the held handlers write their 503
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await proxy.cleanup()
        await health.cleanup()
        await api.close()
        log.info("stopped")
