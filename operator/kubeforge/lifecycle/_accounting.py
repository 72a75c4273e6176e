"""GPU-hours, cost and checkpoints: what the job has used and what it can resume from."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from kubeforge.lifecycle._plan import GPU_HOURS_FOLD_SECONDS, StatusDraft, TrainingContext, TrainingPlan
from kubeforge.objects import CHECKPOINT_REPORTED, NORMAL, Pod


def fold_running(d: StatusDraft, ctx: TrainingContext, *, end: bool) -> None:
    """Add the running segment since ``runningSince`` to ``gpuHours`` and ``cost``.

    GPU-hours of a segment = seconds / 3600 x replicas x the GPUs one rank holds
    (``ctx.rank_gpus``: gpusPerReplica plus what sidecars and init containers request, as the
    ledger books it; gpusPerReplica when unknown). Cost is the sum over
    segments of each segment's GPU-hours at the price of the pool it ran in (a job that
    falls back from spot to on-demand pays each pool's own price). ``end`` closes the segment
    (the gang stopped); otherwise a new one starts now.
    """
    since = d.time("runningSince")
    if since is None:
        return
    pl = d.placement
    replicas = len(pl.nodes) if pl else d.spec.replicas
    hours = max(0.0, ctx.now - since) / 3600.0 * replicas * (ctx.rank_gpus or d.spec.gpus_per_replica)
    d.set(gpuHours=round(float(d.get("gpuHours") or 0.0) + hours, 6),
          runningSince=None if end else d.stamp(ctx.now))
    price = ctx.pool_prices.get(pl.pool) if pl else None
    if price is not None:
        d.set(cost=round(float(d.get("cost") or 0.0) + hours * price, 4))


def maybe_fold(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> None:
    """Fold a long running segment into the totals, at most every GPU_HOURS_FOLD_SECONDS, and
    ask for the reconcile that folds the next one (no resync is relied on)."""
    if "runningSince" in d.patch:  # this very write starts (or ends) a segment
        if d.patch["runningSince"]:
            plan.requeue(GPU_HOURS_FOLD_SECONDS)
        return
    since = d.time("runningSince")
    if since is None:
        return
    if ctx.now - since >= GPU_HOURS_FOLD_SECONDS:
        fold_running(d, ctx, end=False)
        plan.requeue(GPU_HOURS_FOLD_SECONDS)
    else:
        plan.requeue(since + GPU_HOURS_FOLD_SECONDS - ctx.now)


def checkpoint_from(pods: Sequence[Pod]) -> dict[str, Any] | None:
    """The newest checkpoint reported in the pods' termination messages.

    The workload writes one JSON line ``{"step": N, "path": "...", "time": "..."}`` as the
    last line of its termination message (see examples/workload); anything else is ignored.
    """
    best = None
    for p in pods:
        if not p.message:
            continue
        try:
            data = json.loads(p.message.strip().splitlines()[-1])
        except (ValueError, IndexError):
            continue
        if not isinstance(data, dict) or "step" not in data:
            continue
        try:
            ck = {"step": int(data["step"]), "path": str(data.get("path", ""))[:4096], "time": str(data.get("time", ""))}
        except (TypeError, ValueError):
            continue
        if ck["step"] < 0:
            continue
        if not ck["time"]:
            ck.pop("time")
        if best is None or ck["step"] > best["step"]:
            best = ck
    return best


def report_checkpoint(d: StatusDraft, ctx: TrainingContext, plan: TrainingPlan) -> None:
    """Record a newer checkpoint than ``status.lastCheckpoint``, with an Event."""
    ck = checkpoint_from(ctx.pods)
    last: Mapping[str, Any] = d.get("lastCheckpoint") or {}
    if ck and ck["step"] > int(last.get("step", -1) if last.get("step") is not None else -1):
        d.set(lastCheckpoint=ck)
        plan.events.append((NORMAL, CHECKPOINT_REPORTED, f"checkpoint step {ck['step']} at {ck['path']}"))


def backoff(base: float, cap: float, count: int) -> float:
    """Seconds to wait before retry ``count`` (1 first): ``base * 2**(count-1)``, capped, as
    Job's backoffLimit and Kueue's requeuing backoff do."""
    return min(cap, base * (2 ** max(0, count - 1)))
