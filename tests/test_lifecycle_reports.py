"""Live reports folded by the TrainingJob decision (kubeforge.lifecycle._reports), table-style:
coalesced writes, a checkpoint that only moves forward, nothing but progress and lastCheckpoint."""

from __future__ import annotations

import pytest

from kubeforge.lifecycle import PROGRESS_WRITE_SECONDS
from kubeforge.progress import CheckpointReport, Report, stamp, stamp_ms
from training_builders import NOW, admitted, job, merged, nodes, plan, pods, quiet

RUNNING = dict(phase="Running", startTime=stamp(NOW - 600), runningSince=stamp(NOW - 60))


def rep(received: float = NOW, **kw) -> Report:
    return Report(received=received, reporter="llm-worker-0-0", **kw)


def ck(step: int, at: float = NOW) -> CheckpointReport:
    return CheckpointReport(step, f"/checkpoints/step-{step}", stamp(at))


def running(**status) -> dict:
    return admitted(2, **{**RUNNING, **status})


def progress(step: int, at: float, total: int = 1000) -> dict:
    return {"step": step, "totalSteps": total, "percent": round(100 * step / total, 2), "lastReportTime": stamp_ms(at),
            "reporter": "llm-worker-0-0", "metrics": []}


@pytest.mark.parametrize("status,report,now,writes,requeue", [
    # the first report is written at once
    (running(), rep(step=10, total_steps=1000), NOW, True, None),
    # a report newer than the progress written, past the interval: written
    (running(progress=progress(10, NOW - 40)), rep(step=50), NOW, True, None),
    # within the interval: waits, and asks for the reconcile that writes it
    (running(progress=progress(10, NOW - 10)), rep(step=50), NOW, False, PROGRESS_WRITE_SECONDS - 10),
    # the report already written: nothing, and no reconcile asked for it
    (running(progress=progress(50, NOW - 40)), rep(NOW - 40, step=50), NOW, False, None),
])
def test_reports_are_written_at_most_once_per_interval(status, report, now, writes, requeue):
    p = plan(job(2, status=status), pods(2), nodes(2), now=now, report=report)
    assert ("progress" in (p.status or {})) is writes
    if requeue is not None:
        assert p.requeue_after == pytest.approx(requeue)
    assert quiet(p)  # never a phase, a restart, a placement or an attempt


def test_a_report_writes_progress_and_the_live_checkpoint_only():
    p = plan(job(2, status=running()), pods(2), nodes(2), report=rep(step=120, total_steps=1000, checkpoint=ck(100)))
    assert set(p.status) <= {"progress", "lastCheckpoint", "replicas", "gpuHours", "runningSince"}
    assert p.status["progress"]["step"] == 120 and p.status["progress"]["percent"] == 12.0
    assert p.status["lastCheckpoint"] == {"step": 100, "path": "/checkpoints/step-100", "time": stamp(NOW)}
    assert p.events == []  # a live checkpoint is a status field, not an Event per report


@pytest.mark.parametrize("last,reported,expect_step", [
    (None, 20, 20),
    ({"step": 10, "path": "/checkpoints/step-10"}, 20, 20),
    ({"step": 40, "path": "/checkpoints/step-40"}, 20, None),  # the termination message's is newer: kept
])
def test_live_checkpoint_beats_the_termination_message_only_when_newer(last, reported, expect_step):
    st = running(**({"lastCheckpoint": last} if last else {}))
    p = plan(job(2, status=st), pods(2), nodes(2), report=rep(step=reported + 1, checkpoint=ck(reported)))
    assert (p.status or {}).get("lastCheckpoint", {}).get("step") == expect_step


def test_termination_message_newer_than_the_live_checkpoint_wins():
    st = running(lastCheckpoint={"step": 20, "path": "/checkpoints/step-20"})
    msg = '{"step": 40, "path": "/checkpoints/step-40", "time": "2027-01-15T07:59:00Z"}'
    done = pods(2, phase="Succeeded", exit_code=0, message=msg)
    p = plan(job(2, status=st), done, nodes(2), report=rep(step=30, checkpoint=ck(30)))
    assert p.status["lastCheckpoint"]["step"] == 40


def test_eta_from_the_step_rate_between_two_writes():
    first = plan(job(2, status=running()), pods(2), nodes(2), now=NOW, report=rep(NOW, step=100, total_steps=1000))
    body = merged(job(2, status=running()), first)
    later = NOW + 60
    second = plan(body, pods(2), nodes(2), now=later, report=rep(later, step=160))
    # 60 steps a minute, 840 left: 14 minutes
    assert second.status["progress"]["eta"] == stamp(later + 840)
    assert second.status["progress"]["percent"] == 16.0


def test_a_finished_job_still_keeps_its_last_report():
    st = running(phase="Succeeded", placement=None)
    p = plan(job(2, status=st), [], {}, report=rep(step=1000, total_steps=1000))
    assert p.status["progress"]["percent"] == 100.0 and p.status["progress"]["eta"] == stamp(NOW)


def test_no_report_changes_nothing():
    assert "progress" not in (plan(job(2, status=running()), pods(2), nodes(2)).status or {})
