"""Pure lifecycle decisions: what a TrainingJob needs next, from what exists and ``now``."""

from kubeforge.lifecycle.training import (
    NodeView,
    PodView,
    TrainingPlan,
    current_pool,
    interruption_reason,
    plan_training,
    pod_view,
    restart_attempt,
)

__all__ = [
    "NodeView", "PodView", "TrainingPlan", "current_pool",
    "interruption_reason", "plan_training", "pod_view", "restart_attempt",
]
