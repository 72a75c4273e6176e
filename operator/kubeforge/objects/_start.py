"""When a pod got through each phase of its start, and how long a replica group's start took, read
from what the pod's status shows (issue 28, item 1). Pure.

Kubernetes shows a pod's start in its status as:

* ``PodScheduled=True`` (``lastTransitionTime``): the API server sets it when the pod is bound
  (``pods/binding``);
* ``Initialized=True``: every init container ran to completion (a model download in an init
  container ends here);
* each container's ``state.running.startedAt``: the kubelet started it, so its image was pulled.
  No image-pulled time is kept in the status (``PodReadyToStartContainers`` marks the sandbox,
  before the pull; the kubelet's ``Pulled`` Event has the pull's duration, but Events are
  best-effort and rate-limited), so the containers' start is the pull's upper bound;
* ``Ready=True``: the readiness probe passed (vLLM's ``/health``: the model is loaded and the
  engine initialized). vLLM exports no start-time series of its own (its ``Model loading took``
  and ``init engine ... took`` are log lines), so this is the engine's Ready.

Times are the API server's and the kubelet's, in whole seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kubeforge.objects._reasons import READY
from kubeforge.objects._timestamps import loose_time

__all__ = ["GroupStart", "PodStart", "group_start", "pod_start_from_k8s"]


@dataclass(frozen=True, slots=True)
class PodStart:
    """The phases of one pod's start, unix seconds (None: not reached, or not shown).

    Attributes:
        scheduled: ``PodScheduled=True``'s ``lastTransitionTime``.
        initialized: ``Initialized=True``'s.
        started: The latest ``state.running.startedAt`` of its containers, once every container
            runs (None while one does not).
        ready: ``Ready=True``'s ``lastTransitionTime`` (None while not Ready).
    """

    scheduled: float | None = None
    initialized: float | None = None
    started: float | None = None
    ready: float | None = None


def _true_since(conds: Iterable[Any], type_: str) -> float | None:
    for c in conds:
        if isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True":
            return loose_time(c.get("lastTransitionTime"))
    return None


def pod_start_from_k8s(status: Mapping[str, Any]) -> PodStart | None:
    """The start phases of a pod from its ``status`` (a dict or kopf's view), or None when it
    shows none of them (a pod not bound yet). Never raises on odd content."""
    conds = status.get("conditions") or []
    started = None
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        at = loose_time(((cs.get("state") or {}).get("running") or {}).get("startedAt")) if isinstance(cs, Mapping) else None
        if at is None:
            started = None
            break
        started = at if started is None else max(started, at)
    out = PodStart(_true_since(conds, "PodScheduled"), _true_since(conds, "Initialized"),
                   started if statuses else None, _true_since(conds, READY))
    return None if out == PodStart() else out


@dataclass(frozen=True, slots=True)
class GroupStart:
    """How long a replica group's start took, phase by phase: seconds after the group got its
    nodes (``admittedAt``) when its **last** pod reached each phase (None: not every pod has).

    Attributes:
        scheduled: Every pod bound.
        initialized: Every pod's init containers done.
        started: Every container running (images pulled).
        ready: Every pod Ready (the leader's engine serves).
    """

    scheduled: float | None = None
    initialized: float | None = None
    started: float | None = None
    ready: float | None = None

    def to_status(self) -> dict[str, float]:
        """``status.groups[].start`` (``scheduledSeconds``... only the phases reached)."""
        return {f"{k}Seconds": v for k, v in (("scheduled", self.scheduled), ("initialized", self.initialized),
                                              ("started", self.started), ("ready", self.ready)) if v is not None}

    @classmethod
    def from_status(cls, doc: Any) -> GroupStart | None:
        """The :meth:`to_status` form read back (odd values count as absent)."""
        if not isinstance(doc, Mapping):
            return None

        def num(key: str) -> float | None:
            v = doc.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None

        out = cls(num("scheduledSeconds"), num("initializedSeconds"), num("startedSeconds"), num("readySeconds"))
        return None if out == GroupStart() else out


def group_start(admitted_at: float, starts: Iterable[PodStart | None], pods: int) -> GroupStart | None:
    """The start of a group of ``pods`` pods admitted at ``admitted_at`` from its current pods'
    :class:`PodStart` (one per pod present): each phase is the last pod's, and absent until
    ``pods`` pods reached it; never below 0 (the API server's clock and the operator's may
    differ by a second). None when no pod shows any phase."""
    starts = list(starts)
    if not any(s is not None for s in starts):
        return None

    def last(attr: str) -> float | None:
        times = [getattr(s, attr) for s in starts if s is not None and getattr(s, attr) is not None]
        if len(times) < pods:
            return None
        return round(max(0.0, max(times) - admitted_at), 1)

    out = GroupStart(last("scheduled"), last("initialized"), last("started"), last("ready"))
    return None if out == GroupStart() else out
