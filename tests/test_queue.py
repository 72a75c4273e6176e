"""The controller-style work queue (kubeforge.runtime.queue.WorkQueue). Moved from
test_state.py (handlers.state.WorkQueue)."""

from __future__ import annotations

import asyncio

from kubeforge.runtime.queue import WorkQueue


async def _until(pred, tries=200):
    """Poll ``pred`` for at most ``tries`` x 10 ms (bounded)."""
    for _ in range(tries):
        if pred():
            return True
        await asyncio.sleep(0.01)
    return pred()


def _gated_recorder(workers, record=None):
    """A started WorkQueue behind a gate not yet set, whose handler appends ``record(q, key)``
    (the key itself by default) to the returned list. Call it inside the running loop."""
    seen, gate = [], asyncio.Event()

    async def handler(key):
        seen.append(record(q, key) if record else key)
        return None

    q = WorkQueue(handler, workers=workers, name="t", gate=gate)
    q.start()
    return q, seen, gate


def test_work_queue_runs_a_key_once_at_a_time_and_reruns_it_when_dirty():
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
        await _until(lambda: seen)
        q.add("a")  # while "a" runs: marked dirty, not run concurrently
        q.add("a")
        await asyncio.sleep(0.05)  # a short window in which a second run must NOT start
        assert seen == ["a"]
        gate.set()
        await _until(lambda: len(seen) == 2)
        await asyncio.sleep(0.05)  # and only once more, however many adds came meanwhile
        await q.stop()
        return seen

    assert asyncio.run(scenario()) == ["a", "a"]


def test_work_queue_deduplicates_queued_keys_and_waits_for_its_gate():
    async def scenario():
        q, seen, gate = _gated_recorder(workers=2)
        for k in ("a", "b", "a", "a", "b"):
            q.add(k)
        await asyncio.sleep(0.05)
        assert seen == []  # not leading yet
        gate.set()
        await _until(lambda: len(seen) == 2)
        await asyncio.sleep(0.05)
        await q.stop()
        return sorted(seen)

    assert asyncio.run(scenario()) == ["a", "b"]


def test_work_queue_requeues_after_the_handler_asks_and_retries_a_failure():
    async def scenario():
        calls = []

        async def handler(key):
            calls.append(key)
            if len(calls) == 1:
                return 0.02  # look again soon
            if len(calls) == 2:
                raise RuntimeError("boom")  # retried after 0.5 s
            return None

        q = WorkQueue(handler, workers=1, name="t")
        q.start()
        q.add("k")
        ok = await _until(lambda: len(calls) >= 3, tries=300)
        await q.stop()
        return ok, calls

    ok, calls = asyncio.run(scenario())
    assert ok and calls == ["k", "k", "k"]


def test_urgent_keys_are_taken_before_the_normal_lane_and_a_queued_key_moves_up_once():
    async def scenario():
        # each handler records the urgent keys still waiting behind it
        q, seen, gate = _gated_recorder(workers=1, record=lambda q, key: (key, q.urgent_waiting()))
        for k in ("a", "b", "c"):
            q.add(k)
        q.add("d", urgent=True)
        q.add("b", urgent=True)  # queued normally: moves up, and runs once
        q.add("d")  # already urgent: stays so
        q.add("f", follow_up=True)  # after every urgent key, before the normal lane
        q.add("c", follow_up=True)  # queued normally: moves up to the follow-up lane
        q.add("b", follow_up=True)  # already urgent: stays so
        assert (len(q), q.urgent_waiting()) == (5, 2)
        gate.set()
        await _until(lambda: len(seen) == 5)
        await asyncio.sleep(0.05)  # no second run of "b" or "c" from their old places
        await q.stop()
        return seen

    # each handler sees the urgent keys still waiting behind it
    assert asyncio.run(scenario()) == [("d", 1), ("b", 0), ("f", 0), ("c", 0), ("a", 0)]


def test_an_urgent_add_while_the_key_runs_reruns_it_ahead_of_the_normal_lane():
    async def scenario():
        seen, release = [], asyncio.Event()

        async def handler(key):
            seen.append(key)
            if len(seen) == 1:
                await release.wait()
            return None

        q = WorkQueue(handler, workers=1, name="t")
        q.start()
        q.add("a")
        await _until(lambda: seen)
        q.add("z")
        q.add("a", urgent=True)  # "a" is running: re-run after it, before "z"
        release.set()
        await _until(lambda: len(seen) == 3)
        await q.stop()
        return seen

    assert asyncio.run(scenario()) == ["a", "a", "z"]


def test_a_timer_for_a_key_already_queued_is_dropped_and_one_for_an_idle_key_fires_once():
    """add_after: the pod-event batch (kubeforge.runtime.state.POD_EVENT_BATCH_SECONDS) of a
    job already queued adds no second run; an idle key's timers merge into the earliest."""
    async def scenario():
        q, seen, gate = _gated_recorder(workers=1)
        q.add("a")
        q.add_after("a", 0.05)  # queued: its run comes first and sees everything
        q.add_after("b", 0.2)
        q.add_after("b", 0.05)  # the earlier timer wins
        q.add_after("b", 0.1)
        gate.set()
        await _until(lambda: len(seen) == 2)
        await asyncio.sleep(0.3)  # no second run of either
        await q.stop()
        return seen

    assert asyncio.run(scenario()) == ["a", "b"]


def test_timers_work_on_uvloop_where_a_due_time_already_past_is_a_plain_handle():
    """The operator runs on uvloop (kubeforge.cli.operator_loop). uvloop's ``call_at`` for a time
    already past returns a ``Handle`` with no ``when()``; the queue read ``when()`` back and the
    chaos test's operator raised on a second timer for the same key (a requeue after 0 s)."""
    import uvloop

    async def scenario():
        q, seen, gate = _gated_recorder(workers=1)
        q.add_after("a", 0.0)   # due now: uvloop hands back a plain Handle
        q.add_after("a", 0.0)   # a second timer for the key compares with the first
        q.add_after("b", 0.2)
        q.add_after("b", 0.05)  # the earlier timer still wins
        gate.set()
        await _until(lambda: len(seen) == 2)
        await asyncio.sleep(0.3)
        await q.stop()
        return seen

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(scenario()) == ["a", "b"]


def test_starting_a_queue_exports_its_worker_count():
    """``kubeforge_max_concurrent_reconciles{controller}`` says how many reconciles a queue runs
    at once (the training bench prints it beside the reconcile times)."""
    from kubeforge import metrics

    async def scenario():
        q, _, _ = _gated_recorder(workers=5, record=None)
        gauge = metrics.MAX_CONCURRENT_RECONCILES.labels(controller="t")
        assert gauge._value.get() == 5
        await q.stop()

    asyncio.run(scenario())


def test_the_job_workers_fit_in_the_clients_requests_in_flight():
    """More TrainingJob workers than the client lets requests fly put the workers' pod creates
    ahead of the urgent lane's admission writes at the client's semaphore (the burst measured
    at 128 workers: created -> Admitted p95 12.5 s against 3.9 s at 64)."""
    from kubeforge.runtime.client import MAX_IN_FLIGHT
    from kubeforge.runtime.operator import JOB_WORKERS, SERVICE_WORKERS

    assert JOB_WORKERS <= MAX_IN_FLIGHT
    assert SERVICE_WORKERS <= MAX_IN_FLIGHT


def test_a_backlog_of_reconciles_that_never_suspend_still_lets_the_loop_run_other_tasks():
    # A reconcile with nothing to write may never suspend, and a get from a queue that holds
    # keys does not either: without a yield between keys one worker took a restart's whole
    # backlog while the watches and the admission round waited (e2e/README-scale-bench.md).
    async def scenario():
        seen, turns = [], []

        async def handler(key):
            seen.append(key)  # no await: finds nothing to do
            return None

        async def other_task():  # a watch or the admission loop, ready all along
            while len(seen) < 200:
                turns.append(len(seen))
                await asyncio.sleep(0)

        q = WorkQueue(handler, workers=2, name="t")
        for i in range(200):
            q.add(i)
        q.start()
        await asyncio.wait_for(other_task(), timeout=5)
        await q.stop()
        return turns

    turns = asyncio.run(scenario())
    # Before the fix: one turn at the start, then none until all 200 were done.
    assert len(turns) >= 50, f"the other task ran {len(turns)} times while 200 keys were handled"
    assert max(b - a for a, b in zip(turns, turns[1:])) <= 2, "a worker took many keys without a yield"
