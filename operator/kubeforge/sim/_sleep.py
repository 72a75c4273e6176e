"""vLLM's sleep mode as the model-server simulator plays it (warm standby, issue 28): each
replica's engine sleeps and wakes on ``POST /sleep?level=1`` and ``POST /wake_up`` and says so on
``GET /is_sleeping``, taking a modelled time to move its weights. Pure: the clock is passed in.

The times (:class:`WakeModel`): a level-1 wake copies the weights back from host memory, about
**3 s for 64 GiB** by default. Measured: llm-d's Qwen3-32B benchmark on one H100 timed
``engine.wake_up()`` at 2.67 s for 61.68 GiB (llm-d/llm-d
``guides/gke-pod-snapshots/benchmark-results``); vLLM's blog "Zero-Reload Model Switching with vLLM
Sleep Mode" reports level-1 wakes from a fraction of a second for small models to a few seconds
for the largest. Going to sleep moves the same bytes the other way: modelled at the same rate
(an assumption; no published figure is used). The rate scales with the weights' size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DEFAULT_WAKE_SECONDS_PER_64_GIB", "EngineSleep", "WakeModel"]

DEFAULT_WAKE_SECONDS_PER_64_GIB = 3.0
"""Seconds to wake (or put to sleep) 64 GiB of weights at level 1 (see the module)."""


@dataclass(frozen=True)
class WakeModel:
    """How long a simulated engine takes to sleep and wake.

    Attributes:
        weights_gib: The model's weights, GiB (> 0); 64 by default.
        seconds_per_64_gib: Seconds to move 64 GiB between GPU and host memory (>= 0).
    """

    weights_gib: float = 64.0
    seconds_per_64_gib: float = DEFAULT_WAKE_SECONDS_PER_64_GIB

    @property
    def wake_seconds(self) -> float:
        """Seconds from ``POST /wake_up`` to awake."""
        return self.weights_gib / 64.0 * self.seconds_per_64_gib

    @property
    def sleep_seconds(self) -> float:
        """Seconds from ``POST /sleep`` to asleep (the same bytes, the other way)."""
        return self.wake_seconds


@dataclass
class _Engine:
    asleep: bool = False  # the state once the last transition ends
    until: float = 0.0  # when it ends
    before: bool = False  # the state before it


@dataclass
class EngineSleep:
    """Every simulated engine's sleep state, by ``(namespace, pod)``; an engine never told
    anything is awake (as vLLM's after its start).

    Attributes:
        model: The times.
        calls: ``(what, namespace, pod, time)`` of every sleep and wake asked, in order.
    """

    model: WakeModel = field(default_factory=WakeModel)
    calls: list[tuple[str, str, str, float]] = field(default_factory=list)
    _engines: dict[tuple[str, str], _Engine] = field(default_factory=dict)

    def is_sleeping(self, namespace: str, pod: str, now: float) -> bool:
        """``GET /is_sleeping``: asleep once a sleep ended, and until a wake ended."""
        e = self._engines.get((namespace, pod))
        if e is None:
            return False
        return e.asleep if now >= e.until else e.before

    def _move(self, what: str, namespace: str, pod: str, now: float, asleep: bool, seconds: float) -> float:
        before = self.is_sleeping(namespace, pod, now)
        self.calls.append((what, namespace, pod, now))
        e = self._engines.setdefault((namespace, pod), _Engine())
        e.before, e.asleep = before, asleep
        e.until = now + (seconds if before != asleep else 0.0)
        return e.until - now

    def sleep(self, namespace: str, pod: str, now: float) -> float:
        """``POST /sleep?level=1``; returns the seconds until it is asleep (0 when it already is)."""
        return self._move("sleep", namespace, pod, now, True, self.model.sleep_seconds)

    def wake(self, namespace: str, pod: str, now: float) -> float:
        """``POST /wake_up``; returns the seconds until it is awake (0 when it already is)."""
        return self._move("wake", namespace, pod, now, False, self.model.wake_seconds)

    def forget(self, namespace: str, pod: str) -> None:
        """The pod is gone (its successor of the same name starts awake)."""
        self._engines.pop((namespace, pod), None)
