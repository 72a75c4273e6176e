"""The InferenceService reconcile's reads and calls for replicas that take minutes to start (issue
28): the standby engines' sleep state before the plan and the sleeps and wakes after it
(through ``rt.engine``, :mod:`kubeforge.runtime.engine_control`), and predictive scale-up's
history (through ``rt.metrics``, :func:`~kubeforge.runtime.metrics_source.read_history`). The
decisions are :mod:`kubeforge.serving` and :mod:`kubeforge.autoscaling`'s; these only read and send.
"""

from __future__ import annotations

import asyncio
from typing import Sequence

from kubeforge.autoscaling import DemandHistory
from kubeforge.objects import InferenceServiceRecord, Key, Pod, groups_of
from kubeforge.runtime.engine_control import EngineCalls
from kubeforge.runtime.metrics_source import read_history
from kubeforge.runtime.prometheus_urls import url_refusal
from kubeforge.runtime.state import Runtime
from kubeforge.serving import ServingPlan, engines_to_ask, lead_seconds

__all__ = ["HISTORY_REFRESH_SECONDS", "read_sleeping", "refresh_history", "send_engine_calls"]

HISTORY_REFRESH_SECONDS = 30.0
"""Predictive scale-up reads its history (three range queries) at most this often per service:
the forecast looks minutes ahead, its inputs are minute rates."""


async def read_sleeping(rt: Runtime, rec: InferenceServiceRecord, pods: Sequence[Pod]) -> dict[int, bool]:
    """Whether each Ready standby group's engine sleeps (its leader's ``/is_sleeping``), asked
    at once; a group whose engine does not answer is left out (unknown)."""
    asks = engines_to_ask(groups_of(rec.status), pods)
    if not asks or rt.engine is None:
        return {}
    port = rec.spec.port  # type: ignore[union-attr]
    answers = await asyncio.gather(*(rt.engine.is_sleeping(p, port) for p in asks.values()))
    return {i: a for i, a in zip(asks, answers) if a is not None}


def send_engine_calls(rt: Runtime, key: Key, rec: InferenceServiceRecord, plan: ServingPlan, calls: EngineCalls) -> None:
    """Start the plan's sleeps and wakes in the background (one per pod at a time); each one's
    end queues the service's reconcile, which reads the engine's state again."""
    if rt.engine is None:
        return
    engine, port = rt.engine, rec.spec.port  # type: ignore[union-attr]
    for pod in plan.wake:
        calls.fire("wake", pod, lambda p=pod: engine.wake(p, port), lambda: rt.queue_service(key, urgent=True))
    for pod in plan.sleep:
        calls.fire("sleep", pod, lambda p=pod: engine.sleep(p, port), lambda: rt.queue_service(key))


async def refresh_history(rt: Runtime, rec: InferenceServiceRecord, held: tuple[float, DemandHistory] | None,
                          now: float) -> tuple[float, DemandHistory] | None:
    """Predictive scale-up's history of ``rec``: ``held`` (``(read at, history)``) while younger
    than :data:`HISTORY_REFRESH_SECONDS`, else read again; None when predictive scale-up is off,
    its lead time unknown (no start measured, no ``leadSeconds``) or the URL refused."""
    a = rec.spec.autoscaling  # type: ignore[union-attr]
    p = a.predictive
    if p.mode.value == "Off":
        return None
    lead = float(p.lead_seconds) if p.lead_seconds else lead_seconds(rec.status)
    if not lead or url_refusal(a.prometheus_url, rt.options.prometheus_allow, rt.api_servers):
        return None
    if held is not None and now - held[0] < HISTORY_REFRESH_SECONDS:
        return held
    return now, await read_history(rt.metrics, rec, now, float(p.trend_window_seconds), lead)
