"""kopf handlers, one module per concern; importing this package registers them.

Handlers are thin: they feed indexes and a work queue; the decisions live in the pure core
(:mod:`kubeforge.placement`, :mod:`kubeforge.lifecycle`, :mod:`kubeforge.autoscaling`).
No handler here needs a finalizer: children are garbage-collected through owner references,
so deleting an object never waits for the operator.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from kubeforge.handlers import indexes  # noqa: F401  (registers the indexes)
from kubeforge.handlers import kube
from kubeforge.handlers.inference import reconcile_service
from kubeforge.handlers.pools import pool_status_loop
from kubeforge.handlers.state import STATE, WorkQueue
from kubeforge.handlers.training import admission_loop, reconcile_job

log = logging.getLogger("kubeforge")


@kopf.on.startup()
async def _startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    settings.persistence.finalizer = "kubeforge.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubeforge.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="kubeforge.io", key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    kube.load_config()
    # kopf passes every index to startup handlers; they fill in as the watches list.
    STATE.indexes = {k: v for k, v in kwargs.items() if k.startswith("kf_")}
    STATE.jobs = WorkQueue(reconcile_job, workers=16, name="trainingjobs")
    STATE.services = WorkQueue(reconcile_service, workers=4, name="inferenceservices")
    STATE.jobs.start()
    STATE.services.start()
    STATE.tasks = [
        asyncio.create_task(admission_loop(), name="admission"),
        asyncio.create_task(pool_status_loop(), name="pool-status"),
    ]


@kopf.on.cleanup()
async def _cleanup(**_: Any) -> None:
    for t in STATE.tasks:
        t.cancel()
    await asyncio.gather(*STATE.tasks, return_exceptions=True)
    for q in (STATE.jobs, STATE.services):
        if q is not None:
            await q.stop()
