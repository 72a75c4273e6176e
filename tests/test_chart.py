"""The Helm chart, rendered without a cluster: lint, RBAC, Pod Security, and agreement with the
Dockerfile and the CLI (one source of truth each for the entrypoint, flags and ports)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kubeforge"
RELEASE = "kf"


@pytest.fixture(scope="module")
def helm() -> str:
    from kubeforge.sim.tools import ToolsError, ensure_tools

    try:
        bin_dir = ensure_tools()
    except ToolsError as e:
        pytest.skip(f"helm is not available (hack/build-tools.sh did not provide it): {e}")
    return str(bin_dir / "helm")


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([helm, *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def render(helm: str, *args: str) -> list[dict]:
    out = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", "kubeforge-system", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict], kind: str, component: str = "operator") -> dict:
    """The one object of ``kind`` of the operator (or of the activator: ``component``)."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    assert len(found) == 1, f"expected one {component} {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


@pytest.fixture(scope="module")
def docs(helm) -> list[dict]:
    return render(helm)


def cli_run_options() -> dict[str, object]:
    """The ``kubeforge run`` click options, by parameter name."""
    from kubeforge.cli import run

    return {p.name: p for p in run.params}


def dockerfile_exec(instr: str) -> list[str]:
    """The JSON (exec) form of a Dockerfile instruction such as ENTRYPOINT or CMD."""
    text = (ROOT / "Dockerfile").read_text()
    m = re.findall(rf"^{instr}\s+(\[.*\])\s*$", text, re.M)
    assert len(m) == 1, f"Dockerfile needs exactly one exec-form {instr}"
    return json.loads(m[0])


def test_lint(helm):
    proc = run_helm(helm, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in proc.stdout


def test_lint_with_every_option(helm):
    run_helm(helm, "lint", "--strict", str(CHART), "--set", "serviceMonitor.enabled=true",
             "--set", "grafanaDashboard.enabled=true", "--set", "watchNamespaces={a,b}", "--set", "logLevel=debug")


def test_renders_expected_objects(docs):
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment",
                            "Role", "RoleBinding", "PodDisruptionBudget"]
                           # the activator (activator.enabled, the default)
                           + ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment",
                              "PodDisruptionBudget"]
                           # the workers' status endpoint (status.enabled, the default): its Service
                           # and the Role on its TLS Secret
                           + ["Service", "Role", "RoleBinding"]
                           # the four CRDs (crds.install, the default)
                           + ["CustomResourceDefinition"] * 4)
    for d in docs:
        labels = d["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_clusterrole_is_least_privilege(docs):
    rules = one(docs, "ClusterRole")["rules"]
    for r in rules:
        for field in ("verbs", "resources", "apiGroups"):
            assert "*" not in r.get(field, []), f"wildcard in {field}: {r}"
            assert not any("*" in x for x in r.get(field, [])), f"wildcard in {field}: {r}"
        assert "secrets" not in r["resources"], r
        assert "nonResourceURLs" not in r and "resourceNames" not in r
        assert not set(r["verbs"]) & {"escalate", "bind", "impersonate", "deletecollection"}, r

    def verbs(group: str, resource: str) -> set[str]:
        return {v for r in rules if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}

    for plural in ("gpupools", "trainingjobs", "inferenceservices"):
        assert verbs("kubeforge.io", plural) == {"get", "list", "watch"}  # never writes spec (GitOps)
        assert verbs("kubeforge.io", f"{plural}/status") == {"patch"}
    assert verbs("", "pods") == {"get", "list", "watch", "create", "delete", "patch"}
    assert verbs("", "services") == {"get", "list", "watch", "create", "patch", "delete"}
    assert verbs("discovery.k8s.io", "endpointslices") == {"get", "list", "create", "patch"}
    assert verbs("", "persistentvolumeclaims") == {"get", "list", "watch", "create", "delete"}
    assert verbs("apps", "deployments") == {"get", "list", "watch", "delete"}  # 0.1's, deleted once
    assert verbs("apps", "deployments/scale") == set()  # replica groups, not a Deployment, are scaled
    assert verbs("", "nodes") == {"get", "list", "watch"}
    assert verbs("", "namespaces") == {"get", "list", "watch"}
    assert verbs("", "events") == {"create", "patch"}
    assert verbs("events.k8s.io", "events") == {"create", "patch"}
    assert verbs("apiextensions.k8s.io", "customresourcedefinitions") == {"get", "list", "watch"}
    assert verbs("resource.k8s.io", "deviceclasses") == {"get", "list", "watch"}  # a DRA pool's class must exist


def test_clusterrolebinding_binds_the_serviceaccount(docs):
    crb, sa, cr = one(docs, "ClusterRoleBinding"), one(docs, "ServiceAccount"), one(docs, "ClusterRole")
    assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cr["metadata"]["name"]}
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "kubeforge-system"}]
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_rbac_and_serviceaccount_can_be_turned_off(helm):
    docs = render(helm, "--set", "rbac.create=false", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=ops")
    assert {d["kind"] for d in docs} == {"Service", "Deployment", "PodDisruptionBudget", "CustomResourceDefinition"}
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
    assert one(docs, "Deployment", "activator")["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


def test_deployment_runs_replicas_that_elect_a_leader(docs):
    spec = one(docs, "Deployment")["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    (c,) = spec["template"]["spec"]["containers"]
    assert "--leader-election" in c["args"] and f"--lease-name={RELEASE}-kubeforge" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"  # --lease-namespace
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_leader_election_rbac_is_namespaced_to_the_lease(docs):
    role, binding = one(docs, "Role"), one(docs, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kubeforge-system"
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    cluster_rules = one(docs, "ClusterRole")["rules"]
    assert not [r for r in cluster_rules if "leases" in r["resources"]], "no cluster-wide Lease rights"


def test_one_replica_needs_no_leader_election_and_two_refuse_to_run_without(helm):
    docs = render(helm, "--set", "replicaCount=1", "--set", "leaderElection.enabled=false")
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert not [d for d in docs if d["kind"] in ("PodDisruptionBudget", "Role")
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"]
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--set", "leaderElection.enabled=false", check=False)
    assert proc.returncode != 0  # two operators without a leader would promise the same GPUs twice


def test_prometheus_allow_list_reaches_the_operator(helm):
    docs = render(helm, "--set", "prometheus.allowedURLs={http://prometheus.monitoring:9090}")
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--prometheus-url-allow=http://prometheus.monitoring:9090" in c["args"]


def test_deployment_passes_pod_security_restricted(docs):
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] == 65532
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsNonRoot"] is True
    assert sc.get("privileged") is not True
    # the read-only root filesystem needs a writable /tmp
    tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1
    vol = next(v for v in pod["volumes"] if v["name"] == tmp[0]["name"])
    assert "emptyDir" in vol
    # restricted allows only these volume types
    for v in pod["volumes"]:
        assert set(v) - {"name"} <= {"emptyDir", "configMap", "secret", "projected", "downwardAPI", "persistentVolumeClaim", "ephemeral", "csi"}


def test_dockerfile_user_matches_chart(docs):
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER 65532(:65532)?\s*$", text, re.M)
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 65532
    assert re.search(r"^FROM \S+", text, re.M)
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base and ":" in base.group(1) and not base.group(1).endswith(":latest"), "pin the base image tag"


def test_command_and_args_agree_with_dockerfile_and_cli(docs):
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    entrypoint, cmd = dockerfile_exec("ENTRYPOINT"), dockerfile_exec("CMD")
    assert c["command"] == entrypoint == ["kubeforge"]
    assert c["args"][: len(cmd)] == cmd == ["run"]

    # the console script in pyproject.toml is what ENTRYPOINT names
    assert re.search(r'^kubeforge = "kubeforge\.cli:main"$', (ROOT / "pyproject.toml").read_text(), re.M)

    # every rendered flag parses with the real click command
    from kubeforge.cli import run

    ctx = run.make_context("run", list(c["args"][1:]))
    assert ctx.params["namespaces"] == ()
    assert ctx.params["verbose"] is False


def test_ports_agree_with_cli_defaults_and_dockerfile(docs, helm):
    opts = cli_run_options()
    health_port = int(str(opts["health_address"].default).rsplit(":", 1)[1])
    metrics_port = int(opts["metrics_port"].default)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["health"]["port"] == health_port
    assert values["metrics"]["port"] == metrics_port

    expose = re.search(r"^EXPOSE\s+(.+)$", (ROOT / "Dockerfile").read_text(), re.M)
    status_port = int(str(opts["status_address"].default).rsplit(":", 1)[1])
    assert values["status"]["port"] == status_port
    assert expose and {int(p) for p in expose.group(1).split()} == {health_port, metrics_port, status_port}

    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": metrics_port, "health": health_port, "status": status_port}
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] == "/healthz"
        assert get["port"] in ("health", health_port)
    from kubeforge.cli import run

    params = run.make_context("run", list(c["args"][1:])).params
    assert params["health_address"].rsplit(":", 1)[1] == str(health_port)
    assert params["metrics_port"] == metrics_port

    svc = one(docs, "Service")
    (sp,) = svc["spec"]["ports"]
    assert sp["name"] == "metrics" and sp["targetPort"] in ("metrics", metrics_port)
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()


def test_args_built_from_values(helm):
    docs = render(helm, "--set", "watchNamespaces={ml,serving}", "--set", "logLevel=debug",
                  "--set", "metrics.port=9090", "--set", "health.port=9091")
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    from kubeforge.cli import run

    params = run.make_context("run", list(c["args"][1:])).params
    assert params == {"namespaces": ("ml", "serving"), "health_address": "0.0.0.0:9091", "metrics_port": 9090,
                      "metrics_address": "0.0.0.0", "verbose": True, "leader_election": True,
                      "lease_namespace": "default", "lease_name": f"{RELEASE}-kubeforge", "prometheus_allow": (),
                      "activator_service": ("kubeforge-system", f"{RELEASE}-kubeforge-activator"),
                      "status_address": "0.0.0.0:8443",
                      "status_url": f"https://{RELEASE}-kubeforge-status.kubeforge-system.svc:8443",
                      "status_tls_secret": ("kubeforge-system", f"{RELEASE}-kubeforge-status-tls"),
                      "worker_reporting": True, "progress_write_seconds": 30.0, "progress_writes_per_second": 5.0,
                      "engine_control_url": "", "model_cache": False, "event_loop": "auto"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 9090, "health": 9091, "status": 8443}


def test_the_cache_agent_turns_the_operators_model_cache_on(helm):
    """The operator writes ModelCacheNode specs and mounts node copies only where agents run."""
    docs = render(helm, "--set", "cacheAgent.enabled=true")
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    from kubeforge.cli import run

    assert run.make_context("run", list(c["args"][1:])).params["model_cache"] is True
    rules = [
        r for d in docs if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == f"{RELEASE}-kubeforge"
        for r in d["rules"]]
    assert {"get", "list", "watch", "create", "patch", "delete"} <= {
        v for r in rules if "modelcachenodes" in r["resources"] for v in r["verbs"]}


def test_scheduling_values(helm):
    docs = render(helm, "--set", "nodeSelector.role=system", "--set", "tolerations[0].key=gpu",
                  "--set", "tolerations[0].operator=Exists", "--set", "podAnnotations.a=b",
                  "--set", "image.repository=example.com/kf", "--set", "image.tag=dev")
    pod = one(docs, "Deployment")["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"role": "system"}
    assert pod["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert pod["spec"]["containers"][0]["image"] == "example.com/kf:dev"


def test_default_image_tag_is_app_version(docs):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "kubeforge"
    # the chart's version is SemVer 2 (Helm's rule), appVersion the Python package's (PEP 440), which
    # is the image's tag (hack/build-image.sh); both name the same release
    project = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert chart["appVersion"] == project
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?", chart["version"])
    assert chart["version"].replace("-dev.", ".dev").replace("-rc.", "rc") == project
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["image"].endswith(":" + chart["appVersion"])


def crds_of(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}


def test_chart_installs_the_generated_crds_and_keeps_them(docs):
    crds = crds_of(docs)
    plain = {d["metadata"]["name"]: d for p in sorted((ROOT / "crds").glob("*.yaml"))
             for d in yaml.safe_load_all(p.read_text()) if d}
    assert sorted(crds) == sorted(plain) == ["gpupools.kubeforge.io", "inferenceservices.kubeforge.io",
                                             "modelcachenodes.kubeforge.io", "trainingjobs.kubeforge.io"]
    for name, crd in crds.items():
        assert crd["spec"] == plain[name]["spec"]  # the same schema as crds/ (kubectl apply, GitOps)
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}  # helm uninstall leaves them
        assert crd["metadata"]["labels"].items() >= {**plain[name]["metadata"]["labels"],
                                                     "app.kubernetes.io/component": "crd"}.items()
    # Helm would create a chart's crds/ directory unmanaged and never upgrade it
    assert not (CHART / "crds").exists()


def test_crds_can_be_left_to_gitops_or_deleted_with_the_release(helm):
    assert not crds_of(render(helm, "--set", "crds.install=false"))
    crds = crds_of(render(helm, "--set", "crds.keep=false"))
    assert len(crds) == 4 and not any(c["metadata"].get("annotations") for c in crds.values())


@pytest.mark.parametrize("bad", [
    "replicaCount=abc",            # wrong type
    "replicaCount=9",              # out of range
    "prometheus.allowedURLs={prometheus:9090}",  # not a URL
    "metrics.port=abc",            # wrong type
    "health.port=70000",           # out of range
    "image.pullPolicy=Sometimes",  # not in the enum
    "logLevel=trace",
    "serviceMonitor.enabled=maybe",
    "activator.enabled=yes",
    "activator.replicas=0",
    "activator.port=0",
    "activator.maxBodyBytes=-1",
    "activator.retryAfterSeconds=abc",
    "activator.unknown=1",
    "crds.install=sometimes",
    "crds.unknown=1",
])
def test_schema_rejects_bad_values(helm, bad):
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--set", bad, check=False)
    assert proc.returncode != 0, f"--set {bad} rendered:\n{proc.stdout[:500]}"
    assert "schema" in proc.stderr.lower(), proc.stderr


def test_servicemonitor_only_when_enabled(helm, docs):
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]
    sm = one(render(helm, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prom"), "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= one(docs, "Service")["metadata"]["labels"].items()
    assert not sm["spec"]["selector"]["matchLabels"].items() <= one(docs, "Service", "activator")["metadata"]["labels"].items()


def test_grafana_dashboard_only_when_enabled(helm, docs):
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    cm = one(render(helm, "--set", "grafanaDashboard.enabled=true"), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["kubeforge.json"])
    assert dash == json.loads((CHART / "dashboards" / "kubeforge.json").read_text())


def test_dashboard_uses_every_operator_metric():
    dash = json.loads((CHART / "dashboards" / "kubeforge.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    defined = set(re.findall(r'(?:Counter|Gauge|Histogram)\(\s*"(kubeforge_\w+)"', (ROOT / "operator" / "kubeforge" / "metrics.py").read_text()))
    assert len(defined) >= 8
    missing = {m for m in defined if not re.search(rf"\b{m}(_total|_bucket|_sum|_count)?\b", exprs)}
    assert not missing, f"dashboard panels miss {missing}"
    used = set(re.findall(r"\bkubeforge_\w+", exprs))
    known = defined | {m + s for m in defined for s in ("_bucket", "_sum", "_count")}
    assert used <= known, f"dashboard uses undefined metrics {used - known}"


def test_values_are_all_documented_and_in_schema():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"].startswith("http://json-schema.org/draft-07/")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])
    lines = (CHART / "values.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^ {0,2}[A-Za-z]\w*:", line) and i > 0:  # top-level values and their fields
            prev = lines[i - 1].strip()
            # a value is documented by the comment above it, or is a section whose children are
            parent_doc = prev.startswith("#")
            section = line.rstrip().endswith(":")
            assert parent_doc or section or prev.endswith(":"), f"values.yaml:{i + 1} undocumented: {line.strip()}"


# --- the activator (issue 14: hold requests at zero) ----------------------------------------


def test_activator_runs_the_same_image_with_flags_the_cli_parses(docs):
    dep = one(docs, "Deployment", "activator")
    spec = dep["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    (op,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == op["image"] and c["command"] == ["kubeforge"] and c["args"][0] == "activator"
    from kubeforge.cli import activator_cmd

    params = activator_cmd.make_context("activator", list(c["args"][1:])).params
    values = yaml.safe_load((CHART / "values.yaml").read_text())["activator"]
    assert params["port"] == values["port"] == 8012
    assert params["metrics_port"] == values["metricsPort"]
    assert params["max_body_bytes"] == values["maxBodyBytes"] and params["max_requests"] == values["maxRequests"]
    assert params["forward_timeout"] == values["forwardTimeoutSeconds"]
    assert params["retry_after"] == values["retryAfterSeconds"]
    assert pod["terminationGracePeriodSeconds"] == values["shutdownGraceSeconds"] + 5
    assert params["backend_override"] is None  # the simulator's flag never reaches a real cluster
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 8012, "metrics": values["metricsPort"]}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert env == {"POD_NAME": "metadata.name", "POD_IPS": "status.podIPs"}  # --identity, --own-address
    # Pod Security "restricted", as the operator's
    assert pod["securityContext"] == one(docs, "Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert c["securityContext"] == op["securityContext"]
    # the activator's selector never selects operator pods, nor the operator's activator pods
    sel = spec["selector"]["matchLabels"]
    assert sel["app.kubernetes.io/component"] == "activator"
    assert not one(docs, "Deployment")["spec"]["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


def test_activator_service_and_the_operator_flag_name_it(docs):
    svc = one(docs, "Service", "activator")
    assert svc["metadata"]["name"] == f"{RELEASE}-kubeforge-activator"
    assert {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} == {
        "http": (8012, "http"), "metrics": (9090, "metrics")}
    pod_labels = one(docs, "Deployment", "activator")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (op,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert f"--activator-service=kubeforge-system/{svc['metadata']['name']}" in op["args"]


def test_activator_rbac_is_list_watch_endpointslices_only(docs):
    cr = one(docs, "ClusterRole", "activator")
    assert cr["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]
    crb, sa = one(docs, "ClusterRoleBinding", "activator"), one(docs, "ServiceAccount", "activator")
    assert crb["roleRef"]["name"] == cr["metadata"]["name"]
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "kubeforge-system"}]
    assert one(docs, "Deployment", "activator")["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["metadata"]["name"] != one(docs, "ServiceAccount")["metadata"]["name"]  # not the operator's rights


def test_activator_pdb_only_with_two_replicas(helm, docs):
    pdb = one(docs, "PodDisruptionBudget", "activator")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == one(docs, "Deployment", "activator")["spec"]["selector"]["matchLabels"]
    single = render(helm, "--set", "activator.replicas=1")
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == "activator"]


def test_activator_can_be_turned_off(helm):
    docs = render(helm, "--set", "activator.enabled=false", "--set", "serviceMonitor.enabled=true")
    assert not [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "activator"]
    (op,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert not [a for a in op["args"] if a.startswith("--activator-service")]
    assert len([d for d in docs if d["kind"] == "ServiceMonitor"]) == 1


def test_activator_servicemonitor_honors_its_labels(helm):
    docs = render(helm, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prom")
    sm = one(docs, "ServiceMonitor", "activator")
    assert sm["metadata"]["labels"]["release"] == "prom"
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == "metrics" and ep["honorLabels"] is True  # namespace/service name the InferenceService
    assert sm["spec"]["selector"]["matchLabels"].items() <= one(docs, "Service", "activator")["metadata"]["labels"].items()
    assert "honorLabels" not in one(docs, "ServiceMonitor")["spec"]["endpoints"][0]


def test_activator_values(helm):
    docs = render(helm, "--set", "activator.replicas=3", "--set", "activator.port=8080", "--set", "activator.maxBodyBytes=1048576",
                  "--set", "activator.nodeSelector.role=system", "--set", "logLevel=debug",
                  "--set", "activator.resources.limits.memory=1Gi")
    dep = one(docs, "Deployment", "activator")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert dep["spec"]["replicas"] == 3
    assert "--port=8080" in c["args"] and "--max-body-bytes=1048576" in c["args"] and "--verbose" in c["args"]
    assert dep["spec"]["template"]["spec"]["nodeSelector"] == {"role": "system"}
    assert c["resources"]["limits"]["memory"] == "1Gi"
    assert {p["name"]: p["port"] for p in one(docs, "Service", "activator")["spec"]["ports"]}["http"] == 8080


def test_status_endpoint_service_rbac_and_args(helm, docs):
    svc = one(docs, "Service", "status")
    assert svc["metadata"]["name"] == f"{RELEASE}-kubeforge-status"
    assert svc["spec"]["ports"] == [{"name": "status", "port": 8443, "targetPort": "status", "protocol": "TCP"}]
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()  # every replica serves; the leader writes
    rules = one(docs, "ClusterRole")["rules"]

    def verbs(group: str, resource: str) -> set[str]:
        return {v for r in rules if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}

    assert verbs("authentication.k8s.io", "tokenreviews") == {"create"}
    assert verbs("", "configmaps") == {"get", "create", "patch"}  # kubeforge-status-ca per namespace
    role = one(docs, "Role", "status")
    assert role["metadata"]["namespace"] == "kubeforge-system"
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [f"{RELEASE}-kubeforge-status-tls"],
                      "verbs": ["get", "update"]}]
    assert [r["verbs"] for r in role["rules"] if not r.get("resourceNames")] == [["create"]]
    assert one(docs, "RoleBinding", "status")["roleRef"]["name"] == role["metadata"]["name"]

    off = render(helm, "--set", "status.enabled=false")
    assert not [d for d in off if d["metadata"]["labels"].get("app.kubernetes.io/component") == "status"]
    (c,) = one(off, "Deployment")["spec"]["template"]["spec"]["containers"]
    from kubeforge.cli import run

    params = run.make_context("run", list(c["args"][1:])).params
    assert params["status_address"] == "" and "status" not in {p["name"] for p in c["ports"]}
    quiet = render(helm, "--set", "status.workerReporting=false", "--set", "status.progressWriteSeconds=120")
    (c,) = one(quiet, "Deployment")["spec"]["template"]["spec"]["containers"]
    params = run.make_context("run", list(c["args"][1:])).params
    assert params["worker_reporting"] is False and params["progress_write_seconds"] == 120.0
