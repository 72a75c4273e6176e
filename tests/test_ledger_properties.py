"""Property tests of the GPU ledger over random event sequences (issue 8).

A small fleet (8 nodes x 8 GPUs: 4 spot and 4 on-demand, NVLink cliques of 2 nodes, 2 blocks)
with three pools over it (``spot``, ``od`` and ``all``, which overlaps both) lives in the pure
simulator of ``tests/simcluster.py``. Events: submit a job (random replicas, GPUs, topology,
priority, pools, fallback), suspend, resume, preempt (an interruption taint on a node, or
``DisruptionTarget`` on a pod), fail a worker, succeed a gang, delete a job, a foreign pod bound
to a node or finishing, a gated serving replica appearing or going, a node recovering, time
passing. After each event the operator's loop runs to a fixed point (admission round, every
job's reconcile, kube-scheduler and the kubelet), then the invariants are checked:

(a) the ledger equals what the pods hold, node by node (kubeforge's pods and foreign ones);
(b) the ledger never promises a node more GPUs than it has (checked after every admission
    round and every reconcile too), and every pod kubeforge pinned to a node binds there;
(c) a job holding a placement has exactly one live pod per rank of its current attempt, on
    ``placement.nodes[rank]``; no live pod of another attempt; no live pod without a placement;
(d) a suspended or finished job holds no placement, and only its terminating pods hold GPUs;
(e) ``restarts.failures`` moves (by one, for that job) only on a worker failure,
    ``restarts.preemptions`` only on a disruption (by one for each job it hit); neither, nor
    ``attempt``, ever goes down;
(f) settled means settled: a round without the admission memo would admit no gang and place
    no serving replica either (no gang waits for GPUs that are free for it);
(g) no valid job pays for another's template: jobs are submitted with templates whose sidecars
    and init containers request GPUs too (``TEMPLATES``), and a job whose template asks for no
    GPU of its own is never told PlacementLost nor fails to start (issue 18).

Also in the event space: the operator restarting (or a pod call failing) between a status
write and the pod calls that follow it, and admission rounds running between job reconciles.

A failure names the invariant and lists the events applied.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from simcluster import (
    BLOCK, CLIQUE, NS as NS_DEFAULT, SPOT, SimCluster, build_ledger, job_body, mk_node, mk_pool, mk_service,
)

INTERRUPTIONS = ("aws-node-termination-handler/spot-itn", "karpenter.sh/disrupted",
                 "cloud.google.com/impending-node-termination")
TOPOLOGIES = (
    {"mode": "None"},
    {"mode": "Preferred"},
    {"mode": "Preferred", "level": "block"},
    {"mode": "Required", "level": "nvlink"},
    {"mode": "Required", "level": "block"},
)
POOL_LISTS = (("spot",), ("od",), ("all",), ("spot", "od"), ("od", "spot"), ("spot", "all"), ("gone", "od"))
DISRUPTIONS = ("PreemptionByScheduler", "DeletionByTaintManager", "EvictionByEvictionAPI", "TerminationByKubelet")
_GPU1 = {"limits": {"nvidia.com/gpu": 1}}
TEMPLATES = (
    # what most teams write: one trainer container
    {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}]}},
    # an app-container sidecar (an in-pod profiler) with a GPU of its own: sum rule
    {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"},
                             {"name": "profiler", "image": "nsys:1", "resources": _GPU1}]}},
    # a restartable init container (KEP-753 sidecar, an exporter) with a GPU: sum rule
    {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}],
              "initContainers": [{"name": "exporter", "image": "dcgm:1", "restartPolicy": "Always",
                                  "resources": _GPU1}]}},
    # a plain init container (a warm-up) asking 4 GPUs: max rule
    {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}],
              "initContainers": [{"name": "warmup", "image": "w:1", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}},
    # both: a sidecar started before a 4-GPU init container (the init runs beside it: 4 + 1)
    {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}],
              "initContainers": [{"name": "exporter", "image": "dcgm:1", "restartPolicy": "Always", "resources": _GPU1},
                                 {"name": "warmup", "image": "w:1", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}},
)
"""Pod templates a real team writes (issue 18): the first requests no GPU of its own; the others
make a rank hold more than gpusPerReplica by the scheduler's rule, which the ledger must book."""


def fleet() -> SimCluster:
    nodes = [mk_node(f"n{i}", 8, {CLIQUE: f"c{i // 2}", BLOCK: f"b{i // 4}", **({SPOT: "spot"} if i < 4 else {})})
             for i in range(8)]
    # No preemption between jobs (the simulator does not apply Preempt decisions).
    never = {"withinQuota": "Never", "reclaimQuota": "Never"}
    pools = [
        mk_pool("spot", {"matchLabels": {SPOT: "spot"}}, preemption=never),
        mk_pool("od", {"matchExpressions": [{"key": SPOT, "operator": "DoesNotExist"}]}, preemption=never),
        mk_pool("all", preemption=never),
    ]
    services = [
        mk_service("chat", ns="serve", pools=["all"], gpus=1),
        mk_service("big", ns="serve", pools=["od"], gpus=2, topology={"mode": "Required", "level": "nvlink"}),
        # a 405B-class replica: tensor 8 x pipeline 2 = two whole 8-GPU nodes of one NVLink domain,
        # competing with the gangs for the same domains (issue 13)
        mk_service("llm405", ns="serve", pools=["od"], gpus=None, parallelism={"tensor": 8, "pipeline": 2},
                   topology={"mode": "Required", "level": "nvlink"}),
    ]
    return SimCluster(nodes, pools, services)


# ------------------------------------------------------------------------------- events

submits = st.tuples(
    st.just("submit"),
    st.integers(1, 4),                       # replicas
    st.sampled_from([1, 2, 4, 8]),           # gpusPerReplica
    st.integers(0, len(TOPOLOGIES) - 1),
    st.integers(0, 2),                       # priority
    st.integers(0, len(POOL_LISTS) - 1),
    st.sampled_from([0, 60, 300]),           # fallbackAfterSeconds
    st.integers(0, 2),                       # preemptionsBeforeFallback
    st.integers(0, 2),                       # maxRestarts
    st.sampled_from([0, 10]),                # backoffSeconds
    st.integers(0, len(TEMPLATES) - 1),      # pod template
)
picks = st.integers(0, 63)
# A user suspends or deletes a gang right after admission, before its placement is written
# (this found test_admission.py::test_memo_forgets_a_wait_caused_by_an_admission_that_was_abandoned).
races = st.tuples(st.sampled_from(["race-suspend", "race-delete"]), picks)
bursts = st.tuples(st.just("burst"), st.lists(submits, min_size=2, max_size=4))
events = st.one_of(
    submits,
    bursts,
    st.tuples(st.just("suspend"), picks),
    st.tuples(st.just("resume"), picks),
    st.tuples(st.just("taint"), st.integers(0, 7), st.integers(0, len(INTERRUPTIONS) - 1)),
    st.tuples(st.just("untaint"), st.integers(0, 7)),
    st.tuples(st.just("disrupt"), picks, picks),
    st.tuples(st.just("fail"), picks, picks),
    st.tuples(st.just("succeed"), picks),
    st.tuples(st.just("delete"), picks),
    st.tuples(st.just("foreign"), st.sampled_from([1, 2, 4, 8]), st.integers(0, 7)),
    st.tuples(st.just("foreign-done"), picks),
    st.tuples(st.just("serve"), st.integers(0, 2)),
    st.tuples(st.just("unserve"), picks),
    st.tuples(st.just("time"), st.sampled_from([1, 15, 45, 400])),
    st.tuples(st.just("crash")),
    races,
)


def random_event_submit(rng: random.Random) -> tuple:
    return ("submit", rng.randint(1, 4), rng.choice([1, 2, 4, 8]), rng.randrange(len(TOPOLOGIES)),
            rng.randint(0, 2), rng.randrange(len(POOL_LISTS)), rng.choice([0, 60, 300]), rng.randint(0, 2),
            rng.randint(0, 2), rng.choice([0, 10]), rng.randrange(len(TEMPLATES)))


def random_event(rng: random.Random) -> tuple:
    """The same event space as ``events``, drawn from ``rng`` (for long random walks)."""
    kind = rng.choice(["submit"] * 4 + ["burst", "suspend", "resume", "taint", "untaint", "disrupt", "fail", "fail",
                                        "succeed", "delete", "foreign", "foreign-done", "serve", "unserve",
                                        "time", "time", "crash", "race-suspend", "race-delete"])
    p = lambda: rng.randrange(64)  # noqa: E731
    if kind == "burst":
        return ("burst", [random_event_submit(rng) for _ in range(rng.randint(2, 4))])
    if kind == "submit":
        return random_event_submit(rng)
    if kind == "taint":
        return ("taint", rng.randrange(8), rng.randrange(len(INTERRUPTIONS)))
    if kind == "untaint":
        return ("untaint", rng.randrange(8))
    if kind in ("disrupt", "fail"):
        return (kind, p(), p())
    if kind == "foreign":
        return ("foreign", rng.choice([1, 2, 4, 8]), rng.randrange(8))
    if kind == "serve":
        return ("serve", rng.randrange(3))
    if kind == "time":
        return ("time", rng.choice([1, 15, 45, 400]))
    if kind == "crash":
        return ("crash",)
    if kind.startswith("race-"):
        return (kind, p())
    return (kind, p())


# ------------------------------------------------------------------------------- the driver


class World:
    """Applies events to a :class:`SimCluster` and checks (e) around each one."""

    def __init__(self, grace: float, interleave: float = 0.5, seed: int = 0):
        self.sim = fleet()
        self.sim.grace = grace
        self.sim.interleave = interleave
        self.sim.rng = random.Random(seed)
        self.n = 0
        self.plain: set = set()  # jobs whose template requests no GPU of its own

    def _jobs(self, pred=lambda sj: True):
        return [k for k in sorted(self.sim.jobs) if pred(self.sim.jobs[k])]

    def _live_current(self, key):
        sj = self.sim.jobs[key]
        attempt = int(sj.status.get("attempt") or 0)
        return sorted(((p.namespace, p.name) for p in self.sim.job_pods(key)
                       if p.attempt == attempt and not p.deleting and not p.terminal and p.phase == "Running"))

    def _counters(self):
        out = {}
        for k, sj in self.sim.jobs.items():
            r = sj.status.get("restarts") or {}
            out[k] = (int(r.get("failures", 0)), int(r.get("preemptions", 0)), int(sj.status.get("attempt") or 0),
                      sj.status.get("phase"))
        return out

    def _submit(self, ev: tuple) -> str:
        _, replicas, gpus, topo, prio, pools, fallback, pbf, max_restarts, backoff, tmpl = ev
        name = f"j{self.n}"
        self.n += 1
        if tmpl == 0:
            self.plain.add((NS_DEFAULT, name))
        self.sim.add_job(job_body(
            name, replicas=replicas, gpus=gpus, topology=TOPOLOGIES[topo], priority=prio, pools=POOL_LISTS[pools],
            created=self.sim.now, fallbackAfterSeconds=fallback, template=TEMPLATES[tmpl],
            failurePolicy={"preemptionsBeforeFallback": pbf, "maxRestarts": max_restarts,
                           "backoffSeconds": backoff, "maxBackoffSeconds": 600}))
        return (f"{name}: {replicas} x {gpus} GPUs, {TOPOLOGIES[topo]}, priority {prio}, pools {POOL_LISTS[pools]}, "
                f"fallbackAfterSeconds {fallback}, preemptionsBeforeFallback {pbf}, maxRestarts {max_restarts}, "
                f"backoff {backoff}, template {tmpl}")

    def apply(self, ev: tuple) -> None:
        sim = self.sim
        kind = ev[0]
        failed: set = set()     # jobs whose worker failed: failures +1 (or the job is Failed)
        preempted: set = set()  # jobs disrupted: preemptions +1
        note = ""
        if kind == "submit":
            note = self._submit(ev)
        elif kind == "burst":  # several jobs in one instant: one admission round sees them all
            note = "; ".join(self._submit(e) for e in ev[1])
        elif kind in ("suspend", "resume"):
            want = kind == "suspend"
            keys = self._jobs(lambda sj: sj.body["spec"].get("suspend", False) != want)
            if keys:
                key = keys[ev[1] % len(keys)]
                sim.edit_spec(key, suspend=want)
                note = f"{key[1]}"
        elif kind == "taint":
            node = f"n{ev[1]}"
            if not sim.nodes[node].taints:
                sim.taint(node, INTERRUPTIONS[ev[2]])
                for k, sj in sim.jobs.items():
                    pl = sj.status.get("placement") or {}
                    if node in (pl.get("nodes") or ()):
                        preempted.add(k)
                note = f"{node} {INTERRUPTIONS[ev[2]]}, hits {sorted(k[1] for k in preempted)}"
        elif kind == "untaint":
            node = f"n{ev[1]}"
            if sim.nodes[node].taints:
                sim.untaint(node)
                note = node
        elif kind in ("disrupt", "fail"):
            keys = [k for k in self._jobs() if self._live_current(k)]
            if keys:
                key = keys[ev[1] % len(keys)]
                pods = self._live_current(key)
                pk = pods[ev[2] % len(pods)]
                if kind == "disrupt":
                    sim.set_pod(pk, disruption=DISRUPTIONS[ev[2] % len(DISRUPTIONS)])
                    sim.delete_pod(pk)
                    preempted.add(key)
                else:
                    sim.set_pod(pk, phase="Failed", exit_code=1, ready=False)
                    failed.add(key)
                note = f"{pk[1]}"
        elif kind == "succeed":
            keys = [k for k in self._jobs(lambda sj: sj.status.get("phase") == "Running")]
            if keys:
                key = keys[ev[1] % len(keys)]
                for pk in self._live_current(key):
                    sim.set_pod(pk, phase="Succeeded", exit_code=0, ready=False)
                note = key[1]
        elif kind == "delete":
            keys = self._jobs()
            if keys:
                key = keys[ev[1] % len(keys)]
                sim.delete_job(key)
                note = key[1]
        elif kind == "foreign":
            name = f"f{self.n}"
            self.n += 1
            where = sim.add_foreign_pod(name, ev[1], prefer=[f"n{ev[2]}"])
            note = f"{name}: {ev[1]} GPUs -> {where or 'Pending (fits nowhere)'}"
        elif kind == "foreign-done":
            keys = sorted(k for k, sp in sim.pods.items() if sp.foreign and not sp.pod.terminal)
            if keys:
                pk = keys[ev[1] % len(keys)]
                sim.set_pod(pk, phase="Succeeded")
                note = pk[1]
        elif kind == "serve":  # its autoscaler asks for one more replica group
            svc = sorted(sim.services)[ev[1] % len(sim.services)]
            sim.scale_service(svc, +1)
            note = svc[1]
        elif kind == "unserve":  # ... or one fewer
            svc = sorted(sim.services)[ev[1] % len(sim.services)]
            sim.scale_service(svc, -1)
            note = svc[1]
        elif kind == "time":
            sim.advance(ev[1])
            note = f"+{ev[1]}s"
        elif kind == "crash":  # the next reconcile that deletes or creates pods is cut short
            sim.crash_pending = True
        elif kind.startswith("race-"):  # right after the next round that admits something
            sim.race = (kind[5:], ev[1])
        sim.log.append(f"{kind} {note}".rstrip() if note else f"{kind} (nothing to do)")
        before = self._counters()
        sim.settle()
        sim.check_settled()
        self.check_counters(before, failed, preempted)
        self.check_idle_jobs()
        self.check_no_blame_on_valid_jobs()

    def check_no_blame_on_valid_jobs(self):
        """(g) Another job's template never costs a valid job its placement: a job whose
        template asks for no GPU of its own is never told PlacementLost (its GPUs taken) nor
        fails to start (issue 18)."""
        for k in self.plain:
            sj = self.sim.jobs.get(k)
            if sj is None:
                continue
            adm = next((c for c in sj.status.get("conditions") or [] if c.get("type") == "Admitted"), {})
            failed = next((c for c in sj.status.get("conditions") or [] if c.get("type") == "Failed"), {})
            if adm.get("reason") == "PlacementLost" or failed.get("reason") == "StartupRetryLimitExceeded":
                self.sim.fail(f"(g) {k[1]}: a valid job lost its placement: {adm.get('message') or failed.get('message')}")

    def check_counters(self, before, failed, preempted):
        """(e) Restart counters move only for the cause that moves them."""
        sim = self.sim
        after = self._counters()
        for k, (f1, p1, a1, phase1) in after.items():
            f0, p0, a0, _ = before.get(k, (0, 0, 0, None))
            spec = sim.jobs[k].body["spec"]
            max_restarts = spec["failurePolicy"]["maxRestarts"]
            if f1 < f0 or p1 < p0 or a1 < a0:
                sim.fail(f"(e) {k[1]}: counters went down: failures {f0}->{f1}, preemptions {p0}->{p1}, attempt {a0}->{a1}")
            if k in failed:
                if not (f1 == f0 + 1 or (phase1 == "Failed" and f0 == f1 == max_restarts)):
                    sim.fail(f"(e) {k[1]}: a worker failed, failures {f0}->{f1} (maxRestarts {max_restarts}, phase {phase1})")
            elif f1 != f0:
                sim.fail(f"(e) {k[1]}: failures {f0}->{f1} without a worker failure")
            if k in preempted:
                if p1 != p0 + 1:
                    sim.fail(f"(e) {k[1]}: disrupted, preemptions {p0}->{p1}")
            elif p1 != p0:
                sim.fail(f"(e) {k[1]}: preemptions {p0}->{p1} without a disruption")

    def check_idle_jobs(self):
        """(d) A suspended or finished job holds nothing but its terminating pods' GPUs."""
        sim = self.sim
        snap = sim.snapshot()
        led = build_ledger(snap, "nvidia.com/gpu")
        for k, sj in sim.jobs.items():
            idle = sj.body["spec"].get("suspend") or sj.status.get("phase") in ("Succeeded", "Failed", "Suspended")
            if not idle:
                continue
            if sj.status.get("placement") or k in sim.assumed:
                sim.fail(f"(d) {k[1]} (phase {sj.status.get('phase')}) holds a placement")
            terminating = sum(p.requests.get("nvidia.com/gpu", 0) for p in sim.job_pods(k)
                              if p.deleting and not p.terminal)
            held = led.held_by(("TrainingJob",) + k)
            if held != terminating:
                sim.fail(f"(d) {k[1]} (phase {sj.status.get('phase')}) holds {held} GPUs, "
                         f"its terminating pods {terminating}")


def run(evs, grace: float, interleave: float = 0.5, seed: int = 0) -> World:
    w = World(grace, interleave, seed)
    for ev in evs:
        w.apply(ev)
    # Let every deletion finish: then only running gangs and foreign pods hold GPUs.
    w.apply(("time", 400))
    return w


@settings(max_examples=150, deadline=None)
@given(st.lists(events, min_size=1, max_size=25), st.sampled_from([0.0, 30.0]), st.sampled_from([0.0, 0.5, 1.0]),
       st.integers(0, 2**16))
def test_ledger_matches_pods_over_random_events(evs, grace, interleave, seed):
    run(evs, grace, interleave, seed)


@settings(max_examples=25, deadline=None)
@given(st.lists(submits, min_size=2, max_size=10),
       st.lists(st.one_of(st.tuples(st.just("taint"), st.integers(0, 7), st.just(0)),
                          st.tuples(st.just("disrupt"), picks, picks),
                          st.tuples(st.just("fail"), picks, picks),
                          st.tuples(st.just("crash")),
                          st.tuples(st.just("time"), st.sampled_from([15, 400]))), max_size=10))
def test_crowded_fleet_survives_preemptions_and_failures(subs, hits):
    """Many jobs first (a full fleet and a queue), then disruptions and failures."""
    run([("burst", list(subs))] + list(hits), 30.0)


@settings(max_examples=30, deadline=None)
@given(st.lists(submits, min_size=2, max_size=8), races, st.lists(events, max_size=4))
def test_gangs_behind_an_abandoned_admission_get_the_gpus(subs, race, more):
    """A burst fills the fleet; one of the gangs admitted is suspended or deleted before its
    placement is written: the gangs that waited behind it must get the GPUs (invariant (f))."""
    run([race, ("burst", list(subs))] + list(more), 0.0, 0.0)


def test_long_random_walks():
    """Longer sequences than Hypothesis draws, from fixed seeds (deterministic)."""
    for seed in range(6):
        rng = random.Random(seed)
        run([random_event(rng) for _ in range(60)], rng.choice([0.0, 30.0]), rng.choice([0.0, 0.5, 1.0]), seed)
