"""The operator process: kopf settings, start-up and shutdown of the runtime's loops.

Importing this module registers every kopf handler (the indexes and the deletion events).
No handler here needs a finalizer: children are garbage-collected through owner references,
so deleting an object never waits for the operator.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

import kubeforge
from kubeforge.runtime import indexes  # noqa: F401  (registers the indexes)
from kubeforge.runtime.activator import activator_loop
from kubeforge.runtime.admission import admission_loop
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.events import EventSink
from kubeforge.runtime.inference import reconcile_service
from kubeforge.runtime.informer import informers
from kubeforge.runtime.kopf_watching import configure_watching
from kubeforge.runtime.leader import lead
from kubeforge.runtime.pools import pool_status_loop
from kubeforge.runtime.queue import WorkQueue
from kubeforge.runtime.status_server import start_status_server
from kubeforge.runtime.training import reconcile_job
from kubeforge.runtime.watch_echo import watch_watchdog

log = logging.getLogger("kubeforge")

JOB_WORKERS = 64
"""TrainingJob reconciles at once. A reconcile is a few API round trips in a row (its status, its
pods), each 100-400 ms on a busy API server, so the workers set how fast a burst's pods are
created: 800 gangs on 1,024 nodes (e2e/README-training-bench.md, issue 31) took create -> all pods
bound p95 35 s at 16 workers, 13-14 s at 64 (kubeforge phase alone). It was 16 again from
2891359 until the race that 32 and 64 workers exposed was fixed (0ac6cd3: the status overlay
dropped our write while the watch lagged, and bursts placed gangs on GPUs already given); with
it fixed, 64 workers: p95 12.6 s alone, 23.6 s after the baseline phase
against 26.1 s at 16 in the same form, no placement lost, 11-12 ms of operator CPU per placed
job. No more than the client's :data:`~kubeforge.runtime.client.MAX_IN_FLIGHT` either: above it
the creates queue at the client's slots ahead of the urgent lane's admission writes (at 128,
created -> Admitted p95 12.5 s against 3.9 s at 64)."""
SERVICE_WORKERS = 4


class NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kubeforge registers no change handlers (only indexes and event handlers), so the diff
    base kopf builds on every event (a deep copy of the whole object) is never read: keep it
    empty. On a busy cluster that deep copy was a tenth of the operator's CPU."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


OWN_GROUP = "/apis/kubeforge.io/v1alpha1"
DISCOVERY = {
    "/api/v1": ("pods", "nodes", "persistentvolumeclaims", "services", "namespaces"),
    "/apis/discovery.k8s.io/v1": ("endpointslices",),
    "/apis/apps/v1": ("deployments",),
    "/apis/storage.k8s.io/v1": ("storageclasses",),
    OWN_GROUP: ("trainingjobs", "inferenceservices", "gpupools"),
}
"""The API groups (and resources in them) kopf must find when it scans the API at start-up."""


async def wait_for_discovery(rt: Any, backoff: float = 1.0, cap: float = 10.0) -> None:
    """Return once the API server's discovery lists every resource of :data:`DISCOVERY`.

    kopf scans the API's groups once, after the startup handlers, and rescans a group only
    when a CRD changes. An operator that starts while the API server is down or still starting
    (a control-plane restart or upgrade, a node reboot) would scan a partial list (``/api`` is
    installed first; ``/apis/...`` answers 503 "the request has been made before all known
    HTTP paths have been installed") and serve nothing else for its whole life ("Unresolved
    resources cannot be served"). Waiting here, before kopf's first scan, makes that scan
    whole; each of kubeforge's own kinds is also listed once (a CRD just Established answers
    429 "storage is (re)initializing" for a moment). One log line per failure streak; never gives up (a liveness probe is the place for
    a deadline).
    """
    failing = 0
    while True:
        missing = []
        for path, wanted in DISCOVERY.items():
            try:
                body = await rt.client.request("GET", path, read=True) or {}
                have = {r.get("name") for r in body.get("resources") or []}
                missing += [f"{path}/{w}" for w in wanted if w not in have]
            except ApiError as e:
                missing.append(f"{path} ({e})")
        for res in DISCOVERY[OWN_GROUP] if not missing else ():
            # A CRD Established a moment ago may still answer 429 "storage is (re)initializing":
            # list each kind once, so kopf's own first lists do not log an ERROR per kind.
            try:
                await rt.client.request("GET", f"{OWN_GROUP}/{res}", query={"limit": "1"}, read=True)
            except ApiError as e:
                missing.append(f"{OWN_GROUP}/{res} ({e})")
        if not missing:
            if failing:
                log.info("API discovery complete after %d tries", failing + 1)
            return
        if failing == 0:
            log.warning("waiting for the API server to serve %s", ", ".join(missing)[:500])
        failing += 1
        await asyncio.sleep(min(cap, backoff * 2 ** min(failing, 4)))


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, memo: Any, **kwargs: Any) -> None:
    rt = memo.rt
    settings.persistence.finalizer = "kubeforge.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubeforge.io")
    settings.persistence.diffbase_storage = NoDiffBase(prefix="kubeforge.io", key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    configure_watching(settings)
    settings.networking.request_timeout = 30
    await rt.client.start()
    rt.api_servers = rt.client.server_addresses()
    await rt.metrics.start()
    await wait_for_discovery(rt)
    await start_status_server(rt)
    # kopf passes every index to startup handlers; they fill in as the watches list. Pods,
    # claims and nodes come from the informers (started below, once the queues their handlers
    # feed exist).
    stores, watchers = informers(rt.client, memo, rt.options.namespaces)
    rt.cache.attach({**{k: v for k, v in kwargs.items() if k.startswith("kf_")}, **stores})
    rt.informers_synced = [w.synced for w in watchers]
    rt.events = EventSink(rt.client)
    rt.events.start()
    rt.jobs = WorkQueue(lambda key: reconcile_job(rt, key), workers=JOB_WORKERS, name="trainingjobs", gate=rt.leading)
    rt.services = WorkQueue(lambda key: reconcile_service(rt, key), workers=SERVICE_WORKERS, name="inferenceservices",
                            gate=rt.leading)
    rt.jobs.start()
    rt.services.start()
    rt.tasks = [
        asyncio.create_task(admission_loop(rt), name="admission"),
        asyncio.create_task(pool_status_loop(rt), name="pool-status"),
        asyncio.create_task(lead(rt, memo.stop), name="leader-election"),
        asyncio.create_task(activator_loop(rt), name="activator-endpoints"),
        asyncio.create_task(watch_watchdog(rt, memo.stop), name="watch-watchdog"),
    ] + [asyncio.create_task(w.run(), name=f"informer {w.path}") for w in watchers]
    log.info("kubeforge %s: pods, claims and nodes by informer (%d watches)", kubeforge.__file__, len(watchers))


@kopf.on.cleanup()
async def _cleanup(memo: Any, **_: Any) -> None:
    rt = memo.rt
    for t in rt.tasks:
        t.cancel()
    await asyncio.gather(*rt.tasks, return_exceptions=True)
    for q in (rt.jobs, rt.services, rt.events):
        if q is not None:
            await q.stop()
    if rt.status_server is not None:
        await rt.status_server.stop()
    await rt.metrics.close()
    if rt.engine is not None:
        await rt.engine.close()
    await rt.client.close()
