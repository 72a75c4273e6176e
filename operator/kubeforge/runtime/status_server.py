"""The status endpoint: HTTPS, in the operator process, on its own port (``--status-address``).

Two paths, one handler (docs/workload-reporting.md):

- ``POST /apis/kubeforge.io/v1alpha1/namespaces/{ns}/trainingjobs/{name}/status``: kubeforge's
  payload (or Kubeflow's, recognised by its ``trainerStatus`` key);
- ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status``: Kubeflow
  Trainer's (KEP-2779), for Hugging Face's ``KubeflowTrainerCallback`` and Kubeflow SDK scripts.

One request, in order, each step cheaper than the next: a follower answers 503 with Retry-After
(every replica serves behind the chart's Service, only the leader writes status; a retry on a
new connection reaches another replica), a body over 16 KiB 413; the token is checked (401,
403; TokenReviews bounded and cached: :mod:`kubeforge.runtime.status_auth`), the job must exist
(404) and the sender be a live pod of its current attempt (403); the job's token bucket (429
with Retry-After: :data:`REPORTS_PER_SECOND`, burst :data:`REPORT_BURST`); the payload (400,
422 naming the field). An accepted report goes into the :class:`~kubeforge.runtime.status_book.ReportBook`
and the job's reconcile is queued for when its next progress write is due (at most one every
``--progress-write-seconds``, longer beyond ``--progress-writes-per-second`` in all): no API
request per report, and nothing a worker sends reaches
placement or the spec. Answers are Kubernetes ``Status`` objects, as Kubeflow's server sends.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from kubeforge import metrics
from kubeforge.api import STATUS_TOKEN_AUDIENCE
from kubeforge.progress import (
    KUBEFLOW_PATH, KUBEFORGE_PATH, MAX_BODY_BYTES, AuthError, Buckets, ReportError, last_report_time, parse_report,
)
from kubeforge.runtime.status_auth import Authenticator, Busy, reporting_pod, retry_after
from kubeforge.runtime.status_tls import serving_cert, ssl_context

log = logging.getLogger("kubeforge.status")

REPORTS_PER_SECOND = 1.0
"""Reports a job may send per second, sustained (all its pods together)."""
REPORT_BURST = 20.0
"""... and at once (every rank of a gang reporting the same step)."""
FOLLOWER_RETRY_SECONDS = 1
"""Retry-After of a follower's 503: the next connection through the Service may reach the leader."""
REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 413: "RequestEntityTooLarge",
           422: "Invalid", 429: "TooManyRequests", 503: "ServiceUnavailable"}


_COUNTERS: dict[int, Any] = {}
"""The report counter's child per code (a label lookup per request is measurable at 100/s)."""
_HEADS = (b'{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": ',
          b'{"kind": "Status", "apiVersion": "v1", "status": "Success", "message": ')
_TAILS: dict[int, bytes] = {}
"""What follows the message in a ``Status`` body, per code (built once)."""


def status_body(code: int, message: str) -> bytes:
    """A ``Status`` answer's body: the bytes ``json.dumps`` writes for the object (``kind``,
    ``apiVersion``, ``status``, ``message``, ``code``, and ``reason`` for a failure), with only
    the message encoded per answer."""
    tail = _TAILS.get(code)
    if tail is None:
        rest = {"code": code} if code < 400 else {"code": code, "reason": REASONS.get(code, "InternalError")}
        tail = _TAILS[code] = (", " + json.dumps(rest)[1:]).encode()
    return _HEADS[code < 400] + json.dumps(message).encode() + tail


def answer(code: int, message: str, retry: str | None = None) -> web.Response:
    """A Kubernetes ``Status`` answer (``Failure`` with its reason, or ``Success``): the same
    response as ``web.json_response`` of the object, without encoding the whole object."""
    counter = _COUNTERS.get(code)
    if counter is None:
        counter = _COUNTERS[code] = metrics.STATUS_REPORTS.labels(code=str(code))
    counter.inc()
    return web.Response(body=status_body(code, message), status=code, content_type="application/json",
                        charset="utf-8", headers={"Retry-After": retry} if retry else None)


def server_hosts(url: str) -> list[str]:
    """The names the serving certificate covers: the workers' URL's host, ``localhost`` and
    ``127.0.0.1`` (the local cluster, a port-forward)."""
    host = urlsplit(url).hostname if url else None
    return list(dict.fromkeys([h for h in (host, "localhost", "127.0.0.1") if h]))


class StatusServer:
    """The endpoint of one operator process.

    Args:
        rt: The :class:`~kubeforge.runtime.state.Runtime` (cache, book, leadership, options).
        address: ``HOST:PORT`` to listen on (port 0: any free port, see :attr:`port`).
    """

    def __init__(self, rt: Any, address: str):
        host, _, port = address.rpartition(":")
        self.rt = rt
        self.host = host.strip("[]") or "0.0.0.0"
        self.port = int(port)
        self.auth = Authenticator(rt.client, STATUS_TOKEN_AUDIENCE)
        self.buckets = Buckets(REPORTS_PER_SECOND, REPORT_BURST)
        self._runner: web.AppRunner | None = None
        self._bugs: set[str] = set()
        self._slots: dict[tuple[str, str], float] = {}
        self._next_slot = 0.0

    def app(self) -> web.Application:
        """The aiohttp application (routes and the body bound)."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(KUBEFORGE_PATH, self._kubeforge)
        app.router.add_post(KUBEFLOW_PATH, self._kubeflow)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        return app

    async def start(self) -> None:
        """Get the certificate (:func:`kubeforge.runtime.status_tls.serving_cert`), publish its CA
        on the runtime (``rt.status_ca``) and listen.

        Raises:
            OSError: the address is taken; ApiError: the TLS Secret could not be read or made.
        """
        opts = self.rt.options
        cert = await serving_cert(self.rt.client, opts.status_tls_secret, server_hosts(opts.status_url), time.time())
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=ssl_context(cert), backlog=1024)
        await site.start()
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []  # the bound port when 0 was asked
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.rt.status_ca = cert.ca
        self.rt.status_ca_refresh = cert.ca_changed
        log.info("status endpoint on https://%s:%d (workers report to %s)", self.host, self.port,
                 opts.status_url or "nowhere: --status-url not set")

    async def stop(self) -> None:
        """Stop listening (requests in flight are given a moment)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _kubeforge(self, request: web.Request) -> web.Response:
        return await self._guarded(request, kubeflow=False)

    async def _kubeflow(self, request: web.Request) -> web.Response:
        return await self._guarded(request, kubeflow=True)

    async def _guarded(self, request: web.Request, kubeflow: bool) -> web.Response:
        """:meth:`handle`, with a bug of ours answered as a ``Status`` 500 (logged once per kind)."""
        try:
            return await self.handle(request, kubeflow)
        except Exception as e:  # noqa: BLE001
            if type(e).__name__ not in self._bugs:
                self._bugs.add(type(e).__name__)
                log.exception("status endpoint: unexpected error")
            return answer(500, f"internal error: {type(e).__name__}")

    async def _unknown(self, request: web.Request) -> web.Response:
        return answer(404, f"no such endpoint: {request.method} {request.path[:200]} (POST "
                      f"{KUBEFORGE_PATH} or {KUBEFLOW_PATH})")

    async def handle(self, request: web.Request, kubeflow: bool) -> web.Response:
        """One report (see the module docstring for the order of the checks)."""
        ns, name = request.match_info["namespace"], request.match_info["name"]
        rt = self.rt
        if not rt.leading.is_set():
            return answer(503, "this operator replica is not the leader; retry (the leader writes status)",
                          str(FOLLOWER_RETRY_SECONDS))
        if (request.content_length or 0) > MAX_BODY_BYTES:
            return answer(413, f"report body is {request.content_length} bytes; at most {MAX_BODY_BYTES} are accepted")
        try:
            who = await self.auth.identify(request.headers.get("Authorization"), ns)
            key = (ns, name)
            rec = rt.cache.job(key)
            if rec is None or rec.deleting:
                return answer(404, f"TrainingJob {ns}/{name} not found")
            status = rt.cache.effective(key, rec).status
            pod = reporting_pod(rt.cache.job_pods(key), status, key, who)
            wait = self.buckets.take(key, time.monotonic())
            if wait > 0:
                return answer(429, f"TrainingJob {ns}/{name} reports more than {REPORTS_PER_SECOND:g} a second "
                              f"(burst {REPORT_BURST:g}); report less often", retry_after(wait))
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                return answer(413, f"report body is over {MAX_BODY_BYTES} bytes")
            now = time.time()
            report = parse_report(body, kubeflow_path=kubeflow, received=now, reporter=pod.name, attempt=pod.attempt)
        except AuthError as e:
            return answer(e.code, e.message, str(FOLLOWER_RETRY_SECONDS) if e.code == 503 else None)
        except Busy as e:
            return answer(429, e.message, retry_after(e.retry_after))
        except ReportError as e:
            return answer(e.code, e.message)
        rt.reports.put(key, report)
        due = self._schedule(key, status, now)
        return answer(200, f"report accepted; status.progress of TrainingJob {ns}/{name} is written within {due:.0f}s")

    def _schedule(self, key: tuple[str, str], status: Any, now: float) -> float:
        """Queue the job's reconcile for when its next progress write is due, in a slot of the
        write budget (``--progress-writes-per-second``: slots ``1 / budget`` s apart, so a burst
        of first reports, e.g. 1,000 jobs after a restart, is written at that pace and never
        fills the work queue); a job with a slot already taken for that write keeps it.
        Returns the delay."""
        last = last_report_time(status)
        due = now if last is None else max(now, last + self.rt.progress_interval())
        have = self._slots.get(key)
        if have is not None and have > now and have >= due - 0.001:
            return have - now
        budget = self.rt.options.progress_writes_per_second
        slot = max(due, self._next_slot) if budget > 0 else due
        self._next_slot = slot + (1.0 / budget if budget > 0 else 0.0)
        self._slots[key] = slot
        if len(self._slots) > 2 * len(self.rt.reports) + 1000:
            self._slots = {k: t for k, t in self._slots.items() if t > now}
        if self.rt.jobs is not None:
            self.rt.jobs.add_after(key, slot - now)
        return slot - now


async def start_status_server(rt: Any) -> None:
    """Start the endpoint when ``--status-address`` is set (``rt.status_server``). A failure (the
    port taken, the TLS Secret out of reach) is logged and the operator runs on without it:
    worker pods then get no reporting environment (:meth:`~kubeforge.runtime.state.Runtime.reporting`),
    and jobs fall back on their termination messages."""
    if not rt.options.status_address:
        return
    server = StatusServer(rt, rt.options.status_address)
    try:
        await server.start()
    except Exception as e:  # noqa: BLE001  the endpoint is optional; the operator's core is not
        log.error("status endpoint not served (%s: %s): workers will not report progress", type(e).__name__, e)
        return
    rt.status_server = server
