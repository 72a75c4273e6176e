"""Samples of the demo over time, for the plot and the printed rows: the pool's GPUs allocated
per domain of its narrowest topology level (NVLink) as its status says, the chat service's
replicas as its status says, and its queue as the model-server simulator holds it and as the
operator last read it from Prometheus.

A :class:`Sampler` thread takes one sample every ``interval`` seconds (two GETs and one look at
the simulator), from the operator's start to the end of the demo.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["Sample", "Sampler", "Timeline"]


@dataclass(frozen=True)
class Sample:
    """One sample; ``t`` in seconds since the timeline's start.

    Attributes:
        t: Seconds since :attr:`Timeline.t0`.
        domains: GPUs allocated per domain of the pool's narrowest level (status).
        desired: The service's ``status.desiredReplicas`` (None before its first decision).
        ready: ``status.readyReplicas``.
        groups: Replica groups in ``status.groups`` (draining ones included).
        metric: ``status.lastMetricValue``: the queue the operator read from Prometheus.
        waiting: Requests waiting in the simulator (replicas' queues and those held at zero).
        running: Requests running in the simulator.
    """

    t: float
    domains: dict[str, int] = field(default_factory=dict)
    desired: int | None = None
    ready: int = 0
    groups: int = 0
    metric: float | None = None
    waiting: int = 0
    running: int = 0


@dataclass
class Timeline:
    """The samples, and the marks the plot shades (``burst``: (start, end) seconds)."""

    t0: float = field(default_factory=time.monotonic)
    samples: list[Sample] = field(default_factory=list)
    burst: tuple[float, float] | None = None
    level: str = "nvlink"
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def add(self, s: Sample) -> None:
        with self.lock:
            self.samples.append(s)

    def latest(self) -> Sample | None:
        with self.lock:
            return self.samples[-1] if self.samples else None

    def since(self, t: float) -> list[Sample]:
        with self.lock:
            return [s for s in self.samples if s.t >= t]

    def write_json(self, path: Path) -> None:
        with self.lock:
            doc = {"level": self.level, "burst": self.burst, "samples": [asdict(s) for s in self.samples]}
        path.write_text(json.dumps(doc, indent=None, separators=(",", ":")))


class Sampler(threading.Thread):
    """Samples ``pool`` and service ``(namespace, name)`` every ``interval`` seconds into
    ``timeline`` until :meth:`stop`. ``reader`` makes a :class:`~kubeforge._demo.kube.Kube`
    for this thread; ``sim`` (optional, set later) is the
    :class:`~kubeforge.sim.modelserver.ModelServerSim`. A failed read skips one sample."""

    def __init__(self, timeline: Timeline, reader: Callable[[], Any], pool: str, service: tuple[str, str],
                 interval: float = 0.5):
        super().__init__(name="demo-sampler", daemon=True)
        self.timeline, self.reader, self.pool, self.service, self.interval = timeline, reader, pool, service, interval
        self.sim: Any = None
        self.failures = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        kube = self.reader()
        try:
            while not self._stop_event.is_set():
                try:
                    self.timeline.add(self._sample(kube))
                except Exception:  # noqa: BLE001 - an API hiccup loses one sample, never the demo
                    self.failures += 1
                self._stop_event.wait(self.interval)
        finally:
            kube.close()

    def sample_now(self, kube: Any) -> None:
        """One more sample, from the calling thread (the demo's last look, after the thread stopped)."""
        try:
            self.timeline.add(self._sample(kube))
        except Exception:  # noqa: BLE001 - as in the thread: one sample lost
            self.failures += 1

    def _sample(self, kube: Any) -> Sample:
        t = self.timeline.now()
        ps = kube.get("gpupools", self.pool).get("status") or {}
        levels = [lv["name"] for lv in ps.get("topologyLevels") or []]
        level = levels[0] if levels else self.timeline.level
        self.timeline.level = level
        domains = {d["name"]: (d.get("gpus") or {}).get("allocated", 0)
                   for d in ps.get("domains") or [] if d.get("level") == level}
        ns, name = self.service
        st = kube.get("inferenceservices", name, ns).get("status") or {}
        waiting = running = 0
        if self.sim is not None:
            try:
                snap = self.sim.snapshot(ns, name)
                waiting, running = snap["waiting"], snap["running"]
            except KeyError:
                pass
        return Sample(t=t, domains=domains, desired=st.get("desiredReplicas"), ready=st.get("readyReplicas", 0),
                      groups=len(st.get("groups") or []), metric=st.get("lastMetricValue"),
                      waiting=waiting, running=running)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)
