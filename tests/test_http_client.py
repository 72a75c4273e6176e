"""kubeforge.runtime.http_client: one client, opened once, reopened after close."""

from __future__ import annotations

import asyncio

from kubeforge.runtime.http_client import LazyHttpClient


def test_one_client_opened_once_and_reopened_after_close() -> None:
    async def run() -> None:
        holder = LazyHttpClient()
        first = await holder.client()
        await holder.start()
        assert await holder.client() is first and not first.is_closed
        await holder.close()
        assert first.is_closed
        second = await holder.client()
        assert second is not first and not second.is_closed
        await holder.close()
        await holder.close()  # closing twice is harmless

    asyncio.run(run())
