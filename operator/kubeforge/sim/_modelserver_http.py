"""The model-server simulator's HTTP face: ``GET /metrics`` and the completion requests.

:func:`handler` builds the :class:`http.server.BaseHTTPRequestHandler` class that
:class:`kubeforge.sim.modelserver.ModelServerSim` serves with; it reads the simulator through
the small :class:`Simulator` protocol, so this module does not import the simulator back.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from ._latency import Done
from ._serving import Key, service_for_host

MAX_BODY = 1 << 20
"""The largest request body read, bytes (a larger one is answered 413)."""


class Simulator(Protocol):
    """What the handler needs of the simulator (:class:`kubeforge.sim.modelserver.ModelServerSim`)."""

    request_timeout: float

    def metrics_text(self) -> str: ...

    def submit(self, key: Key, context_tokens: int, generated_tokens: int) -> tuple[int, threading.Event] | None: ...

    def result(self, rid: int) -> Done | None: ...


def prompt_tokens(doc: Any) -> int:
    """The prompt's length in tokens from a request body: ``prompt`` text at 4 characters a token,
    a token list, or chat ``messages``; 0 when the body names none."""
    if not isinstance(doc, dict):
        return 0
    p = doc.get("prompt")
    if isinstance(p, str):
        return max(1, len(p) // 4)
    if isinstance(p, list):
        return len(p) if all(isinstance(x, int) for x in p) else sum(len(str(x)) // 4 for x in p)
    msgs = doc.get("messages")
    if isinstance(msgs, list):
        return max(1, sum(len(str(m.get("content", ""))) // 4 for m in msgs if isinstance(m, dict)))
    return 0


def handler(sim: Simulator) -> type[BaseHTTPRequestHandler]:
    """The request handler class for ``sim``: ``GET /metrics`` renders its series; ``POST`` on
    any path submits one request for the service the ``Host`` or ``X-Kubeforge-Service`` header
    names and answers when it completes (200, 503 when its replica went away, 404 for an unknown
    service, 413 for a body over :data:`MAX_BODY`, 504 past ``sim.request_timeout``)."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = sim.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, {"error": "request body too large"})
                return
            raw = self.rfile.read(length) if length > 0 else b""
            try:
                doc = json.loads(raw) if raw else {}
            except ValueError:
                doc = {}
            key = service_for_host(self.headers.get("Host"), self.headers.get("X-Kubeforge-Service"))
            mt = doc.get("max_tokens") if isinstance(doc, dict) else None
            gen = mt if isinstance(mt, int) and not isinstance(mt, bool) and 0 < mt <= 1 << 16 else 16
            sub = sim.submit(key, prompt_tokens(doc) or 128, gen) if key else None
            if sub is None:
                self._send(404, {"error": "no simulated InferenceService for this Host or X-Kubeforge-Service"})
                return
            rid, ev = sub
            if not ev.wait(sim.request_timeout):
                sim.result(rid)
                self._send(504, {"error": "the simulated request did not complete in time"})
                return
            done = sim.result(rid)
            if done is None or done.aborted:
                self._send(503, {"error": "aborted: the replica serving the request went away"})
                return
            self._send(200, {"id": f"cmpl-{rid}", "object": "text_completion", "model": key[1],
                             "choices": [{"index": 0, "text": "ok " * gen, "finish_reason": "length"}],
                             "usage": {"prompt_tokens": done.request.context, "completion_tokens": gen,
                                       "total_tokens": done.request.context + gen},
                             "kubeforge_sim": {"replica": done.replica, "ttft_seconds": done.ttft}})

        def log_message(self, *a):  # quiet
            pass

    return Handler
