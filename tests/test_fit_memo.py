"""The round's "no room for this request" memo (issue 31, scale): within one admission round a
gang whose request found no room is not placed again for a later gang of the same request while
nothing in the pool's GPUs was promised or released and the same reservations hold against it.
Proof that it changes nothing: every round here is decided twice, with the memo and without it
(``AdmissionRules(memo_fits=False)``: every gang placed from scratch), and the whole plans must be
equal (admissions, waits with their reasons and messages, preemptions, reservations, quotas,
serving, ledgers); the count of placements shows the memo did skip some."""

from __future__ import annotations

import random

import pytest

import kubeforge.admission._round as round_module
from e2e.bench.lib.replay import T0
from e2e.bench.lib.traces import ALIBABA_PODS, default_trace
from e2e.bench.scale.workload import fleet as scale_fleet, gangs, job_views, pool as scale_pool, snapshot as scale_snapshot
from kubeforge.admission import AdmissionMemo, AdmissionRules, QueueingStrategy, plan_admission
from kubeforge.api import GPUPoolSpec
from kubeforge.objects import record_from_k8s
from records import CLIQUE, NOW, iso, mk_job, mk_node, mk_service, placed, pool_body, snapshot

REQUIRED = {"mode": "Required", "level": "nvlink"}


def digest(plan) -> dict:
    """Everything a plan decided, comparable with ``==``."""
    return {
        "admit": plan.admit, "wait": plan.wait, "preempt": plan.preempt, "reservations": plan.reservations,
        "groups": plan.groups, "serving_waits": plan.serving_waits, "backoff_ends": plan.backoff_ends,
        "quotas": plan.quotas, "ledgers": {r: dict(led.per_node) for r, led in plan.ledgers.items()},
    }


@pytest.fixture
def fits(monkeypatch) -> list[int]:
    """Counts the round's placements of a gang (the plain fit and the nominated one): its calls of
    ``place_gang`` and of a pool's ``PoolIndex.place`` (the same answer, see
    ``tests/test_placement_index.py``; it calls ``place_gang`` of its own module, not counted twice)."""
    count = [0]
    real, real_indexed = round_module.place_gang, round_module.PoolIndex.place

    def counting(*a, **kw):
        count[0] += 1
        return real(*a, **kw)

    def counting_indexed(self, request):
        count[0] += 1
        return real_indexed(self, request)

    monkeypatch.setattr(round_module, "place_gang", counting)
    monkeypatch.setattr(round_module.PoolIndex, "place", counting_indexed)
    return count


def both(fits, snap, now, memo_on=None, memo_off=None, queueing=None):
    """The round with the memo and without; returns (digest with, digest without, fits with, fits without)."""
    fits[0] = 0
    on = plan_admission(snap, now, memo_on, AdmissionRules(queueing=queueing))
    n_on = fits[0]
    fits[0] = 0
    off = plan_admission(snap, now, memo_off, AdmissionRules(queueing=queueing, memo_fits=False))
    return digest(on), digest(off), n_on, fits[0]


def pool(max_reservations: int = 2):
    body = pool_body("p", levels=[("nvlink", CLIQUE)])
    body["spec"]["reservations"] = {"maxReservations": max_reservations}
    rec = record_from_k8s(GPUPoolSpec, body)
    assert rec.spec is not None, rec.spec_error
    return rec


def running(name, node, *, eta=None, limit=None, priority=0, gpus=8, ns="team-a"):
    st = {"phase": "Running", "attempt": 0, "placement": placed("p", [node], admitted_at=NOW - 3600)}
    if eta is not None:
        st["progress"] = {"step": 10, "eta": iso(eta), "lastReportTime": iso(NOW - 30)}
    extra = {"maxRunSeconds": limit} if limit is not None else {}
    return mk_job(name, gpus=gpus, status=st, created=NOW - 3700, priority=priority, ns=ns, **extra)


def crowded_queue():
    """Four NVLink domains of two 8-GPU nodes, six of eight nodes busy (one half) (ends known for some, one
    low-priority job a high-priority gang can preempt), and 60 waiting gangs of four requests, at
    three priorities and with and without time limits, so that the round admits, preempts,
    reserves and backfills between runs of same-request gangs that do not fit."""
    nodes = [mk_node(f"c{c}-{i}", labels={CLIQUE: f"c{c}"}) for c in range(4) for i in range(2)]
    busy = [running("r0", "c0-0", eta=NOW + 900), running("r1", "c0-1", eta=NOW + 2400),
            running("r2", "c1-0", limit=6000), running("r3", "c1-1", priority=-5),
            running("r4", "c2-0", gpus=4, eta=NOW + 300), running("r5", "c3-1", eta=NOW + 1200)]
    shapes = [dict(replicas=2, gpus=8, topology=REQUIRED), dict(replicas=1, gpus=8),
              dict(replicas=1, gpus=4), dict(replicas=3, gpus=4)]
    waiting = []
    for i in range(60):
        extra = {"maxRunSeconds": 200 + 100 * (i % 4)} if i % 3 == 0 else {}
        waiting.append(mk_job(f"w{i:02d}", created=NOW - 5000 + 10 * i, priority=10 if i == 2 else i % 3 - 6,
                              ns=("team-a", "team-b")[i % 2], **shapes[i % 4 if i > 8 else 0], **extra))
    return nodes, busy + waiting


@pytest.mark.parametrize("queueing", [None, QueueingStrategy.BEST_EFFORT_FIFO, QueueingStrategy.STRICT_FIFO,
                                      QueueingStrategy.BACKFILL])
def test_a_crowded_round_decides_the_same_with_and_without_the_memo(fits, queueing):
    nodes, jobs = crowded_queue()
    svc = mk_service("s", gpus=4, status={"desiredReplicas": 2})
    on, off, n_on, n_off = both(fits, snapshot([pool()], nodes, jobs=jobs, services=[svc]), NOW, queueing=queueing)
    assert on == off
    assert len(on["wait"]) > 40 and (queueing == QueueingStrategy.STRICT_FIFO or on["preempt"])
    if queueing != QueueingStrategy.STRICT_FIFO:  # StrictFIFO places nothing behind its first blocker
        assert on["admit"]
        assert n_on < n_off  # the memo answered some gangs without placing them


def test_the_memo_is_forgotten_when_the_round_frees_or_promises_gpus(fits):
    """A gang nominated earlier uses its nomination (a release of what it was promised, then its
    placement): gangs after it are placed against what is free then, as without the memo."""
    nodes, jobs = crowded_queue()
    first = plan_admission(snapshot([pool()], nodes, jobs=jobs), NOW)
    assert first.preempt
    snap = snapshot([pool()], nodes, jobs=jobs)
    for p in first.preempt:
        snap.nominations[p.key] = (p.pool, dict(p.gpus_by_node))
    on, off, n_on, n_off = both(fits, snap, NOW + 1)
    assert on == off and n_on < n_off


@pytest.mark.parametrize("nodes, jobs", [(32, 400), (24, 600)])
def test_the_scale_bench_rounds_decide_the_same_with_and_without_the_memo(fits, nodes, jobs):
    """The scale bench's cold, written and release rounds (trace gangs, 16 namespaces, QoS
    priorities) at a small size, each chain with its own cross-round memo."""
    batch = gangs(default_trace(ALIBABA_PODS), jobs, seed=7)
    views = job_views(batch)
    fleet_nodes, pool_rec = scale_fleet(nodes), scale_pool()
    memo_on, memo_off = AdmissionMemo(), AdmissionMemo()
    on, off, n_on, n_off = both(fits, scale_snapshot(fleet_nodes, pool_rec, views), T0, memo_on, memo_off)
    assert on == off and n_on < n_off
    by_key = {(g.namespace, g.name): g for g in batch}
    placed_nodes = {a.key: a.placement.nodes for a in on["admit"]}
    views.update(job_views([by_key[k] for k in placed_nodes], placed_nodes))
    on, off, n_on, n_off = both(fits, scale_snapshot(fleet_nodes, pool_rec, views), T0 + 5, memo_on, memo_off)
    assert on == off and n_on <= n_off
    done = next(iter(placed_nodes))
    views.update(job_views([by_key[done]], finished=frozenset([done])))
    on, off, n_on, n_off = both(fits, scale_snapshot(fleet_nodes, pool_rec, views), T0 + 15, memo_on, memo_off)
    assert on == off and n_on <= n_off


@pytest.mark.parametrize("seed", range(8))
def test_random_crowded_rounds_decide_the_same_with_and_without_the_memo(fits, seed):
    """Random queues over the same fleet: requests drawn from a few shapes (so that many gangs
    share one), random priorities, teams, ages, time limits and avoided nodes, each strategy."""
    rng = random.Random(seed)
    nodes, jobs = crowded_queue()
    busy = [j for j in jobs if j.name.startswith("r")]
    shapes = [dict(replicas=2, gpus=8, topology=REQUIRED), dict(replicas=1, gpus=8), dict(replicas=1, gpus=4),
              dict(replicas=3, gpus=4), dict(replicas=2, gpus=2, topology={"mode": "Preferred", "level": "nvlink"})]
    waiting = []
    for i in range(50):
        extra = {"maxRunSeconds": rng.choice([120, 600, 1800, 7200])} if rng.random() < 0.4 else {}
        waiting.append(mk_job(f"w{i:02d}", created=NOW - rng.randint(10, 5000), priority=rng.choice([-6, -5, 0, 10]),
                              ns=rng.choice(["team-a", "team-b"]), **rng.choice(shapes), **extra))
    snap = snapshot([pool(rng.choice([1, 2, 4]))], nodes, jobs=busy + waiting)
    queueing = rng.choice([None, QueueingStrategy.BEST_EFFORT_FIFO, QueueingStrategy.STRICT_FIFO, QueueingStrategy.BACKFILL])
    on, off, n_on, n_off = both(fits, snap, NOW, queueing=queueing)
    assert on == off and n_on <= n_off
