"""The operator's Prometheus metrics (prometheus-client), all in one place.

Label values are bounded: kinds, results, phases and states are small fixed sets; pool
names are the only free-form label and the cluster has few pools. No per-job labels.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from kubeforge.objects import PREEMPTION_REASONS, STARTUP_FAILURE_REASONS

RECONCILES = Counter("kubeforge_reconciles_total", "Reconciles by kind and result (success, error).", ["kind", "result"])
RECONCILE_SECONDS = Histogram(
    "kubeforge_reconcile_duration_seconds", "Reconcile duration by kind, seconds.", ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "kubeforge_max_concurrent_reconciles",
    "Workers of a work queue (trainingjobs, inferenceservices): the most reconciles it runs at once "
    "(controller-runtime's controller_runtime_max_concurrent_reconciles).", ["controller"])
ADMISSIONS = Counter("kubeforge_admission_decisions_total", "Gang admission decisions by result (admitted, waiting).", ["pool", "result"])
JOBS_BY_PHASE = Gauge("kubeforge_trainingjobs", "TrainingJobs by phase.", ["phase"])
POOL_GPUS = Gauge("kubeforge_pool_gpus", "GPUs of a pool by state (capacity, allocatable, allocated, free).", ["pool", "state"])
PREEMPTION_RESTARTS = Counter("kubeforge_preemption_restarts_total", "Gang restarts caused by preemption.")
FAILURE_RESTARTS = Counter("kubeforge_failure_restarts_total", "Gang restarts caused by worker failures.")
AUTOSCALER_DECISIONS = Counter("kubeforge_autoscaler_decisions_total", "Autoscaler decisions by direction (up, down, hold).", ["direction"])
API_REQUESTS = Counter("kubeforge_api_requests_total", "Kubernetes API requests by verb, resource and HTTP status code ('error': no response).",
                       ["verb", "resource", "code"])
EVENTS_DROPPED = Counter("kubeforge_events_dropped_total", "Kubernetes Events dropped because the send queue was full.")
ADMISSION_ROUND_SECONDS = Histogram(
    "kubeforge_admission_round_duration_seconds", "Duration of one admission round (snapshot, plan, apply), seconds.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
WATCH_EVENT_DELAY = Histogram(
    "kubeforge_watch_event_delay_seconds",
    "Seconds from an object's metadata.creationTimestamp (1 s resolution) to the operator's first sight of it "
    "through its watch; objects created after the operator started only.", ["resource"],
    buckets=(0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 30, 60),
)
WATCH_STALLED = Gauge(
    "kubeforge_watch_stalled_seconds",
    "Seconds the operator's oldest status write of the resource has waited for its watch event with no event of "
    "the resource at all meanwhile (0: none waits); past 300 the operator stops with exit code 4 for its "
    "Deployment to start it again.", ["resource"],
)
ADMISSION_WAIT_TIME = Histogram(
    "kubeforge_admission_wait_time_seconds",
    "Seconds from the operator's first sight of a waiting gang (or its requeue) to the admission round that "
    "admits it (Kueue's kueue_admission_wait_time_seconds).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 30, 60, 300, 1800, 7200),
)
ADMISSION_WRITE_DELAY = Histogram(
    "kubeforge_admission_write_delay_seconds",
    "Seconds from the admission round's decision to the status write that puts the placement on record "
    "(the work queue's wait and the PATCH).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 30),
)
LEADER = Gauge("kubeforge_leader", "1 while this operator process holds the leader Lease, else 0.")
PREEMPTIONS = Counter("kubeforge_preemptions_total", "Gangs preempted by admission, by reason (PreemptedByHigherPriority, QuotaReclaimed).", ["reason"])
PREEMPTION_LOST_GPU_HOURS = Counter(
    "kubeforge_preemption_lost_gpu_hours_total",
    "GPU-hours of work since their last checkpoint held by gangs when admission preempted them (an upper bound of what they lose).",
)
STARTUP_FAILURES = Counter("kubeforge_startup_failures_total", "Gangs stopped because they failed to start, by reason.", ["reason"])
STATUS_REPORTS = Counter("kubeforge_status_reports_total",
                         "Workers' progress reports to the status endpoint, by HTTP status code of the answer.", ["code"])
STATUS_REPORT_CODES = (200, 400, 401, 403, 404, 413, 422, 429, 503)
"""Every code the status endpoint answers (runtime/status_server.py), started at 0 by :func:`serve`."""


def serve(port: int, addr: str = "0.0.0.0") -> None:
    """Expose /metrics on ``addr:port`` in a background thread. Labelled series whose label
    values are known in advance start at 0, so dashboards and alerts see them before the
    first event (Prometheus' advice for counters with labels)."""
    for kind in ("trainingjobs", "inferenceservices"):
        for result in ("success", "error"):
            RECONCILES.labels(kind=kind, result=result)
        RECONCILE_SECONDS.labels(kind=kind)
    for direction in ("up", "down", "hold"):
        AUTOSCALER_DECISIONS.labels(direction=direction)
    for reason in PREEMPTION_REASONS:
        PREEMPTIONS.labels(reason=reason)
    for reason in STARTUP_FAILURE_REASONS:
        STARTUP_FAILURES.labels(reason=reason)
    WATCH_EVENT_DELAY.labels(resource="trainingjobs")
    WATCH_STALLED.labels(resource="trainingjobs")
    for code in STATUS_REPORT_CODES:
        STATUS_REPORTS.labels(code=str(code))
    LEADER.set(0)
    start_http_server(port, addr=addr)
