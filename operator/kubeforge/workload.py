"""Report a training job's progress to kubeforge from inside a worker: standard library only.

This one file runs in any image with Python 3.8+ (it imports nothing outside the standard library
and nothing else of kubeforge): ``from kubeforge import workload`` where kubeforge is installed,
or copy it next to your script as ``kubeforge_workload.py``. See docs/workload-reporting.md.

::

    from kubeforge import workload

    for step in range(start, total):
        loss = train_step(step)
        workload.report(step=step + 1, total_steps=total, metrics={"loss": loss})  # at most every 10 s
        if (step + 1) % 100 == 0:
            path = save_checkpoint(step + 1)
            workload.report(step=step + 1, checkpoint=(step + 1, path), force=True)

What it reads (the operator sets them on every worker): ``KUBEFORGE_STATUS_URL`` (where to
POST), ``KUBEFORGE_STATUS_TOKEN`` (the projected token's file, re-read as the kubelet renews
it), ``KUBEFORGE_STATUS_CA_CERT`` (the endpoint's CA file). Without them every call is a no-op
that returns False, so the same script runs outside kubeforge.

Behaviour: only global rank 0 reports (``RANK`` unset or 0) unless ``all_ranks``; calls closer
than ``min_interval`` seconds are skipped unless ``force`` (use it for checkpoints and the last
step); one HTTPS connection is kept open from report to report (a TLS handshake is most of what
a report costs the operator), and closed on any error; a 503 (an operator replica that is not
the leader) or a 429 with a short Retry-After is retried twice on a new connection (through the
Service, it may reach another replica); nothing ever raises into the training loop: a failure is
printed once to stderr per kind and the call returns False.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import sys
import time
from datetime import datetime, timezone
from urllib.parse import urlsplit
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

URL_ENV = "KUBEFORGE_STATUS_URL"
TOKEN_ENV = "KUBEFORGE_STATUS_TOKEN"
CA_ENV = "KUBEFORGE_STATUS_CA_CERT"
MIN_INTERVAL = 10.0
"""Seconds between two reports that are not forced (the operator writes a job's status every
30 s at most anyway; 1,000 jobs at this pace cost it about 13 % of a core: make bench-reporting)."""
TOKEN_TTL = 60.0
"""Seconds the token file is cached (the kubelet renews it at 80 % of its hour)."""
MAX_RETRY_WAIT = 2.0
"""A Retry-After longer than this is not waited for: the report is skipped."""

Checkpoint = Union[Tuple[int, str], Mapping[str, Any]]


def checkpoint_payload(checkpoint: Checkpoint, now: Optional[datetime] = None) -> Dict[str, Any]:
    """``{"step", "path", "time"}`` from ``(step, path)`` or a mapping with those keys; the time
    defaults to now (UTC)."""
    if isinstance(checkpoint, Mapping):
        step, path, when = checkpoint["step"], checkpoint["path"], checkpoint.get("time")
    else:
        (step, path), when = checkpoint, None
    if when is None:
        when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"step": int(step), "path": str(path), "time": str(when)}


def payload(step: Optional[int] = None, total_steps: Optional[int] = None, checkpoint: Optional[Checkpoint] = None,
            metrics: Optional[Mapping[str, float]] = None) -> Dict[str, Any]:
    """kubeforge's report body. Metric values must be numbers (tensors: call ``.item()``);
    anything not finite is left out (the endpoint refuses NaN)."""
    body: Dict[str, Any] = {}
    if step is not None:
        body["step"] = int(step)
    if total_steps is not None:
        body["totalSteps"] = int(total_steps)
    if checkpoint is not None:
        body["checkpoint"] = checkpoint_payload(checkpoint)
    clean = {}
    for name, value in (metrics or {}).items():
        v = float(value)
        if v == v and v not in (float("inf"), float("-inf")):
            clean[str(name)] = v
    if clean:
        body["metrics"] = clean
    return body


class Reporter:
    """One worker's reporter (see the module docstring).

    Args:
        env: Where the variables come from (``os.environ``).
        min_interval: Seconds between two reports that are not forced.
        timeout: Seconds one request may take.
        retries: Extra tries after a 503 or a short 429.
        all_ranks: Report from every rank, not only global rank 0.
        clock: Monotonic seconds (tests pass their own).
        sleep: Waits between tries (tests pass their own).
    """

    def __init__(self, env: Mapping[str, str] = os.environ, min_interval: float = MIN_INTERVAL,
                 timeout: float = 5.0, retries: int = 2, all_ranks: bool = False,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.url = env.get(URL_ENV, "")
        self.token_file = env.get(TOKEN_ENV, "")
        self.ca_file = env.get(CA_ENV, "")
        rank = env.get("RANK", "0") or "0"
        self.enabled = bool(self.url and self.token_file) and (all_ranks or rank == "0")
        self.min_interval, self.timeout, self.retries = min_interval, timeout, retries
        self.clock, self.sleep = clock, sleep
        self._last = float("-inf")
        self._token: Tuple[float, str] = (float("-inf"), "")
        self._ctx: Optional[ssl.SSLContext] = None
        self._warned: set = set()
        self._conn: Optional[http.client.HTTPConnection] = None
        parts = urlsplit(self.url)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.sent = 0
        self.last_status: Optional[int] = None

    def report(self, step: Optional[int] = None, total_steps: Optional[int] = None,
               checkpoint: Optional[Checkpoint] = None, metrics: Optional[Mapping[str, float]] = None,
               force: bool = False) -> bool:
        """Send one report; True when the operator accepted it (200). Never raises."""
        if not self.enabled:
            return False
        now = self.clock()
        if not force and now - self._last < self.min_interval:
            return False
        self._last = now
        try:
            body = json.dumps(payload(step, total_steps, checkpoint, metrics)).encode()
        except (TypeError, ValueError, KeyError) as e:
            self._warn("payload", f"cannot build the report: {e}")
            return False
        return self._send(body)

    def _send(self, body: bytes) -> bool:
        """POST ``body`` on the kept connection, retrying a 503 or a short 429 on a new one."""
        for attempt in range(self.retries + 1):
            try:
                code, retry_after, text = self._post(body)
            except (OSError, ssl.SSLError, ValueError, http.client.HTTPException) as e:
                self._close()
                self._warn(type(e).__name__, f"cannot report to {self.url}: {e}")
                self._ctx = None  # the CA may have been missing: built again next time
                return False
            self.last_status = code
            if code == 200:
                self.sent += 1
                return True
            self._close()  # a follower, a refusal: the next try goes through the Service again
            wait = _retry_after(retry_after)
            if code in (429, 503) and attempt < self.retries and wait <= MAX_RETRY_WAIT:
                self.sleep(wait)
                continue
            self._warn(f"http-{code}", f"report refused ({code}): {_message(text)}")
            return False
        return False

    def _post(self, body: bytes) -> Tuple[int, Optional[str], bytes]:
        """One POST: ``(status, Retry-After, body)``. Opens the connection when there is none;
        a kept connection the server closed meanwhile is opened again once."""
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._read_token()}"}
        for fresh in (self._conn is None, True):
            conn = self._connection()
            try:
                conn.request("POST", self._path, body=body, headers=headers)
                resp = conn.getresponse()
                text = resp.read()
                return resp.status, resp.getheader("Retry-After"), text
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._close()
                if fresh:
                    raise
        raise http.client.HTTPException("unreachable")  # the loop returns or raises

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            parts = urlsplit(self.url)
            if parts.scheme == "https":
                self._conn = http.client.HTTPSConnection(parts.hostname or "", parts.port or 443,
                                                         timeout=self.timeout, context=self._context())
            else:
                self._conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=self.timeout)
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _read_token(self) -> str:
        at, token = self._token
        if self.clock() - at > TOKEN_TTL or not token:
            with open(self.token_file) as f:
                token = f.read().strip()
            self._token = (self.clock(), token)
        return token

    def _context(self) -> Optional[ssl.SSLContext]:
        if self._ctx is None and self.url.startswith("https://"):
            self._ctx = ssl.create_default_context(cafile=self.ca_file or None)
        return self._ctx

    def _warn(self, kind: str, text: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            print(f"kubeforge.workload: {text} (said once; training goes on)", file=sys.stderr, flush=True)


def _retry_after(value: Optional[str]) -> float:
    try:
        return max(0.0, float(value)) if value else 1.0
    except ValueError:
        return 1.0


def _message(text: bytes) -> str:
    """The ``message`` of the operator's ``Status`` answer, else the body's start."""
    try:
        return str(json.loads(text.decode()).get("message"))[:300]
    except (ValueError, UnicodeDecodeError, AttributeError):
        return text[:300].decode(errors="replace")


_default: Optional[Reporter] = None


def reporter() -> Reporter:
    """The process's :class:`Reporter`, made from ``os.environ`` on first use."""
    global _default
    if _default is None:
        _default = Reporter()
    return _default


def report(step: Optional[int] = None, total_steps: Optional[int] = None, checkpoint: Optional[Checkpoint] = None,
           metrics: Optional[Mapping[str, float]] = None, force: bool = False) -> bool:
    """Report progress with the process's :class:`Reporter`: where the training is (``step`` of
    ``total_steps``), its newest complete checkpoint (``(step, path)``), a few numeric
    ``metrics``. True when the operator accepted it; never raises."""
    return reporter().report(step, total_steps, checkpoint, metrics, force)
