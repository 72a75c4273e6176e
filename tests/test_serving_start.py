"""Replicas that take minutes to start, the pure plan (issue 28, items 1 and 3): start phases read
from the pods and frozen once Ready, the service's estimate over its last starts and wakes in
status (an operator restart loses none), and warm standby: standby groups told to sleep once
Ready and kept out of the Service, a scale-up that wakes one first and refills the standby count,
their GPUs counted, a standby group's rollout and scale-down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubeforge.admission import AssumedGroup, GroupShape
from kubeforge.objects import GroupStart, Node, PlacementRecord, Pod, PodStart, group_start, pod_from_k8s, rfc3339
from kubeforge.serving import ServingContext, engines_to_ask, lead_seconds, nearest_rank, plan_serving
from records import NOW, NS, mk_service

TH = "hash-1"
SHAPE = GroupShape(pool="p", pods=1, gpus=2, held=2)
ADMITTED = NOW - 300


def grp(index=0, *, attempt=0, phase="Ready", node=None, **extra):
    return {"index": index, "attempt": attempt, "phase": phase, "pool": "p", "nodes": [node or f"n{index}"],
            "gpusPerPod": 2, "templateHash": TH, "admittedAt": rfc3339(ADMITTED), **extra}


def svc(*groups, standby=0, desired=None, start_time=None):
    st: dict = {"groups": list(groups)}
    if desired is not None:
        st["desiredReplicas"] = desired
    if start_time is not None:
        st["startTime"] = start_time
    return mk_service("llm", gpus=2, status=st, **({"standby": {"replicas": standby}} if standby else {}))


def pod(group=0, *, attempt=0, ready=True, phase="Running", start=None):
    return Pod(namespace=NS, name=f"llm-{group}-0-{attempt}", service="llm", group=group, worker=0, attempt=attempt,
               phase=phase, ready=ready, node=f"n{group}", assigned=f"n{group}", ip=f"10.0.0.{group}",
               start=start if start is not None else PodStart(ADMITTED + 2, ADMITTED + 2, ADMITTED + 40, ADMITTED + 280))


def plan(rec, pods=(), *, desired=1, sleeping=None, assumed=None, now=NOW, th=TH):
    return plan_serving(rec, ServingContext(now=now, desired=desired, pods=list(pods), shape=SHAPE, template_hash=th,
                                            sleeping=sleeping or {}, assumed=assumed or {},
                                            nodes={f"n{i}": Node(f"n{i}") for i in range(6)}))


def by_index(p):
    return {g["index"]: g for g in p.status["groups"]}


def reasons(p):
    return [e[1] for e in p.events]


def placed(index, node):
    return AssumedGroup(index, PlacementRecord("p", (node,), None, None, "fits"), 2)


# --------------------------------------------------------------------------- start phases


def test_a_pods_start_phases_come_from_its_conditions_and_container_states():
    body = {"metadata": {"name": "llm-0-0-0", "namespace": NS, "labels": {"kubeforge.io/group-index": "0"}},
            "spec": {"containers": [{"name": "vllm"}, {"name": "proxy"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:01:30Z"}],
                "containerStatuses": [{"name": "vllm", "state": {"running": {"startedAt": "2026-01-01T00:01:30Z"}}},
                                      {"name": "proxy", "state": {"running": {"startedAt": "2026-01-01T00:01:10Z"}}}]}}
    t0 = 1767225600.0
    s = pod_from_k8s(body).start
    assert s == PodStart(t0 + 2, t0 + 60, t0 + 90, None)  # not Ready yet; every container started at 90 s
    body["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    assert pod_from_k8s(body).start.started is None  # one container not running: not started
    del body["metadata"]["labels"]
    assert pod_from_k8s(body).start is None  # read for InferenceService pods only


def test_a_groups_phase_is_its_last_pods_and_absent_until_every_pod_reached_it():
    a = PodStart(100.0, 101.0, 150.0, 400.0)
    b = PodStart(103.0, 104.0, 170.0, None)
    assert group_start(99.0, [a, b], 2) == GroupStart(4.0, 5.0, 71.0, None)
    assert group_start(99.0, [a], 2) is None  # one pod of two: no phase reached by every pod
    assert group_start(120.0, [a], 1).scheduled == 0.0  # never below zero (clocks a second apart)
    assert GroupStart.from_status(GroupStart(1.0, 2.0, 3.0, 4.0).to_status()) == GroupStart(1.0, 2.0, 3.0, 4.0)


def test_start_phases_show_in_status_while_starting_and_are_frozen_once_ready():
    starting = pod(ready=False, start=PodStart(ADMITTED + 2, ADMITTED + 2, ADMITTED + 40, None))
    p = plan(svc(grp(phase="Starting")), [starting])
    assert by_index(p)[0]["start"] == {"scheduledSeconds": 2.0, "initializedSeconds": 2.0, "startedSeconds": 40.0}
    p = plan(svc(grp(phase="Starting")), [pod()])
    g = by_index(p)[0]
    assert g["phase"] == "Ready" and g["start"]["readySeconds"] == 280.0
    # Ready: a later readiness flap (a new Ready time) does not rewrite the start
    again = plan(svc(g), [pod(start=PodStart(ADMITTED + 2, ADMITTED + 2, ADMITTED + 40, ADMITTED + 900))])
    assert by_index(again)[0]["start"]["readySeconds"] == 280.0


def test_each_start_adds_a_sample_once_and_the_estimate_survives_in_status():
    p = plan(svc(grp(phase="Starting")), [pod()])
    assert p.status["startTime"]["cold"] == {"samples": [280.0], "p50Seconds": 280.0, "p90Seconds": 280.0}
    again = plan(svc(*p.status["groups"], start_time=p.status["startTime"]), [pod()])  # Ready already: no new sample
    assert again.status["startTime"]["cold"]["samples"] == [280.0]
    many = {"cold": {"samples": [float(s) for s in range(100, 120)]}, "wake": {"samples": [3.0]}}
    p = plan(svc(grp(phase="Starting"), start_time=many), [pod()])
    cold = p.status["startTime"]["cold"]
    assert len(cold["samples"]) == 20 and cold["samples"][-1] == 280.0 and cold["samples"][0] == 101.0  # the last 20
    assert cold["p90Seconds"] == nearest_rank(cold["samples"], 0.9) == 118.0  # the 18th of 20
    assert lead_seconds(p.status) == 118.0 and lead_seconds({}) is None


def test_a_recreated_group_starts_its_phases_again():
    p = plan(svc(grp(start={"readySeconds": 280.0})), [pod(phase="Failed", ready=False)])
    g = by_index(p)[0]
    assert g["attempt"] == 1 and "start" not in g


# --------------------------------------------------------------------------- warm standby


def test_a_service_with_standby_places_desired_plus_standby_and_the_extra_one_is_standby():
    rec = svc(grp(0), standby=1, desired=1)
    p = plan(rec, [pod(0)], assumed={1: placed(1, "n1")})
    g = by_index(p)
    assert g[0].get("standby") is None and g[1]["standby"] == "Pending" and g[1]["phase"] == "Starting"
    assert p.written_assumed == [1] and not p.release


def test_a_ready_standby_group_is_told_to_sleep_and_stays_out_of_the_service():
    rec = svc(grp(0), grp(1, standby="Pending"), standby=1, desired=1)
    p = plan(rec, [pod(0), pod(1)], sleeping={1: False})
    assert [x.name for x in p.sleep] == ["llm-1-0-0"] and p.wake == []
    assert [e[0] for e in p.endpoints] == ["llm-0-0-0"]  # only the serving group routes
    g = by_index(p)[1]
    assert g["phase"] == "Standby" and g["standby"] == "Pending"
    assert p.status["readyReplicas"] == 1 and p.status["replicas"] == 2
    assert p.status["standbyReplicas"] == 0 and p.status["standbyGPUs"] == 2  # held already, not asleep yet


def test_asleep_is_confirmed_by_the_engine_and_counted():
    rec = svc(grp(0), grp(1, standby="Pending"), standby=1, desired=1)
    p = plan(rec, [pod(0), pod(1)], sleeping={1: True})
    g = by_index(p)[1]
    assert g["standby"] == "Asleep" and g["standbySince"] == rfc3339(NOW) and p.sleep == []
    assert p.status["standbyReplicas"] == 1 and p.status["standbyGPUs"] == 2 and "StandbyAsleep" in reasons(p)
    # an engine found awake again (restarted) is put back to sleep
    p2 = plan(svc(grp(0), g, standby=1, desired=1), [pod(0), pod(1)], sleeping={1: False})
    assert by_index(p2)[1]["standby"] == "Pending" and [x.name for x in p2.sleep] == ["llm-1-0-0"]


def test_a_scale_up_wakes_a_standby_first_and_refills_the_standby_count():
    asleep = grp(1, standby="Asleep", standbySince=rfc3339(NOW - 600))
    rec = svc(grp(0), asleep, standby=1, desired=1)
    p = plan(rec, [pod(0), pod(1)], desired=2, sleeping={1: True}, assumed={2: placed(2, "n2")})
    g = by_index(p)
    assert g[1]["standby"] == "Waking" and [x.name for x in p.wake] == ["llm-1-0-0"]
    assert "WakingStandby" in reasons(p)
    assert [e[0] for e in p.endpoints] == ["llm-0-0-0"]  # not routed until awake
    assert g[2]["standby"] == "Pending"  # the new group refills the standby count, no cold start for the scale-up
    assert [(c[0].index, c[1]) for c in p.create] == [(2, 0)]
    # the engine is awake: the group serves and its wake time is a sample
    woken = plan(svc(*p.status["groups"], standby=1, desired=2), [pod(0), pod(1), pod(2, ready=False)], desired=2,
                 sleeping={1: False}, now=NOW + 3)
    g = by_index(woken)
    assert g[1].get("standby") is None and g[1]["phase"] == "Ready"
    assert sorted(e[0] for e in woken.endpoints) == ["llm-0-0-0", "llm-1-0-0"]
    assert woken.status["startTime"]["wake"]["samples"] == [3.0] and "StandbyWoken" in reasons(woken)
    assert woken.status["readyReplicas"] == 2


def test_a_scale_up_takes_a_starting_standby_group_as_a_serving_one():
    rec = svc(grp(0), grp(1, phase="Starting", standby="Pending"), standby=1, desired=1)
    p = plan(rec, [pod(0), pod(1, ready=False)], desired=2)
    assert by_index(p)[1].get("standby") is None and p.wake == []


def test_no_group_is_created_for_a_scale_up_a_standby_covers():
    rec = svc(grp(0), grp(1, standby="Asleep", standbySince=rfc3339(NOW - 60)), standby=1, desired=1)
    p = plan(rec, [pod(0), pod(1)], desired=2, sleeping={1: True})
    assert p.create == [] and len(p.status["groups"]) == 2  # admission places the refill: desired + standby = 3


def test_standby_replicas_beyond_the_count_go_at_once_and_a_scale_down_drains_serving_ones():
    rec = svc(grp(0), grp(1), grp(2, standby="Asleep"), grp(3, phase="Starting", standby="Pending"), standby=1,
              desired=2)
    p = plan(rec, [pod(0), pod(1), pod(2), pod(3, ready=False)], desired=1, sleeping={2: True})
    g = by_index(p)
    assert 3 not in g and "llm-3-0-0" in p.delete  # the starting extra standby goes first, at once
    assert g[2]["standby"] == "Asleep"
    assert sum(1 for x in g.values() if x["phase"] == "Draining") == 1  # one serving group drains


def test_a_stale_standby_group_is_recreated_at_once_and_does_not_hold_back_the_rollout():
    rec = svc(grp(0), grp(1, standby="Asleep"), standby=1, desired=1)
    p = plan(rec, [pod(0), pod(1)], sleeping={1: True}, th="hash-2")
    g = by_index(p)
    assert g[1]["attempt"] == 1 and g[1]["standby"] == "Pending" and g[1]["phase"] == "Starting"
    assert "llm-1-0-0" in p.delete and "RollingOut" in reasons(p)


def test_a_lost_waking_group_comes_back_as_a_serving_one():
    rec = svc(grp(0), grp(1, standby="Waking", standbySince=rfc3339(NOW - 2)), standby=1, desired=2)
    p = plan(rec, [pod(0), pod(1, phase="Failed", ready=False)], desired=2)
    g = by_index(p)[1]
    assert g["attempt"] == 1 and g.get("standby") is None


def test_the_runtime_asks_the_ready_standby_leaders_only():
    from kubeforge.objects import groups_of
    rec = svc(grp(0), grp(1, standby="Asleep"), grp(2, phase="Starting", standby="Pending"), standby=2, desired=1)
    asks = engines_to_ask(groups_of(rec.status), [pod(0), pod(1), pod(2, ready=False)])
    assert list(asks) == [1] and asks[1].name == "llm-1-0-0"


def test_standby_needs_vllm():
    from kubeforge.api import InferenceServiceSpec
    with pytest.raises(ValueError, match="standby.replicas needs engine vllm"):
        InferenceServiceSpec.model_validate({"pools": ["p"], "engine": "sglang", "standby": {"replicas": 1},
                                             "template": {"spec": {"containers": [{"name": "s", "image": "s"}]}}})


def test_group_status_round_trips_its_start_and_standby_state():
    from kubeforge.objects import groups_of
    rec = svc(grp(0, standby="Asleep", standbySince=rfc3339(NOW - 5), start={"readySeconds": 280.0}), standby=1,
              desired=0)
    (g,) = groups_of(rec.status)
    assert (g.phase, g.standby, g.standby_since, g.start) == ("Ready", "Asleep", NOW - 5, GroupStart(ready=280.0))
    assert replace(g, standby=None).standby is None


def test_a_service_with_standby_runs_its_leaders_with_vllms_sleep_mode():
    from kubeforge.builders.serving import build_group_pod, serving_hash
    from kubeforge.objects import GroupRecord

    with_standby, without = mk_service("s", gpus=1, standby={"replicas": 1}), mk_service("s", gpus=1)
    g = GroupRecord(index=0, nodes=("n0",), pool="p")
    main = build_group_pod(with_standby, group=g, worker=0, pods=1, gpus_per_pod=1, template_hash="h")["spec"]["containers"][0]
    assert main["args"][-1] == "--enable-sleep-mode"
    assert {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in main["env"]
    plain = build_group_pod(without, group=g, worker=0, pods=1, gpus_per_pod=1, template_hash="h")["spec"]["containers"][0]
    assert "--enable-sleep-mode" not in (plain.get("args") or []) and all(
        e["name"] != "VLLM_SERVER_DEV_MODE" for e in plain["env"])
    assert serving_hash(with_standby) != serving_hash(without)  # turning standby on rolls the replicas once
    multi = mk_service("m", gpus=None, parallelism={"tensor": 8, "pipeline": 2}, standby={"replicas": 1})
    g2 = GroupRecord(index=0, nodes=("n0", "n1"), pool="p")
    lead = build_group_pod(multi, group=g2, worker=0, pods=2, gpus_per_pod=8, template_hash="h")["spec"]["containers"][0]
    assert "--enable-sleep-mode" in lead["args"][-1] and "--tensor-parallel-size 8" in lead["args"][-1]
    worker = build_group_pod(multi, group=g2, worker=1, pods=2, gpus_per_pod=8, template_hash="h")["spec"]["containers"][0]
    assert "--enable-sleep-mode" not in worker["args"][-1]


def test_standby_through_the_reconcile_on_a_fake_cluster(monkeypatch):
    """The runtime's part on a fake API server (tests/fakekube.py) with a fake engine control: the
    standby leader is told to sleep and recorded Asleep, a scale-up wakes it (no new pod for it) and
    a new group refills the standby count, asleep."""
    import asyncio

    from fakekube import settle, small_cluster
    from kubeforge.autoscaling import Signals
    from kubeforge.runtime.engine_control import FakeEngineControl
    from kubeforge.runtime.metrics_source import FakeMetrics
    from records import service_body, submitted

    url = "http://prometheus.monitoring.svc:9090"

    def st(kube):
        return kube.get("InferenceService", NS, "chat")["status"]

    async def go():
        kube = await small_cluster()
        kube.use_clock(monkeypatch)
        engine, metrics = FakeEngineControl(), FakeMetrics()
        kube.rt.engine, kube.rt.metrics = engine, metrics
        metrics.signals_of[(NS, "chat")] = Signals(time=kube.now, waiting=0.0, running=0.0, replicas=1.0)
        await kube.client_create("InferenceService", submitted(service_body(
            "chat", gpus=2, minReplicas=1, maxReplicas=3, standby={"replicas": 1},
            autoscaling={"prometheusURL": url, "scaleDown": {"stabilizationWindowSeconds": 600}})))
        for _ in range(3):
            await settle(kube)
            kube.now += 1.0
        s = st(kube)
        roles = {g["index"]: g.get("standby") for g in s["groups"]}
        assert sorted(roles.values(), key=str) == ["Asleep", None] and s["standbyReplicas"] == 1, s["groups"]
        (sleeper,) = [g["leader"] for g in s["groups"] if g.get("standby") == "Asleep"]
        assert ("sleep", sleeper) in engine.calls and sleeper in engine.asleep
        pods_before = {p["metadata"]["name"] for p in kube.items("Pod")}

        metrics.signals_of[(NS, "chat")] = Signals(time=kube.now, waiting=8.0, running=0.0, replicas=2.0)
        kube.now += 10.0
        for _ in range(4):
            await settle(kube)
            await asyncio.sleep(0)
            kube.now += 1.0
        s = st(kube)
        serving = [g for g in s["groups"] if not g.get("standby")]
        standby = [g for g in s["groups"] if g.get("standby")]
        assert s["desiredReplicas"] == 2 and len(serving) == 2 and sleeper in {g["leader"] for g in serving}
        assert ("wake", sleeper) in engine.calls and sleeper not in engine.asleep
        assert len(standby) == 1 and standby[0]["standby"] == "Asleep" and standby[0]["leader"] not in pods_before
        assert s["readyReplicas"] == 2 and s["startTime"]["wake"]["samples"]

    asyncio.run(go())
