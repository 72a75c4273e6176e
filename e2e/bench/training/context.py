"""What one run of the training bench carries from step to step."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.bench.lib.cluster import Cluster
from e2e.bench.training.workload import Job

__all__ = ["Run"]


@dataclass
class Run:
    """One bench run: its flags, cluster, jobs and what the phases measured.

    Attributes:
        args: The parsed flags.
        c: The cluster.
        fleet_name: The fleet's ``kubeforge.io/sim-fleet`` label.
        capacity: GPUs of the fleet.
        jobs: The gangs, in submission order.
        phases: The phases to run, in order.
        api: The kubernetes ApiClient (once the cluster is up).
        node_clique: Node -> its NVLink domain.
        node_block: Node -> its IB block.
        results: Phase -> (its Phase, its summary).
        costs: Phase -> its Cost.
        extra: Everything else the report prints (operator figures, errors, log digest).
        op_log_offset: Where this run's lines start in the operator's log.
    """

    args: Any
    c: Cluster
    fleet_name: str
    capacity: int
    jobs: list[Job]
    phases: list[str]
    api: Any = None
    node_clique: dict[str, str] = field(default_factory=dict)
    node_block: dict[str, str] = field(default_factory=dict)
    results: dict[str, tuple] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    op_log_offset: int = 0

    @property
    def op_log(self) -> Path:
        """The operator's log (``<cluster dir>/operator.log``)."""
        return self.c.dir / "operator.log"

    @property
    def jobmap(self) -> dict[str, Job]:
        """The jobs by name."""
        return {j.name: j for j in self.jobs}

    @property
    def n_pods(self) -> int:
        """Pods of every job."""
        return sum(j.replicas for j in self.jobs)
