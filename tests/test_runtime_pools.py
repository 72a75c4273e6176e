"""runtime/pools.py: the GPUPool status loop takes the last admission round's snapshot and
ledgers when a round ran since its last pass (issue 31: a second snapshot and ledger every 2 s
were about a tenth of the operator's CPU in a burst), and makes its own otherwise; on the fake
API server (tests/fakekube.py) with the real index handlers and the real admission round."""

from __future__ import annotations

import asyncio

from fakekube import settle, small_cluster
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.pools import PoolPasses, refresh_pools
from records import NS, job_body, submitted


def _gpus(kube) -> dict:
    return kube.get("GPUPool", "", "p")["status"]["gpus"]


def _counting_snapshots(kube, monkeypatch) -> list:
    made: list = []
    real = kube.rt.cache.snapshot

    def snapshot():
        made.append(1)
        return real()

    monkeypatch.setattr(kube.rt.cache, "snapshot", snapshot)
    return made


def test_a_pass_after_a_round_takes_what_the_round_started_from(monkeypatch):
    async def go():
        kube = await small_cluster(2)
        kube.use_clock(monkeypatch)
        await kube.client_create("TrainingJob", submitted(job_body("a", gpus=8)))
        await settle(kube)  # "a" runs on one node
        passes = PoolPasses()
        await refresh_pools(kube.rt, passes, kube.now)  # the first pass: its own snapshot
        own = kube.get("GPUPool", "", "p")["status"]
        await kube.client_create("TrainingJob", submitted(job_body("b", gpus=8)))
        await admission_round(kube.rt, kube.now)  # admits "b": assumed, no status, no pods yet
        made = _counting_snapshots(kube, monkeypatch)
        await refresh_pools(kube.rt, passes, kube.now)
        assert made == []  # the round's snapshot, ledger and views, not a second set
        # what a pass of its own made at the round's start: "b"'s GPUs not yet, and never twice
        assert kube.get("GPUPool", "", "p")["status"] == own
        await refresh_pools(kube.rt, passes, kube.now)  # no round since: its own, "b" assumed
        assert made == [1] and _gpus(kube)["allocated"] == 16
        assert [w["name"] for w in kube.get("GPUPool", "", "p")["status"]["workloads"]] == ["a", "b"]

    asyncio.run(go())


def test_without_a_round_since_the_last_pass_a_pass_makes_its_own_and_sees_a_change_at_once(monkeypatch):
    async def go():
        kube = await small_cluster(2)
        kube.use_clock(monkeypatch)
        await kube.client_create("TrainingJob", submitted(job_body("a", gpus=8)))
        await settle(kube)
        passes = PoolPasses()
        await refresh_pools(kube.rt, passes, kube.now)
        assert _gpus(kube)["allocated"] == 8
        await admission_round(kube.rt, kube.now)
        await refresh_pools(kube.rt, passes, kube.now)  # from the round: the same figures
        assert _gpus(kube)["allocated"] == 8
        for pod in kube.items("Pod"):  # the job's pods go (no round runs)
            await kube.remove("Pod", NS, pod["metadata"]["name"])
        await kube.remove("TrainingJob", NS, "a")
        made = _counting_snapshots(kube, monkeypatch)
        await refresh_pools(kube.rt, passes, kube.now)
        assert made == [1] and _gpus(kube)["allocated"] == 0

    asyncio.run(go())


def test_a_round_ledger_missing_for_a_pools_resource_falls_back_to_a_snapshot_of_its_own(monkeypatch):
    async def go():
        kube = await small_cluster(2)
        kube.use_clock(monkeypatch)
        passes = PoolPasses()
        await refresh_pools(kube.rt, passes, kube.now)
        await admission_round(kube.rt, kube.now)
        kube.rt.cache.round_done({}, {}, kube.rt.cache.snapshot())  # a round that kept no ledger, no view
        made = _counting_snapshots(kube, monkeypatch)
        await refresh_pools(kube.rt, passes, kube.now)
        assert made == [1] and _gpus(kube)["capacity"] == 16

    asyncio.run(go())


def test_a_pool_deleted_after_the_round_is_not_written_back_and_is_forgotten(monkeypatch):
    async def go():
        kube = await small_cluster(2)
        kube.use_clock(monkeypatch)
        passes = PoolPasses()
        await refresh_pools(kube.rt, passes, kube.now)
        await admission_round(kube.rt, kube.now)  # its snapshot still holds pool "p"
        await kube.remove("GPUPool", None, "p")
        await refresh_pools(kube.rt, passes, kube.now)  # from the round: the write finds no pool
        assert kube.items("GPUPool") == []
        await refresh_pools(kube.rt, passes, kube.now)  # its own: the pool is gone from its memory
        assert passes.last == {} and passes.views == {}

    asyncio.run(go())
