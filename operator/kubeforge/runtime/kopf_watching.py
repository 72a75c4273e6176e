"""kopf's watch timeouts for kubeforge's resources, and why the inactivity timeout is held long.

kopf watches kubeforge's own kinds, namespaces, StorageClasses, DRA objects and 0.1 Deployments
(its indexes, ``runtime/indexes.py``), and CRDs (its scan of served resources); pods, claims and
nodes come from kubeforge's informers (``runtime/informer.py``), which these settings do not
touch.

Each watch request is bounded twice, as client-go bounds its own:

- :data:`SERVER_TIMEOUT` seconds is the request's ``timeoutSeconds``: the API server ends the
  watch, and kopf resumes it from the last ``resourceVersion`` it saw (no list);
- :data:`CLIENT_TIMEOUT` seconds is aiohttp's total timeout for the whole request: a stream that
  went silent without a close (a half-open connection) ends then, and kopf resumes it likewise.

**The inactivity timeout (kopf >= 1.45, ``settings.watching.inactivity_timeout``, default 70 s)
is set past both, to** :data:`INACTIVITY_TIMEOUT` **seconds, so that it never fires.** kopf
arms it with ``asyncio.timeout()`` inside the async generator that yields the watch events
(``kopf/_cogs/clients/watching.py: watch_objs``) and reschedules it after each event. The timer
cancels the *task*, and the task is not always inside the generator: while kopf's watcher
handles the event it was just given (for a new object it awaits ``Scheduler.spawn``, which
yields to the loop), the generator sits at its ``yield``. If the deadline passes then, the
cancellation lands in the watcher's own code instead of the generator's ``async with``, is not
turned into the ``TimeoutError`` kopf catches, and ends the watcher task as *cancelled*. kopf
guards that task with ``cancellable=True`` and its orchestrator drops a cancelled watcher
without a log line or a new one (``kopf/_core/reactor/orchestration.py``): the operator stays
blind to that resource until it restarts.

It takes an event that arrives just before the deadline while the event loop is late, which is
what an overloaded control plane gives: the API server sends a watch's bookmarks late (kopf's
70 s assume one a minute) and the operator's loop lags behind its own catch-up writes. It is
the likely way a restart at 5,000 nodes lost its TrainingJob watch on 2026-12-07 (no debug log
was kept to show it; e2e/README-scale-bench.md); ``tests/test_kopf_watching.py`` drives kopf's
own ``watch_objs`` into it. With the timer past :data:`CLIENT_TIMEOUT`, each request ends by the server or by
aiohttp first (aiohttp cancels only inside its own reads, and a late one surfaces as a
``TimeoutError`` from the next read, which kopf catches), so a silent stream is still dropped,
after at most :data:`CLIENT_TIMEOUT` instead of 70 s. ``runtime/watch_echo.py`` stays as the
last line: a TrainingJob watch that stops delivering for any other reason stops the operator.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLIENT_TIMEOUT", "INACTIVITY_TIMEOUT", "SERVER_TIMEOUT", "configure_watching"]

SERVER_TIMEOUT = 300
"""Seconds: a kopf watch request's ``timeoutSeconds`` (the API server ends it, kopf resumes)."""

CLIENT_TIMEOUT = 330
"""Seconds: aiohttp's total timeout of one kopf watch request (ends a silent, half-open stream)."""

INACTIVITY_TIMEOUT = 4 * CLIENT_TIMEOUT
"""Seconds: kopf's watch inactivity timeout, held past :data:`CLIENT_TIMEOUT` so it never fires
(see the module's docstring for the race it would otherwise lose)."""


def configure_watching(settings: Any) -> None:
    """Set kopf's watch timeouts on ``settings`` (a ``kopf.OperatorSettings``), in place.

    Sets ``watching.server_timeout``, ``watching.client_timeout`` and, where this kopf has it
    (1.45 and later), ``watching.inactivity_timeout``; nothing else. No return value, no errors.
    """
    settings.watching.server_timeout = SERVER_TIMEOUT
    settings.watching.client_timeout = CLIENT_TIMEOUT
    if hasattr(settings.watching, "inactivity_timeout"):
        settings.watching.inactivity_timeout = INACTIVITY_TIMEOUT
