"""GPU quotas and checkpoint-aware preemption against the real control plane.

Two teams (namespaces) share one pool of 32 GPUs (2 NVLink domains x 2 nodes x 8): each is
guaranteed 16. Every path the pool's ``preemption`` policy allows is exercised: borrowing idle
quota, the borrowing limit, reclaiming borrowed GPUs, priority preemption within a team with
the victim that loses the least work; victims restart from their checkpoint, counted as
preemptions, never failures; status and Events name who preempted whom and why.
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import apply, condition, events_for, get_json, job_status, new_namespace, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster


YOUNG_RUNS_UNPROTECTED = {"minRuntimeSeconds": 0}
"""These tests preempt gangs placed seconds before; the pool's default protects a run for 30 min."""


@pytest.fixture
def other_namespace(cluster):
    yield from new_namespace(cluster)


def quotas(team_a: str, team_b: str, borrow_a: int | None = None) -> dict:
    a = {"name": "team-a", "namespaces": [team_a], "nominalGPUs": 16}
    if borrow_a is not None:
        a["borrowingLimitGPUs"] = borrow_a
    return {"quotas": [a, {"name": "team-b", "namespaces": [team_b], "nominalGPUs": 16}],
            "preemption": YOUNG_RUNS_UNPROTECTED}


def job(name: str, ns: str, pool: str, **spec) -> dict:
    return training_job(name, ns, replicas=2, gpus=8, mode="Required", level="nvlink", pools=[pool], **spec)


def running(cluster, ns: str, name: str) -> bool:
    return len(running_pods(cluster, ns, name)) == 2 and job_status(cluster, ns, name).get("phase") == "Running"


def pool_quota(cluster, pool: str, team: str) -> dict:
    st = get_json(cluster, "gpupool", pool).get("status") or {}
    return next((q for q in st.get("quotas") or [] if q["name"] == team), {})


def test_a_team_borrows_idle_quota_and_the_owner_reclaims_it(cluster, namespace, other_namespace, fleet, capsys):
    pool = namespace
    fleet(cliques=2, nodes=2, pool_spec=quotas(namespace, other_namespace))
    apply(cluster, job("a1", namespace, pool))
    wait_for(lambda: running(cluster, namespace, "a1"), timeout=60, what="team A's first job")
    apply(cluster, job("a2", namespace, pool))  # beyond team A's 16: borrows team B's idle GPUs
    wait_for(lambda: running(cluster, namespace, "a2"), timeout=60, what="team A's job on borrowed GPUs")
    wait_for(lambda: pool_quota(cluster, pool, "team-a").get("borrowedGPUs") == 16, timeout=30,
             what="status.quotas showing 16 GPUs borrowed")

    apply(cluster, job("b1", other_namespace, pool))  # within team B's nominal 16: reclaims them
    wait_for(lambda: running(cluster, other_namespace, "b1"), timeout=90, what="team B's job after reclaiming its quota")
    victims = [n for n in ("a1", "a2") if (condition(job_status(cluster, namespace, n), "Preempted") or {}).get("status") == "True"]
    assert len(victims) == 1, victims  # the fewest victims: one gang frees one NVLink domain
    st = job_status(cluster, namespace, victims[0])
    pre = condition(st, "Preempted")
    assert pre["reason"] == "QuotaReclaimed" and f"{other_namespace}/b1" in pre["message"], pre
    assert st["restarts"] == {"failures": 0, "preemptions": 1, "startupFailures": 0}
    assert any(e["reason"] == "Preempted" and f"{other_namespace}/b1" in e["message"]
               for e in events_for(cluster, namespace, victims[0]))
    assert any(e["reason"] == "Preempting" for e in events_for(cluster, other_namespace, "b1"))
    # No cycle: the victim waits for room; it does not take the GPUs back from team B.
    time.sleep(5)
    assert running(cluster, other_namespace, "b1")
    vst = job_status(cluster, namespace, victims[0])
    assert vst["phase"] in ("Restarting", "Pending") and not vst.get("placement")
    assert condition(vst, "Admitted")["reason"] in ("WaitingForCapacity", "Preempted"), condition(vst, "Admitted")
    wait_for(lambda: pool_quota(cluster, pool, "team-b").get("usedGPUs") == 16
             and pool_quota(cluster, pool, "team-a").get("borrowedGPUs") == 0, timeout=30, what="quota usage after reclaim")
    with capsys.disabled():
        print(f"\n[quota] reclaim: {victims[0]} preempted by {other_namespace}/b1 ({pre['message']})")


def test_borrowing_limit_makes_a_job_wait_with_quota_exceeded(cluster, namespace, other_namespace, fleet):
    pool = namespace
    fleet(cliques=2, nodes=2, pool_spec=quotas(namespace, other_namespace, borrow_a=0))
    apply(cluster, job("a1", namespace, pool))
    wait_for(lambda: running(cluster, namespace, "a1"), timeout=60)
    apply(cluster, job("a2", namespace, pool))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "a2")) and condition(s, "Admitted") and s, timeout=30)
    adm = condition(st, "Admitted")
    assert adm["reason"] == "QuotaExceeded" and "team-a" in adm["message"], adm
    assert not st.get("placement")


def test_higher_priority_preempts_the_gang_that_loses_the_least_work(cluster, namespace, fleet, capsys):
    pool = namespace
    fleet(cliques=2, nodes=2, pool_spec={"preemption": YOUNG_RUNS_UNPROTECTED})  # no quotas: one team, priority preemption
    # "ckpt" starts first and checkpoints a second before the preemption; "no-ckpt" starts
    # later and never checkpoints. Preempting "ckpt" loses the least work although it is the
    # older job (a newest-first policy would pick "no-ckpt").
    for name in ("ckpt", "no-ckpt"):
        apply(cluster, job(name, namespace, pool, priority=0))
        wait_for(lambda: running(cluster, namespace, name), timeout=60, what=f"{name} running")
        time.sleep(4)
    ck = {"step": 100, "path": "/checkpoints/ckpt", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))}
    cluster.kubectl("patch", "trainingjob", "ckpt", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"lastCheckpoint": ck}}))  # as the operator records a reported one
    apply(cluster, job("urgent", namespace, pool, priority=100))
    wait_for(lambda: running(cluster, namespace, "urgent"), timeout=90, what="the high-priority job after preempting")
    victim = job_status(cluster, namespace, "ckpt")
    pre = condition(victim, "Preempted")
    assert pre and pre["status"] == "True" and pre["reason"] == "PreemptedByHigherPriority", pre
    assert f"{namespace}/urgent" in pre["message"] and "priority 100" in pre["message"]
    assert victim["restarts"]["preemptions"] == 1 and victim["restarts"]["failures"] == 0
    assert (condition(job_status(cluster, namespace, "no-ckpt"), "Preempted") or {}).get("status") != "True"
    assert running(cluster, namespace, "no-ckpt")
    # The victim restarts from its checkpoint when room returns: here, once "urgent" is gone.
    cluster.kubectl("delete", "trainingjob", "urgent", "-n", namespace)
    wait_for(lambda: running(cluster, namespace, "ckpt"), timeout=90, what="the victim running again")
    env = {e["name"]: e.get("value") for e in running_pods(cluster, namespace, "ckpt")[0]["spec"]["containers"][0]["env"]}
    assert env["KUBEFORGE_LAST_CHECKPOINT_STEP"] == "100" and env["KUBEFORGE_RESTART_ATTEMPT"] == "1"
    with capsys.disabled():
        print(f"\n[quota] priority: ckpt preempted ({pre['message']})")


def test_no_preemption_when_the_pool_says_never(cluster, namespace, fleet):
    pool = namespace
    fleet(cliques=1, nodes=2, pool_spec={"preemption": {"withinQuota": "Never", "reclaimQuota": "Never"}})
    apply(cluster, job("low", namespace, pool, priority=0))
    wait_for(lambda: running(cluster, namespace, "low"), timeout=60)
    apply(cluster, job("high", namespace, pool, priority=100))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "high")) and condition(s, "Admitted") and s, timeout=30)
    assert condition(st, "Admitted")["reason"] == "WaitingForCapacity"
    time.sleep(3)
    assert running(cluster, namespace, "low")
