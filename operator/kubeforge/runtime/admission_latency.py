"""Where a TrainingJob's admission time goes inside the operator, as three Prometheus histograms.

From a user's create call to ``Admitted=True`` on record, a gang passes three stages the
operator can time itself:

1. **watch delay** (``kubeforge_watch_event_delay_seconds{resource="trainingjobs"}``): from
   ``metadata.creationTimestamp`` to the operator's first sight of the job (its watch event
   reaching the index handler). The timestamp has one-second resolution (RFC 3339 seconds, the
   API server truncates), so each observation is late by up to 1 s (0.5 s on average); only jobs
   created after this process started and never reconciled (no status yet) are observed, so a
   restart does not record its backlog.
2. **admission wait** (``kubeforge_admission_wait_time_seconds``, Kueue's
   ``kueue_admission_wait_time_seconds``): from that sight (or the requeue of a job whose
   placement was released) to the admission round that admits it: the queue's wait for GPUs
   and for the round.
3. **admission write delay** (``kubeforge_admission_write_delay_seconds``): from the round's
   decision to the status write that puts the placement on record: the work queue's wait for
   a worker and the PATCH itself.

The API server's own created → Admitted (the training bench's audit column) is their sum plus
the status write's way back to a watcher. The times are this process's monotonic clock (the
watch delay, wall clock against the API server's timestamp). Memory: one float per job waiting
or decided and not yet written; :meth:`AdmissionClock.forget` drops a deleted job's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

from kubeforge.metrics import ADMISSION_WAIT_TIME, ADMISSION_WRITE_DELAY, WATCH_EVENT_DELAY


@dataclass
class AdmissionClock:
    """Per-job stage times of admission (the module's three stages), observed into the histograms.

    Attributes:
        clock: Monotonic seconds for the two in-process stages.
        wall: Unix seconds, compared with ``creationTimestamp`` for the watch delay.
        started: Unix seconds this process started; jobs created earlier give no watch delay.
    """

    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    started: float = field(default_factory=time.time)
    _seen: dict[Hashable, float] = field(default_factory=dict)
    _decided: dict[Hashable, float] = field(default_factory=dict)

    def seen_waiting(self, key: Hashable, created: float, new: bool) -> None:
        """The index handler saw ``key`` with no placement on record. The first such sight
        starts its admission wait (later ones change nothing until it is decided); ``new``
        (no status yet) with ``created`` (unix seconds, 0 if unknown) at or after
        :attr:`started` also observes its watch delay."""
        if key in self._seen or key in self._decided:
            return
        self._seen[key] = self.clock()
        if new and created and created >= int(self.started):
            WATCH_EVENT_DELAY.labels(resource="trainingjobs").observe(max(0.0, self.wall() - created))

    def decided(self, key: Hashable) -> None:
        """An admission round admitted ``key``: observe its wait (when its start was seen) and
        start its write delay."""
        now = self.clock()
        began = self._seen.pop(key, None)
        if began is not None:
            ADMISSION_WAIT_TIME.observe(now - began)
        self._decided[key] = now

    def written(self, key: Hashable) -> None:
        """A status write put ``key``'s admitted placement on record: observe its write delay."""
        began = self._decided.pop(key, None)
        if began is not None:
            ADMISSION_WRITE_DELAY.observe(self.clock() - began)

    def forget(self, key: Hashable) -> None:
        """Drop what is held about ``key`` (the job was deleted, or its decision taken back)."""
        self._seen.pop(key, None)
        self._decided.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen) + len(self._decided)
