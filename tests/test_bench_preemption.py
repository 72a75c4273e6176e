"""The preemption bench's pure parts (e2e/bench/preemption.py, e2e/bench/lib/reports.py): the
policy is told a checkpoint only once a report has carried it, a job that never reports shows
none, the oracle case sees every one, the Kueue-like case keeps Kueue's pool whatever
``--preemption`` says, and the flags make the two shapes of issue 27."""

from __future__ import annotations

import pytest

from kubeforge.objects import parse_time

from e2e.bench import preemption
from e2e.bench.lib.replay import T0
from e2e.bench.lib.reports import ReportMix, known_checkpoint, last_report

MIN = 60.0


@pytest.mark.parametrize("minutes, every, want", [
    (29, 5, None),  # no checkpoint written yet
    (31, 5, 30),  # the report at 30 min carries the checkpoint written at 30 min
    (34, 5, 30),
    (59, 10, 30),  # the 60-min checkpoint is not written yet
    (65, 10, 60),  # written at 60, reported at 60
    (35, 40, None),  # its first report is not due yet
    (90, None, None),  # never reports
])
def test_the_operator_knows_a_checkpoint_once_a_report_carried_it(minutes, every, want):
    got = known_checkpoint(T0, T0 + minutes * MIN, 30 * MIN, every * MIN if every else None)
    assert got == (None if want is None else T0 + want * MIN)


def test_a_checkpoint_written_after_the_last_report_is_not_known():
    # reports every 10 min, checkpoint every 15: at 25 min the last report (20) carried the one of 15
    assert known_checkpoint(T0, T0 + 25 * MIN, 15 * MIN, 10 * MIN) == T0 + 15 * MIN
    # at 39 min the checkpoint of 30 was written, but the last report was at 30... and carried it
    assert known_checkpoint(T0, T0 + 39 * MIN, 15 * MIN, 10 * MIN) == T0 + 30 * MIN
    # every 20 min: at 59 the last report was at 40, so the checkpoint of 45 is unknown
    assert known_checkpoint(T0, T0 + 59 * MIN, 15 * MIN, 20 * MIN) == T0 + 30 * MIN
    assert last_report(T0, T0 + 59 * MIN, 20 * MIN) == T0 + 40 * MIN
    assert last_report(T0, T0 + 19 * MIN, 20 * MIN) is None


def test_the_mix_parses_and_draws_from_its_own_seed():
    assert ReportMix.parse("0.3:1,2,5,10") == ReportMix()
    assert ReportMix.parse("0.5:") == ReportMix(0.5, ReportMix().minutes)
    mix = ReportMix()
    a = mix.draw(2000, 7)
    assert a == mix.draw(2000, 7) and a != mix.draw(2000, 8)
    assert sum(x is None for x in a) / len(a) == pytest.approx(0.3, abs=0.04)
    assert {x for x in a if x is not None} == {60.0, 120.0, 300.0, 600.0}
    assert "30% of jobs never report" in mix.describe()


def _job(report_every: float | None) -> preemption.Job:
    j = preemption.Job("g1", "research", 0, 1, 8, T0, 10 * 3600.0, report_every=report_every)
    j.placement, j.started = ("n00",), T0
    return j


@pytest.mark.parametrize("every, oracle, want", [
    (None, False, None),  # silent: the policy falls back on the time since placement
    (None, True, 60),  # the oracle knows every checkpoint at once
    (10 * MIN, False, 60),  # the report at 60 min carried the checkpoint of 60
    (40 * MIN, False, 30),  # its last report, at 40 min, carried the one of 30; the one of 60 is unknown
])
def test_job_record_shows_only_the_reported_checkpoint(every, oracle, want):
    rec = preemption.job_record(_job(every), T0 + 65 * MIN, 30 * MIN, f"u-{every}-{oracle}", oracle)
    got = rec.status.get("lastCheckpoint")
    assert (got and parse_time(got["time"])) == (want and T0 + want * MIN)
    assert rec.status["placement"]["nodes"] == ["n00"]


def test_the_kueue_case_keeps_kueues_pool_whatever_the_flag_says():
    _, _, oracle, pool = preemption.CASES["kueue"]
    assert not oracle and pool == {"minRuntimeSeconds": 0, "withinQuotaWhileBorrowing": "LowerPriority"}
    merged = {**{"minRuntimeSeconds": 3600, "reclaimQuota": "LowerPriority"}, **pool}
    rec = preemption.make_pool(32, 0, merged)
    assert rec.spec.preemption.min_runtime_seconds == 0
    assert rec.spec.preemption.reclaim_quota.value == "LowerPriority"
    assert preemption.CASES["oracle"][2] and not preemption.CASES["kubeforge"][2]


def test_the_default_flags_run_both_shapes_over_seven_seeds():
    a = preemption.parse_args([])
    assert a.shape_list == [("default", 8, 400), ("overloaded", 16, 600)]
    assert a.case_list == ["kubeforge", "kueue"] and preemption._seeds(a.seeds) == list(range(1, 8))
    assert a.mix == ReportMix() and a.pool_preemption is None
    one = preemption.parse_args(["--nodes", "4", "--preemption", '{"minRuntimeSeconds": 0}'])
    assert one.shape_list == [("custom", 4, 400)] and one.pool_preemption == {"minRuntimeSeconds": 0}
    with pytest.raises(SystemExit):
        preemption.parse_args(["--cases", "kubeforge,slurm"])


def test_fresh_keeps_who_reports():
    j = _job(5 * MIN)
    j.preemptions = 3
    (f,) = preemption.fresh([j])
    assert f.report_every == 5 * MIN and f.preemptions == 0 and not f.placement


def test_a_tiny_replay_counts_what_it_measures():
    a = preemption.parse_args(["--nodes", "2", "--jobs", "12", "--hours", "2", "--step", "300", "--seeds", ""])
    jobs = preemption.load_jobs(a.trace, 12, 7, 1.0, 2.0, a.mix)
    r = preemption.simulate(preemption.fresh(jobs), 2, 30 * MIN, 300.0, 2 * 3600, tag="t-")
    assert set(r) >= {"preemptions", "lost", "finished", "util", "wait_hp", "worst_intervals"}
    assert 0 <= r["util"] <= 1 and r["finished"] <= len(jobs)


def test_pools_of_two_shapes_never_share_a_parse_cache_entry():
    # the operator's parse cache is keyed by uid and generation: the overloaded shape's pool (64
    # nominal GPUs a team) once reused the default shape's (32) when both ran in one process
    small, big = preemption.make_pool(32, 0), preemption.make_pool(64, 0)
    assert small.uid != big.uid
    assert big.spec.quotas[0].nominal_gpus == 64


def test_the_nvl72_pool_protects_no_young_run_unless_asked():
    """The NVL72 bench's rack gangs must run within grace + 10 s, so its pool sets
    ``minRuntimeSeconds: 0``; ``--min-runtime default`` gives the API's own default."""
    from e2e.bench.nvl72.cli import parse_args
    from e2e.bench.nvl72.model import pool_record
    from kubeforge.api import GPUPoolSpec

    assert parse_args([]).min_runtime == 0
    assert pool_record(parse_args([]).min_runtime).spec.preemption.min_runtime_seconds == 0
    api_default = GPUPoolSpec.model_validate({}).preemption.min_runtime_seconds
    assert pool_record(parse_args(["--min-runtime", "default"]).min_runtime).spec.preemption.min_runtime_seconds == api_default
