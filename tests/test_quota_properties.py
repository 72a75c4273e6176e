"""Property tests of GPU quotas and preemption in the pure core (kubeforge.admission).

Random teams, quotas, borrowing limits, running gangs (priorities, checkpoint ages) and one
waiting gang; ``plan_admission`` decides. Whatever it decides:

- a quota is never exceeded except by borrowing, and borrowing never beyond its limit;
- every victim is allowed by the rules (same team: strictly lower priority; other team: it
  borrows and the preemptor stays within its nominal quota);
- the victims are the fewest the placement needs (dropping any one, the gang no longer fits);
- no cycle: once the preemptor runs on its nominated GPUs, no victim, waiting in its turn,
  would pick the preemptor as a victim.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from examples import examples
from hypothesis import strategies as st

from kubeforge.admission import (
    HIGHER_PRIORITY, QUOTA_RECLAIM, UNLISTED, build_ledger, gang_request, plan_admission, pool_view, quota_book,
)
from kubeforge.placement import Placement, place_gang

import builders as b
from records import GPU, NOW, iso, mk_job, mk_node, placed, snapshot

TEAMS = {"a": "team-a", "b": "team-b"}  # namespace "c" is in no quota


def pool_record(nominal_a: int, nominal_b: int, limit_a, limit_b, within: str, reclaim: str):
    quotas = []
    for ns, nominal, limit in (("a", nominal_a, limit_a), ("b", nominal_b, limit_b)):
        q = {"name": TEAMS[ns], "namespaces": [ns], "nominalGPUs": nominal}
        if limit is not None:
            q["borrowingLimitGPUs"] = limit
        quotas.append(q)
    # The builder gives each pool a fresh uid: specs are parsed once per (uid, generation), as the operator does.
    return b.GPUPool("p").quotas(quotas).preemption({"withinQuota": within, "reclaimQuota": reclaim}).record()


job_shape = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3), st.sampled_from([(1, 4), (1, 8), (2, 4), (2, 8)]),
                      st.integers(0, 7200))


def running_state(quiet, shapes, nodes):
    """Admit the shapes one by one in ``quiet`` (the pool without preemption), as Running jobs
    with their placement and last checkpoint; those that do not fit are dropped."""
    jobs = []
    for i, (ns, prio, (replicas, gpus), ckpt_age) in enumerate(shapes):
        cand = mk_job(f"r{i}", ns=ns, replicas=replicas, gpus=gpus, priority=prio, created=NOW - 10000 + i)
        plan = plan_admission(snapshot([quiet], nodes, jobs=jobs + [cand]), NOW)
        got = [a for a in plan.admit if a.key == cand.key]
        if not got:
            continue
        st_ = {"phase": "Running", "attempt": 0,
               "placement": placed("p", got[0].placement.nodes, admitted_at=NOW - 9000),
               "lastCheckpoint": {"step": 1, "path": "/c", "time": iso(NOW - ckpt_age)}}
        jobs.append(mk_job(f"r{i}", ns=ns, replicas=replicas, gpus=gpus, priority=prio, created=NOW - 10000 + i, status=st_))
    return jobs


def used(pool, nodes, jobs):
    snap = snapshot([pool], nodes, jobs=jobs)
    led = build_ledger(snap, GPU)
    return quota_book(pool, pool_view(pool, snap.nodes, led.per_node), led)


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nominal_a=st.integers(0, 32), nominal_b=st.integers(0, 32),
       limit_a=st.sampled_from([None, 0, 8, 16]), limit_b=st.sampled_from([None, 0, 8, 16]),
       within=st.sampled_from(["LowerPriority", "Never"]), reclaim=st.sampled_from(["Any", "LowerPriority", "Never"]),
       shapes=st.lists(job_shape, min_size=1, max_size=8), waiting=job_shape)
def test_quotas_and_preemption_rules_hold(nominal_a, nominal_b, limit_a, limit_b, within, reclaim, shapes, waiting):
    pool = pool_record(nominal_a, nominal_b, limit_a, limit_b, within, reclaim)
    nodes = [mk_node(f"n{i}", 8) for i in range(4)]
    jobs = running_state(pool_record(nominal_a, nominal_b, limit_a, limit_b, "Never", "Never"), shapes, nodes)
    ns, prio, (replicas, gpus), _ = waiting
    wj = mk_job("w", ns=ns, replicas=replicas, gpus=gpus, priority=prio, created=NOW)
    before = used(pool, nodes, jobs)
    plan = plan_admission(snapshot([pool], nodes, jobs=jobs + [wj]), NOW)
    team = before.team(ns)
    need = replicas * gpus

    # Quotas: an admission never takes a team past nominal + borrowing limit.
    for a in plan.admit:
        limit = before.limit.get(team) if team != UNLISTED else None
        if limit is not None:
            assert before.used.get(team, 0) + need <= before.nominal.get(team, 0) + limit, (before.used, team, need)

    for pre in plan.preempt:
        assert pre.key == wj.key and not plan.admit
        by_key = {j.key: j for j in jobs}
        for v in pre.victims:
            victim = by_key[v.key]
            vteam = before.team(victim.namespace)
            if v.reason == HIGHER_PRIORITY:
                assert vteam == team and victim.spec.priority < prio and within == "LowerPriority"
            else:
                assert v.reason == QUOTA_RECLAIM and vteam != team and reclaim != "Never"
                assert before.used.get(team, 0) + need <= before.nominal.get(team, 0), "reclaim while borrowing"
                assert before.borrowed(vteam) > 0, "reclaimed from a team that does not borrow"
                if reclaim == "LowerPriority":
                    assert victim.spec.priority < prio

        # The fewest: without any one victim, the gang does not fit.
        view = pool_view(pool, {n.name: n for n in nodes}, build_ledger(snapshot([pool], nodes, jobs=jobs), GPU).per_node)
        req = gang_request(wj)
        for drop in pre.victims:
            freed: dict[str, int] = {}
            for v in pre.victims:
                if v is not drop:
                    for n, g in v.gpus_by_node.items():
                        freed[n] = freed.get(n, 0) + g
            trial = [replace(n, gpus_allocated=max(0, n.gpus_allocated - freed.get(n.name, 0))) for n in view.nodes]
            assert not isinstance(place_gang(req, trial, view.levels), Placement), f"{drop.key} was not needed"

        # No cycle: the preemptor runs on its nominated GPUs, the victims wait; none of them
        # would pick the preemptor.
        nodes_of = [n for n, g in pre.gpus_by_node.items() for _ in range(g // gpus)]
        winner = mk_job("w", ns=ns, replicas=replicas, gpus=gpus, priority=prio, created=NOW,
                        status={"phase": "Running", "attempt": 0, "placement": placed("p", nodes_of, admitted_at=NOW),
                                "lastCheckpoint": {"step": 1, "path": "/c", "time": iso(NOW)}})
        gone = {v.key for v in pre.victims}
        after = [j for j in jobs if j.key not in gone] + [winner]
        for v in pre.victims:
            old = by_key[v.key]
            again = mk_job(old.name, ns=old.namespace, replicas=old.spec.replicas, gpus=old.spec.gpus_per_replica,
                           priority=old.spec.priority, created=old.created + 1)
            nxt = plan_admission(snapshot([pool], nodes, jobs=after + [again]), NOW + 1)
            for p2 in nxt.preempt:
                assert wj.key not in {x.key for x in p2.victims}, f"{v.key} would preempt its preemptor back"


def test_a_job_admitted_in_a_round_is_never_a_victim_in_the_same_round():
    """Regression: a job admitted earlier in a round was a victim candidate for a later job of
    the round (without the placement it was just given: choose_victims raised AttributeError
    and the whole round was lost). It is never a victim in the round that admitted it: the
    later job waits, and preempts next round if the rules still allow it."""
    pool = pool_record(8, 8, None, None, "LowerPriority", "Any")
    nodes = [mk_node(f"n{i}", 8) for i in range(2)]
    small = mk_job("small", ns="a", replicas=1, gpus=8, priority=0, created=NOW - 20)  # within nominal
    big = mk_job("big", ns="a", replicas=2, gpus=8, priority=5, created=NOW - 10)  # would borrow
    plan = plan_admission(snapshot([pool], nodes, jobs=[small, big]), NOW)
    assert [a.key for a in plan.admit] == [small.key]
    assert not plan.preempt
    assert [w.key for w in plan.wait] == [big.key]


def test_gangs_within_nominal_quota_go_before_borrowers_of_higher_priority():
    """Kueue's order: a gang that fits within its team's nominal quota is admitted before a
    higher-priority gang of another team that would borrow; served first, the borrower would be
    the first thing the other team reclaims (a preemption for nothing)."""
    pool = pool_record(8, 8, None, None, "LowerPriority", "Any")
    nodes = [mk_node(f"n{i}", 8) for i in range(2)]
    running = mk_job("r", ns="a", replicas=1, gpus=8, priority=9, created=NOW - 100,
                     status={"phase": "Running", "attempt": 0, "placement": placed("p", ("n0",), admitted_at=NOW - 90)})
    borrower = mk_job("more", ns="a", replicas=1, gpus=8, priority=9, created=NOW - 20)
    own = mk_job("own", ns="b", replicas=1, gpus=8, priority=0, created=NOW - 10)
    plan = plan_admission(snapshot([pool], nodes, jobs=[running, borrower, own]), NOW)
    assert [a.key for a in plan.admit] == [own.key]
    assert not plan.preempt and [w.key for w in plan.wait] == [borrower.key]
