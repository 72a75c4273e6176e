"""The peers' pure helpers, without a cluster: kustomize inputs -> objects for the sim's API
server, the Kueue objects and JobSets as a user writes them, who writes what in the Kueue
phase, and the profile summary."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from e2e.bench.training.kueue import who_writes
from e2e.peers import queues
from e2e.peers._manifests import crds, webhook_configurations, webhook_groups


def _write(path: Path, *docs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n---\n".join(yaml.safe_dump(d) for d in docs))


def _webhook(name: str, group: str, path: str) -> dict:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["x"]}]}


@pytest.fixture
def layout(tmp_path):
    """A fake 'jobset' module layout: one CRD with a conversion patch, webhooks with both kinds
    of kustomize patch (an RFC 6902 list with a target, and a strategic merge)."""
    base = tmp_path / "manifests" / "jobset" / "config" / "components"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "jobsets.jobset.x-k8s.io"}, "spec": {"group": "jobset.x-k8s.io"}}
    _write(base / "crd" / "bases" / "jobsets.yaml", crd)
    _write(base / "crd" / "patches" / "webhook_in_jobsets.yaml", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobsets.jobset.x-k8s.io"},
        "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {
            "namespace": "system", "name": "webhook-service", "path": "/convert"}}, "conversionReviewVersions": ["v1"]}}}})
    _write(base / "crd" / "kustomization.yaml", {"resources": ["bases/jobsets.yaml"],
                                                 "patches": [{"path": "patches/webhook_in_jobsets.yaml"}]})
    mutating = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "mutating-webhook-configuration"},
                "webhooks": [_webhook("mjobset.kb.io", "jobset.x-k8s.io", "/mutate-jobset"),
                             _webhook("mpod.kb.io", "", "/mutate--v1-pod")]}
    _write(base / "webhook" / "manifests.yaml", mutating)
    (base / "webhook" / "patches").mkdir(parents=True)
    _write(base / "webhook" / "patches" / "pod.yaml", [{"op": "replace", "path": "/webhooks/1/objectSelector",
                                                        "value": {"matchExpressions": [{"key": "jobset", "operator": "Exists"}]}}])
    _write(base / "webhook" / "kustomization.yaml", {"resources": ["manifests.yaml"], "patches": [
        {"path": "patches/pod.yaml", "target": {"kind": "MutatingWebhookConfiguration",
                                                 "name": "mutating-webhook-configuration"}},
        {"patch": yaml.safe_dump({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                                  "metadata": {"name": "mutating-webhook-configuration"},
                                  "webhooks": [{"name": "mjobset.kb.io", "timeoutSeconds": 7}]})}]})
    return tmp_path


def test_crds_get_their_conversion_webhook_on_loopback(layout):
    (crd,) = crds(layout, "jobset", "https://127.0.0.1:9443", "Q0E=")
    wh = crd["spec"]["conversion"]["webhook"]
    assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    assert wh["clientConfig"] == {"url": "https://127.0.0.1:9443/convert", "caBundle": "Q0E="}


def test_webhooks_are_patched_renamed_and_pointed_at_loopback(layout):
    (cfg,) = webhook_configurations(layout, "jobset", "https://127.0.0.1:9443", "Q0E=")
    assert cfg["metadata"] == {"name": "jobset-mutating-webhook-configuration", "labels": {"kubeforge.io/peer": "jobset"}}
    by = {w["name"]: w for w in cfg["webhooks"]}
    assert by["mpod.kb.io"]["objectSelector"]["matchExpressions"][0]["key"] == "jobset"  # RFC 6902 patch
    assert by["mjobset.kb.io"]["timeoutSeconds"] == 7  # strategic merge by webhook name
    assert by["mpod.kb.io"]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate--v1-pod", "caBundle": "Q0E="}
    assert all("service" not in w["clientConfig"] for w in cfg["webhooks"])


def test_webhooks_of_integrations_not_run_are_dropped(layout):
    (cfg,) = webhook_configurations(layout, "jobset", "https://x", "", keep=lambda w: webhook_groups(w) <= {"jobset.x-k8s.io"})
    assert [w["name"] for w in cfg["webhooks"]] == ["mjobset.kb.io"]


def test_jobset_asks_for_the_topology_the_job_asks_for():
    js = queues.jobset("j", "ns", 3, 8, "q", "Required", "nvidia.com/gpu.clique", priority_class="high",
                       pod_annotations=queues.KWOK_KEEP_RUNNING)
    assert js["metadata"]["labels"] == {queues.QUEUE_LABEL: "q", queues.PRIORITY_LABEL: "high"}
    job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (3, 3, "Indexed")
    ann = job["template"]["metadata"]["annotations"]
    assert ann[queues.REQUIRED] == "nvidia.com/gpu.clique" and queues.PREFERRED not in ann
    assert job["template"]["spec"]["containers"][0]["resources"]["requests"] == {queues.GPU: "8"}
    pref = queues.jobset("j", "ns", 1, 1, "q", "Preferred", "b")["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert pref["template"]["metadata"]["annotations"] == {queues.PREFERRED: "b"}
    none = queues.jobset("j", "ns", 1, 1, "q", "None")["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert none["template"]["metadata"]["annotations"] == {queues.UNCONSTRAINED: "true"}
    with pytest.raises(ValueError):
        queues.jobset("j", "ns", 1, 1, "q", "Required", None)


def test_topology_ends_at_the_host_and_queues_lend_in_a_cohort():
    t = queues.topology("t", ["block", "clique"])
    assert [lv["nodeLabel"] for lv in t["spec"]["levels"]] == ["block", "clique", queues.HOSTNAME]
    cq = queues.cluster_queue("a", "f", 64, cohort="pool", reclaim_within_cohort="Any", within_cluster_queue="LowerPriority")
    assert cq["spec"]["cohortName"] == "pool"
    assert cq["spec"]["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [{"name": queues.GPU, "nominalQuota": 64}]


@pytest.mark.parametrize("call,who", [
    (("POST", "jobset.x-k8s.io", "jobsets", ""), "bench"),
    (("POST", "", "pods", "binding"), "kube-scheduler"),
    (("POST", "", "pods", ""), "job controller"),
    (("PATCH", "", "pods", ""), "kueue"),
    (("APPLY", "kueue.x-k8s.io", "workloads", "status"), "kueue"),
    (("POST", "batch", "jobs", ""), "jobset"),
    (("PUT", "batch", "jobs", "status"), "job controller"),
    (("PATCH", "", "pods", "status"), "kwok"),
])
def test_kueue_phase_attributes_writes(call, who):
    assert who_writes(*call) == who


def test_profile_summary_counts_areas_and_functions(tmp_path):
    from e2e.bench.profile_operator import summarize

    raw = tmp_path / "raw.txt"
    raw.write_text("process 1;thread (0x1);run (asyncio/events.py:80);handle (kopf/_core/x.py:10);"
                   "loads (json/__init__.py:346) 30\n"
                   "process 1;run (asyncio/events.py:80);plan (kubeforge/admission/_plan.py:226) 70\n")
    out = summarize(raw, 5)
    assert "100 samples" in out
    assert "70.0%  kubeforge admission (pure)" in out and "30.0%  JSON" in out
    assert "70.0%  plan (admission/_plan.py)" in out  # inclusive; entry points on every stack are left out
    assert "run (asyncio/events.py)" not in out.split("inclusive")[1]
