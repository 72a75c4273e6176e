"""The backfill bench's pure parts (e2e/bench/backfill/): the mix it documents (large gangs on
time, who reports an ETA and who sets a time limit), the records the admission core reads (an ETA
only once a report came, a large gang Required in one block), the StrictFIFO comparison with its
slack, and a tiny replay through the real core under each strategy."""

from __future__ import annotations

import pytest

from kubeforge.admission import QueueingStrategy
from kubeforge.objects import parse_time

from e2e.bench.backfill import cli, live
from e2e.bench.backfill.replay import Result, simulate
from e2e.bench.backfill.workload import Job, Mix, job_record, load_jobs, pool_record
from e2e.bench.lib.replay import T0


@pytest.fixture(scope="module")
def jobs() -> list[Job]:
    return load_jobs(cli.parse_args([]).trace, Mix(), 7)


def test_large_gangs_arrive_on_time_and_small_ones_fill_the_fleet(jobs):
    big = [j for j in jobs if j.large]
    assert [round((j.arrival - T0) / 60) for j in big] == [120, 240, 360, 480, 600]
    assert all(j.replicas == 8 and j.gpus == 8 and 3600 <= j.work <= 4 * 3600 for j in big)
    small = [j for j in jobs if not j.large]
    assert all(j.replicas == 1 and j.gpus in (1, 2, 4, 8) and 300 <= j.work <= 4 * 3600 for j in small)
    offered = sum(j.total * j.work for j in small) / (32 * 8 * 10 * 3600)
    assert offered == pytest.approx(0.75, rel=0.25)
    assert jobs == sorted(jobs, key=lambda j: (j.arrival, j.name)) and load_jobs(cli.parse_args([]).trace, Mix(), 7) == jobs


def test_who_reports_and_who_sets_a_limit(jobs):
    reports = sum(j.report_every is not None for j in jobs) / len(jobs)
    limits = [j for j in jobs if j.limit is not None]
    assert reports == pytest.approx(0.7, abs=0.05) and len(limits) / len(jobs) == pytest.approx(0.5, abs=0.05)
    assert all(j.limit % 900 == 0 and j.limit >= 1.2 * j.work for j in limits)
    assert {j.report_every for j in jobs} == {None, 60.0, 120.0, 300.0, 600.0}


def test_a_record_shows_the_eta_only_after_a_report():
    j = Job("s1", False, 1, 8, T0, 3600.0, 300.0, 5400)
    assert job_record(j, T0, "u0").status == {"phase": "Pending", "attempt": 0}
    j.placement, j.started = ("n000",), T0
    early = job_record(j, T0 + 200, "u1")
    assert "progress" not in early.status and early.spec.max_run_seconds == 5400
    later = job_record(j, T0 + 700, "u1")
    assert parse_time(later.status["progress"]["eta"]) == T0 + 3600
    assert parse_time(later.status["progress"]["lastReportTime"]) == T0 + 600
    silent = Job("s2", False, 1, 8, T0, 3600.0, None, None, started=T0, placement=("n001",))
    assert "progress" not in job_record(silent, T0 + 3000, "u2").status


def test_a_large_gang_needs_one_block():
    rec = job_record(Job("L000", True, 8, 8, T0, 3600.0, None, None), T0, "u3")
    assert rec.spec.replicas == 8 and rec.spec.topology.level == "block"
    assert rec.spec.topology.mode.value == "Required"
    pool = pool_record({"maxReservations": 2})
    assert [lv.name for lv in pool.spec.topology_levels] == ["nvlink", "block"]
    assert pool.spec.reservations.max_reservations == 2


def test_delayed_counts_a_small_job_only_past_one_round_of_slack():
    strict = Result(waits={"a": 100.0, "b": 100.0, "c": 100.0, "d": None})
    mine = Result(waits={"a": 160.0, "b": 161.0, "c": None, "d": 5000.0})
    assert cli.delayed(["a", "b", "c", "d"], mine, strict, 60.0) == ["b", "c"]


def test_the_default_flags_are_the_documented_mix():
    a = cli.parse_args([])
    assert a.mix == Mix() and (a.step, a.drain_hours, a.seed, a.live) == (60.0, 6.0, 7, False)
    assert a.png.name == "backfill.png"


def test_a_tiny_replay_under_each_strategy():
    mix = Mix(nodes=16, hours=2.0, small_load=0.9, large_every=40.0)
    tiny = load_jobs(cli.parse_args([]).trace, mix, 3)
    for s in cli.STRATEGIES:
        r = simulate(tiny, 16, s, 2.0, 1.0, step=300.0, tag=f"t-{s.value}-")
        assert set(r.waits) == {j.name for j in tiny} and r.large == {j.name for j in tiny if j.large}
        assert 0 < r.util <= 1 and r.rounds == len(r.series)
        f = r.figures(T0 + 3 * 3600, {j.name: j.arrival for j in tiny})
        assert f["large_p95"] >= f["large_p50"] >= 0
        if s is not QueueingStrategy.BACKFILL:
            assert r.reserved == 0  # only Backfill reserves


def test_the_live_scenario_is_seeded_and_compressed():
    a = live.scenario(8.0, 100.0, 7)
    assert a == live.scenario(8.0, 100.0, 7)
    big = [j for j in a if j.large]
    assert [j.at for j in big] == [100.0 * k for k in range(1, 5)] and all(j.duration == 90.0 for j in big)
    assert all(30 <= j.duration <= 120 and j.gpus in (4, 8) for j in a if not j.large)
    assert all(j.limit is None or j.limit >= j.duration for j in a)


def test_the_targets_compare_backfill_with_each_baseline(capsys):
    def result(large_wait: float, small_wait: float, util: float) -> Result:
        return Result(waits={"L000": large_wait, "s00000": small_wait}, large={"L000"}, util=util)

    results = {QueueingStrategy.BEST_EFFORT_FIFO: result(6000.0, 0.0, 0.80),
               QueueingStrategy.STRICT_FIFO: result(3000.0, 600.0, 0.60),
               QueueingStrategy.BACKFILL: result(1020.0, 0.0, 0.79)}
    cli.report(cli.parse_args([]), results, {"L000": T0, "s00000": T0})
    out = capsys.readouterr().out
    assert "p95 <= 0.3 x BestEffortFIFO's: 17 vs 100 min (0.17x) -> met" in out
    assert "79.0% vs 80.0% (1.0 points lower) -> met" in out
    assert "0 of 1 do -> met" in out


def test_the_gang_log_follows_each_large_gang_through_the_real_core():
    import io

    from e2e.bench.backfill.gangs import GangLog

    mix = Mix(nodes=16, hours=2.0, small_load=0.9, large_every=40.0)
    tiny = load_jobs(cli.parse_args([]).trace, mix, 3)
    out = io.StringIO()
    log = GangLog(16, out=out)
    log.work = {j.name: j.work for j in tiny}
    r = simulate(tiny, 16, QueueingStrategy.BACKFILL, 2.0, 1.0, step=300.0, tag="g-", observe=log)
    text = out.getvalue()
    started = sorted(n for n in r.large if r.waits[n] is not None)
    assert started and all(f" {n} STARTED on ['b0']" in text for n in started)
    assert all(log.bound[n] >= 0 for n in log.bound) and set(log.bound) <= r.large


@pytest.mark.parametrize("pts, words", [(4.7, "4.7 points lower"), (-4.7, "4.7 points higher"), (0.01, "the same")])
def test_utilisation_points_in_words(pts, words):
    assert cli._points(pts) == words
