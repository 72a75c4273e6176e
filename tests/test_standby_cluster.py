"""Replicas that take minutes to start, on the real control plane (issue 28): measured start phases
in status and ``kubectl describe``, and warm standby through the model-server simulator's sleep
mode, with the session operator running for real.

The operator reaches the simulated engines at its ``--engine-control-url`` (a loopback port
:func:`kubeforge.demo.start_operator` reserves; this module's simulator serves it), the way it
reaches a vLLM leader at its pod IP: ``POST /sleep?level=1``, ``POST /wake_up``,
``GET /is_sleeping``. The simulator answers a wake after its modelled time (3 s for 64 GiB here,
vLLM's published figure). kwok makes a pod Ready about a second after it is bound, so a cold start
here is not minutes: what the test proves is the path (the replica that serves after the scale-up
is the standby pod, woken, not a new pod; its time to serve is the wake time; a new standby
replica is started and put to sleep to refill the count), and that each start's phases are
written. Every wait is bounded.
"""

from __future__ import annotations

import time

import pytest

import builders as b
from conftest import apply, events_for, get_json, wait_for

pytestmark = pytest.mark.cluster

NAME = "chat"
WAKE_S = 3.0


@pytest.fixture(scope="module")
def stack(cluster):
    """(simulator on the operator's engine-control port, Prometheus scraping it every 1 s)."""
    from kubeforge.demo import engine_control_port
    from kubeforge.sim.modelserver import ModelServerSim, WakeModel
    from kubeforge.sim.prometheus import Prometheus

    port = engine_control_port(cluster)
    assert port, "the session operator was started without --engine-control-url"
    sim = ModelServerSim(kubeconfig=cluster.kubeconfig, port=port, poll_seconds=0.25,
                         wake=WakeModel(weights_gib=64.0, seconds_per_64_gib=WAKE_S)).start()
    prom = Prometheus([sim.target]).start()
    yield sim, prom
    prom.close()
    sim.stop()


def isvc(namespace: str, url: str, standby: int = 1) -> dict:
    """1 to 3 two-GPU replicas in the namespace's pool, ``standby`` of them kept asleep (warm
    standby), drained at once, pods gone at once, autoscaled every second from ``url`` (4
    waiting a replica; up at once, down held 600 s)."""
    return (b.InferenceService(NAME).ns(namespace).without("topology").pools(namespace).gpus(2)
            .spec(minReplicas=1, maxReplicas=3, standby={"replicas": standby}, drainSeconds=0)
            .template({"spec": {"terminationGracePeriodSeconds": 0,
                                "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.10.0",
                                                "args": ["--model", "Qwen/Qwen3-32B"]}]}})
            .spec(autoscaling={"prometheusURL": url, "targetPerReplica": 4, "pollingIntervalSeconds": 1,
                               "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 4, "periodSeconds": 1},
                               "scaleDown": {"stabilizationWindowSeconds": 600, "maxStep": 1, "periodSeconds": 1}})
            .manifest())


def status(cluster, ns: str) -> dict:
    return get_json(cluster, "inferenceservice", NAME, "-n", ns).get("status") or {}


def by_role(st: dict) -> tuple[list[dict], list[dict]]:
    """(serving groups, standby groups) of a status."""
    groups = st.get("groups") or []
    return [g for g in groups if not g.get("standby")], [g for g in groups if g.get("standby")]


def slice_pods(cluster, ns: str) -> list[str]:
    sl = get_json(cluster, "endpointslice", f"kubeforge-{NAME}", "-n", ns)
    return sorted(e["targetRef"]["name"] for e in sl.get("endpoints") or [] if e.get("targetRef"))


def settled(cluster, ns: str) -> dict | None:
    """The status once one group serves and one sleeps."""
    st = status(cluster, ns)
    serving, standby = by_role(st)
    ok = (len(serving) == 1 and serving[0]["phase"] == "Ready" and len(standby) == 1
          and standby[0]["standby"] == "Asleep" and standby[0]["phase"] == "Standby")
    return st if ok else None


def test_standby_sleeps_out_of_the_service_and_a_scale_up_wakes_it_then_refills(cluster, namespace, fleet, stack):
    from kubeforge.sim.modelserver import ServiceModel

    sim, prom = stack
    fleet(cliques=1, nodes=1, gpus=8)  # 8 GPUs: room for 4 replicas of 2
    sim.add_service(namespace, NAME, ServiceModel(slots=0), request_seconds=600.0)  # serves nothing: a fixed queue
    apply(cluster, isvc(namespace, prom.url))

    st = wait_for(lambda: settled(cluster, namespace), timeout=60, what="one serving and one asleep standby replica")
    serving, (standby,) = by_role(st)
    assert st["readyReplicas"] == 1 and st["standbyReplicas"] == 1 and st["standbyGPUs"] == 2 and st["replicas"] == 2
    sleeper = standby["leader"]
    assert ("sleep", namespace, sleeper) in [c[:3] for c in sim.engines.calls]
    assert slice_pods(cluster, namespace) == [serving[0]["leader"]]  # the standby replica is out of the Service
    pool = get_json(cluster, "gpupool", namespace)["status"]
    wait_for(lambda: get_json(cluster, "gpupool", namespace)["status"].get("standbyGPUs") == 2, timeout=15,
             what="GPUPool status.standbyGPUs")
    assert pool["gpus"]["allocated"] >= 4  # both replicas hold their GPUs
    # its pods carry what vLLM's sleep mode needs
    pod = get_json(cluster, "pod", sleeper, "-n", namespace)
    main = pod["spec"]["containers"][0]
    assert "--enable-sleep-mode" in main["args"] and {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in main["env"]

    t0 = time.monotonic()
    sim.inject(namespace, NAME, 8)  # queue 8 at 4 per replica: 2 replicas
    wait_for(lambda: status(cluster, namespace).get("desiredReplicas") == 2, timeout=20, what="the scale-up to 2")
    t_asked = time.monotonic()
    wait_for(lambda: sleeper in slice_pods(cluster, namespace), timeout=30, what="the woken standby in the Service")
    took = time.monotonic() - t_asked
    # the replica that serves is the standby pod, woken (no new pod for the scale-up), after the wake time
    assert ("wake", namespace, sleeper) in [c[:3] for c in sim.engines.calls]
    assert WAKE_S - 0.5 <= took <= WAKE_S + 8, f"woken in {took:.1f}s, wake modelled at {WAKE_S}s"
    assert len(slice_pods(cluster, namespace)) == 2
    st = wait_for(lambda: (s := settled_after_refill(cluster, namespace, sleeper)) and s, timeout=60,
                  what="the standby count refilled by a new replica, asleep")
    wake = st["startTime"]["wake"]["samples"]
    assert len(wake) == 1 and WAKE_S - 0.5 <= wake[0] <= WAKE_S + 8, wake
    reasons = [e["reason"] for e in events_for(cluster, namespace, NAME)]
    assert {"WakingStandby", "StandbyWoken", "StandbyAsleep"} <= set(reasons), reasons
    print(f"\nscale-up served by the woken standby {took:.1f}s after it was asked for "
          f"(total {time.monotonic() - t0:.1f}s from the burst); wake sample {wake[0]}s")


def settled_after_refill(cluster, ns: str, woken: str) -> dict | None:
    st = status(cluster, ns)
    serving, standby = by_role(st)
    ok = (len(serving) == 2 and all(g["phase"] == "Ready" for g in serving) and woken in {g["leader"] for g in serving}
          and len(standby) == 1 and standby[0]["standby"] == "Asleep" and st.get("standbyReplicas") == 1)
    return st if ok else None


def test_start_phases_show_in_status_and_in_kubectl_describe(cluster, namespace, fleet, stack):
    sim, prom = stack
    fleet(cliques=1, nodes=1, gpus=8)
    body = isvc(namespace, prom.url, standby=0)
    apply(cluster, body)
    st = wait_for(lambda: (s := status(cluster, namespace)).get("readyReplicas") == 1 and s.get("startTime") and s,
                  timeout=60, what="a Ready replica with its start measured")
    (g,) = st["groups"]
    start = g["start"]
    assert {"scheduledSeconds", "startedSeconds", "readySeconds"} <= set(start), start
    assert 0 <= start["scheduledSeconds"] <= start["startedSeconds"] <= start["readySeconds"] < 60, start
    cold = st["startTime"]["cold"]
    assert cold["samples"] == [start["readySeconds"]] and cold["p90Seconds"] == start["readySeconds"]
    out = cluster.kubectl("describe", "inferenceservice", NAME, "-n", namespace).stdout
    for text in ("Start:", "Ready Seconds:", "Scheduled Seconds:", "Start Time:", "p90Seconds:"):
        assert text in out, f"{text!r} not in kubectl describe:\n{out}"
    wide = cluster.kubectl("get", "inferenceservice", NAME, "-n", namespace, "-o", "wide").stdout
    assert "START-P90" in wide and "STANDBY" in wide, wide
    print(f"\nstart phases: {start}; estimate {cold}")
