"""The status overlay: act on our own last write until the index has caught up with it."""

import asyncio

from kubeforge.handlers.state import State


def obj(rv, **status):
    return {"metadata": {"resourceVersion": str(rv)}, "status": status}


def test_overlay_wins_until_the_index_reaches_our_write():
    s = State()
    key = ("ns", "job")
    s.remember_status(key, obj(12, placement={"nodes": ["n1"]}, phase="Pending"))
    # The index still holds an older version without the placement: we must not forget it,
    # however long the index lags (the job would be admitted twice).
    assert s.effective_status(key, obj(10, phase="Pending"))["placement"] == {"nodes": ["n1"]}
    assert s.effective_status(key, obj(11))["placement"] == {"nodes": ["n1"]}
    # The index caught up (or moved past): the index is the truth again.
    assert s.effective_status(key, obj(12, placement={"nodes": ["n1"]}, phase="Running"))["phase"] == "Running"
    assert s.effective_status(key, obj(10, phase="Pending")) == {"phase": "Pending"}  # entry dropped


def test_overlay_keeps_the_full_status_returned_by_the_api_server():
    s = State()
    key = ("ns", "job")
    # Another write (admission) landed between our GET and our patch: the API server's answer
    # holds both, so the overlay never hides the placement.
    s.remember_status(key, obj(20, placement={"nodes": ["n2"]}, lastCheckpoint={"step": 5}))
    assert s.effective_status(key, obj(19))["placement"] == {"nodes": ["n2"]}


def test_object_deleted_during_the_write_clears_the_overlay():
    s = State()
    key = ("ns", "job")
    s.remember_status(key, obj(5, phase="Running"))
    s.remember_status(key, None)
    assert s.effective_status(key, None) == {}


def test_work_queue_runs_a_key_once_at_a_time_and_reruns_it_when_dirty():
    from kubeforge.handlers.state import WorkQueue

    async def scenario():
        seen, gate = [], asyncio.Event()

        async def handler(key):
            seen.append(key)
            if len(seen) == 1:
                await gate.wait()
            return None

        q = WorkQueue(handler, workers=4, name="t")
        q.start()
        q.add("a")
        for _ in range(100):  # bounded: until the worker has picked it up
            if seen:
                break
            await asyncio.sleep(0.01)
        q.add("a")  # while "a" runs: marked dirty, not run concurrently
        q.add("a")
        await asyncio.sleep(0.05)  # a short window in which a second run must NOT start
        assert seen == ["a"]
        gate.set()
        for _ in range(100):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.01)
        await q.stop()
        return seen

    assert asyncio.run(scenario()) == ["a", "a"]


def test_an_older_write_finishing_late_never_replaces_a_newer_one():
    s = State()
    key = ("ns", "job")
    s.remember_status(key, obj(100, placement={"nodes": ["n1"]}))
    s.remember_status(key, obj(90, phase="Pending"))  # issued earlier, answered later
    assert s.effective_status(key, obj(80))["placement"] == {"nodes": ["n1"]}
