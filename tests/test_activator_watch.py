"""The activator's EndpointSlice watch loop, with the API calls scripted: list then watch,
resume from the last resourceVersion, relist at once on the first 410, back off (doubling,
capped) on errors and on a second 410 in a row."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from kubeforge.activator import _watch


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_list(self, objs):
        self.calls.append(("list", len(objs)))

    def on_event(self, kind, obj):
        self.calls.append(("event", kind))


def scripted(monkeypatch, lists, watches):
    """``lists``/``watches``: what successive calls return or raise (exceptions are raised)."""
    seen_rv: list[str] = []

    async def list_slices(api):
        item = lists.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    async def watch_once(api, sink, rv):
        seen_rv.append(rv)
        if not watches:
            raise asyncio.CancelledError  # end of the script
        item = watches.pop(0)
        if isinstance(item, BaseException):
            raise item
        sink.on_event("MODIFIED", {})
        return item

    monkeypatch.setattr(_watch, "list_slices", list_slices)
    monkeypatch.setattr(_watch, "watch_once", watch_once)
    return seen_rv


def run_loop(sink) -> list[float]:
    sleeps: list[float] = []

    async def sleep(s):
        sleeps.append(s)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(_watch.watch_slices(None, sink, sleep=sleep))
    return sleeps


def test_list_then_watch_resumes_from_the_last_resource_version(monkeypatch):
    rvs = scripted(monkeypatch, [([{}, {}], "10")], ["11", "12"])
    sink = Sink()
    assert run_loop(sink) == []
    assert rvs == ["10", "11", "12"]
    assert sink.calls == [("list", 2), ("event", "MODIFIED"), ("event", "MODIFIED")]


def test_410_relists_at_once_then_backs_off_if_it_repeats(monkeypatch):
    gone = ApiException(status=410, reason="Expired")
    rvs = scripted(monkeypatch, [([], "1"), ([], "5"), ([], "6")], [gone, gone])
    sink = Sink()
    assert run_loop(sink) == [1.0]  # the first 410 relists at once, the second waits
    assert rvs == ["1", "5", "6"]
    assert [c for c in sink.calls if c[0] == "list"] == [("list", 0)] * 3


def test_errors_back_off_doubling_to_the_cap_and_reset_after_a_list(monkeypatch):
    err = aiohttp.ClientConnectionError("refused")
    lists = [err] * 7 + [([], "3")]
    scripted(monkeypatch, lists, [ApiException(status=500, reason="boom")])
    sink = Sink()
    sleeps = run_loop_until_lists_done(sink, lists)
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 1.0]  # capped at MAX_BACKOFF, reset by the list


def run_loop_until_lists_done(sink, lists):
    sleeps: list[float] = []

    async def sleep(s):
        sleeps.append(s)
        if not lists:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(_watch.watch_slices(None, sink, sleep=sleep))
    return sleeps
