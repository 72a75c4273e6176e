"""The chart's RBAC, proven by use: the real operator runs authenticated as the chart's
ServiceAccount (a token from the TokenRequest API, nothing else) and drives whole TrainingJob
and InferenceService lifecycles. Every call it makes is then decided by the ClusterRole the
chart renders; any rule missing shows up as a 403 (``Forbidden``) in the operator's log.

The session's admin operator is stopped for the duration of this module and always restarted
afterwards (and the release uninstalled), whatever happens.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

import builders as b
from conftest import apply, condition, events_for, get_json, job_pods, job_status, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kubeforge"
IMAGE = ["--set", "image.repository=registry.invalid/kubeforge", "--set", "image.tag=test"]
# An HTTP 403 as the kubernetes client or kopf log it (not "403" inside a timestamp's milliseconds).
FORBIDDEN = re.compile(r"Forbidden|forbidden|\(403\)|HTTP 403|\"code\":\s*403")
# No Prometheus answers here: a closed loopback port fails fast, so ScalingActive is False.
NO_PROMETHEUS = "http://127.0.0.1:9"


def helm(cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    from kubeforge.sim.tools import tool

    proc = subprocess.run([tool("helm"), *args], capture_output=True, text=True, env=cluster.env(), timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def rendered_clusterroles(cluster) -> dict[str, dict]:
    """The chart's ClusterRoles by name: the operator's (``kfrbac-kubeforge``) and the activator's."""
    out = helm(cluster, "template", "kfrbac", str(CHART), "--namespace", "kubeforge-system", *IMAGE).stdout
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d and d.get("kind") == "ClusterRole"}


def token_kubeconfig(cluster, sa: str, namespace: str, path: Path) -> None:
    """A kubeconfig for ``cluster``'s API server whose only credential is a bound token of
    ServiceAccount ``namespace/sa`` (server and CA copied from the admin kubeconfig)."""
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    ctx = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
    cl = next(c["cluster"] for c in admin["clusters"] if c["name"] == ctx["cluster"])
    kc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {k: v for k, v in cl.items()
                                                 if k in ("server", "certificate-authority-data", "certificate-authority")}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": sa, "context": {"cluster": "sim", "user": sa}}],
        "current-context": sa,
    }
    path.write_text(yaml.safe_dump(kc))
    path.chmod(0o600)


class OperatorLog:
    """The part of ``operator.log`` written since a mark."""

    def __init__(self, cluster):
        self.path = cluster.dir / "operator.log"
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def text(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")

    def forbidden(self) -> list[str]:
        """403s that RBAC decided, one line each (the API server's message when logged).

        A 403 with reason ``NamespaceTerminating`` (an Event posted into a namespace that an
        earlier test is deleting) is admission, not RBAC, and is left out."""
        records = re.split(r"\n(?=\[\d{4}-\d\d-\d\d )", self.text())
        found = []
        for rec in records:
            if not FORBIDDEN.search(rec) or "NamespaceTerminating" in rec:
                continue
            msg = re.search(r'"message":"((?:[^"\\]|\\.)*)"', rec)
            found.append(msg.group(1) if msg else rec.splitlines()[0])
        return found


def healthy(cluster) -> bool:
    """The operator's liveness endpoint answers 200 (kopf is up and its watches started)."""
    port = json.loads((cluster.dir / "operator.ports").read_text())["health"]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def sa_operator(cluster, tmp_path_factory):
    """Install the chart, then run the operator as its ServiceAccount; yields a dict with
    ``namespace``, ``release``, ``sa``, ``kubeconfig``, ``log`` (an :class:`OperatorLog`)."""
    from kubeforge.demo import start_operator, stop_operator

    ns, rel = f"rbac-{uuid.uuid4().hex[:6]}", f"kf{uuid.uuid4().hex[:6]}"
    sa = f"{rel}-kubeforge"
    kubeconfig = tmp_path_factory.mktemp("rbac") / "kubeconfig"
    cluster.kubectl("create", "namespace", ns)
    swapped = False
    try:
        helm(cluster, "install", rel, str(CHART), "--namespace", ns, "--set", "crds.install=false", *IMAGE, "--set", "rbac.create=true")
        wait_for(lambda: cluster.kubectl("get", "serviceaccount", sa, "-n", ns, check=False).returncode == 0,
                 timeout=30, what="the chart's ServiceAccount")
        token_kubeconfig(cluster, sa, ns, kubeconfig)
        who = subprocess.run([str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json"],
                             capture_output=True, text=True, timeout=30)
        assert who.returncode == 0, who.stderr
        assert json.loads(who.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:{sa}"

        log = OperatorLog(cluster)
        stop_operator(cluster)
        swapped = True
        # With leader election as the chart runs it: the Lease in the release namespace,
        # through the chart's namespaced Role.
        start_operator(cluster, extra_env={"KUBECONFIG": str(kubeconfig)},
                       args=("--leader-election", "--lease-namespace", ns, "--lease-name", sa))
        wait_for(lambda: healthy(cluster), timeout=60, what="the ServiceAccount operator's /healthz")
        wait_for(lambda: cluster.kubectl("get", "lease", sa, "-n", ns, check=False).returncode == 0,
                 timeout=60, what="the leader Lease (coordination.k8s.io) in the release namespace")
        assert not log.forbidden(), "RBAC gap at startup:\n" + "\n".join(log.forbidden()[:20])
        yield {"namespace": ns, "release": rel, "sa": sa, "kubeconfig": str(kubeconfig), "log": log}
    finally:
        if swapped:
            stop_operator(cluster)
            start_operator(cluster)  # the session's admin operator, always back
        helm(cluster, "uninstall", rel, "--namespace", ns, "--wait", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if swapped:
            wait_for(lambda: healthy(cluster), timeout=60, what="the admin operator to be back")


def test_rendered_clusterrole_is_least_privilege(cluster):
    roles = rendered_clusterroles(cluster)
    assert sorted(roles) == ["kfrbac-kubeforge", "kfrbac-kubeforge-activator"]
    activator = {r: set(rule["verbs"]) for rule in roles["kfrbac-kubeforge-activator"]["rules"] for r in rule["resources"]}
    assert activator == {"endpointslices": {"list", "watch"}}, activator  # it reads, never writes
    for rule in [r for role in roles.values() for r in role["rules"]]:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(key, []), f"wildcard in {key}: {rule}"
        assert not rule.get("nonResourceURLs"), rule
        assert "secrets" not in rule.get("resources", []), rule
        assert not {"update", "deletecollection", "escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
        if "kubeforge.io" in rule["apiGroups"]:
            for res in rule["resources"]:
                allowed = {"patch"} if res.endswith("/status") else {"get", "list", "watch"}
                if res == "modelcachenodes":  # the operator's own kind: it makes them and writes their spec
                    allowed = {"get", "list", "watch", "create", "patch", "delete"}
                assert set(rule["verbs"]) <= allowed, f"{res}: {rule['verbs']} (the spec is the user's)"


def test_training_job_lifecycle_as_the_chart_serviceaccount(cluster, sa_operator, namespace, fleet):
    log = OperatorLog(cluster)
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("llm", namespace, replicas=2, gpus=8,
                                checkpoint={"size": "1Gi", "deletionPolicy": "Delete"}))

    pods = wait_for(lambda: (p := running_pods(cluster, namespace, "llm")) and len(p) == 2 and p, timeout=90,
                    what="2 running workers (created already placed by the ServiceAccount operator)")
    st = wait_for(lambda: (s := job_status(cluster, namespace, "llm")).get("phase") == "Running" and s, timeout=30,
                  what="status.phase Running (trainingjobs/status patched)")
    assert condition(st, "Admitted")["status"] == "True"
    assert sorted(st["placement"]["nodes"]) == sorted(p["spec"]["nodeName"] for p in pods)
    for p in pods:
        assert not p["spec"].get("schedulingGates")
        assert p["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    # the operator said so in Events (events/create)
    assert any(e["reason"] == "Admitted" for e in events_for(cluster, namespace, "llm"))
    assert get_json(cluster, "service", "kubeforge-workers", "-n", namespace)["spec"]["clusterIP"] == "None"
    assert get_json(cluster, "pvc", "llm-checkpoint", "-n", namespace)["metadata"]["ownerReferences"][0]["name"] == "llm"
    # gpupools/status patched
    wait_for(lambda: (get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {}).get("allocated") == 16,
             timeout=30, what="pool status counting the job's GPUs")

    cluster.kubectl("delete", "trainingjob", "llm", "-n", namespace)

    def children_gone():
        pvc = cluster.kubectl("get", "pvc", "llm-checkpoint", "-n", namespace, check=False).returncode != 0
        return not job_pods(cluster, namespace, "llm") and pvc
    wait_for(children_gone, timeout=60, what="the job's Pods and PVC to be garbage-collected")
    wait_for(lambda: (get_json(cluster, "gpupool", namespace).get("status") or {}).get("gpus", {}).get("allocated") == 0,
             timeout=30, what="pool status releasing the job's GPUs")
    assert not log.forbidden(), "RBAC gap (operator log):\n" + "\n".join(log.forbidden()[:20])


def inference_service(name: str, namespace: str, **spec) -> dict:
    """1 to 2 one-GPU vLLM replicas in the namespace's pool, autoscaled every second from a
    Prometheus that does not answer; ``spec`` (camelCase) over it."""
    return (b.InferenceService(name).ns(namespace).without("topology").pools(namespace).gpus(1)
            .spec(port=8000, minReplicas=1, maxReplicas=2,
                  autoscaling={"prometheusURL": NO_PROMETHEUS, "pollingIntervalSeconds": 1})
            .template({"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.4"}]}})
            .spec(**spec).manifest())


def serving_pods(cluster, namespace: str) -> list[dict]:
    return [p for p in get_json(cluster, "pods", "-n", namespace, "-l", "kubeforge.io/inference-service=chat")["items"]
            if not p["metadata"].get("deletionTimestamp")]


def test_inference_service_lifecycle_as_the_chart_serviceaccount(cluster, sa_operator, namespace, fleet):
    log = OperatorLog(cluster)
    fleet(cliques=1, nodes=1)
    apply(cluster, inference_service("chat", namespace))

    pods = wait_for(lambda: (p := serving_pods(cluster, namespace)) and p, timeout=60, what="the replica's pod")
    assert pods[0]["metadata"]["ownerReferences"][0]["kind"] == "InferenceService"
    svc = get_json(cluster, "service", "chat", "-n", namespace)
    assert svc["metadata"]["ownerReferences"][0]["kind"] == "InferenceService" and not svc["spec"].get("selector")

    def status_with_conditions():
        s = get_json(cluster, "inferenceservice", "chat", "-n", namespace).get("status") or {}
        return condition(s, "ScalingActive") and condition(s, "Ready") and s.get("readyReplicas") == 1 and s
    st = wait_for(status_with_conditions, timeout=60, what="inferenceservices/status with conditions and a ready replica")
    assert condition(st, "ScalingActive")["status"] == "False"  # no Prometheus answers: hold, never guess
    assert condition(st, "Ready")["status"] == "True"
    assert st["desiredReplicas"] == 1 and st["url"] == f"http://chat.{namespace}.svc:8000"
    assert any(e["reason"] == "Admitted" for e in events_for(cluster, namespace, "chat"))
    sl = wait_for(lambda: (r := cluster.kubectl("get", "endpointslice", "kubeforge-chat", "-n", namespace, "-o", "json",
                                                check=False)).returncode == 0 and json.loads(r.stdout).get("endpoints")
                  and json.loads(r.stdout), timeout=30, what="the Service's EndpointSlice with the replica")
    assert sl["endpoints"][0]["targetRef"]["name"] == pods[0]["metadata"]["name"]

    cluster.kubectl("delete", "inferenceservice", "chat", "-n", namespace)
    wait_for(lambda: cluster.kubectl("get", "pods,service,endpointslice", "-n", namespace, "-l",
                                     "kubeforge.io/inference-service=chat", "-o", "name").stdout.strip() == "",
             timeout=60, what="the pods, Service and EndpointSlice to be garbage-collected")
    assert not log.forbidden(), "RBAC gap (operator log):\n" + "\n".join(log.forbidden()[:20])


def test_autoscaler_can_scale_as_the_chart_serviceaccount(cluster, sa_operator, namespace, fleet):
    """Raising minReplicas makes the autoscaler ask for a second replica group, which the
    operator places and creates as the chart's ServiceAccount (pods, the EndpointSlice)."""
    log = OperatorLog(cluster)
    fleet(cliques=1, nodes=1)
    apply(cluster, inference_service("chat", namespace))
    wait_for(lambda: (get_json(cluster, "inferenceservice", "chat", "-n", namespace).get("status") or {})
             .get("desiredReplicas") == 1, timeout=60, what="the first status")
    cluster.kubectl("patch", "inferenceservice", "chat", "-n", namespace, "--type=merge", "-p", '{"spec":{"minReplicas":2}}')

    def scaled_or_forbidden():
        if log.forbidden():
            return "forbidden"
        return len([p for p in serving_pods(cluster, namespace) if p["spec"].get("nodeName")]) == 2 and "scaled"
    outcome = wait_for(scaled_or_forbidden, timeout=45, what="two replicas bound (or a 403 in the log)")
    assert outcome == "scaled" and not log.forbidden(), (
        "RBAC gap: the operator could not scale as the chart's ServiceAccount:\n" + "\n".join(log.forbidden()[:10]))
    st = wait_for(lambda: (s := get_json(cluster, "inferenceservice", "chat", "-n", namespace).get("status") or {})
                  .get("desiredReplicas") == 2 and s, timeout=30, what="status.desiredReplicas 2")
    assert st["lastScaleDirection"] == "Up"


def test_dra_gang_as_the_chart_serviceaccount(cluster, sa_operator, namespace, dra_fleet):
    """A DRA pool and a 2-node NVLink gang, every call decided by the chart's ClusterRole: the
    pool's capacity from ResourceSlices, the job's ResourceClaimTemplate, its ComputeDomain
    (created with kubeforge's finalizer, read back for ComputeDomainReady), and on delete the
    finalizer patched off and the domain deleted."""
    log = OperatorLog(cluster)
    pool = dra_fleet["pool"]
    wait_for(lambda: (get_json(cluster, "gpupool", pool).get("status") or {}).get("gpus", {}).get("allocatable") == 72,
             timeout=60, what="the DRA pool's capacity from its ResourceSlices")
    apply(cluster, training_job("nv", namespace, replicas=2, gpus=4, mode="Required", level="nvlink", pools=[pool]))
    wait_for(lambda: job_status(cluster, namespace, "nv").get("phase") == "Running", timeout=120, what="the gang Running")
    wait_for(lambda: (condition(job_status(cluster, namespace, "nv"), "ComputeDomainReady") or {}).get("status") == "True",
             timeout=60, what="ComputeDomainReady=True")
    (cd,) = get_json(cluster, "computedomains", "-n", namespace)["items"]
    assert "kubeforge.io/compute-domain" in cd["metadata"]["finalizers"]
    templates = {t["metadata"]["name"] for t in get_json(cluster, "resourceclaimtemplates", "-n", namespace)["items"]}
    for p in job_pods(cluster, namespace, "nv"):
        assert {c["resourceClaimTemplateName"] for c in p["spec"]["resourceClaims"]} <= templates
    cluster.kubectl("delete", "trainingjob", "nv", "-n", namespace, "--wait=false")
    wait_for(lambda: not get_json(cluster, "computedomains", "-n", namespace)["items"], timeout=90,
             what="the ComputeDomain released (finalizer patched off, deleted)")
    assert not log.forbidden(), "RBAC gap (operator log):\n" + "\n".join(log.forbidden()[:20])
