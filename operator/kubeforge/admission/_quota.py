"""GPU quotas, pure: what each team of a pool is guaranteed, may borrow, and holds now.

The rules (Kueue's ClusterQueue quotas with the pool as their cohort): a team (a quota entry of
``GPUPool.spec.quotas``; namespaces in none form the team ``*`` with nominal 0) is guaranteed
``nominalGPUs``. Beyond it, its jobs *borrow* idle GPUs, up to ``borrowingLimitGPUs`` when set.
Who may be preempted to honour these guarantees is :mod:`kubeforge.admission._victims`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


from kubeforge.admission._ledger import Ledger
from kubeforge.admission._pools import PoolView
from kubeforge.api import PreemptionPolicy
from kubeforge.objects import PoolRecord

UNLISTED = "*"
"""The team of namespaces that are in no quota of a pool: nominal 0, borrowing only."""


@dataclass
class QuotaBook:
    """One pool's quotas and what each team uses now (updated as a round admits).

    Attributes:
        pool: The pool's name.
        enabled: The pool has quotas.
        nominal: Team -> nominalGPUs.
        limit: Team -> borrowingLimitGPUs (None: unlimited).
        team_of: Namespace -> team.
        used: Team -> GPUs its workloads hold in the pool.
        within_quota: The pool's ``preemption.withinQuota``.
        reclaim: The pool's ``preemption.reclaimQuota``.
        min_runtime: The pool's ``preemption.minRuntimeSeconds``.
        within_while_borrowing: The pool's ``preemption.withinQuotaWhileBorrowing``.
    """

    pool: str
    enabled: bool = False
    nominal: dict[str, int] = field(default_factory=dict)
    limit: dict[str, int | None] = field(default_factory=dict)
    team_of: dict[str, str] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    within_quota: PreemptionPolicy = PreemptionPolicy.LOWER_PRIORITY
    reclaim: PreemptionPolicy = PreemptionPolicy.ANY
    min_runtime: float = 0.0
    within_while_borrowing: PreemptionPolicy = PreemptionPolicy.NEVER

    def team(self, namespace: str) -> str:
        """The team of a namespace (``*`` when in no quota; every namespace is one team
        when the pool has no quotas)."""
        if not self.enabled:
            return UNLISTED
        return self.team_of.get(namespace, UNLISTED)

    def borrowed(self, team: str, extra: int = 0) -> int:
        """GPUs ``team`` uses beyond its nominal quota (with ``extra`` more)."""
        if not self.enabled:
            return 0
        return max(0, self.used.get(team, 0) + extra - self.nominal.get(team, 0))

    def refusal(self, namespace: str, gpus: int) -> str | None:
        """Why ``gpus`` more GPUs for a job of ``namespace`` would break its team's borrowing
        limit, or None."""
        team = self.team(namespace)
        limit = self.limit.get(team) if team != UNLISTED else None
        over = self.borrowed(team, gpus)
        if not self.enabled or limit is None or over <= limit:
            return None
        return (f"quota {team}: {gpus} more GPUs would make it use {self.used.get(team, 0) + gpus} of its "
                f"{self.nominal.get(team, 0)} nominal + {limit} borrowing limit")

    def usage(self) -> list[dict[str, int | str]]:
        """``status.quotas`` of the pool."""
        if not self.enabled:
            return []
        teams = list(self.nominal) + ([UNLISTED] if self.used.get(UNLISTED) else [])
        return [{"name": t, "nominalGPUs": self.nominal.get(t, 0), "usedGPUs": self.used.get(t, 0),
                 "borrowedGPUs": self.borrowed(t)} for t in teams]


def quota_book(pool: PoolRecord, view: PoolView, ledger: Ledger) -> QuotaBook:
    """The :class:`QuotaBook` of a pool: its quotas and the GPUs each team's workloads
    (TrainingJobs, InferenceService replicas, any other pod of the namespace) hold on the pool's
    nodes, from the ledger."""
    book = QuotaBook(pool.name)
    if pool.spec is None:
        return book
    book.within_quota = pool.spec.preemption.within_quota
    book.reclaim = pool.spec.preemption.reclaim_quota
    book.min_runtime = float(pool.spec.preemption.min_runtime_seconds)
    book.within_while_borrowing = pool.spec.preemption.within_quota_while_borrowing
    book.enabled = bool(pool.spec.quotas)
    for q in pool.spec.quotas:
        book.nominal[q.name] = q.nominal_gpus
        book.limit[q.name] = q.borrowing_limit_gpus
        for ns in q.namespaces:
            book.team_of[ns] = q.name
    names = {n.name for n in view.nodes}
    for (_, ns, _), per_node in ledger.per_workload.items():
        gpus = sum(g for n, g in per_node.items() if n in names)
        if gpus:
            team = book.team(ns)
            book.used[team] = book.used.get(team, 0) + gpus
    return book
