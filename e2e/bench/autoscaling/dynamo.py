"""NVIDIA Dynamo's planner, load-based scaling of aggregated workers, as its code does it.

Read from ai-dynamo/dynamo (the repository is too large for this machine's snapshot tool; the
files were read one by one from the code index):

* ``components/src/dynamo/planner/core/load_scaling.py`` (``_advance_load_agg``,
  ``_agg_easy_decision``): with ``optimization_target`` ``"throughput"`` (the default of
  ``config/planner_config.py``; it forces load scaling on, throughput scaling off), each
  engine's utilization is ``(scheduled decode KV + queued decode KV + queued prefill tokens) /
  max KV tokens``; **any** engine above 1.0 (``"latency"``: 0.4) asks for one more worker;
  **all** below 0.6 (0.1) for one fewer, never below ``min_endpoint`` (1) nor above the GPU
  budget (``max_gpu_budget``, set to ``maxReplicas`` here);
* ``core/state_machine.py`` (``_scaling_in_progress``): while the expected worker count is not
  the ready count, the planner observes only: **one worker at a time**, each a full start apart;
* ``config/defaults.py``: ``load_adjustment_interval`` 5 s;
* ``docs/fault_tolerance/request_rejection.md``: the frontend's busy thresholds
  (``--active-decode-blocks-threshold``) are off unless set, so the router sends every
  request on to a worker and requests queue in the engines, where the planner sees them. The
  bench models the router as join-the-shortest-queue (``gateway = None``), close to the KV
  router's least-loaded choice without prefix reuse.

The old model (Dynamo 0.2-0.3's load planner, KV > 0.9 adds a worker every 30 s) sat behind the
bench's shared gateway, which holds requests once a replica reaches KV 0.8: its KV never passed
0.9 and it never scaled. That planner also added ``0.02`` per waiting request to a worker's KV
load, which the old model left out; the current planner counts queued prompt tokens.

Deletes pods on scale-down (the Kubernetes connector sets the graph's replicas).
"""

from __future__ import annotations

__all__ = ["DYNAMO_KNOBS", "DynamoLoad"]

#: (scale-up, scale-down) utilization thresholds, from the default ("throughput") through
#: "latency" to earlier ones: the equal-attainment sweep's ladder.
DYNAMO_KNOBS = ((1.0, 0.6), (0.7, 0.35), (0.4, 0.1), (0.25, 0.06), (0.15, 0.04), (0.1, 0.02))


class DynamoLoad:
    """Dynamo's load-based planner (aggregated, easy mode), see the module.

    Args:
        b: Bounds (``min_replicas`` is ``min_endpoint``, ``max_replicas`` the GPU budget).
        up: Scale-up utilization threshold (any engine above it), default 1.0 (throughput).
        down: Scale-down threshold (every engine below it), default 0.6.
    """

    drain = False
    gateway = None
    INTERVAL = 5.0

    def __init__(self, b, up: float = 1.0, down: float = 0.6):
        self.b, self.up, self.down = b, up, down
        self.name = "Dynamo planner (load, throughput target)"
        self.knob = f"utilization up {up:g} / down {down:g}"
        self.next = 0.0

    def utilizations(self, view) -> list[float]:
        """Per reporting engine: (reserved KV + prompt tokens waiting) / KV capacity."""
        s = view.prom.latest()
        cap = view.model.kv_cache_tokens
        if s is None or not cap:
            return []
        return [p[0] + p[3] / cap for p in s.pods.values()]

    def tick(self, now: float, current: int, view) -> int | None:
        """One adjustment (every 5 s): observe only while a worker starts; else +1 / -1 / nothing."""
        if now < self.next:
            return None
        self.next = now + self.INTERVAL
        if view.pending():
            return None
        utils = self.utilizations(view)
        if not utils:
            return None
        if any(u > self.up for u in utils) and current < self.b.max_replicas:
            return current + 1
        if current > max(1, self.b.min_replicas) and all(u < self.down for u in utils):
            return current - 1
        return None
