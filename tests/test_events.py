"""Held Events (kubeforge.runtime.events and the runtime that posts through it): the Events
that narrate a status write reach the API server whatever happens after it (the chaos corpus's ``is-gpus-beyond-any-node`` once saw ``ScalingLimited=True
InsufficientCapacity`` with no Event: a write whose answer was lost, or a failure after it,
swallowed the Event of a transition the next reconcile no longer saw).

The real ``reconcile_job`` / ``reconcile_service`` run on ``tests/fakekube.py`` with its
injected faults; :class:`kubeforge.runtime.events.EventSink` runs on a client that fails.
"""

from __future__ import annotations

import asyncio

import pytest

import kubeforge.runtime.events as events_mod
from fakekube import FakeKube, small_cluster
from kubeforge.objects import ADMITTED, NORMAL, SCALED, WARNING
from kubeforge.autoscaling import reasons as scaling
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.cache import Cache
from kubeforge.runtime.client import ApiError
from kubeforge.runtime.events import EventSink, ObjectRef
from kubeforge.runtime.inference import reconcile_service
from kubeforge.runtime.training import reconcile_job
from records import NS, job_body, service_body, submitted

KEY = (NS, "j")


def _reasons(kube: FakeKube, name: str) -> list[tuple[str, str]]:
    return [(t, r) for n, t, r, _ in kube.rt.events.posted if n == name]  # type: ignore[attr-defined]


def test_admitted_event_is_posted_although_the_pod_create_fails(monkeypatch):
    """The placement is written, then the first pod create gets no answer (the reconcile
    raises, the work queue retries): the Admitted Event went out with the write all the same,
    once, and the retry does not post it again."""

    async def go():
        kube = await small_cluster()
        kube.use_clock(monkeypatch)
        await kube.client_create("TrainingJob", submitted(job_body("j", replicas=2, gpus=8)))
        await admission_round(kube.rt, kube.now)
        kube.fail_next = ["create"]
        with pytest.raises(ApiError):
            await reconcile_job(kube.rt, KEY)
        assert kube.get("TrainingJob", NS, "j")["status"]["placement"]
        assert _reasons(kube, "j") == [(NORMAL, ADMITTED)]
        await reconcile_job(kube.rt, KEY)
        assert _reasons(kube, "j") == [(NORMAL, ADMITTED)]

    asyncio.run(go())


@pytest.mark.parametrize("read_back", [True, False])
def test_admitted_event_waits_out_a_lost_status_write(monkeypatch, read_back):
    """The placement's write lands but its answer is lost. Read back, the job shows the write:
    the Event is posted at once, once. When the read gets no answer either, nothing is posted
    yet (the write may have failed), and the next reconcile, which finds the placement on record
    and plans no transition, posts the held Event, with the time it was decided."""

    async def go():
        kube = await small_cluster()
        kube.use_clock(monkeypatch)
        await kube.client_create("TrainingJob", submitted(job_body("j", replicas=2, gpus=8)))
        await admission_round(kube.rt, kube.now)
        if read_back:
            kube.fail_next = ["lost"]
            await reconcile_job(kube.rt, KEY)
            assert _reasons(kube, "j") == [(NORMAL, ADMITTED)]
            await reconcile_job(kube.rt, KEY)
            assert _reasons(kube, "j") == [(NORMAL, ADMITTED)]
            return
        kube.fail_next = ["lost", "read"]
        decided = kube.now
        with pytest.raises(ApiError):
            await reconcile_job(kube.rt, KEY)
        assert kube.get("TrainingJob", NS, "j")["status"]["placement"]
        assert _reasons(kube, "j") == []
        kube.now += 5
        await reconcile_job(kube.rt, KEY)
        assert _reasons(kube, "j") == [(NORMAL, ADMITTED)]
        assert kube.rt.cache.held_events.take(KEY) == []

    asyncio.run(go())


def test_insufficient_capacity_warning_waits_out_a_lost_status_write(monkeypatch):
    """The chaos case: a replica of 16 GPUs on 8-GPU nodes. The write of ``ScalingLimited=True
    InsufficientCapacity`` lands but its answer is lost; the next reconcile sees the condition
    already on record (no transition) and still posts the Warning, once."""

    async def go():
        kube = await small_cluster()
        kube.use_clock(monkeypatch)
        await kube.client_create("InferenceService", submitted(service_body(
            "big", gpus=16, minReplicas=1, maxReplicas=2, autoscaling={"prometheusURL": "http://127.0.0.1:1"})))
        key = (NS, "big")
        kube.fail_next = ["lost"]
        with pytest.raises(ApiError):
            await reconcile_service(kube.rt, key)
        st = kube.get("InferenceService", NS, "big")["status"]
        limited = next(c for c in st["conditions"] if c["type"] == scaling.SCALING_LIMITED)
        assert (limited["status"], limited["reason"]) == ("True", scaling.INSUFFICIENT_CAPACITY)
        assert _reasons(kube, "big") == []
        await reconcile_service(kube.rt, key)
        assert (WARNING, scaling.INSUFFICIENT_CAPACITY) in _reasons(kube, "big")
        assert (NORMAL, SCALED) in _reasons(kube, "big")
        await reconcile_service(kube.rt, key)
        assert _reasons(kube, "big").count((WARNING, scaling.INSUFFICIENT_CAPACITY)) == 1

    asyncio.run(go())


def test_a_refused_or_superseded_write_posts_nothing():
    """Held Events: the newer decision's Event of the same type and reason replaces the older;
    a dropped write's Events are gone; forget drops them with the object."""
    cache = Cache()
    cache.held_events.hold(KEY, [(NORMAL, ADMITTED, "old"), (WARNING, "X", "x")], 1.0)
    cache.held_events.hold(KEY, [(NORMAL, ADMITTED, "new")], 2.0)
    assert cache.held_events.take(KEY) == [(WARNING, "X", "x", 1.0), (NORMAL, ADMITTED, "new", 2.0)]
    assert cache.held_events.take(KEY) == []
    cache.held_events.hold(KEY, [(NORMAL, ADMITTED, "m")], 3.0)
    cache.held_events.drop(KEY)
    assert cache.held_events.take(KEY) == []
    cache.held_events.hold(KEY, [(NORMAL, ADMITTED, "m")], 3.0)
    cache.forget(KEY)
    assert cache.held_events.take(KEY) == []


class _FlakyClient:
    """Fails the first ``fail`` Event creates with ``error``, then records them."""

    def __init__(self, fail: int, error: ApiError):
        self.fail, self.error, self.made, self.tries = fail, error, [], 0

    async def create(self, kind, ns, body):
        self.tries += 1
        if self.tries <= self.fail:
            raise self.error
        self.made.append(body["reason"])
        return body


async def _drain(sink: EventSink, client: _FlakyClient, want: int, seconds: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while len(client.made) < want and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("code, posted", [(0, 1), (503, 1), (429, 1), (422, 0), (403, 0)])
def test_sink_sends_again_after_no_answer_but_not_after_a_refusal(monkeypatch, code, posted):
    """No answer, 429 or 5xx: the Event is sent again (it arrives); 422 or 403: never."""
    monkeypatch.setattr(events_mod, "RETRY_SECONDS", 0.01)

    async def go():
        client = _FlakyClient(2, ApiError(code, "X", "injected"))
        sink = EventSink(client)  # type: ignore[arg-type]
        sink.start()
        sink.post(ObjectRef("TrainingJob", NS, "j", "u1"), WARNING, "Boom", "m")
        await _drain(sink, client, 1, seconds=0.5 if not posted else 2.0)
        await sink.stop()
        assert client.made == ["Boom"] * posted
        assert client.tries == (3 if posted else 1)

    asyncio.run(go())


def test_sink_gives_up_after_max_tries(monkeypatch):
    """An API server that never answers: MAX_TRIES sends, then the Event is dropped."""
    monkeypatch.setattr(events_mod, "RETRY_SECONDS", 0.01)

    async def go():
        client = _FlakyClient(100, ApiError(0, "NoResponse", "injected"))
        sink = EventSink(client)  # type: ignore[arg-type]
        sink.start()
        sink.post(ObjectRef("TrainingJob", NS, "j", "u1"), WARNING, "Boom", "m")
        await asyncio.sleep(0.5)
        await sink.stop()
        assert client.made == [] and client.tries == events_mod.MAX_TRIES

    asyncio.run(go())
