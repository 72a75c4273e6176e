"""Serving end to end on the real control plane (issue 14): the operator, the kubeforge activator
(a local process, :mod:`kubeforge.sim.activation`), Debian's Prometheus and the model-server
simulator (:mod:`kubeforge.sim.modelserver`), which routes real HTTP requests only to the
replicas the operator's EndpointSlice lists and counts the requests it had to abort.

- requests that arrive at zero ready replicas are held by the activator (the first replica
  cold-starts while no GPU is free: it waits, is never dropped, and the status says for what),
  then all answered once a replica is Ready; beyond activation.queueLimit, 429 + Retry-After;
- scale-down drains a replica (out of the Service, its requests finish) before deleting it:
  no request aborted;
- an SLO breach (time to first token over target) scales up.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import builders as b
from conftest import apply, condition, events_for, get_json, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster

NAME = "chat"


@pytest.fixture
def stack(cluster):
    """(simulator, activator, Prometheus scraping both every second)."""
    from kubeforge.sim.activation import LocalActivator
    from kubeforge.sim.modelserver import ModelServerSim
    from kubeforge.sim.prometheus import Prometheus

    sim = ModelServerSim(kubeconfig=cluster.kubeconfig, poll_seconds=0.25).start()
    act = LocalActivator(cluster, sim.url).start()
    prom = Prometheus([sim.target, act.target]).start()
    yield sim, act, prom
    prom.close()
    act.stop()
    sim.stop()


def isvc(namespace: str, prom_url: str, **spec) -> dict:
    """0 to 2 one-GPU replicas in the namespace's pool, pods gone at once, autoscaled every second
    from ``prom_url`` (4 waiting a replica, up at once, down after 5 s, to zero after 600 s);
    ``spec`` (camelCase) over it, its ``autoscaling`` keys merged into these."""
    autoscaling = {"prometheusURL": prom_url, "pollingIntervalSeconds": 1, "targetPerReplica": 4,
                   "scaleToZeroAfterSeconds": 600,
                   "scaleUp": {"stabilizationWindowSeconds": 0, "maxStep": 4, "periodSeconds": 1},
                   "scaleDown": {"stabilizationWindowSeconds": 5, "maxStep": 4, "periodSeconds": 1},
                   **spec.pop("autoscaling", {})}
    if "slo" in autoscaling:
        del autoscaling["targetPerReplica"]  # queue-depth mode's target: refused beside slo
    return (b.InferenceService(NAME).ns(namespace).without("topology").pools(namespace).gpus(1)
            .spec(minReplicas=0, maxReplicas=2)
            .template({"spec": {"terminationGracePeriodSeconds": 0,
                                "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.4",
                                                "command": ["vllm", "serve", "m"]}]}})
            .spec(autoscaling=autoscaling, **spec).manifest())


def status(cluster, ns: str) -> dict:
    return get_json(cluster, "inferenceservice", NAME, "-n", ns).get("status") or {}


def endpoints_mode(cluster, ns: str) -> str | None:
    out = cluster.kubectl("get", "endpointslice", f"kubeforge-{NAME}", "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout)["metadata"]["labels"].get("kubeforge.io/endpoints") if out.returncode == 0 else None


def send(url: str, ns: str, n: int, max_tokens: int = 20, timeout: float = 180.0) -> list[httpx.Response]:
    """``n`` completions at once, through ``url``, for the service by its in-cluster name."""
    def one(i: int) -> httpx.Response:
        return httpx.post(f"{url}/v1/completions", headers={"Host": f"{NAME}.{ns}.svc"},
                          json={"model": "m", "prompt": f"request {i}", "max_tokens": max_tokens}, timeout=timeout)
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def test_requests_at_zero_are_held_through_a_cold_start_and_all_answered(cluster, namespace, fleet, stack):
    from kubeforge.sim.modelserver import ServiceModel

    sim, act, prom = stack
    fleet(cliques=1, nodes=1, gpus=8)
    apply(cluster, training_job("blocker", namespace, replicas=1, gpus=8, mode="None", level=None))
    wait_for(lambda: len(running_pods(cluster, namespace, "blocker")) == 1, timeout=60, what="the pool full")
    sim.add_service(namespace, NAME, ServiceModel(slots=8))
    apply(cluster, isvc(namespace, prom.url, activation={"holdSeconds": 120, "queueLimit": 5}))
    wait_for(lambda: endpoints_mode(cluster, namespace) == "activator", timeout=60,
             what="the Service pointing at the activator")

    with ThreadPoolExecutor(max_workers=1) as bg:
        pending = bg.submit(send, act.url, namespace, 8)
        # the held requests are the activation signal: a replica is asked for, but no GPU is free
        st = wait_for(lambda: (s := status(cluster, namespace)).get("desiredReplicas") == 1 and s, timeout=60,
                      what="a replica asked for while requests are held")
        ready = wait_for(lambda: (c := condition(status(cluster, namespace), "Ready")) and "waiting for GPUs" in c["message"]
                         and c, timeout=30, what="Ready saying the replica waits for GPUs")
        assert ready["status"] == "False"
        time.sleep(5)  # a cold start that takes a while: the replica is never dropped meanwhile
        assert status(cluster, namespace).get("desiredReplicas") == 1
        cluster.kubectl("delete", "trainingjob", "blocker", "-n", namespace)
        answers = pending.result(timeout=240)
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] * 5 + [429] * 3, codes  # queueLimit 5: five held and answered, three told to retry
    assert all(r.headers.get("Retry-After") for r in answers if r.status_code == 429)
    assert endpoints_mode(cluster, namespace) == "replicas"
    assert any("0 -> 1" in e["message"] for e in events_for(cluster, namespace, NAME) if e["reason"] == "Scaled")
    print(f"\nheld at zero through a cold start: {codes.count(200)} answered, {codes.count(429)} got 429")


def test_a_custom_query_without_the_activators_signal_still_comes_back_from_zero(cluster, namespace, fleet, stack):
    """Issue 32.4, the user's steps: minReplicas 0 and a Custom query that reads only the engines'
    queue. At zero replicas that query has no series, so nothing could ever scale the service up
    again; the operator adds the activator's held requests to any queue while no replica is
    ready, and the held requests are answered."""
    from kubeforge.sim.modelserver import ServiceModel

    sim, act, prom = stack
    fleet(cliques=1, nodes=1, gpus=8)
    sim.add_service(namespace, NAME, ServiceModel(slots=8))
    query = 'sum(vllm:num_requests_waiting{namespace="{namespace}",service="{name}"})'
    apply(cluster, isvc(namespace, prom.url, autoscaling={"metric": "Custom", "query": query},
                        activation={"holdSeconds": 120, "queueLimit": 10}))
    wait_for(lambda: (condition(status(cluster, namespace), "Ready") or {}).get("reason") == "ScaledToZero",
             timeout=60, what="the service at zero")
    wait_for(lambda: endpoints_mode(cluster, namespace) == "activator", timeout=60,
             what="the Service pointing at the activator")
    answers = send(act.url, namespace, 3)
    assert [r.status_code for r in answers] == [200] * 3
    assert any("0 -> 1" in e["message"] for e in events_for(cluster, namespace, NAME) if e["reason"] == "Scaled")


def test_scale_down_drains_a_replica_so_no_request_in_flight_is_aborted(cluster, namespace, fleet, stack):
    from kubeforge.sim.modelserver import ServiceModel

    sim, act, prom = stack
    fleet(cliques=1, nodes=1, gpus=8)
    sim.add_service(namespace, NAME, ServiceModel(slots=4, seconds_per_output_token=0.05))
    body = isvc(namespace, prom.url, minReplicas=2, maxReplicas=2, drainSeconds=60)
    apply(cluster, body)
    wait_for(lambda: status(cluster, namespace).get("readyReplicas") == 2 and endpoints_mode(cluster, namespace) == "replicas",
             timeout=60, what="two replicas in the Service")
    wait_for(lambda: sim.snapshot(namespace, NAME)["ready"] == 2, timeout=30, what="the simulator routing to both")

    with ThreadPoolExecutor(max_workers=1) as bg:
        pending = bg.submit(send, sim.url, namespace, 6, 300)  # ~15 s each, spread over both replicas
        wait_for(lambda: sim.snapshot(namespace, NAME)["running"] == 6, timeout=30, what="six requests running")
        body["spec"]["minReplicas"] = body["spec"]["maxReplicas"] = 1
        apply(cluster, body)
        st = wait_for(lambda: (s := status(cluster, namespace)) and any(g.get("drainingSince") for g in s.get("groups", []))
                      and s, timeout=30, what="a replica draining")
        answers = pending.result(timeout=120)
    wait_for(lambda: len(status(cluster, namespace).get("groups") or []) == 1, timeout=90, what="the drained replica gone")
    assert [r.status_code for r in answers] == [200] * 6
    assert sim.aborted(namespace, NAME) == 0
    assert any(e["reason"] == "Draining" for e in events_for(cluster, namespace, NAME))


def test_a_time_to_first_token_breach_scales_up(cluster, namespace, fleet, stack):
    from kubeforge.sim.modelserver import ServiceModel

    sim, act, prom = stack
    fleet(cliques=1, nodes=1, gpus=8)
    sim.add_service(namespace, NAME, ServiceModel(slots=2, seconds_per_output_token=0.02))
    apply(cluster, isvc(namespace, prom.url, minReplicas=1, maxReplicas=4,
                        autoscaling={"slo": {"timeToFirstTokenSeconds": 0.5, "percentile": 90, "windowSeconds": 15}}))
    wait_for(lambda: status(cluster, namespace).get("readyReplicas") == 1, timeout=60, what="one replica")
    sim.set_rate(namespace, NAME, 3.0, request_seconds=2.0)  # one replica of 2 slots carries ~1 req/s
    try:
        st = wait_for(lambda: (s := status(cluster, namespace)).get("desiredReplicas", 1) > 1 and s, timeout=90,
                      what="a scale-up on the TTFT breach")
        slo = wait_for(lambda: condition(status(cluster, namespace), "SLOMet"), timeout=30, what="SLOMet")
        print(f"\nTTFT breach -> {st['desiredReplicas']} replicas; SLOMet {slo['status']}: {slo['message']}")
        assert slo["reason"] != "", slo
    finally:
        sim.set_rate(namespace, NAME, 0.0)
