"""kubeforge.progress: what a training job's workers report, pure.

Workers POST their progress (step, total steps, checkpoint, a few metrics) to the operator's
status endpoint (:mod:`kubeforge.runtime.status_server`), in kubeforge's own payload or Kubeflow
Trainer's (KEP-2779) unchanged. This package holds everything about a report that needs no I/O:

- the two payloads as strict, size-bounded models (:mod:`._schema`), parsed into one
  :class:`Report` with a clear 4xx for each refusal (:func:`parse_report`), and how the reports
  between two status writes combine (:func:`merge_reports`);
- the fold into ``status.progress`` and ``status.lastCheckpoint`` (:func:`progress_status`,
  :func:`checkpoint_status`): percent, ETA from the reported seconds or the step rate, a
  checkpoint that only moves forward;
- the sender's token read before and after its TokenReview (:func:`precheck`,
  :func:`identity_from_review`) and the token buckets (:class:`Buckets`).

``now`` always comes in as a parameter. See docs/workload-reporting.md.
"""

from kubeforge.progress._fold import (
    MAX_ETA_SECONDS, MIN_RATE_SECONDS, checkpoint_status, last_report_time, parse_stamp, progress_status, stamp_ms,
)
from kubeforge.progress._limits import Buckets, TokenBucket
from kubeforge.progress._report import (
    KUBEFLOW, KUBEFORGE, CheckpointReport, Report, ReportError, merge_reports, metric_text, parse_report, stamp,
)
from kubeforge.progress._schema import MAX_BODY_BYTES, MAX_STEP, CheckpointPayload, KubeflowReport, KubeforgeReport
from kubeforge.progress._tokens import (
    POD_NAME_EXTRA, POD_UID_EXTRA, AuthError, Identity, bearer, identity_from_review, precheck, review_body,
    unverified_claims,
)

KUBEFORGE_PATH = "/apis/kubeforge.io/v1alpha1/namespaces/{namespace}/trainingjobs/{name}/status"
"""The status endpoint's path for kubeforge's own payload (``KUBEFORGE_STATUS_URL``)."""
KUBEFLOW_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
"""The same endpoint on Kubeflow Trainer's path (``KUBEFLOW_TRAINER_STATUS_URL``): a TrainingJob
of that namespace and name, Kubeflow's payload."""


def status_path(namespace: str, name: str, kubeflow: bool = False) -> str:
    """The path a job's workers post to: :data:`KUBEFORGE_PATH` or :data:`KUBEFLOW_PATH`."""
    return (KUBEFLOW_PATH if kubeflow else KUBEFORGE_PATH).format(namespace=namespace, name=name)


__all__ = [
    "KUBEFLOW", "KUBEFLOW_PATH", "KUBEFORGE", "KUBEFORGE_PATH", "MAX_BODY_BYTES", "MAX_ETA_SECONDS",
    "MAX_STEP", "MIN_RATE_SECONDS", "POD_NAME_EXTRA", "POD_UID_EXTRA",
    "AuthError", "Buckets", "CheckpointPayload", "CheckpointReport", "Identity", "KubeflowReport", "KubeforgeReport",
    "Report", "ReportError", "TokenBucket",
    "bearer", "checkpoint_status", "identity_from_review", "last_report_time", "merge_reports", "metric_text",
    "parse_report", "parse_stamp", "precheck", "progress_status", "review_body", "stamp", "stamp_ms", "status_path",
    "unverified_claims",
]
