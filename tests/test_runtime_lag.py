"""The real runtime while the watches lag behind its own writes: a placed gang's GPUs stay held
in every admission round until the index shows the placement (tests/fakekube.py, its indexes
set back by hand to what a lagging watch would still hold)."""

from __future__ import annotations

import asyncio

import pytest

from fakekube import small_cluster
from kubeforge.objects import placement_of
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.cache_assumptions import ASSUME_TTL
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.training import reconcile_job
from records import NS, job_body

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
    reconcile read the job back once after the lost answer: the overlay holds the placement, so
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
        with pytest.raises(ApiError):
            await reconcile_job(rt, A)  # applied, its answer lost
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
        await _read_back(kube.rt, job)
        assert (kube.rt.cache.effective(A, job).status.get("phase") == "Running") is kept
    asyncio.run(go())
