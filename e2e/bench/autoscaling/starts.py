"""How long a replica takes from "asked for" to Ready: the start-time model every row shares.

A start is **cold** (image pulled, libraries imported, weights downloaded and loaded, engine
initialized), **cached** (a node that ran this model before keeps what a restart needs), or a
**wake** (a standby replica, started and sleeping, resumes). The user chooses each figure
(``--cold-start``, ``--cached-start``, ``--wake``), whether nodes keep the cache
(``--start-cache``) and a spread (``--start-jitter``). The defaults, and where they come from:

* **cold 300 s**: the issue's target start (5 min). Measured: llm-d, Qwen/Qwen3-32B on vLLM on
  one H100 (``a3-highgpu-1g``), ``PodScheduled`` to serving-ready **4 min 38 s** (277.8 s:
  1.8 s image pull with GKE Image Streaming, 73 s Python and CUDA imports, 130 s model
  download and load of 61 GiB, 73 s engine init), node provisioning excluded
  (llm-d/llm-d ``guides/gke-pod-snapshots/benchmark-results/vllm-qwen3-32b-h100.md``).
  405B-class multi-node groups loading from object storage take 20-30 min (the issue's
  figure, no single measured source): ``--cold-start 1500``.
* **cached 18 s**: the same benchmark's restore of a GKE Pod Snapshot onto a node that has the
  image, ``PodScheduled`` to ``Ready`` (6 s mount and sandbox, 8 s restore, 4 s to Ready,
  ``engine.wake_up()`` included). Used only with ``--start-cache nodes``.
* **wake 3 s**: vLLM sleep mode, level 1 (weights in host RAM): the same benchmark measured
  ``engine.wake_up()`` at 2.67 s for 61.68 GiB; vLLM's blog "Zero-Reload Model Switching with
  vLLM Sleep Mode" (blog.vllm.ai, 2025-10-26) reports level-1 wakes from a fraction of a second
  (0.6B) to a few seconds (235B). Used by standby replicas (``tick`` returning ``(replicas,
  standby)``: kubeforge's ``spec.standby`` row).

The default (``--start-cache none``): every start is cold, the issue's "5 min cold / 3 s wake".
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["CACHE_MODES", "COLD_START_S", "CACHED_START_S", "StartTimes", "WAKE_S"]

COLD_START_S = 300.0
CACHED_START_S = 18.0
WAKE_S = 3.0
CACHE_MODES = ("none", "nodes")


@dataclass(frozen=True)
class StartTimes:
    """The start-time distribution of a run (see the module's text for the sources).

    Attributes:
        cold: Seconds from "asked for" to Ready on a node that never ran the model, > 0.
        cached: The same on a node that did (``cache="nodes"``), > 0.
        wake: Seconds for a sleeping standby replica to serve again, >= 0.
        cache: ``"none"``: every start is cold; ``"nodes"``: the service's nodes keep the
            cache, so a start while fewer replicas exist than the most that ever existed
            (the warm start's included) is cached.
        jitter: Each start (cold or cached) is drawn uniformly in ``[s (1 - jitter), s (1 + jitter)]``,
            in ``[0, 1)``; 0 makes every start exact.
        seed: Seeds the draws (one generator per replay, so rows see the same sequence).

    Raises:
        ValueError: A figure out of range.
    """

    cold: float = COLD_START_S
    cached: float = CACHED_START_S
    wake: float = WAKE_S
    cache: str = "none"
    jitter: float = 0.0
    seed: int = 1

    def __post_init__(self) -> None:
        if not (self.cold > 0 and self.cached > 0 and self.wake >= 0):
            raise ValueError(f"start times must be > 0 (wake >= 0): {self}")
        if self.cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {CACHE_MODES}, got {self.cache!r}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")

    def rng(self) -> random.Random:
        """A fresh generator for one replay."""
        return random.Random(self.seed)

    def cached_for(self, existing: int, high_water: int) -> bool:
        """Whether a start while ``existing`` replicas exist (``high_water`` the most ever) is cached."""
        return self.cache == "nodes" and existing < high_water

    def draw(self, cached: bool, rng: random.Random | None) -> float:
        """One start's seconds to Ready."""
        s = self.cached if cached else self.cold
        if self.jitter and rng is not None:
            s *= rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return s

    def longest(self, cached: bool = False) -> float:
        """The longest a start can take (what a planner with foresight must allow for)."""
        return (self.cached if cached else self.cold) * (1.0 + self.jitter)

    def describe(self) -> str:
        """One line: the figures and the cache mode."""
        spread = f" +-{self.jitter:.0%}" if self.jitter else ""
        cache = (f"cached {self.cached:g}s on a node that ran the model (--start-cache nodes)"
                 if self.cache == "nodes" else "every start cold (--start-cache none)")
        return f"start: cold {self.cold:g}s{spread}, {cache}, wake {self.wake:g}s (standby)"
