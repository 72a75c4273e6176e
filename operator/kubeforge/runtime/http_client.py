"""One process-wide HTTP client, opened on first use: what the runtime's outbound callers share
(:class:`~kubeforge.runtime.metrics_source.PrometheusSource` to Prometheus,
:class:`~kubeforge.runtime.engine_control.HttpEngineControl` to the engines), so each keeps its
connections alive instead of a handshake per call, and the operator closes it at shutdown.
"""

from __future__ import annotations

import httpx


class LazyHttpClient:
    """Holds one ``httpx.AsyncClient``: :meth:`start` opens it (once), :meth:`client` opens it
    when needed and returns it, :meth:`close` closes it (a later use opens a new one)."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        """Open the HTTP client (once; a call before it opens it too)."""
        if self._client is None:
            self._client = httpx.AsyncClient()

    async def close(self) -> None:
        """Close the HTTP client; a later call opens a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def client(self) -> httpx.AsyncClient:
        """The open client (opened here on first use)."""
        await self.start()
        assert self._client is not None
        return self._client
