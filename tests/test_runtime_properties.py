"""Property tests of the runtime that ships (issue 17): random event sequences against the REAL
``admission_round``, ``reconcile_job`` and ``reconcile_service`` of :mod:`kubeforge.runtime`,
through the in-memory API server of tests/fakekube.py (resourceVersions, 409s, lost and failed
writes, owner-reference garbage collection, the real kopf index handlers feeding the Cache).

Fleet: 6 nodes x 8 GPUs in 3 NVLink domains of 2. Work: TrainingJob gangs and InferenceServices
(one of tensor 8 x pipeline 2, i.e. 2-node groups) competing for the same domains. Events:
submit / delete a job, fail or delete a worker, an interruption taint on a node and its removal,
scale a service, the operator restarting (its memory lost, the indexes re-listed), a status
write whose answer is lost after it applied, a pod create that fails after the status that
placed it was written (the reconcile cut in the middle). After each event the operator
runs to a fixed point, then:

(a) the ledger equals what the pods hold, node by node;
(b) no node holds more GPUs than it has (bound pods), and no ledger promises more;
(c) a job holding a placement has one live pod per rank, on ``placement.nodes[rank]``;
(d) a service group holding nodes has one live pod per worker of its attempt, on its nodes,
    and no live pod belongs to a group the status does not list.
"""

from __future__ import annotations

import asyncio
import time

from hypothesis import given, settings
from examples import examples
from hypothesis import strategies as st

import builders
from fakekube import FakeKube
from kubeforge.admission import build_ledger
from kubeforge.objects import groups_of, placement_of, pod_requests
from kubeforge.runtime.admission import admission_round
from kubeforge.runtime.inference import reconcile_service
from kubeforge.runtime.training import reconcile_job
from records import submitted

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
NS = "team"
NODES = [f"n{i}" for i in range(6)]


def node(name: str, clique: str) -> dict:
    return builders.Node(name).labels({CLIQUE: clique, "pool": "p"}).body()


def job(name: str, replicas: int, gpus: int, required: bool) -> dict:
    topo = ("Required", "nvlink") if required else ("None",)
    return submitted(builders.TrainingJob(name).ns(NS).replicas(replicas).gpus(gpus).topology(*topo)
                     .checkpoint({"existingClaimName": "ckpt"})
                     .template({"spec": {"containers": [{"name": "trainer", "image": "t:1"}]}}).body())


def service(name: str, replicas: int, big: bool) -> dict:
    svc = (builders.InferenceService(name).ns(NS)
           .spec(minReplicas=replicas, maxReplicas=replicas, drainSeconds=0,
                 autoscaling={"prometheusURL": "http://127.0.0.1:1"})  # refused: no metric, the count holds
           .template({"spec": {"containers": [{"name": "vllm", "image": "v:1", "command": ["vllm", "serve", "m"]}]}}))
    if big:
        svc.gpus(None).spec(parallelism={"tensor": 8, "pipeline": 2}).topology("Required", "nvlink")
    else:
        svc.gpus(2)
    return submitted(svc.body())


async def world() -> FakeKube:
    kube = FakeKube(time.time())
    await kube.put("Namespace", {"metadata": {"name": NS}, "status": {"phase": "Active"}}, new=True)
    await kube.put("PersistentVolumeClaim", {"metadata": {"name": "ckpt", "namespace": NS}, "spec": {},
                                             "status": {"phase": "Bound"}}, new=True)
    for i, n in enumerate(NODES):
        await kube.put("Node", node(n, f"c{i // 2}"), new=True)
    await kube.put("GPUPool", {"metadata": {"name": "p"}, "spec": {"nodeSelector": {"matchLabels": {"pool": "p"}}}},
                   new=True)
    return kube


async def settle(kube: FakeKube, rounds: int = 25) -> None:
    """The operator until nothing changes: admission, every job's and service's reconcile
    (level-based: all of them, every round), the scheduler and the kubelet."""
    changed: list = []
    for _ in range(rounds):
        snap = {k: repr((o.get("status"), o["metadata"].get("deletionTimestamp"))) for k, o in kube.objects.items()}
        rt = kube.rt
        await admission_round(rt, time.time())
        for o in kube.items("TrainingJob"):
            await _tolerant(reconcile_job(rt, (NS, o["metadata"]["name"])))
        for key in rt.jobs.take():
            await _tolerant(reconcile_job(rt, key))
        for o in kube.items("InferenceService"):
            await _tolerant(reconcile_service(rt, (NS, o["metadata"]["name"])))
        for key in rt.services.take():
            await _tolerant(reconcile_service(rt, key))
        await kube.kubelet()
        now = {k: repr((o.get("status"), o["metadata"].get("deletionTimestamp"))) for k, o in kube.objects.items()}
        changed = [(k, now.get(k, "gone")[:300]) for k in set(now) | set(snap) if now.get(k) != snap.get(k)]
        if not changed:
            kube.fail_next.clear()  # a fault nothing wrote through: it applied to no write
            return
    raise AssertionError(f"no fixed point; still changing: {changed[:4]}")


async def _tolerant(coro) -> None:
    """A reconcile that raises is retried by the work queue: here, by the next round."""
    from kubeforge.runtime.client import ApiError
    try:
        await coro
    except ApiError as e:
        if not e.transient:
            raise


def check(kube: FakeKube, log: list[str]) -> None:
    def fail(msg: str) -> None:
        raise AssertionError(msg + "\nevents:\n  " + "\n  ".join(log))

    rt = kube.rt
    snap = rt.cache.snapshot()
    led = build_ledger(snap, GPU)
    pods = [p for p in kube.items("Pod") if p["status"].get("phase") not in ("Succeeded", "Failed")]
    for n in NODES:
        held = sum(pod_requests(p["spec"]).get(GPU, 0) for p in pods
                   if (p["spec"].get("nodeName") or p["metadata"].get("annotations", {}).get("kubeforge.io/assigned-node")) == n)
        bound = sum(pod_requests(p["spec"]).get(GPU, 0) for p in pods if p["spec"].get("nodeName") == n)
        if led.per_node.get(n, 0) != held:
            fail(f"(a) ledger {led.per_node.get(n, 0)} GPUs on {n}, pods hold {held}")
        if bound > 8 or led.per_node.get(n, 0) > 8:
            fail(f"(b) {n} over-committed: bound {bound}, ledger {led.per_node.get(n, 0)}")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    for o in kube.items("TrainingJob"):
        st = o.get("status") or {}
        pl = placement_of(st)
        if pl is None or st.get("phase") in ("Succeeded", "Failed"):
            continue
        name, attempt = o["metadata"]["name"], int(st.get("attempt") or 0)
        mine = [p for p in live if p["metadata"]["labels"].get("kubeforge.io/job-name") == name
                and int(p["metadata"]["labels"]["kubeforge.io/restart-attempt"]) == attempt]
        ranks = sorted(int(p["metadata"]["labels"]["kubeforge.io/replica-index"]) for p in mine)
        if ranks != list(range(len(pl.nodes))):
            fail(f"(c) job {name} attempt {attempt}: ranks {ranks} for {len(pl.nodes)} nodes")
        for p in mine:
            r = int(p["metadata"]["labels"]["kubeforge.io/replica-index"])
            if p["spec"].get("nodeName") not in (None, pl.nodes[r]):
                fail(f"(c) job {name} rank {r} on {p['spec']['nodeName']}, placed on {pl.nodes[r]}")
    for o in kube.items("InferenceService"):
        name = o["metadata"]["name"]
        groups = {g.index: g for g in groups_of(o.get("status") or {})}
        mine = [p for p in live if p["metadata"]["labels"].get("kubeforge.io/inference-service") == name]
        for p in mine:
            gi = int(p["metadata"]["labels"]["kubeforge.io/group-index"])
            g = groups.get(gi)
            if g is None or not g.nodes or int(p["metadata"]["labels"]["kubeforge.io/restart-attempt"]) != g.attempt:
                fail(f"(d) service {name}: pod {p['metadata']['name']} of no current group")
        for g in groups.values():
            if not g.holds or g.draining_since is not None:
                continue
            workers = sorted(int(p["metadata"]["labels"]["kubeforge.io/worker-index"]) for p in mine
                             if int(p["metadata"]["labels"]["kubeforge.io/group-index"]) == g.index)
            if workers != list(range(len(g.nodes))):
                fail(f"(d) service {name} group {g.index}: workers {workers} for {len(g.nodes)} nodes")


EVENTS = st.one_of(
    st.tuples(st.just("job"), st.integers(1, 3), st.sampled_from([2, 4, 8]), st.booleans()),
    st.tuples(st.just("svc"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("scale"), st.integers(0, 9), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("kill-pod"), st.integers(0, 99), st.booleans()),
    st.tuples(st.just("taint"), st.integers(0, 5)),
    st.tuples(st.just("untaint"), st.integers(0, 5)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("fault"), st.sampled_from(["lost", "create", "slow"])),
)


async def apply_event(kube: FakeKube, ev: tuple, n: list[int], log: list[str]) -> None:
    kind = ev[0]
    if kind == "job":
        name = f"j{n[0]}"
        n[0] += 1
        await kube.client_create("TrainingJob", job(name, ev[1], ev[2], ev[3]))
        log.append(f"job {name}: {ev[1]} x {ev[2]} GPUs, required={ev[3]}")
    elif kind == "svc":
        name = f"s{n[0]}"
        n[0] += 1
        await kube.client_create("InferenceService", service(name, ev[1], ev[2]))
        log.append(f"service {name}: {ev[1]} replicas, 8x2={ev[2]}")
    elif kind == "scale":
        svcs = kube.items("InferenceService")
        if svcs:
            o = svcs[ev[1] % len(svcs)]
            o["spec"]["minReplicas"] = o["spec"]["maxReplicas"] = ev[2]
            o["metadata"]["generation"] += 1
            await kube.put("InferenceService", o)
            log.append(f"scale {o['metadata']['name']} to {ev[2]}")
    elif kind == "delete":
        objs = kube.items("TrainingJob") + kube.items("InferenceService")
        if objs:
            o = objs[ev[1] % len(objs)]
            await kube.remove(o["kind"], NS, o["metadata"]["name"])
            log.append(f"delete {o['kind']} {o['metadata']['name']}")
    elif kind == "kill-pod":
        pods = [p for p in kube.items("Pod") if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
        if pods:
            p = pods[ev[1] % len(pods)]
            if ev[2]:
                p["status"].update(phase="Failed", containerStatuses=[
                    {"name": p["spec"]["containers"][0]["name"], "state": {"terminated": {"exitCode": 1}}}])
                await kube.put("Pod", p)
            else:
                p["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"
                await kube.put("Pod", p)
            log.append(f"{'fail' if ev[2] else 'delete'} pod {p['metadata']['name']}")
    elif kind in ("taint", "untaint"):
        nb = kube.get("Node", None, NODES[ev[1]])
        nb["spec"]["taints"] = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}] if kind == "taint" else []
        await kube.put("Node", nb)
        log.append(f"{kind} {NODES[ev[1]]}")
    elif kind == "restart":
        kube.new_runtime()
        await kube.reindex()
        log.append("operator restarted")
    elif kind == "fault":  # applies to the next event's writes
        n[1] = ev[1]
        log.append(f"fault on the next writes: {ev[1]}")


async def run(events: list[tuple], kube: FakeKube | None = None) -> None:
    kube = kube or await world()
    log: list[str] = []
    n: list = [0, None]  # name counter, the fault armed for the next event's writes
    for ev in events:
        fault, n[1] = n[1], None
        if fault:
            kube.fail_next.append(fault)
        await apply_event(kube, ev, n, log)
        await settle(kube)
        check(kube, log)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(EVENTS, min_size=1, max_size=12))
def test_the_runtime_keeps_the_ledger_true_over_random_events(events):
    asyncio.run(run(events))


def test_a_gang_and_a_405b_group_compete_for_one_domain_through_the_real_runtime():
    asyncio.run(run([("fault", "create"), ("svc", 3, True), ("job", 2, 8, True), ("restart",), ("taint", 0),
                     ("untaint", 0), ("fault", "lost"), ("scale", 0, 1), ("fault", "create"), ("job", 1, 4, False)]))


def test_an_assumed_placement_never_expires_while_its_status_write_is_in_flight(monkeypatch):
    """The race of kubeforge's last round (issue 9): a placement's status write outlived
    ASSUME_TTL, the admission round that ran meanwhile found the assumption expired and gave the
    same GPUs to another job. Two fillers take domains c1 and c2; a is admitted to c0 and its
    write is slow; meanwhile b (older, so first in the queue) is resumed and wants c0 too. The
    Cache keeps an assumption while its write is in flight: b waits. Re-introduce the race (drop
    the ``writing not in self._writing`` guard in Assumptions._expired, runtime/cache_assumptions.py) and this fails with (b)."""
    import kubeforge.runtime.cache as cache_mod

    async def go():
        kube = await world()
        monkeypatch.setattr(cache_mod, "time", kube.clock())
        b = job("b", 2, 8, True)
        b["spec"]["suspend"] = True
        b["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"  # older: first in the queue
        await kube.client_create("TrainingJob", b)
        await kube.client_create("TrainingJob", job("fill1", 2, 8, True))
        await kube.client_create("TrainingJob", job("fill2", 2, 8, True))
        await settle(kube)

        async def resume_b() -> None:
            o = kube.get("TrainingJob", NS, "b")
            o["spec"]["suspend"] = False
            o["metadata"]["generation"] += 1
            await kube.put("TrainingJob", o)

        kube.during_slow_write = resume_b
        kube.fail_next.append("slow")
        await kube.client_create("TrainingJob", job("a", 2, 8, True))
        await settle(kube)
        check(kube, ["b (suspended), fill1, fill2; a, whose placement write outlives ASSUME_TTL while b resumes"])
        held = {o["metadata"]["name"]: placement_of(o.get("status")) for o in kube.items("TrainingJob")}
        assert held["a"] is not None and held["b"] is None, held

    asyncio.run(go())
