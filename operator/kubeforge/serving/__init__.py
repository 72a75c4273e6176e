"""kubeforge.serving: the pure core of InferenceService replicas.

A replica is a group of pods (one per node when the model spans several), placed as one gang by
the admission round, restarted and scaled as one, the LeaderWorkerSet way:
:func:`group_shape` says how many pods and what each holds in a pool, :func:`group_request`
what placement is asked for, and :func:`plan_serving` decides a service's next actions (the
one home of a group's life: failure, startup, drain, rollout, scale) and, given the autoscaler's
:class:`ScalingOutcome`, the whole status patch and every Event of the reconcile
(:func:`groups_status`, :func:`scaling_status`, :func:`scaling_events`). Replicas that take
minutes to start (issue 28): each group's start phases and the service's estimate
(:func:`lead_seconds`, predictive scale-up's lead time), and warm standby replicas kept asleep
(:func:`engines_to_ask`: the leaders whose ``/is_sleeping`` the runtime reads first;
:func:`standby_held`). No I/O; ``now`` is a parameter.
"""

from kubeforge.serving._plan import (
    DRAINING, GROUP_FAILED, GROUP_NOT_STARTED, GROUP_RESTARTED, ROLLING_OUT, AssumedGroup, ServingContext, ServingPlan,
    plan_serving,
)
from kubeforge.serving._standby import engines_to_ask, is_serving, is_standby, pool_standby_gpus, standby_held
from kubeforge.serving._starts import lead_seconds, nearest_rank
from kubeforge.serving._status import ScalingOutcome, group_status, groups_status, scaling_events, scaling_status
from kubeforge.admission import GroupShape, group_request, group_shape

__all__ = [
    "DRAINING", "GROUP_FAILED", "GROUP_NOT_STARTED", "GROUP_RESTARTED", "ROLLING_OUT", "AssumedGroup", "GroupShape",
    "ScalingOutcome", "ServingContext", "ServingPlan", "group_request", "group_shape", "group_status", "groups_status",
    "plan_serving", "scaling_events", "scaling_status", "engines_to_ask", "is_serving", "is_standby", "lead_seconds",
    "nearest_rank", "pool_standby_gpus", "standby_held",
]
