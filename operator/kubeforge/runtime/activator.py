"""Where the kubeforge activator answers: its Service's ready addresses and ``http`` port, read
every :data:`ACTIVATOR_POLL_SECONDS` (one list call, only when ``--activator-service`` is set).

A service with no ready replica gets these addresses in its EndpointSlice, so its requests are
held by the activator until a replica is Ready (see :class:`kubeforge.api.Activation`).
"""

from __future__ import annotations

import logging

from kubeforge.api import ENDPOINT_PORT_NAME
from kubeforge.runtime.state import Runtime, every

log = logging.getLogger("kubeforge.activator")
ACTIVATOR_POLL_SECONDS = 10.0


def ready_addresses(slices: list[dict]) -> tuple[tuple[str, ...], int | None]:
    """(ready IPv4 addresses, the ``http`` port) of a Service's EndpointSlices."""
    addresses: set[str] = set()
    port = None
    for s in slices:
        if s.get("addressType") != "IPv4":
            continue
        port = next((p.get("port") for p in s.get("ports") or [] if p.get("name") == ENDPOINT_PORT_NAME), port)
        for e in s.get("endpoints") or []:
            if (e.get("conditions") or {}).get("ready", True):
                addresses.update(e.get("addresses") or [])
    return tuple(sorted(addresses)), port


async def activator_loop(rt: Runtime) -> None:
    """Keep ``rt.cache.activator`` current; when it changes, every service is looked at again
    (those at zero replicas point their Service at the new addresses). One log line per failure
    streak."""
    ref = rt.options.activator_service
    if ref is None:
        return
    ns, name = ref
    await rt.ready.wait()

    async def step() -> None:
        body = await rt.client.get("EndpointSlice", ns, None, labelSelector=f"kubernetes.io/service-name={name}")
        found = ready_addresses((body or {}).get("items") or [])
        if rt.cache.set_activator(found):
            log.info("activator %s/%s at %s (port %s)", ns, name, ", ".join(found[0]) or "no ready address", found[1])
            for key in rt.cache.services_remembered():
                rt.queue_service(key)

    await every(ACTIVATOR_POLL_SECONDS, step, "activator endpoints not read", log)
