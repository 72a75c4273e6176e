"""Wake-ups: what wakes the loops. The index handlers (kubeforge.runtime.indexes) wake only what
a change can matter to, and the admission loop's safety net slows down when nothing waits
(kubeforge.runtime.admission.round_interval); a burst's admissions are written before any of its
gangs' pods are made (kubeforge.runtime.training).

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


def test_a_claim_wakes_admission_when_it_appears_or_goes_and_its_job_only_when_its_phase_or_class_changes():
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

        # deleted: its entry goes (the informer's on-gone handler) and admission looks again
        rt.admission_wake.clear()
        await kube.remove("PersistentVolumeClaim", NS, f"{JOB}-checkpoint")
        seen.append((rt.admission_wake.is_set(), rt.cache.claim((NS, f"{JOB}-checkpoint"))))
        return seen

    job = (NS, JOB)
    assert asyncio.run(scenario()) == [(True, [], [job]), (False, [], []), (False, [], []), (False, [job], [job]),
                                       (True, None)]


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

        def seen():
            batched = sorted(rt.jobs.batched)
            out.append((rt.jobs.take(), batched))

        await kube.put("Pod", pod, new=True)
        seen()
        pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]  # nothing kubeforge reads
        await kube.put("Pod", pod)
        seen()
        pod["status"]["phase"] = "Running"
        await kube.put("Pod", pod)
        seen()
        await kube.remove("Pod", NS, "j-0")
        seen()
        return out

    job = (NS, "j")
    # each change queues the job within the pod-event batch period (POD_EVENT_BATCH_SECONDS),
    # the deletion too
    assert asyncio.run(scenario()) == [([job], [job]), ([], []), ([job], [job]), ([job], [job])]


def test_a_node_heartbeat_keeps_the_very_record_and_wakes_nothing_a_change_replaces_it_and_wakes_admission():
    # the admission round reuses a pool's view and placement index only while the node objects
    # are the same ones (pool_view's basis): an equal copy per heartbeat would rebuild them all
    async def scenario():
        kube = await small_cluster()
        rt = kube.new_runtime()
        body = copy.deepcopy(kube.get("Node", None, "n0"))
        before = rt.cache.node("n0")
        rt.admission_wake.clear()
        body["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                         "lastHeartbeatTime": "2026-11-27T10:00:00Z"}]
        await kube.put("Node", body)
        heartbeat = (rt.cache.node("n0") is before, rt.admission_wake.is_set())
        body["metadata"].setdefault("labels", {})["nvidia.com/gpu.clique"] = "c9"
        await kube.put("Node", body)
        after = rt.cache.node("n0")
        return heartbeat, (after is before, after.labels.get("nvidia.com/gpu.clique"), rt.admission_wake.is_set())

    assert asyncio.run(scenario()) == ((True, False), (False, "c9", True))


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


def test_an_admission_round_writes_every_admitted_status_before_any_gang_creates_its_pods():
    """A reconcile that writes an admission while other admissions wait in the urgent lane
    leaves its pods to a second pass in the follow-up lane, after every urgent key
    (kubeforge.runtime.training._admissions_first): a burst's gangs are all Admitted after one
    API round trip each. With nothing else waiting, the same reconcile creates the pods."""
    from kubeforge.runtime.admission import admission_round
    from kubeforge.runtime.training import reconcile_job

    def pods(kube):
        return sorted(p["metadata"]["name"] for p in kube.items("Pod"))

    def admitted(kube, name):
        conds = kube.get("TrainingJob", NS, name)["status"].get("conditions") or []
        return any(c["type"] == "Admitted" and c["status"] == "True" for c in conds)

    async def scenario():
        kube = await small_cluster(nodes=3)
        rt = kube.new_runtime()
        for name in ("a", "b", "c"):
            await kube.client_create("TrainingJob", job_body(name, replicas=1, gpus=8))
        rt.jobs.take()
        plan = await admission_round(rt, kube.now)
        assert sorted(k[1] for k in rt.jobs.urgent) == ["a", "b", "c"]
        steps = []
        # the workers take a, then b: each finds the rest of the round waiting behind it
        for name in ("a", "b"):
            rt.jobs.urgent.discard((NS, name))
            rt.jobs.keys.discard((NS, name))
            await reconcile_job(rt, (NS, name))
            steps.append((name, admitted(kube, name), pods(kube), sorted(k[1] for k in rt.jobs.urgent),
                          sorted(k[1] for k in rt.jobs.follow_up)))
        # c is the last of the round: nothing waits behind it (a and b are taken by then)
        rt.jobs.take()
        await reconcile_job(rt, (NS, "c"))
        steps.append(("c", admitted(kube, "c"), pods(kube), [], []))
        for name in ("a", "b"):  # the second passes
            await reconcile_job(rt, (NS, name))
        return len(plan.admit), steps, pods(kube), [kube.get("TrainingJob", NS, n)["status"]["attempt"] for n in "abc"]

    n, steps, after, attempts = asyncio.run(scenario())
    assert n == 3
    assert steps[0] == ("a", True, [], ["b", "c"], ["a"])  # a waits in the follow-up lane, after b and c
    assert steps[1] == ("b", True, [], ["c"], ["a", "b"])
    assert steps[2][:2] == ("c", True) and len(steps[2][2]) == 1  # c's pod, created at once
    assert len(after) == 3 and attempts == [0, 0, 0]  # one pod each, on the first attempt
