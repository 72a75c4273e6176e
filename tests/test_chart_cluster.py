"""The Helm chart against the real API server: server-side validation, Pod Security
`restricted` admission, the RBAC it grants, upgrade, and a clean uninstall."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import get_json, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kubeforge"
# The session cluster's CRDs were applied with kubectl (conftest), as GitOps users manage them: the
# chart leaves them alone (crds.install=false). tests/test_upgrade_cluster.py installs them with the chart.
IMAGE = ["--set", "image.repository=registry.invalid/kubeforge", "--set", "image.tag=test", "--set", "crds.install=false"]


def helm(cluster, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True,
                          env=cluster.env(), input=input, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def release_name() -> str:
    return f"kf{uuid.uuid4().hex[:6]}"


@pytest.fixture
def restricted_namespace(cluster, namespace):
    cluster.kubectl("label", "namespace", namespace, "--overwrite",
                    "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest",
                    "pod-security.kubernetes.io/warn=restricted")
    return namespace


def release_objects(cluster, release: str, namespace: str) -> list[str]:
    """Objects labelled with the release (namespaced ones in ``namespace``), as kind/name."""
    sel = f"app.kubernetes.io/instance={release}"
    found = []
    for kinds, ns_args in (("clusterroles,clusterrolebindings", ()),
                           ("serviceaccounts,deployments,replicasets,services,configmaps,roles,rolebindings,"
                            "poddisruptionbudgets", ("-n", namespace))):
        out = cluster.kubectl("get", kinds, *ns_args, "-l", sel, "-o", "name").stdout
        found += [line for line in out.splitlines() if line.strip()]
    return found


def test_rendered_chart_passes_server_side_dry_run(cluster, namespace):
    rendered = helm(cluster, "template", release_name(), str(CHART), "--namespace", namespace, *IMAGE,
                    "--set", "watchNamespaces={" + namespace + "}", "--set", "logLevel=debug").stdout
    assert "kind: Deployment" in rendered
    proc = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=rendered, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "deployment.apps" in proc.stdout and "clusterrole.rbac.authorization.k8s.io" in proc.stdout
    assert "-activator" in proc.stdout  # the activator's objects (status.podIPs env included) pass validation


def test_install_is_admitted_under_restricted_pod_security(cluster, restricted_namespace):
    ns, rel = restricted_namespace, release_name()
    try:
        out = helm(cluster, "install", rel, str(CHART), "--namespace", ns, *IMAGE)
        assert "PodSecurity" not in out.stderr, out.stderr  # the `warn` label prints violations
        def pods_or_failure(component: str):
            dep = wait_for(lambda: get_json(cluster, "deployments", "-n", ns, "-l",
                                            f"app.kubernetes.io/instance={rel},app.kubernetes.io/component={component}")["items"],
                           timeout=30, what=f"the {component} Deployment")[0]
            sel = ",".join(f"{k}={v}" for k, v in dep["spec"]["selector"]["matchLabels"].items())
            events = get_json(cluster, "events", "-n", ns)["items"]
            bad = [e["message"] for e in events if e.get("reason") == "FailedCreate"]
            if bad:
                raise AssertionError(f"the ReplicaSet could not create the pod: {bad}")
            return get_json(cluster, "pods", "-n", ns, "-l", sel)["items"]

        for component, command in (("operator", "run"), ("activator", "activator")):
            pods = wait_for(lambda: len(p := pods_or_failure(component)) == 2 and p, timeout=60,
                            what=f"both {component} replicas admitted")
            for pod in pods:
                assert pod["spec"]["securityContext"]["runAsUser"] == 65532
                assert pod["spec"]["containers"][0]["args"][0] == command
        # the ServiceAccount may hold the leader Lease in its own namespace only
        sa = f"system:serviceaccount:{ns}:{rel}-kubeforge"
        for verb in ("get", "create", "update"):
            assert cluster.kubectl("auth", "can-i", "--as", sa, verb, "leases.coordination.k8s.io", "-n", ns,
                                   check=False).stdout.strip() == "yes"
        assert cluster.kubectl("auth", "can-i", "--as", sa, "update", "leases.coordination.k8s.io", "-n", "kube-system",
                               check=False).stdout.strip() == "no"
        events = get_json(cluster, "events", "-n", ns)["items"]
        assert not [e for e in events if "PodSecurity" in e.get("message", "")]

        # the ServiceAccount is granted what the operator needs, and no more
        sa = f"system:serviceaccount:{ns}:{rel}-kubeforge"

        def can(*args: str) -> bool:
            return cluster.kubectl("auth", "can-i", "--as", sa, *args, check=False).stdout.strip() == "yes"

        assert can("watch", "trainingjobs.kubeforge.io", "-A")
        assert can("patch", "trainingjobs.kubeforge.io", "--subresource=status", "-n", "default")
        assert can("patch", "gpupools.kubeforge.io", "--subresource=status")
        assert can("create", "pods", "-n", "default")
        assert can("delete", "deployments.apps", "-n", "default")  # 0.1 Deployments, deleted once
        assert not can("create", "deployments.apps", "-n", "default")
        assert can("list", "nodes")
        assert can("watch", "namespaces")
        assert can("list", "customresourcedefinitions.apiextensions.k8s.io")
        assert can("create", "events", "-n", "default")
        assert not can("patch", "trainingjobs.kubeforge.io", "-n", "default")  # never the spec
        assert not can("get", "secrets", "-n", ns)
        assert not can("delete", "nodes")

        # the activator's ServiceAccount lists and watches EndpointSlices, nothing more
        act = f"system:serviceaccount:{ns}:{rel}-kubeforge-activator"

        def act_can(*args: str) -> bool:
            return cluster.kubectl("auth", "can-i", "--as", act, *args, check=False).stdout.strip() == "yes"

        assert act_can("list", "endpointslices.discovery.k8s.io", "-A")
        assert act_can("watch", "endpointslices.discovery.k8s.io", "-A")
        for verb, what in (("get", "endpointslices.discovery.k8s.io"), ("create", "endpointslices.discovery.k8s.io"),
                           ("list", "pods"), ("list", "services"), ("get", "secrets"), ("list", "inferenceservices.kubeforge.io")):
            assert not act_can(verb, what, "-n", "default"), (verb, what)
    finally:
        helm(cluster, "uninstall", rel, "--namespace", ns, "--wait", check=False)


def test_upgrade_then_uninstall_leaves_nothing_but_crds(cluster, namespace):
    ns, rel = namespace, release_name()
    crds_before = {c["metadata"]["name"] for c in get_json(cluster, "crds")["items"] if c["spec"]["group"] == "kubeforge.io"}
    assert len(crds_before) == len(list((ROOT / "crds").glob("*.yaml"))) == 4
    try:
        helm(cluster, "install", rel, str(CHART), "--namespace", ns, *IMAGE)
        dep_name = f"{rel}-kubeforge"
        before = get_json(cluster, "deployment", dep_name, "-n", ns)
        helm(cluster, "upgrade", rel, str(CHART), "--namespace", ns, *IMAGE, "--set", "logLevel=debug",
             "--set", "watchNamespaces={" + ns + "}", "--set", "grafanaDashboard.enabled=true")
        after = get_json(cluster, "deployment", dep_name, "-n", ns)
        assert after["metadata"]["generation"] > before["metadata"]["generation"]
        args = after["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--verbose" in args and f"--namespace={ns}" in args
        assert after["spec"]["strategy"]["type"] == "RollingUpdate"
        status = json.loads(helm(cluster, "status", rel, "--namespace", ns, "-o", "json").stdout)
        assert status["info"]["status"] == "deployed" and status["version"] == 2
        cm = get_json(cluster, "configmaps", "-n", ns, "-l", "grafana_dashboard=1")["items"]
        assert len(cm) == 1
        assert {k for k in release_objects(cluster, rel, ns) if not k.startswith("replicaset")} == {
            f"clusterrole.rbac.authorization.k8s.io/{rel}-kubeforge",
            f"clusterrolebinding.rbac.authorization.k8s.io/{rel}-kubeforge",
            f"serviceaccount/{rel}-kubeforge",
            f"deployment.apps/{rel}-kubeforge",
            f"service/{rel}-kubeforge-metrics",
            f"role.rbac.authorization.k8s.io/{rel}-kubeforge-leader-election",
            f"rolebinding.rbac.authorization.k8s.io/{rel}-kubeforge-leader-election",
            f"poddisruptionbudget.policy/{rel}-kubeforge",
            f"configmap/{rel}-kubeforge-dashboard",
            f"clusterrole.rbac.authorization.k8s.io/{rel}-kubeforge-activator",
            f"clusterrolebinding.rbac.authorization.k8s.io/{rel}-kubeforge-activator",
            f"serviceaccount/{rel}-kubeforge-activator",
            f"deployment.apps/{rel}-kubeforge-activator",
            f"service/{rel}-kubeforge-activator",
            f"poddisruptionbudget.policy/{rel}-kubeforge-activator",
            # the workers' status endpoint (status.enabled): its Service and the Role on its TLS Secret
            f"service/{rel}-kubeforge-status",
            f"role.rbac.authorization.k8s.io/{rel}-kubeforge-status-tls",
            f"rolebinding.rbac.authorization.k8s.io/{rel}-kubeforge-status-tls",
        }
    finally:
        helm(cluster, "uninstall", rel, "--namespace", ns, "--wait", check=False)
    wait_for(lambda: not release_objects(cluster, rel, ns), timeout=60, what="the release's objects to be deleted")
    crds_after = {c["metadata"]["name"] for c in get_json(cluster, "crds")["items"] if c["spec"]["group"] == "kubeforge.io"}
    assert crds_after == crds_before  # crds.install=false: the release never owned them
    assert helm(cluster, "status", rel, "--namespace", ns, check=False).returncode != 0
