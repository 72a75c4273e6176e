"""kubeforge.lifecycle: the TrainingJob state machine, pure.

``plan_training(job, ctx)`` composes one policy per concern (suspend, admission, spec change,
refused creates, disruption, failure, success, time limit, startup, progress) into a
:class:`TrainingPlan`; nothing here does I/O, and ``now`` comes in with the context.
"""

from kubeforge.lifecycle._accounting import backoff, checkpoint_from
from kubeforge.lifecycle._disruption import disruption_reasons
from kubeforge.lifecycle._domain import compute_domain_policy
from kubeforge.lifecycle._plan import (
    GPU_HOURS_FOLD_SECONDS, PROGRESS_WRITE_SECONDS, WAIT_MESSAGE_REFRESH_SECONDS, CreateError, RestartCause,
    StatusDraft, TrainingContext, TrainingPlan,
)
from kubeforge.lifecycle._stop import back_to_admission, fail_job
from kubeforge.lifecycle._time_limit import account_run_time, run_seconds, time_limit_policy
from kubeforge.lifecycle._training import plan_training
from kubeforge.lifecycle._volume import OUR_GATES, claim_wait
from kubeforge.objects import (  # the ComputeDomainReady and volume reasons, where they were first exported
    COMPUTE_DOMAIN_PENDING, COMPUTE_DOMAIN_READY, GANG_NOT_PLACED, IMEX_DAEMONS_NOT_READY, IMEX_DAEMONS_READY,
    VOLUME_NOT_BOUND,
)

__all__ = [
    "COMPUTE_DOMAIN_PENDING", "COMPUTE_DOMAIN_READY", "GANG_NOT_PLACED", "IMEX_DAEMONS_NOT_READY",
    "IMEX_DAEMONS_READY", "compute_domain_policy",
    "GPU_HOURS_FOLD_SECONDS", "OUR_GATES", "VOLUME_NOT_BOUND",
    "PROGRESS_WRITE_SECONDS", "WAIT_MESSAGE_REFRESH_SECONDS",
    "CreateError", "RestartCause", "StatusDraft", "claim_wait", "TrainingContext", "TrainingPlan", "back_to_admission",
    "backoff", "checkpoint_from", "disruption_reasons", "fail_job", "plan_training",
    "account_run_time", "run_seconds", "time_limit_policy",
]
