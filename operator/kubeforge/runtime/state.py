"""The one runtime object an operator process has; kopf hands it to every handler as
``memo.rt``."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from kubeforge.builders.reporting import ReportingConfig
from kubeforge.lifecycle import PROGRESS_WRITE_SECONDS
from kubeforge.objects import Key, Record
from kubeforge.runtime.cache import Cache
from kubeforge.runtime.client import ApiError, KubeClient
from kubeforge.runtime.engine_control import EngineControl, HttpEngineControl
from kubeforge.runtime.events import EventSink, ObjectRef
from kubeforge.runtime.metrics_source import MetricsSource, PrometheusSource
from kubeforge.runtime.status_book import ReportBook

PROGRESS_WRITES_PER_SECOND = 5.0
"""Default of :attr:`Options.progress_writes_per_second`: 150 jobs reporting are written every
30 s each; 1,000 every 200 s each, 5 status writes a second for all of them. A write costs the
operator about as much CPU as 5 reports (``make bench-reporting``)."""

POD_EVENT_BATCH_SECONDS = 1.0
"""Seconds within which a change of a TrainingJob's pod brings its reconcile
(:meth:`Runtime.queue_job_batched`): every change inside the window is decided on together.
kube-controller-manager's Job controller batches pod events the same way and for as long
(``SyncJobBatchPeriod``, 1 s, pkg/controller/job/job_controller.go). A gang's Admitted status,
its pods' creation, a spot restart and a preemption do not wait for it: they come from the
admission round, the node watch and the job's own changes, which queue at once."""


@dataclass
class Options:
    """How this process runs (from the command line).

    Attributes:
        prometheus_allow: URL prefixes an InferenceService's ``prometheusURL`` may start with;
            empty allows only in-cluster Service URLs (:mod:`kubeforge.runtime.prometheus_urls`).
        leader_election: Whether to take part in leader election (else: always leader).
        lease_namespace: Namespace of the leader Lease.
        lease_name: Name of the leader Lease.
        identity: This process's identity in the Lease.
        activator_service: ``(namespace, name)`` of the activator's Service, or None: services
            with no ready replica then get its addresses as their endpoints.
        namespaces: The namespaces watched (``--namespace``); empty: the whole cluster. The
            pod informer lists and watches each (kopf is told the same for its kinds).
        status_address: ``HOST:PORT`` of the workers' status endpoint
            (:mod:`kubeforge.runtime.status_server`); empty: not served.
        status_url: The endpoint's base URL as the workers reach it (``https://HOST:PORT``: the
            chart's Service, or loopback for the local cluster); empty: workers get no reporting
            environment.
        status_tls_secret: ``(namespace, name)`` of the Secret that holds the endpoint's CA and
            certificate, shared by the replicas (:mod:`kubeforge.runtime.status_tls`); None: a
            certificate in memory.
        worker_reporting: Give worker pods the token, CA and ``KUBEFORGE_STATUS_*`` /
            ``KUBEFLOW_TRAINER_STATUS_*`` environment (``--no-worker-reporting`` turns it off).
        progress_write_seconds: The least seconds between two writes of a job's
            ``status.progress`` (:data:`kubeforge.lifecycle.PROGRESS_WRITE_SECONDS`).
        progress_writes_per_second: The most progress writes a second, all jobs together: with
            more reporting jobs than ``progress_write_seconds`` x this, each job's interval grows
            (:meth:`Runtime.progress_interval`), so reports never cost more status writes than this.
        engine_control_url: Where the model servers' sleep and wake endpoints are reached
            instead of each leader pod's IP (``--engine-control-url``; the local cluster's
            model-server simulator): ``<url>/engines/<namespace>/<pod>/sleep`` ...; empty: the pods.
        model_cache: Node agents (``kubeforge cache-agent``, the chart's ``cacheAgent.enabled``)
            serve the pools' nodes: the operator writes ModelCacheNode specs, prefers nodes that
            hold a service's ``spec.model`` and mounts the node's copy into its pods. Off: no
            ModelCacheNode is written and ``spec.model`` mounts only ``pvc://`` sources.
    """

    prometheus_allow: tuple[str, ...] = ()
    leader_election: bool = False
    lease_namespace: str = "default"
    lease_name: str = "kubeforge-operator"
    identity: str = ""
    activator_service: tuple[str, str] | None = None
    namespaces: tuple[str, ...] = ()
    status_address: str = ""
    status_url: str = ""
    status_tls_secret: tuple[str, str] | None = None
    worker_reporting: bool = True
    progress_write_seconds: float = PROGRESS_WRITE_SECONDS
    progress_writes_per_second: float = PROGRESS_WRITES_PER_SECOND
    engine_control_url: str = ""
    model_cache: bool = False

    def reporting_config(self) -> ReportingConfig | None:
        """What worker pods get to report (:mod:`kubeforge.builders.reporting`), or None when
        reporting is off or workers have nowhere to report to."""
        if not (self.worker_reporting and self.status_url and self.status_address):
            return None
        return ReportingConfig(url=self.status_url)


@dataclass
class Runtime:
    """Shared by the loops of one operator process.

    Attributes:
        cache: Indexes and this process's memory (:class:`~kubeforge.runtime.cache.Cache`).
        client: The API client.
        events: The Event sink.
        options: Command-line options.
        ready: Set once kopf has filled every index and the informers have listed.
        informers_synced: One event per informer (:mod:`kubeforge.runtime.informer`), set
            after its first list.
        leading: Set while this process may act (it holds the Lease, or runs alone).
        admission_wake: Set to ask for an admission round soon.
        jobs: The TrainingJob work queue (set at startup).
        services: The InferenceService work queue (set at startup).
        tasks: Background tasks to cancel at shutdown.
        api_servers: Where the API server answers (``host:port``), never queried as a
            Prometheus (:mod:`kubeforge.runtime.prometheus_urls`).
        engine: How standby replicas' engines are told to sleep and wake
            (:class:`~kubeforge.runtime.engine_control.EngineControl`): HTTP to the leader pods,
            or to ``options.engine_control_url``; tests put a fake here.
        metrics: Where the autoscaler's numbers come from
            (:class:`~kubeforge.runtime.metrics_source.MetricsSource`): Prometheus through this
            process's one HTTP client, opened at start-up and closed at cleanup with the API
            client; tests put a :class:`~kubeforge.runtime.metrics_source.FakeMetrics` here.
        reports: The workers' reports not written yet
            (:class:`~kubeforge.runtime.status_book.ReportBook`), read by the job's reconcile.
        status_server: The status endpoint, once started (None: not served).
        status_ca: The endpoint's CA (PEM) once it serves; worker pods get reporting only then.
        status_ca_refresh: This start serves another CA than the ConfigMaps may hold (a new
            one, or the Secret's signed again with key identifiers): every reconciled job's
            namespace gets its CA ConfigMap rewritten, not only those where pods are made, so
            running pods' projected copy is replaced.
        status_ca_written: The CA last written to each namespace's ConfigMap.
        exit_code: ``kubeforge run``'s exit code once a loop stopped the operator on purpose
            (0: none did; :data:`~kubeforge.runtime.watch_echo.EXIT_WATCH_STALLED`).
    """

    cache: Cache = field(default_factory=Cache)
    client: KubeClient = field(default_factory=KubeClient)
    events: EventSink | None = None
    options: Options = field(default_factory=Options)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    informers_synced: list[asyncio.Event] = field(default_factory=list)
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    admission_wake: asyncio.Event = field(default_factory=asyncio.Event)
    jobs: Any = None
    services: Any = None
    tasks: list[asyncio.Task] = field(default_factory=list)
    api_servers: frozenset[str] = frozenset()
    metrics: MetricsSource = field(default_factory=PrometheusSource)
    engine: EngineControl | None = None
    reports: ReportBook = field(default_factory=ReportBook)
    status_server: Any = None
    status_ca: str | None = None
    status_ca_refresh: bool = False
    status_ca_written: dict[str, str] = field(default_factory=dict)
    exit_code: int = 0

    def __post_init__(self) -> None:
        if self.engine is None:
            self.engine = HttpEngineControl(self.options.engine_control_url or None)

    def progress_interval(self) -> float:
        """Seconds between two progress writes of one job now: ``--progress-write-seconds``, or
        longer when more jobs report than ``--progress-writes-per-second`` allows at that pace
        (the jobs with a report in :attr:`reports` / the budget)."""
        opts = self.options
        if opts.progress_writes_per_second <= 0:
            return opts.progress_write_seconds
        return max(opts.progress_write_seconds, len(self.reports) / opts.progress_writes_per_second)

    def reporting(self) -> ReportingConfig | None:
        """What this process's worker pods get to report: :meth:`Options.reporting_config` once
        the endpoint serves (its CA known), else None."""
        return self.options.reporting_config() if self.status_ca else None

    def wake_admission(self) -> None:
        self.admission_wake.set()

    def queue_job(self, key: Key, urgent: bool = False, follow_up: bool = False) -> None:
        """Queue the job's reconcile; ``urgent`` for a decision of the admission round (an
        admission, a preemption) that should be written before routine looks; ``follow_up``
        for the creates an admission's reconcile left while more admissions waited (after
        every urgent key, before routine looks: :class:`~kubeforge.runtime.queue.WorkQueue`)."""
        if self.jobs is not None:
            self.jobs.add(key, urgent=urgent, follow_up=follow_up)

    def queue_job_batched(self, key: Key) -> None:
        """Queue the job's reconcile within :data:`POD_EVENT_BATCH_SECONDS`, for a change of
        one of its pods: a gang's pods change together (created, bound, Running, each pod in
        turn), and one reconcile then decides on all of them instead of one per event."""
        if self.jobs is not None:
            self.jobs.add_after(key, POD_EVENT_BATCH_SECONDS)

    def queue_service(self, key: Key, urgent: bool = False) -> None:
        """Queue the service's reconcile; ``urgent`` as for :meth:`queue_job`."""
        if self.services is not None:
            self.services.add(key, urgent=urgent)

    def event(self, kind: str, rec: Record, type_: str, reason: str, message: str, now: float | None = None) -> None:
        """Post an Event about one of our objects (in the background)."""
        if self.events is not None:
            self.events.post(ObjectRef(kind, rec.namespace, rec.name, rec.uid), type_, reason, message, now)


async def every(seconds: float, step: Callable[[], Awaitable[None]], what: str, log: logging.Logger) -> None:
    """Run ``step`` forever, ``seconds`` apart, one log line per failure streak (an API error
    as a warning, anything else with its traceback once), never a traceback per loop."""
    failing = False
    while True:
        try:
            await step()
            failing = False
        except asyncio.CancelledError:
            raise
        except ApiError as e:
            if not failing:
                log.warning("%s: %s", what, e)
            failing = True
        except Exception:
            if not failing:
                log.exception(what)
            failing = True
        await asyncio.sleep(seconds)
