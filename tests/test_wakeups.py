"""What wakes the loops: the index handlers wake only what a change can matter to
(kubeforge.runtime.indexes), and the admission loop's safety net slows down when nothing waits
(kubeforge.runtime.admission.round_interval).

The handlers are driven through the fake API server (tests/fakekube.py), which feeds the real
handlers on every write into stores shaped like kopf's, so the Cache reads what it reads in
production.
"""

from __future__ import annotations

import asyncio

import copy

from fakekube import small_cluster
from kubeforge.admission import AdmissionPlan, Wait
from kubeforge.objects import WAITING_FOR_CAPACITY
from kubeforge.runtime import indexes as ix
from kubeforge.runtime.admission import IDLE_INTERVAL, ROUND_INTERVAL, round_interval
from records import NS, job_body

JOB = "train"


def _claim(phase: str | None, annotations: dict | None = None, volume: str | None = None) -> dict:
    body = {"metadata": {"name": f"{JOB}-checkpoint", "namespace": NS, "labels": {"kubeforge.io/job-name": JOB},
                         "annotations": annotations or {}},
            "spec": {"storageClassName": "standard", **({"volumeName": volume} if volume else {})},
            "status": {"phase": phase} if phase else {}}
    return body


def test_a_claim_wakes_admission_when_it_appears_and_its_job_only_when_its_phase_or_class_changes():
    async def scenario():
        kube = await small_cluster()
        rt = kube.new_runtime()
        seen = []

        async def step(body, new=False):
            rt.admission_wake.clear()
            rt.jobs.take()
            await kube.put("PersistentVolumeClaim", body, new=new)
            seen.append((rt.admission_wake.is_set(), sorted(rt.jobs.urgent), rt.jobs.take()))

        # created: admission reads whether a claim exists (existingClaimName), the job its phase
        await step(_claim(None), new=True)
        # the PV controller's annotation, then the bind: nothing either reads
        await step(_claim("Pending", {"volume.kubernetes.io/storage-provisioner": "sim"}))
        await step(_claim("Pending", {"volume.kubernetes.io/storage-provisioner": "sim"}, volume="pv-1"))
        # Bound: the job lifts its volume gate, in the urgent lane (its gated pods hold GPUs)
        await step(_claim("Bound", {"volume.kubernetes.io/storage-provisioner": "sim"}, volume="pv-1"))
        return seen

    job = (NS, JOB)
    assert asyncio.run(scenario()) == [(True, [], [job]), (False, [], []), (False, [], []), (False, [job], [job])]


def test_the_echo_of_our_own_status_write_queues_no_reconcile_and_any_other_version_does():
    async def scenario():
        kube = await small_cluster()
        rt = kube.new_runtime()
        body = await kube.client_create("TrainingJob", job_body("j"))
        key = (NS, "j")
        rt.jobs.take()
        written = copy.deepcopy(body)
        written["metadata"]["resourceVersion"] = "900"
        written["status"] = {"phase": "Pending"}
        rt.cache.remember(key, written)  # the answer to our status write
        out = []
        for rv in ("900", "901"):  # its echo, then someone else's change
            b = copy.deepcopy(written)
            b["metadata"]["resourceVersion"] = rv
            await ix.kf_jobs(body=b, memo=type("M", (), {"rt": rt})())
            out.append(rt.jobs.take())
        return out

    assert asyncio.run(scenario()) == [[], [(NS, "j")]]


def test_a_pod_event_that_changes_nothing_the_record_keeps_queues_no_reconcile():
    async def scenario():
        kube = await small_cluster()
        rt = kube.new_runtime()
        pod = {"metadata": {"name": "j-0", "namespace": NS, "labels": {"kubeforge.io/job-name": "j"}},
               "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"}}
        out = []
        await kube.put("Pod", pod, new=True)
        out.append(rt.jobs.take())
        pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]  # nothing kubeforge reads
        await kube.put("Pod", pod)
        out.append(rt.jobs.take())
        pod["status"]["phase"] = "Running"
        await kube.put("Pod", pod)
        out.append(rt.jobs.take())
        return out

    job = (NS, "j")
    assert asyncio.run(scenario()) == [[job], [], [job]]


def test_the_safety_net_round_slows_down_only_after_a_round_that_decided_nothing_and_left_nothing_waiting():
    waiting = AdmissionPlan(wait=[Wait((NS, "j"), WAITING_FOR_CAPACITY, "no room")])
    now = 1000.0
    assert round_interval(None, now) == ROUND_INTERVAL  # no round yet, or the last one failed
    assert round_interval(waiting, now) == ROUND_INTERVAL
    assert round_interval(AdmissionPlan(serving_waits={(NS, "s"): (WAITING_FOR_CAPACITY, "no room")}), now) == ROUND_INTERVAL
    assert round_interval(AdmissionPlan(), now) == IDLE_INTERVAL > ROUND_INTERVAL
    # a job's restart back-off ends in 4 s: nothing but the time wakes a round for it
    assert round_interval(AdmissionPlan(backoff_ends=now + 4), now) == 4
    assert round_interval(AdmissionPlan(backoff_ends=now + 60), now) == IDLE_INTERVAL


def test_a_round_reports_when_the_first_restart_back_off_ends():
    from kubeforge.admission import plan_admission
    from records import NOW, iso, mk_node, mk_pool, snapshot, view, mk_job

    backoff = view(mk_job("b", status={"phase": "Restarting", "restartNotBefore": iso(NOW + 30)}))
    later = view(mk_job("c", status={"phase": "Restarting", "restartNotBefore": iso(NOW + 90)}))
    snap = snapshot(pools=[mk_pool("p")], nodes=[mk_node("n0")], jobs=[backoff, later])
    plan = plan_admission(snap, NOW)
    assert plan.wait == [] and plan.admit == [] and plan.backoff_ends == NOW + 30
    after = plan_admission(snap, NOW + 31)  # "b" is admitted now; "c" is still backing off
    assert [a.key for a in after.admit] == [backoff.key] and after.backoff_ends == NOW + 90
