"""The reports accepted and not yet written: one merged :class:`~kubeforge.progress.Report` per
job, read by the job's reconcile (``TrainingContext.report``), which folds it into the status it
writes anyway (:mod:`kubeforge.lifecycle`, its fold of reports). The book is the only thing the status
endpoint changes: no API request is made per report.

It keeps the latest merge per job even after it is written (the decision knows, from
``status.progress.lastReportTime``, that it is; a newer leader starts with an empty book and
the workers' next reports). Bounded: at most :data:`MAX_JOBS` jobs, the least recently
reporting forgotten first; a deleted job's entry goes with it (:meth:`ReportBook.forget`).
"""

from __future__ import annotations

from collections import OrderedDict

from kubeforge.objects import Key
from kubeforge.progress import Report, merge_reports

MAX_JOBS = 100_000
"""Jobs whose last report is kept."""


class ReportBook:
    """Reports by job, merged (:func:`kubeforge.progress.merge_reports`)."""

    def __init__(self, max_jobs: int = MAX_JOBS):
        self.max_jobs = max_jobs
        self._reports: OrderedDict[Key, Report] = OrderedDict()
        self.accepted = 0

    def put(self, key: Key, report: Report) -> Report:
        """Merge ``report`` into the job's entry; returns the merged report."""
        merged = merge_reports(self._reports.get(key), report)
        self._reports[key] = merged
        self._reports.move_to_end(key)
        while len(self._reports) > self.max_jobs:
            self._reports.popitem(last=False)
        self.accepted += 1
        return merged

    def get(self, key: Key) -> Report | None:
        """The job's merged report, or None."""
        return self._reports.get(key)

    def forget(self, key: Key) -> None:
        """Drop the job's entry (the job is gone)."""
        self._reports.pop(key, None)

    def __len__(self) -> int:
        return len(self._reports)
