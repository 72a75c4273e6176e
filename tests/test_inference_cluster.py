"""InferenceService autoscaling against the real control plane, a real Prometheus and the
model-server simulator, with the session operator running for real.

The path under test is the production one: the simulator exports
``vllm:num_requests_waiting{namespace,service}``, Prometheus (Debian's binary, scrape 1 s)
scrapes it, the operator queries Prometheus every ``pollingIntervalSeconds``, writes the replica
count (``status.desiredReplicas``) and admission places each replica (a group of one pod here)
on GPUs; kube-scheduler binds the pods on kwok GPU nodes and the simulator counts the Ready ones
as serving capacity. Multi-node groups are tests/test_serving_cluster.py.

Most tests use ``ServiceModel(slots=0)``: replicas serve nothing, so the waiting queue is
exactly what the test injected and the replica count it asks for is deterministic. The
scale-from-zero test uses real slots so the queue drains into the replica that comes back.
Windows are seconds; every wait is bounded.
"""

from __future__ import annotations

import json
import time

import pytest

import builders as b
from conftest import apply, condition, events_for, get_json, wait_for

pytestmark = pytest.mark.cluster

NAME = "chat"


@pytest.fixture(scope="module")
def stack(cluster):
    """(simulator, Prometheus) shared by the module; Prometheus scrapes the simulator every 1 s."""
    from kubeforge.sim.modelserver import ModelServerSim
    from kubeforge.sim.prometheus import Prometheus

    sim = ModelServerSim(kubeconfig=cluster.kubeconfig).start()
    prom = Prometheus([sim.target]).start()
    yield sim, prom
    prom.close()
    sim.stop()


def isvc(namespace: str, url: str, gpus: int = 2, min_replicas: int = 1, max_replicas: int = 4, **autoscaling) -> dict:
    """``min_replicas`` to ``max_replicas`` replicas of ``gpus`` GPUs in the namespace's pool, pods
    gone at once, scaled on vLLM's waiting queue from ``url`` (4 a replica); ``autoscaling``
    (camelCase) over those keys."""
    # Windows and steps in seconds, not the production defaults (a paced +1 per 10 s scale-up
    # and a 5-minute scale-down window): the tests check the mechanisms, quickly.
    a = {"prometheusURL": url, "metric": "VLLMWaiting", "targetPerReplica": 4, "pollingIntervalSeconds": 1,
         "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 4, "periodSeconds": 1},
         "scaleDown": {"stabilizationWindowSeconds": 10, "maxStep": 4, "periodSeconds": 1}}
    a.update(autoscaling)
    return (b.InferenceService(NAME).ns(namespace).without("topology").pools(namespace).gpus(gpus)
            .spec(minReplicas=min_replicas, maxReplicas=max_replicas)
            .template({"spec": {"terminationGracePeriodSeconds": 0,
                                "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.0",
                                                "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct"]}]}})
            .spec(autoscaling=a).manifest())


def replicas(cluster, ns: str) -> int | None:
    """The replica count the autoscaler asked for (``status.desiredReplicas``)."""
    out = cluster.kubectl("get", "inferenceservice", NAME, "-n", ns, "-o", "jsonpath={.status.desiredReplicas}",
                          check=False)
    return int(out.stdout) if out.returncode == 0 and out.stdout.strip() else None


def status(cluster, ns: str) -> dict:
    return get_json(cluster, "inferenceservice", NAME, "-n", ns).get("status") or {}


def cond_is(cluster, ns: str, type_: str, value: str, reason: str | None = None):
    c = condition(status(cluster, ns), type_)
    return c if c and c["status"] == value and (reason is None or c["reason"] == reason) else None


def hold(pred, seconds: float, what: str, interval: float = 0.25) -> None:
    """Poll for ``seconds`` and fail as soon as ``pred`` is false (asserting something did NOT change)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert pred(), f"{what} changed before {seconds:.1f}s"
        time.sleep(interval)


def start(cluster, namespace, sim, prom, slots=0, request_seconds=600.0, **kw) -> None:
    from kubeforge.sim.modelserver import ServiceModel

    sim.add_service(namespace, NAME, ServiceModel(slots=slots), request_seconds=request_seconds)
    apply(cluster, isvc(namespace, prom.url, **kw))


def spike_to(cluster, ns, sim, n: int, want: int, within: float) -> float:
    """Inject ``n`` requests; wait (bounded) until the autoscaler asks for ``want`` replicas;
    returns the seconds it took from the spike."""
    t0 = time.monotonic()
    sim.inject(ns, NAME, n)
    wait_for(lambda: replicas(cluster, ns) == want, timeout=within, what=f"{want} replicas after a spike of {n}")
    return time.monotonic() - t0


def test_queue_spike_scales_up_within_the_window_with_a_scaled_event(cluster, namespace, fleet, stack):
    sim, prom = stack
    fleet(cliques=1, nodes=2, gpus=8)  # 16 GPUs: room for 8 replicas of 2
    start(cluster, namespace, sim, prom, gpus=2, max_replicas=4)
    wait_for(lambda: replicas(cluster, namespace) == 1, timeout=30, what="minReplicas 1")
    wait_for(lambda: status(cluster, namespace).get("lastMetricValue") == 0, timeout=30, what="the operator reading 0 from Prometheus")
    wait_for(lambda: sim.snapshot(namespace, NAME)["ready"] == 1, timeout=30, what="1 Ready pod seen by the simulator")

    took = spike_to(cluster, namespace, sim, 40, 4, within=20)
    # scrape (1 s) + polling interval (1 s) + one reconcile: a few seconds, never a KEDA/HPA 30 s+15 s cycle
    assert took < 10, f"scale-up took {took:.1f}s"
    # (the first Scaled event is 0 -> 1, minReplicas at creation)
    ev = wait_for(lambda: [e for e in events_for(cluster, namespace, NAME)
                           if e["reason"] == "Scaled" and "replicas 1 -> " in e["message"]], timeout=15,
                  what="a Scaled event from 1 replica")
    msg = ev[-1]["message"]
    assert "replicas 1 -> 4" in msg and "queue 40" in msg and "target 4 per replica" in msg, msg
    st = wait_for(lambda: (s := status(cluster, namespace)).get("desiredReplicas") == 4 and s, timeout=15)
    assert st["lastScaleDirection"] == "Up" and st["lastMetricValue"] == 40
    assert condition(st, "ScalingActive")["status"] == "True"
    lim = condition(st, "ScalingLimited")
    assert lim["status"] == "True" and lim["reason"] == "TooManyReplicas", lim  # 10 wanted, max 4
    wait_for(lambda: sim.snapshot(namespace, NAME)["ready"] == 4, timeout=30, what="4 Ready pods")
    print(f"\nspike of 40 -> 4 replicas patched in {took:.1f}s")


def test_quiet_queue_scales_down_only_after_the_stabilization_window(cluster, namespace, fleet, stack):
    sim, prom = stack
    window = 12
    fleet(cliques=1, nodes=2, gpus=8)
    start(cluster, namespace, sim, prom, gpus=2, max_replicas=4,
          scaleDown={"stabilizationWindowSeconds": window, "maxStep": 4, "periodSeconds": 1})
    wait_for(lambda: replicas(cluster, namespace) == 1, timeout=30, what="minReplicas 1")
    spike_to(cluster, namespace, sim, 16, 4, within=20)

    t_quiet = time.monotonic()
    sim.clear(namespace, NAME)  # silence: no arrivals, nothing waiting
    wait_for(lambda: prom.query(f'sum(vllm:num_requests_waiting{{namespace="{namespace}",service="{NAME}"}})') == 0,
             timeout=10, what="Prometheus to see the empty queue")
    # The operator read a non-empty queue within ~1 s before the silence, so the window's
    # highest recommendation stays 4 until about t_quiet + window: nothing may move before.
    hold(lambda: replicas(cluster, namespace) == 4, t_quiet + window - 3 - time.monotonic(),
         "replicas during the scale-down stabilization window")
    wait_for(lambda: replicas(cluster, namespace) == 1, timeout=window + 10, what="scale-down to minReplicas after the window")
    took = time.monotonic() - t_quiet
    assert took >= window - 3, took
    ev = [e for e in events_for(cluster, namespace, NAME) if e["reason"] == "Scaled" and "4 -> 1" in e["message"]]
    assert ev, "no Scaled event for 4 -> 1"
    print(f"\nquiet queue -> scale-down after {took:.1f}s (window {window}s)")


def test_min_zero_scales_to_zero_when_idle_and_back_on_new_requests(cluster, namespace, fleet, stack):
    sim, prom = stack
    idle = 6
    fleet(cliques=1, nodes=2, gpus=8)
    run_s = 12  # one request in flight is activity: no scale to zero under it (Knative counts in-flight requests)
    start(cluster, namespace, sim, prom, slots=1, request_seconds=run_s, gpus=2, min_replicas=0, max_replicas=2,
          scaleToZeroAfterSeconds=idle)
    wait_for(lambda: replicas(cluster, namespace) == 0, timeout=30, what="created at 0 replicas")
    wait_for(lambda: status(cluster, namespace).get("lastMetricValue") == 0, timeout=30, what="metric read at zero")

    sim.inject(namespace, NAME, 3)  # the queue exists with no pod at all
    wait_for(lambda: replicas(cluster, namespace) == 1, timeout=15, what="scale from zero")
    snap = wait_for(lambda: (s := sim.snapshot(namespace, NAME))["ready"] == 1 and s, timeout=30, what="the replica Ready")
    assert snap["running"] == 1 and snap["waiting"] == 2  # the queue drained into the new replica

    t_quiet = time.monotonic()
    sim.clear(namespace, NAME)  # the 2 waiting requests leave; the running one goes on for up to run_s
    hold(lambda: replicas(cluster, namespace) == 1, idle + 2, "the replica while a request runs on it")
    wait_for(lambda: sim.snapshot(namespace, NAME)["running"] == 0, timeout=run_s, what="the request finished")
    t_idle = time.monotonic()
    wait_for(lambda: replicas(cluster, namespace) == 0, timeout=idle + 10, what="scale to zero after the idle period")
    assert time.monotonic() - t_idle >= idle - 3
    wait_for(lambda: cond_is(cluster, namespace, "Ready", "True", "ScaledToZero"), timeout=15, what="Ready/ScaledToZero")
    wait_for(lambda: sim.snapshot(namespace, NAME)["ready"] == 0, timeout=30, what="the pod gone")

    took = spike_to(cluster, namespace, sim, 2, 1, within=15)  # the way back from zero
    assert any("0 -> 1" in e["message"] for e in events_for(cluster, namespace, NAME) if e["reason"] == "Scaled")
    print(f"\nback from zero in {took:.1f}s")


def test_prometheus_outage_holds_replicas_and_sets_scaling_active_false(cluster, namespace, fleet, stack):
    sim, prom = stack
    fleet(cliques=1, nodes=2, gpus=8)
    start(cluster, namespace, sim, prom, gpus=2, max_replicas=4)
    wait_for(lambda: replicas(cluster, namespace) == 1, timeout=30, what="minReplicas 1")
    spike_to(cluster, namespace, sim, 8, 2, within=20)
    wait_for(lambda: cond_is(cluster, namespace, "ScalingActive", "True"), timeout=10, what="ScalingActive=True")
    prom.stop()
    try:
        c = wait_for(lambda: cond_is(cluster, namespace, "ScalingActive", "False"), timeout=15, what="ScalingActive=False")
        assert c["reason"] == "FailedGetMetric", c  # the reason names the failure: no metric
        assert "no metric value" in c["message"] and "2 replicas" in c["message"], c["message"]
        assert "Prometheus query failed (connection" in c["message"], c["message"]  # the real error
        sim.inject(namespace, NAME, 30)  # the queue grows, but nobody can see it
        hold(lambda: replicas(cluster, namespace) == 2, 5, "replicas during the Prometheus outage")
    finally:
        prom.start()
    wait_for(lambda: cond_is(cluster, namespace, "ScalingActive", "True"), timeout=30, what="ScalingActive=True again")
    wait_for(lambda: replicas(cluster, namespace) == 4, timeout=30, what="scale-up once the metric is back")


def _capacity_case(cluster, namespace, fleet, stack):
    """8 GPUs, 4 per replica, a queue asking for 4 replicas: returns (replicas, ScalingLimited)."""
    sim, prom = stack
    fleet(cliques=1, nodes=1, gpus=8)  # 8 GPUs: 2 replicas of 4
    start(cluster, namespace, sim, prom, gpus=4, max_replicas=4, pollingIntervalSeconds=2)
    wait_for(lambda: replicas(cluster, namespace) == 1, timeout=30, what="minReplicas 1")
    wait_for(lambda: sim.snapshot(namespace, NAME)["ready"] == 1, timeout=30, what="1 Ready pod")
    sim.inject(namespace, NAME, 40)  # asks for 10, max 4, the pool fits 2
    wait_for(lambda: cond_is(cluster, namespace, "ScalingLimited", "True", "InsufficientCapacity"),
                 timeout=30, what="ScalingLimited=True/InsufficientCapacity")
    hold(lambda: (replicas(cluster, namespace) or 0) < 4, 4, "the capped replica count")
    return replicas(cluster, namespace), condition(status(cluster, namespace), "ScalingLimited")


def test_too_few_free_gpus_caps_the_scale_and_reports_insufficient_capacity(cluster, namespace, fleet, stack):
    n, c = _capacity_case(cluster, namespace, fleet, stack)
    assert n == 2, n  # never maxReplicas, never one more than the pool holds
    assert c["status"] == "True" and c["reason"] == "InsufficientCapacity", c
    msg = c["message"]
    assert "4 wanted" in msg and "2 short (8 GPUs)" in msg and "can place 0 more" in msg, msg
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"kubeforge.io/inference-service={NAME}")["items"]
    assert len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods), "a replica was left unschedulable"


def test_template_gpu_and_pool_edits_roll_out_one_replica_at_a_time(cluster, namespace, fleet):
    """Spec edits roll out group by group with no surge (never spare GPUs): at most one replica
    is unavailable at any moment, and the replicas come back on the new template."""
    fleet(cliques=1, nodes=2)
    other = fleet(cliques=1, nodes=1, pool=f"{namespace}-other")
    body = isvc(namespace, "http://127.0.0.1:1", gpus=2, min_replicas=2, max_replicas=2)
    body["spec"]["drainSeconds"] = 0  # the replicas serve nothing here: no drain to wait for
    apply(cluster, body)

    def running():
        return [p for p in get_json(cluster, "pods", "-n", namespace, "-l", f"kubeforge.io/inference-service={NAME}")["items"]
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]

    def rolled(check):
        pods = running()
        return len(pods) == 2 and all(check(p) for p in pods) and pods

    wait_for(lambda: rolled(lambda p: True), timeout=60, what="two replicas running")
    h0 = {g["templateHash"] for g in status(cluster, namespace)["groups"]}
    body["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]
    body["spec"]["gpusPerReplica"] = 4
    apply(cluster, body)
    least_ready, t0 = 2, time.monotonic()
    while time.monotonic() - t0 < 90:
        least_ready = min(least_ready, int(status(cluster, namespace).get("readyReplicas", 0)))
        if rolled(lambda p: p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "4"
                  and any(e["name"] == "VLLM_LOGGING_LEVEL" for e in p["spec"]["containers"][0].get("env") or [])):
            break
        time.sleep(0.2)
    else:
        raise AssertionError("both replicas not on the new template with 4 GPUs within 90 s")
    assert least_ready >= 1, "both replicas were down at once during the rollout"
    st = wait_for(lambda: (s := status(cluster, namespace)) and all(g["phase"] == "Ready" for g in s["groups"]) and s,
                  timeout=30, what="both groups Ready")
    assert {g["templateHash"] for g in st["groups"]}.isdisjoint(h0) and st["desiredReplicas"] == 2
    assert any(e["reason"] == "RollingOut" for e in events_for(cluster, namespace, NAME))

    body["spec"]["pools"] = [f"{namespace}-other"]
    body["spec"]["minReplicas"] = body["spec"]["maxReplicas"] = 1
    apply(cluster, body)
    wait_for(lambda: [p for p in running() if p["spec"]["nodeName"] in other], timeout=90, what="a replica in the new pool")
