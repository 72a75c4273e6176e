"""The chart's node cache agent (issue 29), rendered without a cluster: off by default; when on, a
DaemonSet running `kubeforge cache-agent` from the operator's image with flags the CLI parses,
its node's name from the downward API, the host directory at the same path, and RBAC limited to
ModelCacheNodes (get, watch; patch of status) and, with readSecrets, get on Secrets."""

from __future__ import annotations

import yaml

from test_chart import CHART, helm, one, render, run_helm  # noqa: F401 (helm: the fixture)

ON = ("--set", "cacheAgent.enabled=true")


def component(docs: list[dict], name: str) -> list[dict]:
    return [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == name]


def test_off_by_default(helm):
    assert component(render(helm), "cache-agent") == []


def test_lint_with_the_agent_on(helm):
    run_helm(helm, "lint", "--strict", str(CHART), *ON, "--set", "cacheAgent.hfEndpoint=http://hub.local:8080")


def test_daemonset_runs_the_agent_with_flags_the_cli_parses(helm):
    docs = render(helm, *ON, "--set", "cacheAgent.hfEndpoint=http://hub.local:8080")
    assert sorted(d["kind"] for d in component(docs, "cache-agent")) == [
        "ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"]
    ds = one(docs, "DaemonSet", "cache-agent")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    (op,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == op["image"] and c["command"] == ["kubeforge"] and c["args"][0] == "cache-agent"
    from kubeforge.cli import cache_agent_cmd

    env = {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env["NODE_NAME"] == "spec.nodeName" and env["POD_NAME"] == "metadata.name"
    assert env["HF_ENDPOINT"] == "http://hub.local:8080"
    values = yaml.safe_load((CHART / "values.yaml").read_text())["cacheAgent"]
    params = cache_agent_cmd.make_context("cache-agent", list(c["args"][1:]) + ["--node", "n"]).params
    assert params["interval"] == values["intervalSeconds"] and not params["once"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["models"] == volumes["models"]["hostPath"]["path"] == values["hostPath"] == "/var/lib/kubeforge/models"
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["tolerations"] == values["tolerations"]
    assert ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "cache-agent"


def test_rbac_is_model_cache_nodes_and_get_secrets_only(helm):
    rules = one(render(helm, *ON), "ClusterRole", "cache-agent")["rules"]
    assert rules == [
        {"apiGroups": ["kubeforge.io"], "resources": ["modelcachenodes"], "verbs": ["get", "watch"]},
        {"apiGroups": ["kubeforge.io"], "resources": ["modelcachenodes/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    ]
    rules = one(render(helm, *ON, "--set", "cacheAgent.readSecrets=false"), "ClusterRole", "cache-agent")["rules"]
    assert all("secrets" not in r["resources"] for r in rules)
