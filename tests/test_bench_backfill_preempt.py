"""The backfill bench's preemption rows (``--preempt-after``, the pool's
``spec.reservations.preemptAfterSeconds``): what the records tell the core of checkpoints and of a
preempted job, what a victim loses, the rows a run replays, and a tiny replay that preempts."""

from __future__ import annotations

import pytest

from kubeforge.admission import QueueingStrategy
from kubeforge.objects import ADMITTED, parse_time

from e2e.bench.backfill import cli
from e2e.bench.backfill.replay import Result, _stop, simulate
from e2e.bench.backfill.workload import Job, Mix, job_record, load_jobs
from e2e.bench.lib.replay import T0


def test_a_record_shows_the_last_checkpoint_written_before_the_last_report():
    j = Job("s1", False, 1, 8, T0, 7200.0, 600.0, None, started=T0, placement=("n000",))
    assert "lastCheckpoint" not in job_record(j, T0 + 1700, "u", ckpt=1800).status  # none written yet
    st = job_record(j, T0 + 4000, "u", ckpt=1800).status  # last report at 3600: checkpoints at 1800, 3600
    assert parse_time(st["lastCheckpoint"]["time"]) == T0 + 3600
    silent = Job("s2", False, 1, 8, T0, 7200.0, None, None, started=T0, placement=("n001",))
    assert "lastCheckpoint" not in job_record(silent, T0 + 4000, "u").status  # it never tells


def test_a_victim_loses_its_run_since_the_last_checkpoint_and_waits_again_from_its_stop():
    res = Result()
    j = Job("s1", False, 2, 4, T0, 7200.0, 600.0, None, started=T0 + 100, placement=("n000", "n001"))
    _stop(j, T0 + 100 + 2000, 1800.0, res)
    assert j.saved == 1800 and j.left == 5400 and j.attempt == 1 and not j.placement
    assert res.preemptions == 1 and res.lost_gpu_h == pytest.approx(200 * 8 / 3600) == j.lost[0]
    st = job_record(j, T0 + 2200, "u").status
    [c] = st["conditions"]
    assert c["type"] == ADMITTED and c["status"] == "False" and parse_time(c["lastTransitionTime"]) == T0 + 2100
    assert res.requeue_waits == {("s1", 1): None}


def test_the_rows_of_a_run():
    a = cli.parse_args([])
    assert a.preempt_after == [60.0]
    got = cli.rows(a)
    assert [r for r, _, _ in got[:3]] == list(cli.STRATEGIES) and all(res is None for _, _, res in got[:3])
    assert got[3] == ("Backfill+preempt 60m", QueueingStrategy.BACKFILL, {"preemptAfterSeconds": 3600})
    a = cli.parse_args(["--preempt-after", "", "--reservations", '{"maxReservations": 4}'])
    assert [r for r, _, _ in cli.rows(a)] == list(cli.STRATEGIES)
    a = cli.parse_args(["--preempt-after", "30,90", "--reservations", '{"maxReservations": 4}'])
    assert [res for _, _, res in cli.rows(a)[3:]] == [{"maxReservations": 4, "preemptAfterSeconds": 1800},
                                                       {"maxReservations": 4, "preemptAfterSeconds": 5400}]


def test_a_tiny_replay_that_preempts_for_its_reservations(capsys):
    mix = Mix(nodes=16, hours=2.0, small_load=0.9, large_every=40.0)
    tiny = load_jobs(cli.parse_args([]).trace, mix, 3)
    off = simulate(tiny, 16, QueueingStrategy.BACKFILL, 2.0, 1.0, step=300.0, tag="p-off-")
    on = simulate(tiny, 16, QueueingStrategy.BACKFILL, 2.0, 1.0, step=300.0, tag="p-on-",
                  reservations={"preemptAfterSeconds": 0})
    assert off.preemptions == 0 and off.lost_gpu_h == 0 and not off.requeue_waits
    assert on.preemptions == len(on.requeue_waits) > 0 and on.lost_gpu_h > 0
    assert set(on.waits) == {j.name for j in tiny}
    arrivals = {j.name: j.arrival for j in tiny}
    a = cli.parse_args(["--hours", "2", "--drain-hours", "1", "--step", "300"])
    cli.report(a, {QueueingStrategy.BEST_EFFORT_FIFO: off, QueueingStrategy.STRICT_FIFO: off,
                   QueueingStrategy.BACKFILL: off, "Backfill+preempt 0m": on}, arrivals)
    out = capsys.readouterr().out
    assert f"{on.preemptions:>10} {on.lost_gpu_h:>11.1f}" in out
    assert "target (Backfill+preempt 0m): large-gang wait p95 <= 0.3 x BestEffortFIFO's" in out
    assert "no small job waits longer under Backfill+preempt 0m than under StrictFIFO" in out
