"""A multi-node NVLink gang's ComputeDomain: which one it needs, when the old one goes, and the
``ComputeDomainReady`` condition.

- A gang placed on several nodes of NVLink cliques in a DRA pool (``TrainingContext.domain_cliques``)
  needs the ComputeDomain named for those cliques
  (:func:`kubeforge.objects.compute_domain_name`): created before its pods.
- While the gang waits to be placed again (a restart), its domains are kept: a restart in the same
  cliques reuses its domain and the IMEX daemons come back at once.
- A domain the gang no longer needs (it moved, finished, was suspended or deleted) is released once
  no pod that may hold its channel is left (after a move: the pods of earlier attempts; else every
  pod of the job): kubeforge's finalizer is removed first, then the domain is deleted; the driver's
  controller then removes its channel template.
- ``ComputeDomainReady`` follows the domain's IMEX daemons on the placement's nodes
  (:func:`kubeforge.accelerators.nvidia.domain_ready`: NVIDIA's driver sets the global
  ``status.status`` only when ``numNodes`` is not 0). Until every node's daemon is Ready the
  workers wait in ContainerCreating, and the condition says so.
"""

from __future__ import annotations

from kubeforge.accelerators import nvidia
from kubeforge.lifecycle._plan import StatusDraft, TrainingContext, TrainingPlan
from kubeforge.objects import (
    COMPUTE_DOMAIN_PENDING, COMPUTE_DOMAIN_READY, GANG_NOT_PLACED, IMEX_DAEMONS_NOT_READY, IMEX_DAEMONS_READY, PENDING,
    RESTARTING, compute_domain_name,
)

DOMAIN_RECHECK_SECONDS = 5.0
"""A gang whose domain is not Ready is looked at again at least this often (the domains' watch
wakes it sooner)."""


def _set(d: StatusDraft, status: bool, reason: str, message: str) -> None:
    old = d.current_condition(COMPUTE_DOMAIN_READY)
    if old and old.get("status") == ("True" if status else "False") and old.get("reason") == reason \
            and old.get("message") == message:
        return
    d.condition(COMPUTE_DOMAIN_READY, status, reason, message)


def compute_domain_policy(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> None:
    """Decide the gang's ComputeDomain (see the module docstring); runs after every other policy,
    on the placement they leave."""
    pl = d.placement
    wanted = compute_domain_name(d.job.name, ctx.domain_cliques) if pl is not None and ctx.domain_cliques else None
    waiting = pl is None and d.phase in (PENDING, RESTARTING) and not d.spec.suspend and not d.job.deleting
    stale = [cd.name for cd in ctx.compute_domains if cd.name != wanted and not waiting]
    if stale:
        # Pods that may still hold a stale domain's channel: with no domain wanted, any pod left;
        # else those of earlier attempts (the current attempt's pods are made for ``wanted``:
        # the domain is a function of the placement, fixed for an attempt).
        holders = [p for p in ctx.pods if not p.terminal and (wanted is None or p.attempt != d.attempt)]
        if holders:
            plan.requeue(2.0)  # released once they are gone
        else:
            plan.release_compute_domains = sorted(stale)
    if wanted is None:
        if pl is None and d.current_condition(COMPUTE_DOMAIN_READY):
            _set(d, False, GANG_NOT_PLACED, "the gang holds no placement")
        return
    cd = next((c for c in ctx.compute_domains if c.name == wanted and not c.deleting), None)
    if cd is None:
        plan.compute_domain = (wanted, tuple(ctx.domain_cliques or ()))
        _set(d, False, COMPUTE_DOMAIN_PENDING, f"creating ComputeDomain {wanted} for cliques "
             f"{', '.join(ctx.domain_cliques or ())}; the workers wait in ContainerCreating until their nodes' "
             "IMEX daemons are up")
        plan.requeue(DOMAIN_RECHECK_SECONDS)
        return
    nodes = sorted(set(pl.nodes))  # type: ignore[union-attr]
    if nvidia.domain_ready(cd.status, cd.ready_nodes, nodes):
        _set(d, True, IMEX_DAEMONS_READY, f"ComputeDomain {wanted}: the IMEX daemons of all {len(nodes)} nodes are Ready")
        return
    ready = [n for n in nodes if n in cd.ready_nodes]
    _set(d, False, IMEX_DAEMONS_NOT_READY, f"ComputeDomain {wanted}: {len(ready)} of {len(nodes)} nodes' IMEX "
         "daemons Ready; the workers wait in ContainerCreating until their node's daemon is up")
    plan.requeue(DOMAIN_RECHECK_SECONDS)
