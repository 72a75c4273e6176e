"""The client's request slots (kubeforge.runtime.slots): urgent work first, FIFO within each
class, no slot lost to a cancelled wait; and the work queue marks its urgent lane's requests."""

from __future__ import annotations

import asyncio

import pytest

from kubeforge.runtime.queue import WorkQueue
from kubeforge.runtime.slots import URGENT_WORK, PrioritySlots


async def _waiter(slots, name, order, urgent=None, hold=None):
    async with slots.slot(urgent):
        order.append(name)
        if hold is not None:
            await hold.wait()


def test_a_freed_slot_goes_to_the_urgent_waiter_before_earlier_others_fifo_within_each():
    async def scenario():
        slots, order, hold = PrioritySlots(1), [], asyncio.Event()
        first = asyncio.create_task(_waiter(slots, "holder", order, hold=hold))
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(_waiter(slots, n, order, urgent=u))
                 for n, u in (("create-1", False), ("create-2", False), ("admit-1", True), ("admit-2", True))]
        await asyncio.sleep(0)
        assert slots.waiting() == (2, 2)
        hold.set()
        await asyncio.gather(first, *tasks)
        return order

    assert asyncio.run(scenario()) == ["holder", "admit-1", "admit-2", "create-1", "create-2"]


def test_urgency_is_read_from_the_context_when_not_given():
    async def scenario():
        slots, order, hold = PrioritySlots(1), [], asyncio.Event()
        first = asyncio.create_task(_waiter(slots, "holder", order, hold=hold))
        await asyncio.sleep(0)
        normal = asyncio.create_task(_waiter(slots, "normal", order))
        await asyncio.sleep(0)
        token = URGENT_WORK.set(True)
        urgent = asyncio.create_task(_waiter(slots, "urgent", order))  # the task copies the context
        URGENT_WORK.reset(token)
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(first, normal, urgent)
        return order

    assert asyncio.run(scenario()) == ["holder", "urgent", "normal"]


def test_a_cancelled_wait_loses_no_slot_and_a_newcomer_never_overtakes_a_waiter():
    async def scenario():
        slots, order, hold = PrioritySlots(2), [], asyncio.Event()
        holders = [asyncio.create_task(_waiter(slots, f"h{i}", order, hold=hold)) for i in range(2)]
        await asyncio.sleep(0)
        gone = asyncio.create_task(_waiter(slots, "gone", order))
        kept = asyncio.create_task(_waiter(slots, "kept", order))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert slots.waiting() == (0, 1)
        hold.set()
        await asyncio.gather(*holders, kept)
        # both slots are free again: two holders at once get in without waiting
        both = asyncio.Event()
        again = [asyncio.create_task(_waiter(slots, f"a{i}", order, hold=both)) for i in range(2)]
        await asyncio.sleep(0)
        assert order[-2:] == ["a0", "a1"]
        both.set()
        await asyncio.gather(*again)
        return order

    order = asyncio.run(scenario())
    assert "gone" not in order and order.index("kept") > 1


def test_size_below_one_is_refused():
    with pytest.raises(ValueError):
        PrioritySlots(0)


def test_the_work_queue_marks_only_its_urgent_lane_as_urgent_work():
    async def scenario():
        seen, gate = {}, asyncio.Event()

        async def handler(key):
            seen[key] = URGENT_WORK.get()
            return None

        q = WorkQueue(handler, workers=1, name="t-slots", gate=gate)
        q.start()
        q.add("normal")
        q.add("follow", follow_up=True)
        q.add("admit", urgent=True)
        gate.set()
        for _ in range(200):
            if len(seen) == 3:
                break
            await asyncio.sleep(0.01)
        await q.stop()
        return seen, URGENT_WORK.get()

    seen, after = asyncio.run(scenario())
    assert seen == {"admit": True, "follow": False, "normal": False}
    assert after is False
