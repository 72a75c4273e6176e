"""The backfill bench's bound (e2e/bench/backfill/bound.py): the least maximum large-gang wait when
only the large gangs compete for whole nodes of a block, on hand-checked cases, and its row and
verdict in the bench's report."""

from __future__ import annotations

import math

import pytest

from kubeforge.admission import QueueingStrategy

from e2e.bench.backfill import cli
from e2e.bench.backfill.bound import Gang, gangs_first
from e2e.bench.backfill.replay import Result
from e2e.bench.backfill.workload import Mix, load_jobs
from e2e.bench.lib.replay import T0


def test_waiting_for_a_short_gang_beats_first_come_first_served():
    # One slot. FIFO starts a at 0 and b, c after it (waits 90 and 90); the least maximum wait
    # leaves the slot idle until b (10) and c (20) ran, then starts a at 30: waits a 30, b 0, c 0.
    b = gangs_first([Gang("a", 0, 100), Gang("b", 10, 10), Gang("c", 20, 10)], blocks=1, block_nodes=16, need=16)
    assert b.waits == {"a": 30, "b": 0, "c": 0} and b.exact
    assert b.p(95) == pytest.approx(0.5)  # minutes


def test_a_third_gang_waits_for_the_first_to_end_in_one_block_of_two_slots():
    b = gangs_first([Gang("a", 0, 3600), Gang("b", 0, 7200), Gang("c", 0, 3600)], blocks=1, block_nodes=16, need=8)
    assert sorted(b.waits.values()) == [0, 0, 3600] and b.waits["b"] == 0


def test_two_blocks_hold_four_gangs_at_once_and_none_waits():
    gangs = [Gang(f"L{i}", 0, 3600) for i in range(4)]
    b = gangs_first(gangs, blocks=2, block_nodes=16, need=8)
    assert set(b.waits.values()) == {0} and sorted(b.blocks.values()) == [0, 0, 1, 1]
    fifth = gangs_first(gangs + [Gang("L4", 600, 60)], blocks=2, block_nodes=16, need=8)
    # FIFO would start L4 at 3600 (wait 3000); better, one of the four waits for L4's short run: 660 s
    assert sorted(fifth.waits.values()) == [0, 0, 0, 0, 660] and fifth.waits["L4"] == 0


def test_a_gang_larger_than_a_block_never_starts_and_many_gangs_fall_back_to_arrival_order():
    assert gangs_first([Gang("a", 0, 60)], blocks=2, block_nodes=16, need=17).waits == {"a": math.inf}
    many = gangs_first([Gang(f"g{i:02d}", 60.0 * i, 600) for i in range(12)], blocks=1, block_nodes=1, need=1)
    assert not many.exact and many.waits["g01"] == 540 and many.waits["g11"] == 5940


def test_the_bench_mix_leaves_its_large_gangs_no_wait():
    # 5 gangs of 8 nodes (120, 240, 360, 480, 600 min; runs 1-4 h): never more than two at once,
    # and the fleet's two blocks of 16 nodes hold four.
    a = cli.parse_args([])
    b = cli.bound(load_jobs(a.trace, Mix(), 7), a.nodes, a.large_nodes)
    assert b.exact and b.waits == dict.fromkeys(["L000", "L001", "L002", "L003", "L004"], 0.0)


def test_the_bound_row_and_verdict(capsys):
    r = Result(waits={"L000": 6000.0, "s00000": 0.0}, large={"L000"}, util=0.8)
    results = {QueueingStrategy.BEST_EFFORT_FIFO: r, QueueingStrategy.STRICT_FIFO: r, QueueingStrategy.BACKFILL: r}
    arrivals = {"L000": T0, "s00000": T0}
    cli.report(cli.parse_args([]), results, arrivals, gangs_first([Gang("L000", 0, 60)], 1, 16, 8))
    out = capsys.readouterr().out
    assert f"{cli.BOUND_ROW:<22} {0:>15} {0:>7} {'-':>15}" in out
    assert "the bound is 0 min = 0.00x BestEffortFIFO's 100; 0.3x (30 min) is reachable in this mix" in out
    late = gangs_first([Gang("L000", 0, 3600), Gang("L001", 0, 3600)], 1, 16, 16)
    cli.report(cli.parse_args([]), results, arrivals, late)
    assert "the bound is 60 min = 0.60x BestEffortFIFO's 100; 0.3x (30 min) is NOT reachable" in capsys.readouterr().out
