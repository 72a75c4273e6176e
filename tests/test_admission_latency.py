"""The operator's admission stage histograms (kubeforge/runtime/admission_latency.py): the clock
alone, the real runtime on the fake API server (tests/fakekube.py), and the training bench's
reading of the buckets."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from e2e.bench.training.components import bucket_quantile, summarise_stacks
from fakekube import small_cluster
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.admission_latency import AdmissionClock
from kubeforge.runtime.training import reconcile_job
from records import NS, job_body

A = (NS, "a")


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class _Now:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _stages() -> tuple[float, float, float, float, float, float]:
    return (_sample("kubeforge_watch_event_delay_seconds_count", resource="trainingjobs"),
            _sample("kubeforge_watch_event_delay_seconds_sum", resource="trainingjobs"),
            _sample("kubeforge_admission_wait_time_seconds_count"), _sample("kubeforge_admission_wait_time_seconds_sum"),
            _sample("kubeforge_admission_write_delay_seconds_count"), _sample("kubeforge_admission_write_delay_seconds_sum"))


def _delta(before: tuple, after: tuple) -> list[float]:
    return [round(b - a, 6) for a, b in zip(before, after)]


def test_each_stage_is_observed_once_per_admission_and_a_requeue_starts_a_new_wait():
    now = _Now(1000.0)
    clock = AdmissionClock(clock=now, wall=now, started=900.0)
    before = _stages()
    clock.seen_waiting("a", created=998.0, new=True)       # seen 2 s after its creationTimestamp
    now.t = 1001.0
    clock.seen_waiting("a", created=998.0, new=False)      # another event while it waits: not a new start
    now.t = 1003.0
    clock.decided("a")
    now.t = 1004.5
    clock.written("a")
    clock.written("a")                                     # a second write of the placement: nothing more
    assert _delta(before, _stages()) == [1, 2.0, 1, 3.0, 1, 1.5]
    assert len(clock) == 0
    before = _stages()
    now.t = 2000.0
    clock.seen_waiting("a", created=998.0, new=False)      # released and requeued: a wait, no watch delay
    now.t = 2010.0
    clock.decided("a")
    assert _delta(before, _stages()) == [0, 0, 1, 10.0, 0, 0]
    clock.forget("a")
    assert len(clock) == 0


def test_jobs_from_before_the_process_started_give_no_watch_delay():
    now = _Now(1000.0)
    clock = AdmissionClock(clock=now, wall=now, started=990.5)
    before = _stages()
    clock.seen_waiting("old", created=980.0, new=True)     # created before this process: its backlog
    clock.seen_waiting("unknown", created=0.0, new=True)   # no creationTimestamp
    clock.seen_waiting("same-second", created=990.0, new=True)  # the timestamp's second holds the start
    assert _delta(before, _stages())[:2] == [1, 10.0]
    assert len(clock) == 3
    for key in ("old", "unknown", "same-second"):
        clock.forget(key)
    assert len(clock) == 0


def test_the_runtime_times_an_admission_and_a_lagging_event_starts_no_new_wait():
    """The real index handler, admission round and reconcile: one admission gives one wait and
    one write delay; the job's watch event from before its status write, delivered late, does
    not count as a new wait (the status overlay shows the placement)."""
    async def go() -> None:
        kube = await small_cluster(1)
        rt = kube.rt
        now = _Now(kube.now)
        rt.cache.admission_clock = AdmissionClock(clock=now, wall=now, started=kube.now - 10)
        before = _stages()
        await kube.client_create("TrainingJob", job_body("a", gpus=8, created=kube.now - 1))
        stale = rt.cache.job(A)
        now.t += 2
        await admission_round(rt, kube.now)
        now.t += 0.5
        await reconcile_job(rt, A)
        assert _delta(before, _stages()) == [1, 1.0, 1, 2.0, 1, 0.5]
        assert len(rt.cache.admission_clock) == 0
        body = kube.get("TrainingJob", NS, "a")
        stale_body = {**body, "metadata": {**body["metadata"], "resourceVersion": stale.resource_version},
                      "status": {}}
        await kube.index("TrainingJob", stale_body)         # the lagging watch delivers the old version
        assert len(rt.cache.admission_clock) == 0
    asyncio.run(go())


def test_bucket_quantile_interpolates_within_the_bucket_as_prometheus_does():
    name = "x_seconds"
    samples = {f'{name}_bucket{{le="1.0"}}': 10.0, f'{name}_bucket{{le="2.0"}}': 30.0,
               f'{name}_bucket{{le="4.0"}}': 40.0, f'{name}_bucket{{le="+Inf"}}': 40.0, f"{name}_count": 40.0}
    assert bucket_quantile(samples, name, 0.25) == 1.0
    assert bucket_quantile(samples, name, 0.5) == 1.5                   # rank 20: half way through (1, 2]
    assert abs(bucket_quantile(samples, name, 0.95) - 3.6) < 1e-9      # rank 38 of (30, 40] over (2, 4]
    assert bucket_quantile({**samples, f'{name}_bucket{{le="+Inf"}}': 50.0}, name, 0.95) == 4.0  # past the last bound
    assert bucket_quantile({}, name, 0.5) is None


def test_the_profile_summary_reads_the_operators_main_thread_under_uvloop_and_asyncio():
    """py-spy's raw stacks as the 5,000-node run recorded them (uvloop: no Python frame below
    kopf's ``run`` while idle) and as asyncio's loop leaves them; helper threads are left out."""
    main = "_run_module_as_main (<frozen runpy>:198);<module> (kubeforge/__main__.py:3);run (kubeforge/cli.py:124)"
    loop = main + ";run (kopf/_core/reactor/running.py:79)"
    raw = "\n".join([
        f"{loop} 40",                                                                   # uvloop, idle
        f"{loop};admission_loop (kubeforge/runtime/admission.py:56);admission_round (kubeforge/runtime/admission.py:95) 30",
        f"{loop};reconcile_job (kubeforge/runtime/training.py:170) 10",
        "Thread._bootstrap (threading.py:995);run (kubeforge/metrics.py:9) 500",       # a helper thread
        "run (asyncio/runners.py:118);_run_once (asyncio/base_events.py:1898);select (selectors.py:468) 20",  # asyncio, idle
    ])
    got = summarise_stacks(raw)
    assert (got["total"], got["idle"]) == (100, 60)
    assert dict(got["top"])["admission_round (runtime/admission.py)"] == 30
    assert dict(got["top"])["reconcile_job (runtime/training.py)"] == 10
