"""The pool table, printed only once the pool's status agrees with the pods (issue 19: a table
read from a status not yet caught up showed every domain free under a job that had just filled
one). The wait is bounded; past it the table is printed with what disagrees, and the demo
fails."""

from __future__ import annotations

import time
from typing import Any, Callable

from . import ledger, report
from .kube import wait_until

__all__ = ["PoolTables"]


class PoolTables:
    """Reads one GPUPool's status beside the pods.

    Args:
        kube: A :class:`~kubeforge._demo.kube.Kube`.
        pool: The GPUPool's name.
        nodes: The cluster's nodes (their topology labels).
        agree_seconds: Longest wait for the status to agree with the pods, s.
    """

    def __init__(self, kube: Any, pool: str, nodes: list[dict[str, Any]], agree_seconds: float):
        self.kube, self.pool, self.nodes = kube, pool, nodes
        self.agree_seconds = agree_seconds

    def levels(self, status: dict[str, Any]) -> dict[str, dict[str, str]]:
        """Per topology level of the pool's status (narrowest first): node -> domain."""
        out: dict[str, dict[str, str]] = {}
        for lv in status.get("topologyLevels") or []:
            out[lv["name"]] = {n["metadata"]["name"]: n["metadata"]["labels"][lv["nodeLabel"]]
                               for n in self.nodes if lv["nodeLabel"] in (n["metadata"].get("labels") or {})}
        return out

    def narrowest(self) -> tuple[str, dict[str, str]]:
        """(the pool's narrowest level, node -> domain there); ``nvlink`` and none before the
        pool has a status."""
        levels = self.levels(self.kube.get("gpupools", self.pool).get("status") or {})
        first = next(iter(levels), "nvlink")
        return first, levels.get(first, {})

    def show(self, emit: Callable[[str], None], expected: list[tuple[str, str, str]],
             when: str) -> tuple[list[str], str | None]:
        """Wait (bounded) until the status agrees with the pods and lists ``expected``, then
        print the table. Returns (the table's lines, the problem when it never agreed)."""
        state: dict[str, Any] = {}

        def agrees() -> bool:
            st = self.kube.get("gpupools", self.pool).get("status") or {}
            held = ledger.holdings(self.kube.pods(None, terminating=True))  # every namespace's pods count
            levels = self.levels(st)
            state.update(st=st, held=held, levels=levels, diff=ledger.disagreements(st, held, levels, expected))
            return not state["diff"]

        t = time.monotonic()
        ok = wait_until(agrees, self.agree_seconds)
        held, problem = state["held"], None
        if ok:
            emit(f"GPUs per domain, pool {self.pool} ({when}; its status agrees with the {len(held)} pods holding "
                 f"GPUs, waited {time.monotonic() - t:.1f}s):")
        else:
            emit(f"GPUs per domain, pool {self.pool} ({when}): its status still disagrees with the pods after "
                 f"{self.agree_seconds:.0f}s:")
            for d in state["diff"]:
                emit(f"  ! {d}")
            problem = f"pool status disagrees with the pods {when}: {'; '.join(state['diff'])}"
        lines = report.pool_table(self.pool, state["st"], held, state["levels"])
        for line in lines:
            emit(line)
        return lines, problem
