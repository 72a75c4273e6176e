"""The real runtime while the watches lag behind its own writes: a placed gang's GPUs stay held
in every admission round until the index shows the placement (tests/fakekube.py, its indexes
set back by hand to what a lagging watch would still hold)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from fakekube import small_cluster
from kubeforge.objects import placement_of
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.cache_assumptions import ASSUME_TTL
from kubeforge.runtime.client import ApiError
from kubeforge.lifecycle import TrainingPlan
from kubeforge.runtime.training import _settle_release, reconcile_job
from records import NS, job_body, submitted
from test_runtime_concurrency import Burst

A, B = (NS, "a"), (NS, "b")


def test_a_reconcile_with_nothing_to_write_keeps_the_placement_while_the_index_lags():
    """Job ``a`` is placed on the only node and its status written; the job index still holds
    the version before that write, and the pod index has not seen its pod. A second reconcile
    of ``a`` (nothing new to write) then runs. The next round must still count ``a``'s GPUs:
    ``b`` waits. It was given the same node once (64 job workers in a burst of 800 gangs): the
    reconcile took the record it acted on (our written status) for the index catching up, and
    the status overlay dropped our write."""
    async def go() -> None:
        kube = await small_cluster(1)
        rt = kube.rt
        await kube.client_create("TrainingJob", job_body("a", gpus=8))
        await admission_round(rt, kube.now)
        stale = rt.cache.job(A)  # what the index holds before a's status write
        assert stale is not None and placement_of(stale.status) is None
        await reconcile_job(rt, A)  # writes the placement, creates the pod
        assert placement_of(kube.get("TrainingJob", NS, "a")["status"]) is not None
        kube.stores["kf_jobs"].put(("TrainingJob", NS, "a"), {A: stale})  # the watch lags
        for pod in kube.items("Pod"):
            kube.stores["kf_pods"].drop(("Pod", NS, pod["metadata"]["name"]))
        await reconcile_job(rt, A)
        await kube.client_create("TrainingJob", job_body("b", gpus=8))
        plan = await admission_round(rt, kube.now)
        assert [a.key for a in plan.admit] == []
        assert [w.key for w in plan.wait] == [B]
    asyncio.run(go())


def test_a_lost_answer_is_read_back_so_the_placement_outlives_the_assumption(monkeypatch):
    """The write that puts ``a``'s placement on record is applied but its answer is lost, and the
    watch still has not delivered it when the renewed assumption expires (ASSUME_TTL). The
    reconcile read the job back once after the lost answer (and, finding its write there, went
    on as if answered): the overlay holds the placement, so
    ``b`` waits. With the assumption alone ``b`` got the same node (helper-37's property test, 5
    of 40 seeds with 30 s clock ticks)."""
    async def go() -> None:
        kube = await small_cluster(1)
        kube.use_clock(monkeypatch)
        rt = kube.rt
        await kube.client_create("TrainingJob", job_body("a", gpus=8))
        await admission_round(rt, kube.now)
        stale = rt.cache.job(A)
        kube.fail_next.append("lost")
        await reconcile_job(rt, A)  # applied, its answer lost, read back: the reconcile goes on
        assert placement_of(kube.get("TrainingJob", NS, "a")["status"]) is not None
        kube.stores["kf_jobs"].put(("TrainingJob", NS, "a"), {A: stale})  # the watch lags
        kube.now += ASSUME_TTL + 1
        await kube.client_create("TrainingJob", job_body("b", gpus=8))
        plan = await admission_round(rt, kube.now)
        assert [a.key for a in plan.admit] == []
        assert [w.key for w in plan.wait] == [B]
    asyncio.run(go())


@pytest.mark.parametrize("bump, kept", [(False, True), (True, False)])
def test_the_read_back_keeps_only_the_generation_the_write_was_decided_from(bump, kept):
    """A spec changed meanwhile (a newer generation) is not put in the overlay: the next status
    would be decided from the old spec and written onto the new one; the watch brings it."""
    from kubeforge.runtime.training_status import _read_back

    async def go() -> None:
        kube = await small_cluster(1)
        await kube.client_create("TrainingJob", job_body("a", gpus=8))
        job = kube.rt.cache.job(A)
        body = kube.get("TrainingJob", NS, "a")
        body["status"] = {"phase": "Running"}
        if bump:
            body["metadata"]["generation"] = 2
        await kube.put("TrainingJob", body)
        kube.stores["kf_jobs"].put(("TrainingJob", NS, "a"), {A: job})  # the watch lags
        shown = await _read_back(kube.rt, job, {"phase": "Running"})
        assert (kube.rt.cache.effective(A, job).status.get("phase") == "Running") is kept
        assert (shown is not None) is kept  # the write counts as answered only for its generation
        assert await _read_back(kube.rt, job, {"phase": "Failed"}) is None  # not what is on record
    asyncio.run(go())


@pytest.mark.parametrize("lost", [False, True, "and-read"])
def test_a_release_deletes_the_pods_the_index_never_showed(monkeypatch, lost):
    """Gang ``a`` (2 x 4 GPUs) is placed and its pods created, but the pod watch shows neither
    for longer than the expectations' TTL; its startup timeout releases the placement (attempt
    1). The pods of attempt 0 must go all the same, by name: deleted from the index alone they
    ran on, pinned to a node the next round gave away. With ``lost``, the release's answer is
    lost too: the read-back finds it on record and the same reconcile deletes them (the next
    one, decided from the released status, no longer knows the names). With ``"and-read"`` the
    read-back is lost as well: the reconcile fails, the names wait in the hand-offs, and the
    retry, decided from the released status the watch then shows, deletes them."""
    async def go() -> None:
        kube = await small_cluster(1)
        kube.use_clock(monkeypatch)
        rt = kube.rt
        await kube.client_create("TrainingJob", job_body("a", replicas=2, gpus=4, startupTimeoutSeconds=120))
        await admission_round(rt, kube.now)
        await reconcile_job(rt, A)  # writes the placement
        await reconcile_job(rt, A)  # creates the pods
        made = [p["metadata"]["name"] for p in kube.items("Pod")]
        assert made == ["a-worker-0-0", "a-worker-1-0"]
        for name in made:
            kube.stores["kf_pods"].drop(("Pod", NS, name))  # the watch lags
        kube.now += 121
        if lost:
            kube.fail_next.append("lost")
        if lost == "and-read":
            kube.fail_next.append("read")
            with pytest.raises(ApiError):
                await reconcile_job(rt, A)  # the release is on record; this process cannot know
            assert len([p for p in kube.items("Pod") if not p["metadata"].get("deletionTimestamp")]) == 2
            await kube.index("TrainingJob", kube.get("TrainingJob", NS, "a"))  # the job's watch catches up, not the pods'
        await reconcile_job(rt, A)
        st = kube.get("TrainingJob", NS, "a")["status"]
        assert (st.get("attempt"), placement_of(st)) == (1, None)
        assert [p["metadata"]["name"] for p in kube.items("Pod") if not p["metadata"].get("deletionTimestamp")] == []
    asyncio.run(go())


@pytest.mark.parametrize("seen, deletes, settled", [
    ("older", False, False),     # the watch still shows the version the release was decided from
    ("held", False, True),       # a newer version still holds the placement in attempt 0: never landed
    ("released", True, True),    # a newer version without it, attempt 1: it landed
])
def test_an_unknown_release_is_settled_only_by_a_newer_version(seen, deletes, settled):
    """The names a release left when its answer and read-back were both lost
    (``HandOffs.release_unsettled``) are deleted only once a version newer than the one it was
    decided from shows the release on record; a newer version that still holds the placement
    forgets them (the gang may be running); an older one keeps them for later."""
    async def go() -> None:
        kube = await small_cluster(1)
        rt = kube.rt
        await kube.client_create("TrainingJob", job_body("a", replicas=2, gpus=4))
        await admission_round(rt, kube.now)
        await reconcile_job(rt, A)  # writes the placement
        job = rt.cache.job(A)
        rv = int(job.resource_version)
        names = ("a-worker-0-0", "a-worker-1-0")
        rt.cache.handoffs.release_unsettled(A, str(rv), 0, names)
        status = dict(job.status)
        if seen == "released":
            status.update(placement=None, attempt=1)
        version = str(rv - 1 if seen == "older" else rv + 1)
        plan = TrainingPlan(status={"phase": "Pending"})
        _settle_release(rt, replace(job, resource_version=version, status=status), plan)
        assert sorted(plan.delete_pods) == (sorted(names) if deletes else [])
        assert (rt.cache.handoffs.unsettled_release(A) is None) is settled
    asyncio.run(go())


def test_a_lost_answer_leaves_no_assumption_for_the_next_attempt(monkeypatch):
    """A gang of 2 x 4 GPUs on the only node: its placement write's answer and read-back are lost
    (assumption renewed), the index shows the placement, the gang runs; rank 0 fails and the answer of the
    stop (attempt 1, no placement) is lost too. Attempt 1 must wait for a round. Before the
    assumption was dropped once the status showed a placement (runtime/training._context,
    runtime/cache_snapshot.Snapshotter.job_view), the renewed assumption outlived the placement
    it carried (the retry's 409 kept it) and attempt 1 wrote it with no round, its pods pinned
    beside rank 1 of attempt 0 (30 s grace): (a)."""
    async def go() -> None:
        burst = Burst(0, nodes=1, jobs=0, workers=1, jitter=0, touch=0.0, lost=0.0, grace=30.0)
        kube, key = burst.kube, (NS, "a")
        kube.use_clock(monkeypatch)
        await burst.start()
        body = job_body("a", replicas=2, gpus=4, failurePolicy={"maxRestarts": 3, "backoffSeconds": 0})
        await kube.client_create("TrainingJob", submitted(body))
        await kube.deliver()
        await admission_round(kube.rt, kube.now)
        for step in ("placement", "stop"):
            kube.fail_next.extend(["lost", "read"])  # the answer, and the read-back's
            with pytest.raises(ApiError):
                await reconcile_job(kube.rt, key)  # applied, its answer lost
            for _ in range(4 if step == "placement" else 1):  # the gang runs; or the stop is seen
                await kube.deliver()
                await kube.kubelet()
                await kube.deliver()
                await reconcile_job(kube.rt, key)
                burst.check(f"after the {step}")
            if step == "placement":
                pod = next(p for p in kube.items("Pod") if p["metadata"]["name"].startswith("a-worker-0-"))
                pod["status"].update(phase="Failed", containerStatuses=[
                    {"name": "trainer", "state": {"terminated": {"exitCode": 1}}}])
                await kube.put("Pod", pod)
                await kube.deliver()
        await kube.deliver()
        await kube.kubelet()
        burst.check("attempt 1 decided")
        assert kube.get("TrainingJob", NS, "a")["status"].get("placement") is None, "placed with no round"
    asyncio.run(go())
