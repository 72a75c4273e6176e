"""GPU quotas of a pool (teams and their nominal GPUs) and when a job may preempt others."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

from pydantic import ConfigDict, Field, field_validator

from ._base import DNS_LABEL_PATTERN, MAX_LABEL_LENGTH, KubeModel


class PreemptionPolicy(str, Enum):
    """PreemptionPolicy says which running jobs a waiting job may preempt."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class GPUQuota(KubeModel):
    """GPUQuota is one team's share of the pool (Kueue's ClusterQueue quota, with the pool as
    its cohort): the GPUs its namespaces are guaranteed, and how many more they may borrow
    while other teams leave theirs idle. Borrowed GPUs can be reclaimed: a job of a team still
    within its nominal quota may preempt jobs of teams that borrow (see spec.preemption)."""

    name: str = Field(
        min_length=1,
        max_length=MAX_LABEL_LENGTH,
        pattern=DNS_LABEL_PATTERN,
        description="name of the quota (a team), unique in the pool.",
    )
    namespaces: list[Annotated[str, Field(min_length=1, max_length=MAX_LABEL_LENGTH, pattern=DNS_LABEL_PATTERN)]] = Field(
        min_length=1,
        max_length=64,
        description="namespaces whose jobs use this quota. A namespace belongs to at most one "
        "quota of a pool; jobs of namespaces in no quota may only borrow (nominal 0).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    nominal_gpus: int = Field(
        alias="nominalGPUs",
        ge=0,
        le=1_000_000,
        description="nominalGPUs is the GPUs of the pool the team is guaranteed: its jobs are "
        "admitted up to this many GPUs in all, and may reclaim them from teams that borrow.",
    )
    borrowing_limit_gpus: Optional[int] = Field(
        default=None,
        alias="borrowingLimitGPUs",
        ge=0,
        le=1_000_000,
        description="borrowingLimitGPUs caps the GPUs the team may use beyond nominalGPUs when "
        "others leave theirs idle (0: no borrowing; empty: up to the pool's free GPUs). "
        "Borrowed GPUs may be reclaimed by their owners' jobs.",
    )


class PoolPreemption(KubeModel):
    """PoolPreemption says when a waiting TrainingJob may stop running ones to get GPUs.
    Victims are chosen to lose the least work (the age of their last checkpoint times their
    GPUs; taken cheapest GPUs first, i.e. the freshest checkpoint, then the lowest priority,
    then the newest), get SIGTERM with their grace period so
    they checkpoint, restart from their checkpoint when room returns, and count as
    preemptions (never as failures). A preemption never leads to the victim preempting back."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "self.withinQuota != 'Any'",
        "message": "preemption.withinQuota is LowerPriority or Never",
    }, {
        "rule": "self.withinQuotaWhileBorrowing != 'Any'",
        "message": "preemption.withinQuotaWhileBorrowing is LowerPriority or Never",
    }]})

    within_quota: PreemptionPolicy = Field(
        default=PreemptionPolicy.LOWER_PRIORITY,
        description="withinQuota is LowerPriority (a job may preempt lower-priority jobs of its "
        "own quota, or of the whole pool when the pool has no quotas) or Never. (Kueue: "
        "withinClusterQueue.)",
    )

    within_quota_while_borrowing: PreemptionPolicy = Field(
        default=PreemptionPolicy.NEVER,
        description="withinQuotaWhileBorrowing is Never or LowerPriority: whether withinQuota "
        "preemption is allowed while the preemptor's team uses more GPUs than its nominal quota "
        "(it borrows). Never: a borrowing team does not stop its own jobs, since the GPUs it would "
        "hand from one of its jobs to another are borrowed and may be reclaimed at any moment; in "
        "particular a job stopped by a quota reclaim does not come back by preempting a "
        "lower-priority teammate (a cascade: two preemptions for one reclaim). LowerPriority: "
        "withinQuota applies whatever the team uses (Kueue's withinClusterQueue). A pool without "
        "quotas is one team that never borrows.",
    )

    @field_validator("within_quota", "within_quota_while_borrowing")
    @classmethod
    def _no_any_within(cls, value: PreemptionPolicy, info) -> PreemptionPolicy:
        if value == PreemptionPolicy.ANY:
            name = "withinQuota" if info.field_name == "within_quota" else "withinQuotaWhileBorrowing"
            raise ValueError(f"preemption.{name} is LowerPriority or Never")
        return value
    min_runtime_seconds: int = Field(
        default=1800,
        alias="minRuntimeSeconds",
        ge=0,
        le=604800,
        description="minRuntimeSeconds protects a running gang from preemption by another job "
        "(priority or quota reclaim) until its current run is this old, counted from when its "
        "placement was made (status.placement.admittedAt). Spot reclaims and node failures are "
        "not preemptions by a job and ignore it. Set by the pool's owner rather than each job, so "
        "nobody exempts their own job from priority (Kueue KEP-9876 asks the same of a "
        "ClusterQueue's preemption policy). The default, 30 minutes, lets a run reach a first "
        "checkpoint at a common interval before another job can stop it: without it, a job just "
        "placed looks like the cheapest victim (little work since its placement) and, in an "
        "overloaded pool, is preempted again and again (measured in "
        "e2e/README-preemption-bench.md). Set it near your jobs' checkpoint interval. 0: no protection.",
    )
    reclaim_quota: PreemptionPolicy = Field(
        default=PreemptionPolicy.ANY,
        description="reclaimQuota is Any (a job that stays within its nominal quota may preempt "
        "jobs of any priority of quotas that borrow beyond theirs), LowerPriority (only "
        "lower-priority ones) or Never. (Kueue: reclaimWithinCohort.)",
    )


class QuotaUsage(KubeModel):
    """QuotaUsage is what one team uses of its quota."""

    name: str = Field(max_length=MAX_LABEL_LENGTH, description="name of the quota.")
    nominal_gpus: int = Field(default=0, ge=0, alias="nominalGPUs", description="nominalGPUs from the spec.")
    used_gpus: int = Field(default=0, ge=0, alias="usedGPUs",
                           description="usedGPUs is the GPUs the team's workloads hold in the pool.")
    borrowed_gpus: int = Field(default=0, ge=0, alias="borrowedGPUs",
                               description="borrowedGPUs is usedGPUs beyond nominalGPUs (reclaimable).")
