"""Never hold a GPU silently: refused creates, startup timeouts, storage that cannot bind, spec
edits of running objects, pool fallback after a wait, and the Ready condition, against the real
control plane with the operator running.

Every path here must end with the GPUs either used by running pods or released with a
condition and an Event that say why.
"""

from __future__ import annotations

import json

import pytest

from conftest import (
    apply, condition, events_for, get_json, job_pods, job_status, running_pods, training_job, wait_for,
)

pytestmark = pytest.mark.cluster


def pool_allocated(cluster, pool: str) -> int | None:
    return ((get_json(cluster, "gpupool", pool).get("status") or {}).get("gpus") or {}).get("allocated")


def test_pod_the_api_server_refuses_releases_the_gpus_and_waits_for_a_spec_fix(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    job = training_job("badvol", namespace)
    # A port the model does not check but the API server refuses (422). (A volume name that is
    # no DNS label, the case this test used first, is now refused by the model before admission.)
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 70000}]
    apply(cluster, job)
    st = wait_for(lambda: (s := job_status(cluster, namespace, "badvol")) and (condition(s, "Admitted") or {}).get("reason") == "InvalidSpec" and s,
                  timeout=30, what="Admitted=False/InvalidSpec from the refused pod")
    adm = condition(st, "Admitted")
    assert adm["status"] == "False" and "HTTP 422" in adm["message"] and "70000" in adm["message"], adm
    assert not st.get("placement") and st["restarts"]["startupFailures"] == 0
    assert any(e["reason"] == "InvalidSpec" and e["type"] == "Warning" for e in events_for(cluster, namespace, "badvol"))
    wait_for(lambda: pool_allocated(cluster, namespace) == 0, timeout=30, what="the GPUs released in the pool status")
    attempt = st["attempt"]
    for _ in range(3):  # no retry loop: the job waits for an edit
        assert job_status(cluster, namespace, "badvol")["attempt"] == attempt
    log = (cluster.dir / "operator.log").read_text()
    assert "Traceback" not in log.split("badvol")[-1]
    # The fix: an edit of the template; the job is admitted again and runs.
    cluster.kubectl("patch", "trainingjob", "badvol", "-n", namespace, "--type=json",
                    "-p", json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/ports/0/containerPort", "value": 9400}]))
    wait_for(lambda: len(running_pods(cluster, namespace, "badvol")) == 2, timeout=60, what="the fixed job running")


def test_quota_refusal_is_a_startup_failure_with_backoff_then_failed(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    cluster.kubectl("create", "quota", "one-pod", "-n", namespace, "--hard=pods=1")
    apply(cluster, training_job("quota", namespace, failurePolicy={"maxStartupRetries": 1, "backoffSeconds": 1, "maxBackoffSeconds": 2}))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "quota")).get("phase") == "Failed" and s,
                  timeout=90, what="Failed after the startup retries")
    assert condition(st, "Failed")["reason"] == "StartupRetryLimitExceeded"
    assert "exceeded quota" in condition(st, "Failed")["message"]
    assert st["restarts"] == {"failures": 0, "preemptions": 0, "startupFailures": 1}
    reasons = [e["reason"] for e in events_for(cluster, namespace, "quota")]
    assert "CreateFailed" in reasons and "Failed" in reasons
    wait_for(lambda: not [p for p in job_pods(cluster, namespace, "quota") if not p["metadata"].get("deletionTimestamp")],
             timeout=60, what="the created pods deleted")
    wait_for(lambda: pool_allocated(cluster, namespace) == 0, timeout=30, what="no GPU held")


def test_missing_storage_class_holds_no_gpus_until_fixed(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("nosc", namespace, checkpoint={"storageClassName": "does-not-exist"}))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "nosc")) and condition(s, "Admitted") and s, timeout=30)
    adm = condition(st, "Admitted")
    assert adm["reason"] == "StorageClassNotFound" and "does-not-exist" in adm["message"]
    assert cluster.kubectl("get", "pvc", "nosc-checkpoint", "-n", namespace, check=False).returncode != 0
    assert not st.get("placement")
    cluster.kubectl("patch", "trainingjob", "nosc", "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"checkpoint": {"storageClassName": "kubeforge-sim"}}}))
    wait_for(lambda: len(running_pods(cluster, namespace, "nosc")) == 2, timeout=60, what="running once the class exists")


def test_claim_that_never_binds_times_out_releases_the_gpus_and_fails_after_the_retries(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "stuck", "namespace": namespace},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "no-provisioner-here",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    apply(cluster, pvc)
    apply(cluster, training_job("stuck", namespace, startupTimeoutSeconds=15,
                                checkpoint={"existingClaimName": "stuck"},
                                failurePolicy={"maxStartupRetries": 0}))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "stuck")).get("phase") == "Failed" and s,
                  timeout=90, what="the startup timeout to end the job")
    failed, adm = condition(st, "Failed"), condition(st, "Admitted")
    assert failed["reason"] == "StartupRetryLimitExceeded"
    assert adm["reason"] == "Unschedulable" and "unbound immediate PersistentVolumeClaims" in adm["message"], adm
    assert "15s after admission" in adm["message"]
    wait_for(lambda: pool_allocated(cluster, namespace) == 0, timeout=30, what="no GPU held after the timeout")
    assert any(e["reason"] == "Failed" and "unbound immediate PersistentVolumeClaims" in e["message"]
               for e in events_for(cluster, namespace, "stuck"))


def test_node_selector_matching_nothing_in_the_pool_holds_nothing(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    job = training_job("nosel", namespace)
    job["spec"]["template"]["spec"]["nodeSelector"] = {"example.com/zone": "moon"}
    apply(cluster, job)
    st = wait_for(lambda: (s := job_status(cluster, namespace, "nosel")) and condition(s, "Admitted") and s, timeout=30)
    adm = condition(st, "Admitted")
    assert adm["reason"] == "Unschedulable" and "nodeSelector example.com/zone=moon" in adm["message"], adm
    assert job_pods(cluster, namespace, "nosel") == []


def test_template_edit_of_a_running_job_restarts_the_gang_as_a_new_attempt(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("edit", namespace))
    wait_for(lambda: len(running_pods(cluster, namespace, "edit")) == 2, timeout=60)
    job = training_job("edit", namespace, replicas=1)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "LR", "value": "3e-4"}]
    apply(cluster, job)

    def edited():
        pods = running_pods(cluster, namespace, "edit")
        return len(pods) == 1 and pods[0]["metadata"]["labels"]["kubeforge.io/restart-attempt"] == "1" and pods
    (pod,) = wait_for(edited, timeout=60, what="one pod of attempt 1 with the new template")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["LR"] == "3e-4" and env["PET_NNODES"] == "1"
    st = wait_for(lambda: (s := job_status(cluster, namespace, "edit")).get("phase") == "Running" and s, timeout=30)
    assert st["restarts"] == {"failures": 0, "preemptions": 0, "startupFailures": 0}  # neither a failure nor a preemption
    assert any(e["reason"] == "SpecChanged" for e in events_for(cluster, namespace, "edit"))


def test_kubectl_wait_for_ready(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)
    apply(cluster, training_job("waitme", namespace))
    out = cluster.kubectl("wait", "--for=condition=Ready", "trainingjob/waitme", "-n", namespace, "--timeout=60s")
    assert "condition met" in out.stdout
    st = job_status(cluster, namespace, "waitme")
    assert condition(st, "Ready")["reason"] == "AllWorkersRunning" and st["phase"] == "Running"


def test_a_job_moves_to_the_next_pool_after_waiting_fallback_after_seconds(cluster, namespace, fleet):
    first, second = f"{namespace}-a", f"{namespace}-b"
    fleet(cliques=1, nodes=2, pool=first)
    fleet(cliques=1, nodes=2, pool=second)
    apply(cluster, training_job("hog", namespace, pools=[first]))
    wait_for(lambda: len(running_pods(cluster, namespace, "hog")) == 2, timeout=60)
    apply(cluster, training_job("patient", namespace, pools=[first, second], fallbackAfterSeconds=5))
    st = wait_for(lambda: (s := job_status(cluster, namespace, "patient")) and condition(s, "Admitted") and s, timeout=30)
    assert condition(st, "Admitted")["reason"] == "WaitingForCapacity"  # first it waits for its first pool
    st = wait_for(lambda: (s := job_status(cluster, namespace, "patient")).get("phase") == "Running" and s,
                  timeout=60, what="the job running in the second pool after 5 s")
    assert st["placement"]["pool"] == second
    assert st["restarts"]["preemptions"] == 0


def test_pool_status_adds_up_on_every_domain(cluster, namespace, fleet):
    nodes = fleet(cliques=2, nodes=2)
    apply(cluster, training_job("sum", namespace, replicas=1))
    wait_for(lambda: len(running_pods(cluster, namespace, "sum")) == 1, timeout=60)
    cluster.kubectl("cordon", nodes[-1])
    try:
        def settled():
            st = get_json(cluster, "gpupool", namespace).get("status") or {}
            return st.get("gpus", {}).get("unavailable") == 8 and st
        st = wait_for(settled, timeout=30, what="the cordoned node's GPUs counted as unavailable")
        for counts in [st["gpus"], st["spotGPUs"], st["onDemandGPUs"]] + [d["gpus"] for d in st["domains"]]:
            assert counts["allocated"] + counts["free"] == counts["allocatable"], counts
        assert st["gpus"]["allocatable"] + st["gpus"]["unavailable"] == 32
        assert st["gpus"]["allocated"] == 8
    finally:
        cluster.kubectl("uncordon", nodes[-1], check=False)
