"""The activator's HTTP side (aiohttp) against stub backends, slices fed by hand: held requests
all answered once the slice flips, 429 beyond the bound, the hold timeout, the loop guard, the
body bound, a client that leaves, backends that refuse or stall, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from kubeforge.activator import Activator, ActivatorConfig
from kubeforge.activator._route import MARKER_HEADER

NS, SVC = "ml", "llama"
HOST = f"{SVC}.{NS}.svc.cluster.local"


def endpoint_slice(mode: str, ips: list[str], port: int, hold: int | None = None, limit: int | None = None,
                   service: str = SVC) -> dict:
    ann = {}
    if hold is not None:
        ann["kubeforge.io/activation-hold-seconds"] = str(hold)
    if limit is not None:
        ann["kubeforge.io/activation-queue-limit"] = str(limit)
    return {
        "metadata": {"name": f"kubeforge-{service}", "namespace": NS, "annotations": ann,
                     "labels": {"kubeforge.io/inference-service": service, "kubeforge.io/endpoints": mode}},
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
        "ports": [{"name": "http", "port": port}],
    }


class Stub:
    """A model server stand-in on 127.0.0.1 and 127.0.0.2 (same port): records what it got;
    ``/stream`` answers in chunks, ``/slow`` never answers in time."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        self.by_ip: dict[str, int] = {}
        self.gate: asyncio.Event | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        ip = request.transport.get_extra_info("sockname")[0]
        self.by_ip[ip] = self.by_ip.get(ip, 0) + 1
        self.seen.append({"method": request.method, "path": request.path_qs, "host": request.headers.get("Host"),
                          "body": body.decode(), "marker": request.headers.get(MARKER_HEADER),
                          "x-user": request.headers.get("X-User"), "ip": ip,
                          "xff": request.headers.get("X-Forwarded-For")})
        if request.path == "/slow":
            await asyncio.sleep(30)
        if request.path == "/gate" and self.gate is not None:
            await self.gate.wait()
        if request.path == "/stream":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(3):
                await resp.write(f"data: {i}\n\n".encode())
                await asyncio.sleep(0.01)
            await resp.write_eof()
            return resp
        return web.json_response({"ok": True, "path": request.path_qs}, headers={"X-Backend": ip})


@contextlib.asynccontextmanager
async def running(config: ActivatorConfig | None = None, listed: bool = True):
    """(activator, proxy base URL, health base URL, stub, stub port)."""
    stub = Stub()
    sapp = web.Application()
    sapp.router.add_route("*", "/{tail:.*}", stub.handle)
    srunner = web.AppRunner(sapp, access_log=None, handler_cancellation=True)
    await srunner.setup()
    s1 = web.TCPSite(srunner, "127.0.0.1", 0)
    await s1.start()
    sport = s1._server.sockets[0].getsockname()[1]
    await web.TCPSite(srunner, "127.0.0.2", sport).start()
    act = Activator(config or ActivatorConfig(retry_after=7, tick=0.05, forward_timeout=2, connect_timeout=1,
                                              identity="act-0", own_addresses=("10.0.0.7",)))
    runners = []
    urls = []
    for app, kw in ((act.proxy_app(), {"handler_cancellation": True}), (act.health_app(), {})):
        r = web.AppRunner(app, access_log=None, **kw)
        await r.setup()
        site = web.TCPSite(r, "127.0.0.1", 0)
        await site.start()
        runners.append(r)
        urls.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")
    tick = asyncio.create_task(act.tick_loop())
    if listed:
        act.on_list([])
    try:
        yield act, urls[0], urls[1], stub, sport
    finally:
        tick.cancel()
        for r in runners:
            await r.cleanup()
        await srunner.cleanup()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def wait_until(pred, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def scrape(health: str) -> dict[tuple, float]:
    async with aiohttp.ClientSession() as s, s.get(f"{health}/metrics") as r:
        text = await r.text()
    out = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    return out


def requests_total(m: dict, outcome: str) -> float:
    return m.get(("kubeforge_activator_requests_total", (("namespace", NS), ("outcome", outcome), ("service", SVC))), 0)


def queue_length(m: dict) -> float | None:
    return m.get(("kubeforge_activator_queue_length", (("namespace", NS), ("service", SVC))))


def test_held_requests_are_all_forwarded_once_the_slice_flips():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("activator", ["10.0.0.7"], 8012, hold=30, limit=50))

            async def one(i: int):
                async with s.post(f"{url}/v1/completions?n={i}", data=json.dumps({"i": i}),
                                  headers={"Host": HOST, "X-User": f"u{i}"}) as r:
                    return r.status, await r.json(), r.headers.get("X-Backend")

            tasks = [asyncio.create_task(one(i)) for i in range(20)]
            await wait_until(lambda: act.buffer.held((NS, SVC)) == 20)
            assert queue_length(await scrape(health)) == 20
            assert stub.seen == []
            act.on_event("MODIFIED", endpoint_slice("replicas", ["127.0.0.1", "127.0.0.2"], sport))
            results = await asyncio.gather(*tasks)
            assert [st for st, _, _ in results] == [200] * 20
            assert sorted(b["path"] for _, b, _ in results) == sorted(f"/v1/completions?n={i}" for i in range(20))
            assert len(stub.seen) == 20  # each forwarded exactly once
            assert {x["host"] for x in stub.seen} == {HOST}
            assert {x["marker"] for x in stub.seen} == {"act-0"}
            assert sorted(x["body"] for x in stub.seen) == sorted(json.dumps({"i": i}) for i in range(20))
            assert all(x["x-user"] == f"u{json.loads(x['body'])['i']}" for x in stub.seen)
            assert all(x["xff"] == "127.0.0.1" for x in stub.seen)
            assert stub.by_ip == {"127.0.0.1": 10, "127.0.0.2": 10}  # least outstanding: an even split
            m = await scrape(health)
            assert queue_length(m) == 0
            assert requests_total(m, "forwarded") == 20
            assert m[("kubeforge_activator_hold_seconds_count", (("namespace", NS), ("service", SVC)))] == 20
            assert act.buffer.outstanding((NS, SVC)) == {}

    run(main())


def test_beyond_the_bound_429_with_retry_after():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("activator", ["10.0.0.7"], 8012, hold=30, limit=2))
            held = [asyncio.create_task(s.get(f"{url}/x", headers={"Host": HOST})) for _ in range(2)]
            await wait_until(lambda: act.buffer.held((NS, SVC)) == 2)
            async with s.get(f"{url}/x", headers={"Host": HOST}) as r:
                assert r.status == 429
                assert r.headers["Retry-After"] == "7"
                body = await r.json()
                assert body["reason"] == "QueueFull" and body["service"] == f"{NS}/{SVC}"
            act.on_event("MODIFIED", endpoint_slice("replicas", ["127.0.0.1"], sport))
            for t in held:
                assert (await t).status == 200
            assert requests_total(await scrape(health), "rejected") == 1

    run(main())


def test_hold_timeout_is_503_with_retry_after():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("activator", ["10.0.0.7"], 8012, hold=1, limit=5))
            t0 = time.monotonic()
            async with s.get(f"{url}/x", headers={"Host": f"{SVC}.{NS}"}) as r:
                took = time.monotonic() - t0
                assert r.status == 503 and r.headers["Retry-After"] == "7"
                assert (await r.json())["reason"] == "HoldTimeout"
            assert 1.0 <= took < 1.0 + 0.05 + 1.0  # hold + one tick (+ slack for a loaded machine)
            m = await scrape(health)
            assert requests_total(m, "timed_out") == 1 and queue_length(m) == 0
            assert stub.seen == []

    run(main())


def test_a_request_arriving_while_replicas_is_forwarded_at_once_and_streamed():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("replicas", ["127.0.0.2"], sport))
            async with s.get(f"{url}/stream", headers={"X-Kubeforge-Service": f"{NS}/{SVC}"}) as r:
                assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
                chunks = [c async for c in r.content.iter_any()]
            assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
            assert stub.seen[0]["ip"] == "127.0.0.2"

    run(main())


def test_loop_guard():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("replicas", ["127.0.0.1"], sport))
            async with s.get(f"{url}/x", headers={"Host": HOST, MARKER_HEADER: "act-1"}) as r:
                assert r.status == 508 and (await r.json())["reason"] == "LoopDetected"
            # a replicas slice that lists our own address is no backend: held, never forwarded
            act.on_event("MODIFIED", endpoint_slice("replicas", ["10.0.0.7"], 8012, hold=1))
            async with s.get(f"{url}/x", headers={"Host": HOST}) as r:
                assert r.status == 503 and (await r.json())["reason"] == "HoldTimeout"
            assert stub.seen == []
            assert requests_total(await scrape(health), "failed") == 1

    run(main())


def test_unknown_and_unnamed_services_and_not_synced():
    async def main():
        async with running(listed=False) as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            async with s.get(f"{url}/x", headers={"Host": HOST}) as r:
                assert r.status == 503 and (await r.json())["reason"] == "NotSynced"
            async with s.get(f"{health}/readyz") as r:
                assert r.status == 503
            act.on_list([endpoint_slice("activator", ["10.0.0.7"], 8012)])
            async with s.get(f"{health}/readyz") as r:
                assert r.status == 200
            async with s.get(f"{health}/healthz") as r:
                assert r.status == 200
            async with s.get(f"{url}/x", headers={"Host": f"other.{NS}.svc"}) as r:
                body = await r.json()
                assert r.status == 404 and body["reason"] == "UnknownService" and body["service"] == f"{NS}/other"
            async with s.get(f"{url}/x", headers={"Host": "10.96.0.1"}) as r:
                body = await r.json()
                assert r.status == 404 and body["reason"] == "NoServiceNamed" and "X-Kubeforge-Service" in body["message"]
            m = await scrape(health)
            assert not [k for k in m if ("service", "other") in k[1]]  # no series for unknown names

    run(main())


def test_body_bound_413():
    async def main():
        cfg = ActivatorConfig(max_body_bytes=1000, tick=0.05, forward_timeout=2)
        async with running(cfg) as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("replicas", ["127.0.0.1"], sport))
            async with s.post(f"{url}/x", data=b"x" * 1001, headers={"Host": HOST}) as r:
                assert r.status == 413 and (await r.json())["reason"] == "BodyTooLarge"

            async def chunked():  # no Content-Length: the bound is found while reading
                yield b"x" * 600
                yield b"x" * 600

            async with s.post(f"{url}/x", data=chunked(), headers={"Host": HOST}) as r:
                assert r.status == 413
            async with s.post(f"{url}/x", data=b"x" * 1000, headers={"Host": HOST}) as r:
                assert r.status == 200
            assert [len(x["body"]) for x in stub.seen] == [1000]
            assert act.buffer.outstanding((NS, SVC)) == {}

    run(main())


def test_max_requests_503_overloaded():
    async def main():
        cfg = ActivatorConfig(max_requests=2, retry_after=3, tick=0.05)
        async with running(cfg) as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("activator", ["10.0.0.7"], 8012, hold=30, limit=10))
            held = [asyncio.create_task(s.get(f"{url}/x", headers={"Host": HOST})) for _ in range(2)]
            await wait_until(lambda: act.in_flight == 2)
            async with s.get(f"{url}/x", headers={"Host": HOST}) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "3"
                assert (await r.json())["reason"] == "Overloaded"
            act.on_event("MODIFIED", endpoint_slice("replicas", ["127.0.0.1"], sport))
            assert [(await t).status for t in held] == [200, 200]

    run(main())


def test_a_client_that_leaves_while_held_leaves_the_queue():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("activator", ["10.0.0.7"], 8012, hold=30, limit=10))
            t = asyncio.create_task(s.get(f"{url}/x", headers={"Host": HOST}))
            await wait_until(lambda: act.buffer.held((NS, SVC)) == 1)
            t.cancel()
            await wait_until(lambda: act.buffer.held((NS, SVC)) == 0)
            act.on_event("MODIFIED", endpoint_slice("replicas", ["127.0.0.1"], sport))
            await asyncio.sleep(0.1)
            assert stub.seen == []  # never forwarded
            m = await scrape(health)
            assert requests_total(m, "cancelled") == 1 and queue_length(m) == 0

    run(main())


def test_refused_backend_is_skipped_then_502_when_none_accepts():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            # 127.0.0.3 has nothing listening on the stub's port: refused, the other is tried
            act.on_event("ADDED", endpoint_slice("replicas", ["127.0.0.3", "127.0.0.1"], sport))
            for _ in range(4):
                async with s.get(f"{url}/x", headers={"Host": HOST}) as r:
                    assert r.status == 200
            act.on_event("MODIFIED", endpoint_slice("replicas", ["127.0.0.3"], sport))
            async with s.get(f"{url}/x", headers={"Host": HOST}) as r:
                assert r.status == 502 and (await r.json())["reason"] == "BackendUnreachable"
            assert act.buffer.outstanding((NS, SVC)) == {}
            m = await scrape(health)
            assert requests_total(m, "forwarded") == 4 and requests_total(m, "failed") == 1

    run(main())


def test_backend_too_slow_is_504():
    async def main():
        cfg = ActivatorConfig(forward_timeout=0.5, tick=0.05)
        async with running(cfg) as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_event("ADDED", endpoint_slice("replicas", ["127.0.0.1"], sport))
            async with s.get(f"{url}/slow", headers={"Host": HOST}) as r:
                assert r.status == 504 and (await r.json())["reason"] == "BackendTimeout"
            assert act.buffer.outstanding((NS, SVC)) == {}

    run(main())


def test_slice_deleted_while_held_is_503_and_series_dropped():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            sl = endpoint_slice("activator", ["10.0.0.7"], 8012, hold=30)
            act.on_event("ADDED", sl)
            t = asyncio.create_task(s.get(f"{url}/x", headers={"Host": HOST}))
            await wait_until(lambda: act.buffer.held((NS, SVC)) == 1)
            act.on_event("DELETED", sl)
            r = await t
            assert r.status == 503 and (await r.json())["reason"] == "ServiceRemoved"
            m = await scrape(health)
            assert queue_length(m) is None and requests_total(m, "failed") == 1

    run(main())


def test_relist_releases_and_forgets():
    async def main():
        async with running() as (act, url, health, stub, sport), aiohttp.ClientSession() as s:
            act.on_list([endpoint_slice("activator", ["10.0.0.7"], 8012, hold=30)])
            t = asyncio.create_task(s.get(f"{url}/x", headers={"Host": HOST}))
            await wait_until(lambda: act.buffer.held((NS, SVC)) == 1)
            act.on_list([endpoint_slice("replicas", ["127.0.0.1"], sport)])
            assert (await t).status == 200

    run(main())


def test_cli_defaults_match_activator_config():
    from kubeforge.cli import activator_cmd

    params = {p.name: p.default for p in activator_cmd.params}
    d = ActivatorConfig()
    for name in ("max_body_bytes", "max_requests", "forward_timeout", "connect_timeout", "retry_after"):
        assert params[name] == getattr(d, name), name
    ctx = activator_cmd.make_context("activator", ["--own-address", "10.0.0.1,fd00::1", "--own-address", "10.0.0.2"])
    assert ctx.params["own_addresses"] == ("10.0.0.1", "fd00::1", "10.0.0.2")
    with pytest.raises(Exception):
        activator_cmd.make_context("activator", ["--own-address", "nope"])
