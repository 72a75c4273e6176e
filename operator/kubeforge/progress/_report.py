"""One accepted report, in one shape whichever payload it came in, and how reports combine.

:func:`parse_report` turns a request body into a :class:`Report` (or a :class:`ReportError`
with the HTTP status and a message that names the field); :func:`merge_reports` combines the
reports that arrive between two status writes, so the write carries all of them.

The mapping (documented in docs/workload-reporting.md):

=====================================  ==========================================
payload                                ``status``
=====================================  ==========================================
``step``                               ``progress.step``
``totalSteps``                         ``progress.totalSteps``
``checkpoint {step, path, time}``      ``lastCheckpoint`` (only forward)
``metrics {name: number}``             ``progress.metrics[{name, value}]``
``trainerStatus.progressPercentage``   ``progress.percent``
``trainerStatus.estimatedRemainingSeconds``  ``progress.eta`` (= accepted at + seconds)
``trainerStatus.metrics[{name,value}]``  ``progress.metrics`` (values as sent)
``trainerStatus.lastUpdatedTime``      not kept: ``progress.lastReportTime`` is the operator's clock
=====================================  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from kubeforge.api import MAX_REPORTED_METRICS
from kubeforge.progress._schema import MAX_BODY_BYTES, KubeflowReport, KubeforgeReport

KUBEFORGE = "kubeforge"
""":attr:`Report.source` of kubeforge's own payload."""
KUBEFLOW = "kubeflow"
""":attr:`Report.source` of Kubeflow Trainer's payload."""


class ReportError(Exception):
    """A report refused before it reached the job: the HTTP status and why.

    Attributes:
        code: 400 (not JSON, not an object), 413 (too large), 422 (schema).
        message: One line naming the field and the rule, for the worker's log.
    """

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class CheckpointReport:
    """A checkpoint as reported: its step, its path and when it was written (RFC 3339)."""

    step: int
    path: str
    time: str


@dataclass(frozen=True)
class Report:
    """What one or more accepted reports say, normalized.

    Attributes:
        received: When the operator accepted it (unix seconds, its own clock).
        reporter: The pod that sent it (from its token, never from the body).
        attempt: That pod's attempt (``kubeforge.io/restart-attempt``).
        step: Step reached, or None.
        total_steps: The step training ends at, or None.
        percent: 0-100 as reported (Kubeflow), or None (then it comes from step / totalSteps).
        remaining_seconds: Seconds left as reported (Kubeflow), or None.
        checkpoint: The newest checkpoint reported, or None.
        metrics: ``(name, value)`` pairs, values as strings, at most 16, newest first.
        source: :data:`KUBEFORGE` or :data:`KUBEFLOW`.
    """

    received: float
    reporter: str = ""
    attempt: int = 0
    step: int | None = None
    total_steps: int | None = None
    percent: float | None = None
    remaining_seconds: float | None = None
    checkpoint: CheckpointReport | None = None
    metrics: tuple[tuple[str, str], ...] = ()
    source: str = KUBEFORGE


def metric_text(value: float) -> str:
    """A metric's value as ``status`` keeps it: integers without a fraction, others in
    Python's shortest round-trip form (``0.1`` stays ``0.1``)."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def stamp(ts: float | datetime) -> str:
    """Unix seconds or an aware datetime as RFC 3339 UTC with seconds (``2026-01-02T03:04:05Z``)."""
    dt = ts if isinstance(ts, datetime) else datetime.fromtimestamp(ts, tz=timezone.utc)
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _explain(err: ValidationError) -> str:
    """Pydantic's errors as one line: ``field.path: message`` for the first five."""
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e.get("loc", ())) or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = len(err.errors()) - 5
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


NOT_JSON = ("json_invalid", "json_type", "model_type", "model_attributes_type")
"""Pydantic's error types of a body that is not a JSON object at all (400, not 422)."""


def _validate(model: Any, body: bytes, what: str) -> Any:
    """``model`` from the raw body, in one pass (pydantic's JSON parser; NaN and Infinity, which
    JSON does not allow, are refused there); a :class:`ReportError` otherwise."""
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        first = e.errors()[0] if e.errors() else {}
        if first.get("type") in NOT_JSON and not first.get("loc"):
            raise ReportError(400, f"report body is not a JSON object: {first.get('msg', 'invalid JSON')}") from None
        raise ReportError(422, f"{what}: {_explain(e)}") from None


def parse_report(body: bytes, *, kubeflow_path: bool, received: float, reporter: str = "",
                 attempt: int = 0) -> Report:
    """Validate a report body and normalize it.

    Args:
        body: The raw request body.
        kubeflow_path: It came to Kubeflow Trainer's path: only Kubeflow's payload is accepted.
            On kubeforge's path both are (a body with ``trainerStatus`` is Kubeflow's).
        received: When it was accepted (unix seconds).
        reporter: The sending pod's name (from its verified token).
        attempt: That pod's attempt.

    Returns:
        The :class:`Report`.

    Raises:
        ReportError: 413 over :data:`MAX_BODY_BYTES`, 400 not a JSON object, 422 anything the
            schema refuses (the message names the field) or a report that says nothing.
    """
    if len(body) > MAX_BODY_BYTES:
        raise ReportError(413, f"report body is {len(body)} bytes; at most {MAX_BODY_BYTES} are accepted")
    if kubeflow_path or b'"trainerStatus"' in body:  # only a key is written so (quotes in strings are escaped)
        ts = _validate(KubeflowReport, body, "invalid Kubeflow Trainer status").trainer_status
        names = [m.name for m in ts.metrics]
        if len(set(names)) != len(names):
            raise ReportError(422, "invalid Kubeflow Trainer status: trainerStatus.metrics: a name appears twice")
        if ts.is_empty():
            raise ReportError(422, "empty report: send progressPercentage, estimatedRemainingSeconds or metrics")
        return Report(received, reporter, attempt, source=KUBEFLOW, percent=ts.progress_percentage,
                       remaining_seconds=None if ts.estimated_remaining_seconds is None
                       else float(ts.estimated_remaining_seconds),
                       metrics=tuple((m.name, m.value) for m in ts.metrics))
    kr = _validate(KubeforgeReport, body, "invalid report")
    if kr.is_empty():
        raise ReportError(422, "empty report: send step, checkpoint or metrics")
    if kr.step is not None and kr.total_steps is not None and kr.step > kr.total_steps:
        raise ReportError(422, f"invalid report: step {kr.step} is beyond totalSteps {kr.total_steps}")
    ck = None
    if kr.checkpoint is not None:
        when = kr.checkpoint.time if kr.checkpoint.time is not None else received
        ck = CheckpointReport(kr.checkpoint.step, kr.checkpoint.path, stamp(when))
    return Report(received, reporter, attempt, step=kr.step, total_steps=kr.total_steps, checkpoint=ck,
                   metrics=tuple((k, metric_text(v)) for k, v in kr.metrics.items()))


def merge_reports(older: Report | None, newer: Report) -> Report:
    """Combine two reports not written yet: the newer one's fields win where it has them, its
    metrics come first (older values of other names stay, at most 16 in all), and the checkpoint
    is the newer of the two by step (so a report that carries only progress never hides an
    earlier one's checkpoint). A report of a later attempt starts over (its checkpoint still
    competes: checkpoints outlive attempts)."""
    if older is None:
        return newer
    if newer.attempt > older.attempt:
        return replace(newer, checkpoint=_newest(older.checkpoint, newer.checkpoint))
    if newer.attempt < older.attempt:
        return replace(older, checkpoint=_newest(older.checkpoint, newer.checkpoint))
    names = {n for n, _ in newer.metrics}
    metrics = (newer.metrics + tuple(m for m in older.metrics if m[0] not in names))[:MAX_REPORTED_METRICS]

    def pick(a, b):
        """The newer value when it has one."""
        return b if b is not None else a

    return Report(  # every field named (dataclasses.replace was a fifth of the handler's time)
        received=newer.received, reporter=newer.reporter, attempt=newer.attempt,
        step=pick(older.step, newer.step), total_steps=pick(older.total_steps, newer.total_steps),
        percent=newer.percent if newer.source == KUBEFLOW else pick(older.percent, newer.percent),
        remaining_seconds=newer.remaining_seconds if newer.source == KUBEFLOW else older.remaining_seconds,
        checkpoint=_newest(older.checkpoint, newer.checkpoint), metrics=metrics, source=newer.source,
    )


def _newest(a: CheckpointReport | None, b: CheckpointReport | None) -> CheckpointReport | None:
    """The checkpoint with the higher step (``b`` on a tie: it was reported later)."""
    if a is None:
        return b
    if b is None:
        return a
    return b if b.step >= a.step else a
