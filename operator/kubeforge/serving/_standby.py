"""Warm standby, pure (issue 28, item 3): replicas started and kept asleep, out of the Service,
woken first on a scale-up.

A service with ``spec.standby.replicas: N`` holds ``desired + N`` groups. A group's
``standby`` state (``status.groups[].standby``) says which it is:

* None: a serving replica (in the Service once Ready);
* ``Pending``: a standby replica starting, or Ready and told to sleep
  (``POST /sleep?level=1``: vLLM moves the weights to host memory and frees the KV cache), until
  the engine says it sleeps (``GET /is_sleeping``);
* ``Asleep``: confirmed asleep (``standbySince``), holding its GPUs;
* ``Waking``: taken into service (``POST /wake_up``, ``standbySince`` the ask), out of the
  Service until the engine says it is awake; then it serves, its wake time is a sample of
  ``status.startTime.wake``.

A scale-up (fewer serving groups than ``desired``) turns standby groups into serving ones
before any new group is placed, asleep ones first (:func:`promote`); admission then places new
groups up to ``desired + N``, and the plan makes them standby ones (the refill). The engine's
state comes from the runtime (``ServingContext.sleeping``, the leaders' ``/is_sleeping``,
:func:`engines_to_ask`); the calls it makes are the plan's ``sleep`` and ``wake``. Sleep mode's
endpoints are vLLM's (``vllm/entrypoints/serve/sleep/api_router.py``, served with
``VLLM_SERVER_DEV_MODE=1`` and ``--enable-sleep-mode``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from kubeforge.admission import wake_order
from kubeforge.api import GroupPhase, StandbyState
from kubeforge.objects import GroupRecord, InferenceServiceRecord, Pod, groups_of

__all__ = ["ASLEEP", "PENDING", "WAKING", "StandbyStep", "engines_to_ask", "is_serving", "is_standby",
           "pool_standby_gpus", "promote", "standby_held", "standby_step"]

PENDING, ASLEEP, WAKING = StandbyState.PENDING.value, StandbyState.ASLEEP.value, StandbyState.WAKING.value
READY, FAILED = GroupPhase.READY.value, GroupPhase.FAILED.value


def is_standby(g: GroupRecord) -> bool:
    """A standby replica (Pending or Asleep), not leaving."""
    return g.standby in (PENDING, ASLEEP) and not g.leaving


def is_serving(g: GroupRecord) -> bool:
    """One of the service's serving replicas (a Waking one included, failed ones keep their
    place), not leaving."""
    return not g.leaving and g.standby not in (PENDING, ASLEEP)


@dataclass(frozen=True)
class StandbyStep:
    """A standby group after one look at its engine.

    Attributes:
        group: The group with its new state.
        sleep: Its leader is to be told to sleep.
        wake: Its leader is to be told to wake up.
        woke_after: Seconds from the wake's ask to awake, when it woke now.
    """

    group: GroupRecord
    sleep: bool = False
    wake: bool = False
    woke_after: float | None = None


def standby_step(g: GroupRecord, sleeping: bool | None, now: float) -> StandbyStep:
    """The next state of a group with a standby state, from its engine's ``sleeping`` (the
    leader's ``/is_sleeping``; None: unknown). Not Ready (starting, or recreated): a standby one
    stays Pending, a Waking one becomes a serving one that starts. Ready: Pending sleeps until
    asleep; Asleep stays (an engine found awake is put back to sleep); Waking wakes until awake."""
    if g.standby is None:
        return StandbyStep(g)
    if g.phase != READY or not g.nodes:
        state = None if g.standby == WAKING else PENDING
        return StandbyStep(replace(g, standby=state, standby_since=None))
    if g.standby == WAKING:
        if sleeping is False:
            took = None if g.standby_since is None else round(max(0.0, now - g.standby_since), 1)
            return StandbyStep(replace(g, standby=None, standby_since=None), woke_after=took)
        return StandbyStep(g, wake=True)
    if sleeping is True:
        return StandbyStep(g if g.standby == ASLEEP else replace(g, standby=ASLEEP, standby_since=now))
    if g.standby == ASLEEP and sleeping is None:
        return StandbyStep(g)  # not known now: asleep as last seen
    return StandbyStep(replace(g, standby=PENDING, standby_since=None), sleep=True)


def promote(groups: dict[int, GroupRecord], desired: int, now: float) -> list[tuple[GroupRecord, GroupRecord]]:
    """Turn standby groups into serving ones while fewer serve than ``desired``, in place: a
    Ready one is asked to wake (``Waking``), a starting one simply serves once Ready, in
    :func:`~kubeforge.admission.wake_order`.

    Returns:
        ``(before, after)`` of each group promoted, in the order taken.
    """
    need = desired - sum(1 for g in groups.values() if is_serving(g))
    out = []
    candidates = (g for g in groups.values() if is_standby(g) and g.nodes and g.phase != FAILED)
    for g in wake_order(candidates)[:max(0, need)]:
        # a wake is timed from an engine known asleep only (a Pending one may never have slept)
        after = replace(g, standby=WAKING, standby_since=now if g.standby == ASLEEP else None) \
            if g.phase == READY else replace(g, standby=None, standby_since=None)
        groups[g.index] = after
        out.append((g, after))
    return out


def standby_held(groups: Sequence[GroupRecord] | Mapping[int, GroupRecord]) -> tuple[int, int]:
    """``(asleep, GPUs)``: the standby replicas asleep, and the GPUs every standby replica holds
    (asleep or on its way to sleep; ``gpusPerPod`` x its nodes)."""
    gs = list(groups.values()) if isinstance(groups, Mapping) else list(groups)
    asleep = sum(1 for g in gs if g.standby == ASLEEP and g.holds)
    gpus = sum(g.gpus_per_pod * len(g.nodes) for g in gs if g.standby in (PENDING, ASLEEP) and g.holds)
    return asleep, gpus


def engines_to_ask(groups: Sequence[GroupRecord], pods: Sequence[Pod]) -> dict[int, Pod]:
    """The leader pod of each Ready group with a standby state (current attempt, running, with
    an IP): the runtime asks each ``/is_sleeping`` before the plan."""
    want = {g.index: g.attempt for g in groups if g.standby is not None and g.phase == READY and g.nodes}
    return {p.group: p for p in pods if p.group in want and p.worker == 0 and p.attempt == want[p.group]
            and p.phase == "Running" and p.ip and not p.deleting}


def pool_standby_gpus(services: Iterable[InferenceServiceRecord], pool: str) -> int:
    """The GPUs standby replicas hold in ``pool`` (GPUPool ``status.standbyGPUs``), from the
    services' ``status.groups``."""
    return sum(standby_held([g for g in groups_of(svc.status) if g.pool == pool])[1] for svc in services
               if svc.status.get("groups"))
