"""kubeforge.admission: the pure core of admission and GPU accounting.

A :class:`Snapshot` of what exists, one :class:`Ledger` per GPU resource
(:func:`build_ledger`: placements are assumed until pods show them, as Kueue's cache does),
the per-pool placement view (:func:`pool_view`), and one decision for the whole cluster,
:func:`plan_admission`, for gangs and serving replicas alike, with checkpoint-aware preemption
and reservations with backfill for the gangs that wait (:class:`Reservation`). No I/O; ``now``
is a parameter.
"""

from kubeforge.admission._caches import MAX_WARM_AHEAD, NodeCachePlan, forecast_wants, placed_wants, plan_node_caches
from kubeforge.admission._ledger import Ledger, WorkloadKey, build_ledger, build_ledgers
from kubeforge.admission._plan import (
    BLOCKED_UNTIL_SPEC_CHANGES, Admit, AdmissionMemo, AdmissionPlan, PlaceGroup, Wait, awaiting_admission, candidate_pools,
    first_pool_index, gang_request, plan_admission, queued_since,
)
from kubeforge.admission._ordering import (
    WorkLost, entry_order, queue_order, scale_down_order, service_order, standby_removal_order, victim_order,
    wake_order,
)
from kubeforge.admission._pools import PoolView, groups_that_fit, placeable, pool_members, pool_view
from kubeforge.admission._request import (
    GroupShape, clique_level, group_request, group_shape, multi_node, nvlink_request, own_anti_affinity,
)
from kubeforge.admission._quota import UNLISTED, QuotaBook, quota_book
from kubeforge.admission._running import RunningGangs
from kubeforge.admission._victims import (
    HIGHER_PRIORITY, QUOTA_RECLAIM, LostWorkBasis, Victim, checkpoint_age, checkpoint_basis, choose_victims,
    eligible_victims, lost_work, preemption_message, run_time,
)
from kubeforge.admission._round import AdmissionRules, Preempt
from kubeforge.admission._reservation import (
    QueueingStrategy, Reservation, ending_jobs, expected_end, own_end, pool_strategy, reservation_message, reserve,
)
from kubeforge.admission._reservation_preemption import (
    FOR_RESERVATION, domain_nodes, hold_all, may_preempt, preempt_after, reservation_candidates, reservation_victims,
    stoppable_jobs,
)
from kubeforge.objects import TERMINAL_JOB_PHASES
from kubeforge.admission._status import pool_status
from kubeforge.admission._snapshot import (
    AssumedGroup, JobView, Snapshot, is_dra_pool, pool_capacity_type, pool_resource, same_gpus,
)

__all__ = [
    "MAX_WARM_AHEAD", "NodeCachePlan", "forecast_wants", "placed_wants", "plan_node_caches",
    "groups_that_fit", "entry_order", "queue_order", "scale_down_order", "service_order", "standby_removal_order",
    "victim_order", "wake_order",
    "clique_level", "multi_node", "nvlink_request", "is_dra_pool", "same_gpus",
    "AssumedGroup", "GroupShape", "group_request", "group_shape", "own_anti_affinity",
    "HIGHER_PRIORITY", "QUOTA_RECLAIM", "UNLISTED", "Preempt", "QuotaBook", "Victim", "choose_victims", "lost_work", "preemption_message",
    "AdmissionRules", "LostWorkBasis", "WorkLost", "checkpoint_age", "checkpoint_basis", "eligible_victims", "run_time",
    "quota_book", "RunningGangs",
    "QueueingStrategy", "Reservation", "ending_jobs", "expected_end", "own_end", "pool_strategy", "reservation_message",
    "reserve", "FOR_RESERVATION", "domain_nodes", "hold_all", "may_preempt", "preempt_after", "reservation_candidates",
    "reservation_victims", "stoppable_jobs",
    "BLOCKED_UNTIL_SPEC_CHANGES", "TERMINAL_JOB_PHASES", "Admit", "AdmissionMemo", "AdmissionPlan", "JobView", "Ledger",
    "PoolView", "PlaceGroup", "Snapshot", "Wait", "WorkloadKey", "awaiting_admission", "build_ledger",
    "build_ledgers", "candidate_pools", "first_pool_index", "gang_request", "plan_admission",
    "placeable", "pool_capacity_type", "pool_members", "pool_resource", "pool_status", "pool_view", "queued_since",
]
