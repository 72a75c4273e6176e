"""What the reporting micro bench's server needs from the API server, faked (cheaply, so that the
endpoint's own work is what gets measured): TokenReviews answered at once, a cache of running
jobs with one live worker pod each, and a work queue whose due reconcile only stamps
``status.progress.lastReportTime`` as the real progress write would (see
:mod:`e2e.bench.reporting_micro`)."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field, replace
from typing import Any

from kubeforge.objects import Pod, Record
from kubeforge.progress import stamp_ms
from kubeforge.runtime.state import Options, Runtime
from kubeforge.runtime.status_book import ReportBook


class FakeClient:
    """TokenReviews only: every well-formed token is authenticated, bound to its claim's pod."""

    def __init__(self) -> None:
        self.reviews = 0

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """A TokenReview's answer (nothing else is asked: the certificate lives in memory)."""
        self.reviews += 1
        tok = body["spec"]["token"]
        claims = json.loads(base64.urlsafe_b64decode(tok.split(".")[1] + "=="))
        k8s = claims["kubernetes.io"]
        return {"status": {"authenticated": True, "audiences": body["spec"]["audiences"],
                           "user": {"username": f"system:serviceaccount:{k8s['namespace']}:default",
                                    "extra": {"authentication.kubernetes.io/pod-name": [k8s["pod"]["name"]],
                                              "authentication.kubernetes.io/pod-uid": [k8s["pod"]["uid"]]}}}}


class FakeCache:
    """``jobs`` Running TrainingJobs of one rank, attempt 1, each with its live worker pod."""

    def __init__(self, jobs: int, ns: str):
        self.records: dict[tuple[str, str], Record] = {}
        self.pods: dict[tuple[str, str], list[Pod]] = {}
        for i in range(jobs):
            name = f"j{i:04d}"
            self.records[(ns, name)] = Record(
                namespace=ns, name=name, uid=f"uid-{i}", generation=1, resource_version=str(i + 1), created=0.0,
                deleting=False, spec=None, spec_error=None,
                status={"phase": "Running", "attempt": 1, "conditions": [{"type": "Admitted", "status": "True"}]})
            self.pods[(ns, name)] = [Pod(namespace=ns, name=f"{name}-worker-0-1", job=name, rank=0, attempt=1,
                                         phase="Running", node=f"rep-n-{i // 8}")]

    def job(self, key):
        """The job's record, or None."""
        return self.records.get(key)

    def effective(self, key, rec):
        """The record itself (nothing written ahead of the index here)."""
        return rec

    def job_pods(self, key):
        """The job's pods."""
        return self.pods.get(key, [])


class FakeQueue:
    """``add_after`` as the work queue's (one timer per key); the timer's "reconcile" stamps the
    job's ``progress.lastReportTime`` as its progress write would."""

    def __init__(self, cache: FakeCache):
        self.cache = cache
        self.timers: dict[Any, asyncio.TimerHandle] = {}
        self.writes = 0

    def add_after(self, key, seconds: float) -> None:
        """Queue ``key``'s write in ``seconds`` (an earlier timer wins)."""
        loop = asyncio.get_running_loop()
        old = self.timers.get(key)
        due = loop.time() + min(max(seconds, 0.0), 3600.0)
        if old is not None and not old.cancelled() and old.when() <= due:
            return
        if old is not None:
            old.cancel()
        self.timers[key] = loop.call_at(due, self._write, key)

    def _write(self, key) -> None:
        import time

        self.timers.pop(key, None)
        rec = self.cache.records[key]
        progress = {**(rec.status.get("progress") or {}), "lastReportTime": stamp_ms(time.time())}
        self.cache.records[key] = replace(rec, status={**rec.status, "progress": progress})
        self.writes += 1


@dataclass
class FakeRuntime:
    """What :class:`~kubeforge.runtime.status_server.StatusServer` reads of the runtime."""

    client: FakeClient
    cache: FakeCache
    jobs: FakeQueue
    options: Options = field(default_factory=lambda: Options(
        status_url="https://127.0.0.1:1", progress_write_seconds=30, progress_writes_per_second=5))
    reports: ReportBook = field(default_factory=ReportBook)
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    status_ca: str | None = None
    progress_interval = Runtime.progress_interval


def fake_runtime(jobs: int, ns: str) -> FakeRuntime:
    """A leading runtime with ``jobs`` running jobs in ``ns`` (call inside the event loop)."""
    cache = FakeCache(jobs, ns)
    rt = FakeRuntime(client=FakeClient(), cache=cache, jobs=FakeQueue(cache))
    rt.leading.set()
    return rt
