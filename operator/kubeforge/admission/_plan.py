"""One admission decision for the whole cluster: ``plan_admission(snapshot, now) -> plan``.

Per GPU resource, one ledger; in queue order, every TrainingJob waiting for GPUs is placed
against the ledger minus everything admitted before it in the same round (Kueue's
``BestEffortFIFO``: a gang that does not fit waits and smaller ones behind it still run). The
order is Kueue's scheduler's: gangs that fit within their team's nominal quota first, then
priority, then age. A borrower served before a team's own job would be the first thing that
team reclaims: in a replay of the Alibaba trace (``e2e/bench/preemption.py``) priority-first
order cost several times the preemptions. Then InferenceService replica groups (one or more
pods, each group whole or not at all, inside one domain) get nodes from what is left: serving
never takes GPUs promised to a gang whose pods are still being created, and gangs, which waited
longer, go first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from kubeforge.admission._ledger import Ledger, build_ledgers
from kubeforge.admission._round import Admit, AdmissionRules, Preempt, Round, Wait
from kubeforge.admission._pools import PoolView, pool_view
from kubeforge.admission._snapshot import JobView, Snapshot, pool_resource
from kubeforge.admission._request import gang_request
from kubeforge.admission._reservation import Reservation
from kubeforge.api import TrainingJobSpec
from kubeforge.objects import checkpoint_claim_name, owns_checkpoint_claim
from kubeforge.lifecycle import run_seconds
from kubeforge.objects import (
    ADMITTED, BLOCKED_UNTIL_SPEC_CHANGES, CLAIM_NOT_FOUND, INVALID_SPEC, PREEMPTING, STORAGE_CLASS_NOT_FOUND,
    TERMINAL_JOB_PHASES, Key, condition, condition_time, status_time,
)
from kubeforge.admission._groups import PlaceGroup, place_groups
from kubeforge.placement import PendingGang



@dataclass
class AdmissionPlan:
    """What one round decided; the runtime applies it and nothing else.

    Attributes:
        admit: Gangs placed this round.
        wait: Gangs that wait, with the reason (a preempting gang waits too, :data:`~kubeforge.objects.PREEMPTING`).
        preempt: Gangs that preempt others, with their victims and nominated GPUs.
        groups: Serving replica groups given nodes.
        serving_waits: Services with groups that found no room, with (reason, message).
        ledgers: The ledgers after the round (every admission counted), by resource.
        ledgers_before: The ledgers the round started from (what :func:`build_ledgers` makes of
            its snapshot; ``per_workload`` shared with :attr:`ledgers`, which the round's
            admissions do not change): with :attr:`views`, what the GPUPool status is made of.
        views: The pool views the round placed against (before its own admissions).
        reservations: The reservations the round made (waiting gangs reported ``CapacityReserved``).
        quotas: Each pool's ``status.quotas`` after the round.
        backoff_ends: The earliest ``restartNotBefore`` (unix seconds) of a job that waits out
            its restart back-off and would wait for admission once it ends, or None: nothing
            wakes a round then but the time, so the loop runs one no later.
    """

    admit: list[Admit] = field(default_factory=list)
    wait: list[Wait] = field(default_factory=list)
    preempt: list[Preempt] = field(default_factory=list)
    groups: list[PlaceGroup] = field(default_factory=list)
    serving_waits: dict[Key, tuple[str, str]] = field(default_factory=dict)
    ledgers: dict[str, Ledger] = field(default_factory=dict)
    ledgers_before: dict[str, Ledger] = field(default_factory=dict)
    views: dict[str, PoolView] = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    backoff_ends: float | None = None


@dataclass
class AdmissionMemo:
    """What one round leaves to the next, so a gang that did not fit is not placed again for
    nothing: placement is monotone in free GPUs, so an answer "does not fit" stays true until
    some node of the pool has more free GPUs (or becomes usable) than when it was given.

    Owned by the caller and passed to every :func:`plan_admission`; plain data.

    Attributes:
        free: Per pool, free GPUs per usable node at the start of the last round.
        epoch: Per pool, a counter that moves when a node's free GPUs grew since the last round
            (a node added or made usable counts).
        waits: Per waiting job, ``(signature, epochs of the pools tried, the queue's signature
            for its pools, the Wait)``: the queue's signature (a StrictFIFO pool's blocker, the
            reservations made before the job's turn and what they hold,
            :meth:`~kubeforge.admission._queueing.QueueBook.signature`) must match too, since a
            gang held back by a reservation that is gone may fit although no node got freer.
        views: The last round's pool views, which the next round reuses for every pool whose
            spec and nodes did not change (:func:`~kubeforge.admission.pool_view`).
        reserved: The nodes of each reservation of the last round, by gang: a gang keeps them
            while they are still good (:mod:`kubeforge.admission._reservation`).
        indexes: Per pool, ``(GPU resource, its placement index)`` as the last round that placed
            a gang there left it: the next round carries it over
            (:meth:`~kubeforge.placement.PoolIndex.rebase`) instead of building every kind's
            candidates again over every node.
    """

    free: dict[str, dict[str, int]] = field(default_factory=dict)
    shape: dict[str, tuple] = field(default_factory=dict)
    epoch: dict[str, int] = field(default_factory=dict)
    waits: dict[Key, tuple[tuple, tuple[int, ...], tuple, "Wait"]] = field(default_factory=dict)
    views: dict[str, PoolView] = field(default_factory=dict)
    reserved: dict[Key, frozenset[str]] = field(default_factory=dict)
    indexes: dict[str, tuple] = field(default_factory=dict)

    def advance(self, views: Mapping[str, PoolView], signatures: Mapping[str, tuple] | None = None) -> None:
        """At the start of a round: move each pool's epoch when any of its nodes has more free
        GPUs than at the end of the last round (see :meth:`settle`), or the pool itself
        changed (its levels, tolerations, resource, whether it can place at all), or what a preemption there could do did
        (``signatures``: the lowest running priority, the borrowing teams)."""
        for name, view in views.items():
            cur = {n.name: n.gpus_free for n in view.nodes if n.usable}
            shape = (view.record.generation, view.levels, view.resource, view.labels_key,  # GFD may label late
                     view.unavailable, (signatures or {}).get(name))  # a DeviceClass created later
            prev = self.free.get(name)
            if prev is None or self.shape.get(name) != shape or any(g > prev.get(n, -1) for n, g in cur.items()):
                self.epoch[name] = self.epoch.get(name, 0) + 1
            self.shape[name] = shape
        for gone in set(self.free) - set(views):
            self.free.pop(gone, None)
            self.shape.pop(gone, None)
            self.epoch.pop(gone, None)

    def settle(self, views: Mapping[str, PoolView], taken: Mapping[str, Mapping[str, int]]) -> None:
        """At the end of a round: remember each pool's free GPUs after everything the round
        promised. A gang that waited did so with at least this much free; if a promise is
        abandoned before the next round (the gang suspended or deleted before its placement was
        written), the next round finds more free than this and looks again."""
        for name, view in views.items():
            promised = taken.get(view.resource, {})
            self.free[name] = {n.name: n.gpus_free - promised.get(n.name, 0) for n in view.nodes if n.usable}


def awaiting_admission(job: JobView, now: float) -> bool:
    """Whether a TrainingJob is waiting for GPUs now: a valid spec, not suspended, being
    deleted or finished, holding no placement, within its time limit (``maxRunSeconds``), past
    its backoff (``restartNotBefore``), and not blocked until its spec changes."""
    rec = job.record
    if rec.deleting or rec.spec is None or rec.spec.suspend:
        return False
    if job.phase in TERMINAL_JOB_PHASES or job.placement is not None:
        return False
    limit = rec.spec.max_run_seconds
    if limit is not None and run_seconds(job.status, now) >= limit:
        return False  # out of time: its reconcile fails it (MaxRunSecondsExceeded)
    not_before = status_time(job.status, "restartNotBefore")
    if not_before is not None and not_before > now:
        return False
    adm = condition(job.status, ADMITTED)
    if adm and adm.get("status") == "False" and adm.get("reason") in BLOCKED_UNTIL_SPEC_CHANGES \
            and adm.get("observedGeneration") == rec.generation:
        return False
    return True


def queued_since(job: JobView) -> float:
    """When the job started waiting: the last time ``Admitted`` turned False, else creation."""
    adm = condition(job.status, ADMITTED)
    if adm and adm.get("status") == "False":
        return condition_time(job.status, ADMITTED) or job.record.created
    return job.record.created


def first_pool_index(spec: TrainingJobSpec, status: Mapping) -> int:
    """Index in ``spec.pools`` where the job starts looking: it moves one pool down every
    ``failurePolicy.preemptionsBeforeFallback`` preemptions (0 counts as 1: the first
    preemption moves it), capped at the last pool."""
    per_pool = max(1, spec.failure_policy.preemptions_before_fallback)
    pre = int((status.get("restarts") or {}).get("preemptions", 0))
    return min(pre // per_pool, len(spec.pools) - 1)


def candidate_pools(job: JobView, now: float) -> list[str]:
    """The pools a waiting job may be placed in now, in order: from :func:`first_pool_index`,
    one more every ``fallbackAfterSeconds`` of waiting (0: all of them at once)."""
    spec = job.record.spec
    assert spec is not None
    start = first_pool_index(spec, job.status)
    rest = len(spec.pools) - 1 - start
    if spec.fallback_after_seconds == 0:
        extra = rest
    else:
        extra = min(rest, int(max(0.0, now - queued_since(job)) // spec.fallback_after_seconds))
    return list(spec.pools[start:start + extra + 1])


def _storage_wait(job: JobView, snapshot: Snapshot) -> Wait | None:
    """A job whose checkpoint volume can never bind waits without holding GPUs: a claim it mounts
    but does not make (``existingClaimName``, ``sharedClaim.claimName``) must exist, the class of
    a claim it makes (its own, an ephemeral local tier's) must exist. Mode ObjectStore mounts no
    claim (its Secret is checked before the pods are made: the operator keeps no Secret index)."""
    spec = job.record.spec
    assert spec is not None
    ns = job.record.namespace
    ck = spec.checkpoint
    claim = checkpoint_claim_name(job.record.name, ck)
    tier_class = ck.local_tier.storage_class_name if ck.local_tier else None
    if tier_class and tier_class not in snapshot.storage_classes:
        return Wait(job.key, STORAGE_CLASS_NOT_FOUND,
                    f"checkpoint.localTier.storageClassName: StorageClass {tier_class!r} does not exist")
    if claim is None:
        return None
    if not owns_checkpoint_claim(ck):
        if (ns, claim) not in snapshot.claims:
            field = "sharedClaim.claimName" if ck.shared_claim else "existingClaimName"
            return Wait(job.key, CLAIM_NOT_FOUND,
                        f"checkpoint.{field}: PersistentVolumeClaim {claim!r} does not exist in namespace {ns}")
        return None
    if (ns, claim) in snapshot.claims:
        return None  # made earlier (a restart): it exists, whatever its class
    if ck.storage_class_name and ck.storage_class_name not in snapshot.storage_classes:
        return Wait(job.key, STORAGE_CLASS_NOT_FOUND,
                    f"checkpoint.storageClassName: StorageClass {ck.storage_class_name!r} does not exist")
    return None


def _place_serving(snapshot: Snapshot, views: Mapping[str, PoolView], taken: dict[str, dict[str, int]],
                   holds: Mapping[str, Mapping[str, int]]):
    """Serving replica groups after the gangs (:func:`place_groups`), kept off the GPUs
    reservations hold (a replica's end is never known); what they take is added to ``taken``."""
    if not holds:
        return place_groups(snapshot, views, taken)
    seen = {r: {n: g + holds.get(r, {}).get(n, 0) for n, g in t.items()} for r, t in taken.items()}
    for r, by_node in holds.items():
        for n, g in by_node.items():
            seen.setdefault(r, {}).setdefault(n, g)
    groups, waits = place_groups(snapshot, views, seen)
    for g in groups:
        into = taken.setdefault(views[g.pool].resource, {})
        for n, gpus in g.placement.gpus_by_node.items():
            into[n] = into.get(n, 0) + gpus
    return groups, waits


def _pending_gangs(snapshot: Snapshot, now: float,
                   plan: AdmissionPlan) -> tuple[dict[str, JobView], list[PendingGang]]:
    """The gangs waiting for admission: by ``namespace/name``, and as the queue orders them.

    On the way, ``plan`` gets the earliest end of a restart back-off after which a job would
    wait for admission (``backoff_ends``), and a Wait (InvalidSpec) for every job whose pod
    template cannot be placed: one malformed template never stops admission for the cluster.
    Jobs in a terminating namespace are left out.
    """
    by_key: dict[str, JobView] = {}
    queue: list[PendingGang] = []
    for job in snapshot.jobs.values():
        if not awaiting_admission(job, now):
            ends = status_time(job.status, "restartNotBefore")
            if ends is not None and ends > now and awaiting_admission(job, ends):
                plan.backoff_ends = ends if plan.backoff_ends is None else min(plan.backoff_ends, ends)
            continue
        if job.record.namespace not in snapshot.terminating:
            k = f"{job.key[0]}/{job.key[1]}"
            try:
                request = gang_request(job.record)
            except (TypeError, ValueError, AttributeError, KeyError) as e:
                # One malformed template must never stop admission for the whole cluster: the
                # job waits (InvalidSpec, until its spec changes) and the round goes on.
                plan.wait.append(Wait(job.key, INVALID_SPEC, f"the pod template cannot be placed: {e}"))
                continue
            by_key[k] = job
            queue.append(PendingGang(k, request, job.record.spec.priority,  # type: ignore[union-attr]
                                     job.record.created))
    return by_key, queue


def _decide_gang(job: JobView, pending: PendingGang, snapshot: Snapshot, now: float, rnd: Round,
                 memo: AdmissionMemo, waits: dict[Key, tuple]) -> Admit | Wait | Preempt:
    """One gang's decision, in its turn: a checkpoint volume that can never bind waits
    (:func:`_storage_wait`); a gang that did not fit before and whose pools got no freer, with
    the same queue ahead of it (the memo), waits again without being placed; else the round
    places it (:meth:`Round.place`: admitted, a wait, or a preemption). A Wait is recorded in
    ``waits`` (the next memo) and may get a reservation (:meth:`Round.after_wait`)."""
    spec = job.record.spec
    assert spec is not None
    decision: Admit | Wait | Preempt | None = _storage_wait(job, snapshot)
    if decision is not None:
        return decision
    allowed = candidate_pools(job, now)
    sig = (job.record.uid, job.record.generation, tuple(allowed))
    epochs = tuple(memo.epoch.get(p, -1) for p in spec.pools)
    queued = rnd.queue.signature(spec.pools)
    hit = memo.waits.get(job.key)
    if hit is not None and hit[:3] == (sig, epochs, queued) and job.key not in snapshot.nominations:
        decision = hit[3]  # nothing got freer since it did not fit: it still does not
    else:
        decision = rnd.place(job, pending.request, list(spec.pools), allowed)
    if isinstance(decision, Wait):
        waits[job.key] = (sig, epochs, queued, decision)
        decision = rnd.after_wait(job, pending.request, allowed, decision, now - queued_since(job))
    return decision


def plan_admission(snapshot: Snapshot, now: float, memo: AdmissionMemo | None = None,
                   rules: AdmissionRules | None = None) -> AdmissionPlan:
    """Decide, for the whole cluster, which gangs get GPUs now and which serving replicas get a
    node; see the module docstring for the order and the rules.

    Args:
        snapshot: What exists (pools, nodes, GPU pods, jobs with their effective status and
            assumed placements, services, storage classes, claims).
        now: Unix seconds.
        memo: The previous round's :class:`AdmissionMemo` (updated in place), so gangs that
            did not fit are not placed again until a node of their pools got freer. None:
            every gang is placed from scratch (same answers, more CPU).
        rules: The queue order and victim choice (:class:`AdmissionRules`); None: kubeforge's
            own. A seam for benches and tests that compare with other rules.

    Returns:
        An :class:`AdmissionPlan`; deciding changes nothing in ``snapshot``.
    """
    plan = AdmissionPlan(ledgers=build_ledgers(snapshot))
    memo = memo if memo is not None else AdmissionMemo()
    for name, pool in snapshot.pools.items():
        plan.views[name] = pool_view(pool, snapshot.nodes, plan.ledgers[pool_resource(pool)].per_node,
                                     memo.views.get(name), snapshot.device_classes)
    memo.views = dict(plan.views)
    rules = rules if rules is not None else AdmissionRules()
    rnd = Round(snapshot, now, plan.ledgers, plan.views, rules=rules, reserved_before=memo.reserved,
                indexes_before=memo.indexes)
    taken = rnd.taken

    by_key, queue = _pending_gangs(snapshot, now, plan)
    memo.advance(plan.views, {name: rnd.preemption_signature(name) for name in plan.views})
    waits: dict[Key, tuple] = {}
    for pending in rules.entry_order(queue, lambda p: rnd.borrows(by_key[p.key], p.request.gpus)):
        job = by_key[pending.key]
        decision = _decide_gang(job, pending, snapshot, now, rnd, memo, waits)
        if isinstance(decision, Preempt):
            plan.preempt.append(decision)
            names = ", ".join(f"{v.key[0]}/{v.key[1]}" for v in decision.victims)
            decision = Wait(job.key, PREEMPTING, f"preempting {names} in pool {decision.pool}; "
                            "admitted once their GPUs are free")
        (plan.admit if isinstance(decision, Admit) else plan.wait).append(decision)  # type: ignore[arg-type]
    memo.waits = waits
    memo.settle(plan.views, taken)
    memo.indexes = {name: got for name, got in {**memo.indexes, **rnd.indexes}.items() if name in plan.views}

    plan.reservations = [r for rs in rnd.queue.reservations.values() for r in rs]
    memo.reserved = {r.key: frozenset(r.placement.gpus_by_node) for r in plan.reservations}
    groups, serving_waits = _place_serving(snapshot, plan.views, taken, rnd.queue.holds())
    plan.groups.extend(groups)
    plan.serving_waits.update(serving_waits)

    plan.ledgers_before = {r: Ledger(r, dict(led.per_node), led.per_workload) for r, led in plan.ledgers.items()}
    for resource, extra in taken.items():
        led = plan.ledgers[resource]
        for node, gpus in extra.items():
            led.per_node[node] = led.per_node.get(node, 0) + gpus
    plan.quotas = {name: book.usage() for name, book in rnd.books.items()}
    return plan
