"""The serving orders of kubeforge.admission (issue 30: every order beside the others in
admission/_ordering.py): which standby replicas go first, which are woken first, which groups a
scale-down removes first."""

from __future__ import annotations

from kubeforge.admission import scale_down_order, standby_removal_order, wake_order
from kubeforge.objects import GroupRecord

READY, STARTING, FAILED = "Ready", "Starting", "Failed"


def g(index: int, phase: str = READY, nodes: tuple[str, ...] = ("n",), standby: str | None = None,
      since: float | None = None, draining: float | None = None) -> GroupRecord:
    return GroupRecord(index=index, phase=phase, nodes=nodes, standby=standby, standby_since=since,
                       draining_since=draining)


def test_standby_removal_takes_the_least_invested_first() -> None:
    asleep, sleeping, starting, unplaced = (g(0, standby="Asleep"), g(1, standby="Pending"),
                                            g(2, STARTING, standby="Pending"), g(3, STARTING, (), "Pending"))
    order = standby_removal_order([asleep, sleeping, starting, unplaced])
    assert [x.index for x in order] == [3, 2, 1, 0]
    # within a tier, the highest index first
    assert [x.index for x in standby_removal_order([g(4, standby="Asleep"), g(7, standby="Asleep")])] == [7, 4]


def test_wake_order_takes_the_quickest_to_serve_first() -> None:
    old, new = g(5, standby="Asleep", since=100.0), g(1, standby="Asleep", since=200.0)
    pending, starting = g(0, standby="Pending"), g(2, STARTING, standby="Pending")
    order = wake_order([starting, pending, new, old])
    assert [x.index for x in order] == [5, 1, 0, 2]  # asleep (longest first), Ready not asleep, starting


def test_scale_down_removes_what_serves_least_first() -> None:
    groups = [g(0), g(1, FAILED, ()), g(2, STARTING, ()), g(3, draining=5.0), g(4, STARTING), g(5)]
    order = scale_down_order(groups, {0: 3.0, 5: 1.0})
    assert [x.index for x in order] == [1, 2, 3, 4, 5, 0]
