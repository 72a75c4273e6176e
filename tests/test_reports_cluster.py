"""Workers' reports against the real control plane: the operator's status endpoint, real projected
tokens (TokenRequest, audience kubeforge.io, bound to the pod objects the operator made) checked
by real TokenReviews, and the status the job's one writer folds them into."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest

from conftest import apply, get_json, job_status, running_pods, training_job, wait_for
from kubeforge.builders.reporting import STATUS_CA_CONFIGMAP, STATUS_VOLUME
from kubeforge.progress import status_path
from kubeforge.sim.workers import container_env, pod_token

pytestmark = pytest.mark.cluster


def status_base(cluster) -> str:
    """The session operator's status endpoint (``start_operator`` put its port beside its pid)."""
    return f"https://127.0.0.1:{json.loads((cluster.dir / 'operator.ports').read_text())['status']}"


def post(url: str, ca: str, body: dict, token: str | None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ssl.create_default_context(cadata=ca)) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def running_job(cluster, namespace, fleet, name: str, replicas: int = 2) -> list[dict]:
    fleet(cliques=2, nodes=2, gpus=8)
    apply(cluster, training_job(name, namespace, replicas=replicas, gpus=1, level=None, mode="None",
                                checkpoint={"size": "1Gi", "deletionPolicy": "Delete"}))
    return wait_for(lambda: (p := running_pods(cluster, namespace, name)) and len(p) == replicas and p, timeout=90,
                    what=f"{replicas} running workers of {name}")


def test_reports_reach_status_through_real_token_reviews(cluster, namespace, fleet):
    pods = running_job(cluster, namespace, fleet, "rep")
    pods.sort(key=lambda p: p["metadata"]["name"])
    env = container_env(pods[0])
    base = status_base(cluster)
    assert env["KUBEFORGE_STATUS_URL"] == base + status_path(namespace, "rep")
    assert env["KUBEFLOW_TRAINER_STATUS_URL"] == base + status_path(namespace, "rep", kubeflow=True)
    vol = next(v for v in pods[0]["spec"]["volumes"] if v["name"] == STATUS_VOLUME)
    assert vol["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "kubeforge.io"
    ca = wait_for(lambda: get_json(cluster, "configmap", STATUS_CA_CONFIGMAP, "-n", namespace)["data"]["ca.crt"],
                  timeout=30, what="the namespace's CA ConfigMap")
    token = pod_token(cluster.kubectl, pods[0])

    code, body = post(env["KUBEFORGE_STATUS_URL"], ca, {
        "step": 40, "totalSteps": 400, "metrics": {"loss": 1.25},
        "checkpoint": {"step": 40, "path": "/checkpoints/step-40", "time": "2027-01-15T08:00:00Z"}}, token)
    assert code == 200, body
    st = wait_for(lambda: (s := job_status(cluster, namespace, "rep")).get("progress") and s, timeout=30,
                  what="status.progress written")
    assert st["progress"]["step"] == 40 and st["progress"]["percent"] == 10.0
    assert st["progress"]["reporter"] == pods[0]["metadata"]["name"]
    assert st["progress"]["metrics"] == [{"name": "loss", "value": "1.25"}]
    assert st["lastCheckpoint"] == {"step": 40, "path": "/checkpoints/step-40", "time": "2027-01-15T08:00:00Z"}

    # Kubeflow Trainer's payload, unchanged, on its own path: percent and ETA from it
    code, body = post(env["KUBEFLOW_TRAINER_STATUS_URL"], ca, {"trainerStatus": {
        "progressPercentage": 45, "estimatedRemainingSeconds": 600,
        "metrics": [{"name": "eval_loss", "value": "0.9"}], "lastUpdatedTime": "2027-01-15T08:00:00Z"}}, token)
    assert code == 200, body
    st = wait_for(lambda: (s := job_status(cluster, namespace, "rep"))["progress"].get("percent") == 45 and s,
                  timeout=30, what="the Kubeflow report folded")
    assert st["progress"]["eta"] and {m["name"] for m in st["progress"]["metrics"]} == {"loss", "eval_loss"}
    assert st["phase"] == "Running" and st["placement"]  # nothing but progress moved
    row = cluster.kubectl("get", "trainingjob", "rep", "-n", namespace).stdout
    assert "PROGRESS" in row and "ETA" in row and "45" in row


def test_refusals_by_the_real_api_server(cluster, namespace, fleet):
    pods = running_job(cluster, namespace, fleet, "refuse")
    other = running_job(cluster, namespace, lambda **kw: [], "other")
    ca = wait_for(lambda: get_json(cluster, "configmap", STATUS_CA_CONFIGMAP, "-n", namespace)["data"]["ca.crt"],
                  timeout=30, what="the namespace's CA ConfigMap")
    url = container_env(pods[0])["KUBEFORGE_STATUS_URL"]
    sa_default = cluster.kubectl("create", "token", "default", "-n", namespace).stdout.strip()
    unbound = cluster.kubectl("create", "token", "default", "-n", namespace, "--audience", "kubeforge.io").stdout.strip()
    cases = [
        (None, 401, "no Authorization header"),
        (sa_default, 401, "audience"),                      # the pod's own API token, not the projected one
        (unbound, 401, "not bound to a pod"),
        (pod_token(cluster.kubectl, other[0]), 403, "is not a worker of TrainingJob"),  # another job's pod
    ]
    for token, code, words in cases:
        got, body = post(url, ca, {"step": 1}, token)
        assert (got, body["status"]) == (code, "Failure") and words in body["message"], (code, body)
    good = pod_token(cluster.kubectl, pods[0])
    got, body = post(url, ca, {"step": "one"}, good)
    assert got == 422 and "step" in body["message"]
    # a worker lost: the gang restarts as attempt 1, and the old attempt's pods may no longer report
    cluster.kubectl("delete", "pod", pods[1]["metadata"]["name"], "-n", namespace, "--wait=false")
    wait_for(lambda: job_status(cluster, namespace, "refuse").get("attempt") == 1, timeout=60, what="attempt 1")
    got, body = post(url, ca, {"step": 2}, good)
    assert got in (401, 403), body  # 403: not of the current attempt; 401 once the pod is gone (TokenReview)
    assert "attempt" in body["message"] or "not a worker" in body["message"] or "refused" in body["message"], body
