"""Live reports: fold what the job's workers reported into the status this decision writes.

The status endpoint (:mod:`kubeforge.runtime.status_server`) accepts a worker's report, keeps it
in memory (merged with any other not written yet) and queues the job; the job's one status
writer, this decision, folds it in (:func:`kubeforge.progress.progress_status`,
:func:`kubeforge.progress.checkpoint_status`). Coalesced: ``status.progress`` is rewritten at
most every ``ctx.report_write_seconds`` (its ``lastReportTime`` is the clock), so a job that
reports every second costs one status write per interval, never one per report. A report older
than the progress written is already in it; nothing is written for it again (level-based: the
same report and status give the same decision).

A worker's report never touches placement, the spec, the phase or the restart counters: only
``progress`` and ``lastCheckpoint``, which only moves forward (as the termination-message
fallback, :func:`~kubeforge.lifecycle._accounting.report_checkpoint`, does: whichever is newer wins).
"""

from __future__ import annotations

from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.progress import checkpoint_status, parse_stamp, progress_status

SAME_REPORT_SECONDS = 0.001
"""``lastReportTime`` keeps milliseconds: a report accepted within this of it is the one written."""


def report_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> None:
    """Fold ``ctx.report`` into ``status.progress`` and ``status.lastCheckpoint`` when it is newer
    than the progress written and the write interval has passed; otherwise ask for the
    reconcile that will (``plan.requeue``)."""
    rep = ctx.report
    if rep is None:
        return
    old = d.get("progress") or {}
    last = parse_stamp(old.get("lastReportTime"))
    if last is not None and rep.received <= last + SAME_REPORT_SECONDS:
        return  # written already
    if last is not None and ctx.now < last + ctx.report_write_seconds:
        plan.requeue(last + ctx.report_write_seconds - ctx.now)
        return
    d.set(progress=progress_status(old, rep))
    ck = checkpoint_status(d.get("lastCheckpoint"), rep.checkpoint)
    if ck is not None:
        d.set(lastCheckpoint=ck)
