"""kubeforge.lifecycle: the TrainingJob state machine, pure.

``plan_training(job, ctx)`` composes one policy per concern (suspend, admission, spec change,
refused creates, disruption, failure, success, startup, progress) into a
:class:`TrainingPlan`; nothing here does I/O, and ``now`` comes in with the context.
"""

from kubeforge.lifecycle._accounting import backoff, checkpoint_from
from kubeforge.lifecycle._disruption import disruption_reasons
from kubeforge.lifecycle._domain import (
    COMPUTE_DOMAIN_PENDING, COMPUTE_DOMAIN_READY, GANG_NOT_PLACED, IMEX_DAEMONS_NOT_READY, IMEX_DAEMONS_READY,
    compute_domain_policy,
)
from kubeforge.lifecycle._outcome import KUBELET_REJECTIONS, rejected_by_kubelet
from kubeforge.lifecycle._plan import (
    GPU_HOURS_FOLD_SECONDS, SCHEDULE_TIMEOUT, WAIT_MESSAGE_REFRESH_SECONDS, CreateError, StatusDraft,
    TrainingContext, TrainingPlan,
)
from kubeforge.lifecycle._startup import own_constraint_cause
from kubeforge.lifecycle._training import plan_training
from kubeforge.lifecycle._volume import VOLUME_NOT_BOUND, claim_wait

__all__ = [
    "COMPUTE_DOMAIN_PENDING", "COMPUTE_DOMAIN_READY", "GANG_NOT_PLACED", "IMEX_DAEMONS_NOT_READY",
    "IMEX_DAEMONS_READY", "compute_domain_policy",
    "GPU_HOURS_FOLD_SECONDS", "KUBELET_REJECTIONS", "SCHEDULE_TIMEOUT", "VOLUME_NOT_BOUND",
    "WAIT_MESSAGE_REFRESH_SECONDS",
    "CreateError", "StatusDraft", "claim_wait", "TrainingContext", "TrainingPlan", "backoff", "checkpoint_from",
    "disruption_reasons", "own_constraint_cause", "plan_training", "rejected_by_kubelet",
]
