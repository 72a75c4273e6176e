"""The model-server simulator's HTTP face: ``GET /metrics``, the completion requests, and vLLM's
sleep mode per replica at ``/engines/<namespace>/<pod>/{sleep?level=1, wake_up, is_sleeping}``
(the operator's ``--engine-control-url``: kwok's pod IPs reach nothing, so every simulated
engine is addressed here).

:func:`handler` builds the :class:`http.server.BaseHTTPRequestHandler` class that
:class:`kubeforge.sim.modelserver.ModelServerSim` serves with; it reads the simulator through
the small :class:`Simulator` protocol, so this module does not import the simulator back.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Protocol

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

    def engine_call(self, what: str, namespace: str, pod: str) -> float | bool: ...


ENGINE_PATHS = {("POST", "sleep"): "sleep", ("POST", "wake_up"): "wake", ("GET", "is_sleeping"): "is_sleeping"}
"""``(method, last path segment) -> EngineSleep call`` under ``/engines/<namespace>/<pod>/``."""


def engine_route(method: str, path: str) -> tuple[str, str, str] | None:
    """``(call, namespace, pod)`` of a sleep-mode request, or None for any other path."""
    parts = path.split("?")[0].strip("/").split("/")
    if len(parts) != 4 or parts[0] != "engines":
        return None
    what = ENGINE_PATHS.get((method, parts[3]))
    return (what, parts[1], parts[2]) if what else None


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


def answer_engine(sim: Simulator, method: str, path: str, send: Callable[[int, dict], None]) -> bool:
    """Answer a sleep-mode request through ``send`` (True), blocking as long as the engine takes,
    as vLLM answers ``/sleep`` and ``/wake_up`` once the weights moved; False for another path."""
    route = engine_route(method, path)
    if route is None:
        return False
    out = sim.engine_call(*route)
    if isinstance(out, bool):
        send(200, {"is_sleeping": out})
        return True
    time.sleep(max(0.0, out))
    send(200, {})
    return True


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

        def _engine(self, method: str) -> bool:
            return answer_engine(sim, method, self.path, self._send)

        def do_GET(self):  # noqa: N802
            if self._engine("GET"):
                return
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
            if engine_route("POST", self.path) is not None:
                if 0 < length <= MAX_BODY:
                    self.rfile.read(length)  # vLLM's /sleep and /wake_up take no body: drained
                self._engine("POST")
                return
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
