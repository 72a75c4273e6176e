"""A TrainingJob watch that stops delivering is noticed (kubeforge/runtime/watch_echo.py): the
tracker alone, then the real runtime (its status writes, the ``kf_jobs`` index handler and the
watchdog) on tests/fakekube.py with a watch that lags or stops."""

from __future__ import annotations

import asyncio

from fakekube import small_cluster
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.training import reconcile_job
from kubeforge.runtime.watch_echo import EXIT_WATCH_STALLED, STALL_SECONDS, WatchEcho, watch_watchdog
from records import NS, job_body

A = (NS, "a")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_write_waits_until_the_watch_shows_its_version_and_any_event_restarts_the_wait():
    clock = Clock()
    echo = WatchEcho(clock)
    echo.wrote(A, {"metadata": {"resourceVersion": "10"}}, "9")
    clock.t += 50
    echo.wrote(A, {"metadata": {"resourceVersion": "12"}}, "9")  # a second write keeps the first wait's time
    assert echo.stalled() == (A, 12, 50.0)
    echo.saw(A, "11")  # an older version: still waiting, but the watch is alive now
    clock.t += 20
    assert echo.stalled() == (A, 12, 20.0)
    echo.saw(A, "12")
    assert echo.stalled() is None
    echo.wrote(A, {"metadata": {"resourceVersion": "13"}}, "12")
    echo.forget(A)
    assert echo.stalled() is None
    echo.wrote(A, {"metadata": {"resourceVersion": "14"}}, "14")  # the index shows it already
    echo.wrote(A, {"metadata": {"resourceVersion": "not-a-number"}}, "12")  # not followed
    assert echo.stalled() is None


async def _placed_and_written(monkeypatch, lagging: bool):
    kube = await small_cluster(1)
    kube.use_clock(monkeypatch)
    await kube.client_create("TrainingJob", job_body("a", gpus=8))
    await admission_round(kube.rt, kube.now)
    kube.lagging = lagging
    await reconcile_job(kube.rt, A)  # writes the placement: its echo is awaited
    return kube


async def _watchdog(kube) -> asyncio.Event:
    """Run the watchdog until it stops the operator or a short while has passed."""
    stop = asyncio.Event()
    task = asyncio.create_task(watch_watchdog(kube.rt, stop, check=0.0))
    try:
        await asyncio.wait_for(asyncio.shield(task), 0.2)
    except asyncio.TimeoutError:
        task.cancel()
    return stop


def test_a_watch_that_delivers_is_never_taken_for_stalled(monkeypatch):
    async def go() -> None:
        kube = await _placed_and_written(monkeypatch, lagging=False)
        assert kube.rt.cache.echo.stalled() is None  # the write came back through kf_jobs
        kube.now += STALL_SECONDS * 3
        stop = await _watchdog(kube)
        assert not stop.is_set() and kube.rt.exit_code == 0
    asyncio.run(go())


def test_a_watch_that_stops_delivering_stops_the_operator_after_the_stall(monkeypatch):
    async def go() -> None:
        kube = await _placed_and_written(monkeypatch, lagging=True)
        assert kube.rt.cache.echo.stalled()[0] == A
        kube.now += STALL_SECONDS - 1
        stop = await _watchdog(kube)
        assert not stop.is_set()  # not yet
        kube.now += 2
        stop = await _watchdog(kube)
        assert stop.is_set() and kube.rt.exit_code == EXIT_WATCH_STALLED
    asyncio.run(go())


def test_a_late_delivery_or_a_deleted_job_is_no_stall(monkeypatch):
    async def go() -> None:
        kube = await _placed_and_written(monkeypatch, lagging=True)
        kube.now += STALL_SECONDS + 1
        await kube.deliver()  # the watch was only late
        stop = await _watchdog(kube)
        assert not stop.is_set() and kube.rt.cache.echo.stalled() is None

        await reconcile_job(kube.rt, A)  # nothing new to write: nothing awaited
        body = kube.get("TrainingJob", NS, "a")
        body["status"] = {**body["status"], "phase": "Running"}
        kube.rt.cache.echo.wrote(A, await kube.put("TrainingJob", body), None)  # a write that will not be seen
        await kube.remove("TrainingJob", NS, "a")  # deleted; the lagging watch shows neither
        kube.now += STALL_SECONDS + 1
        stop = await _watchdog(kube)
        assert not stop.is_set() and kube.rt.exit_code == 0
        assert kube.rt.cache.echo.stalled() is None  # the watchdog read it gone and forgot it
    asyncio.run(go())
