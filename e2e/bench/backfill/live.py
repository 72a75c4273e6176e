"""The backfill bench, live and small: kubeforge's operator (reservations with backfill, the
pool's defaults) against the real Kueue v0.16.2 + JobSet (BestEffortFIFO with TopologyAwareScheduling,
Kueue's default) on the same 16 kwok nodes (``e2e/fleets/preempt-16.yaml``: four NVLink cliques of
4 x 8 GPUs) and the same arrivals.

Time is compressed, one live second standing for one minute: small jobs (one pod of 4 or 8 GPUs,
30-120 s) arrive at a load of about the fleet's size for ``--minutes`` live seconds x 60, and
every ``--large-every`` seconds a large gang of 4 x 8 GPUs that needs a whole clique (``Required``
at ``nvidia.com/gpu.clique``; Kueue: ``podset-required-topology``) arrives and runs 90 s. The bench
ends each job ``duration`` seconds after it was admitted (it deletes it: kwok pods run nothing).
kubeforge learns each job's end the way a worker's report tells it (``status.progress.eta``,
written here through the status subresource as the operator's status endpoint would) and half
the small jobs also set ``spec.maxRunSeconds`` (60 or 120 s, the API's minimum being 60); Kueue
reads neither. Printed per system: large-gang wait p50 / max, small-job wait p50 / p95 (seconds
from create to admitted, polled every second), GPUs held on average while jobs arrive.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import dataclass

from e2e.bench.lib.cluster import apply_crds, apply_fleet, open_api, start_operator, stop_operator
from e2e.bench.lib.source import ROOT
from e2e.bench.lib.stats import pct
from e2e.bench.lib.timing import iso, logger
from e2e.peers import BUILD_HINT, peers_bin, queues
from e2e.peers.stack import start_jobset, start_kueue, stop_peers

say = logger("backfill")
CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
LABEL = "kubeforge.io/job-name"


@dataclass
class LiveJob:
    """One job of the live scenario (seconds from the scenario's start)."""

    name: str
    replicas: int
    gpus: int
    at: float
    duration: float
    limit: int | None = None
    created: float | None = None
    admitted: float | None = None
    deleted: bool = False

    @property
    def large(self) -> bool:
        return self.replicas > 1


def scenario(minutes: float, large_every: float, seed: int, load: float = 1.0, gpus: int = 128) -> list[LiveJob]:
    """The arrivals (module docstring), sorted by time."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    mean = 6 * 75.0  # GPU-seconds of a small job: 4 or 8 GPUs, 30-120 s
    while True:
        t += rng.expovariate(load * gpus / mean)
        if t > minutes * 60:
            break
        d = rng.uniform(30, 120)
        limit = (60 if d <= 55 else 120) if rng.random() < 0.5 else None
        jobs.append(LiveJob(f"s{len(jobs):03d}", 1, rng.choice((4, 8)), t, d, limit))
    k, t = 0, large_every
    while t <= minutes * 60:
        jobs.append(LiveJob(f"large{k}", 4, 8, t, 90.0))
        k, t = k + 1, t + large_every
    return sorted(jobs, key=lambda j: j.at)


class Kubeforge:
    """The operator with one GPUPool (reservations at their defaults), TrainingJobs."""

    name = "kubeforge"

    def __init__(self, c, ns: str, fleet: str) -> None:
        self.c, self.ns, self.fleet = c, ns, fleet

    def setup(self) -> None:
        self.c.kubectl("create", "namespace", self.ns, check=False)
        _apply(self.c, {"apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": self.ns},
                        "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/sim-fleet": self.fleet}}}})
        start_operator(self.c)

    def submit(self, j: LiveJob) -> None:
        spec = {"pools": [self.ns], "replicas": j.replicas, "gpusPerReplica": j.gpus,
                "topology": {"mode": "Required", "level": "nvlink"} if j.large else {"mode": "None"},
                "template": {"spec": {"terminationGracePeriodSeconds": 0,
                                      "containers": [{"name": "trainer", "image": "example.com/train:1"}]}}}
        if j.limit:
            spec["maxRunSeconds"] = j.limit
        _apply(self.c, {"apiVersion": "kubeforge.io/v1alpha1", "kind": "TrainingJob",
                        "metadata": {"name": j.name, "namespace": self.ns}, "spec": spec})

    def admitted(self) -> dict[str, float]:
        out = {}
        for o in _list(self.c, "trainingjobs", self.ns):
            at = ((o.get("status") or {}).get("placement") or {}).get("admittedAt")
            if at:
                out[o["metadata"]["name"]] = time.time()
        return out

    def report(self, j: LiveJob) -> None:
        """The job's first progress report: its ETA (when it was admitted plus its duration)."""
        now = time.time()
        body = {"status": {"progress": {"step": 1, "eta": iso(j.admitted + j.duration), "lastReportTime": iso(now)}}}
        self.c.kubectl("patch", "trainingjob", j.name, "-n", self.ns, "--subresource=status", "--type=merge",
                       "-p", json.dumps(body), check=False)

    def end(self, j: LiveJob) -> None:
        self.c.kubectl("delete", "trainingjob", j.name, "-n", self.ns, "--wait=false", check=False)

    def teardown(self) -> None:
        self.c.kubectl("delete", "namespace", self.ns, "--wait=false", check=False)
        self.c.kubectl("wait", "--for=delete", f"namespace/{self.ns}", "--timeout=120s", check=False, timeout=150)
        stop_operator(self.c)
        self.c.kubectl("delete", "gpupool", self.ns, "--ignore-not-found", "--wait=false", check=False)


class Kueue:
    """Kueue + JobSet: one ClusterQueue (BestEffortFIFO) over one TAS flavor, JobSets."""

    name = "kueue"

    def __init__(self, c, ns: str, fleet: str) -> None:
        self.c, self.ns, self.fleet = c, ns, fleet

    def setup(self) -> None:
        start_jobset(self.c)
        start_kueue(self.c)
        p = self.ns
        _apply(self.c, queues.topology(p, [BLOCK, CLIQUE]), queues.resource_flavor(p, {"kubeforge.io/sim-fleet": self.fleet}, p),
               queues.cluster_queue(p, p, 128))
        self.c.kubectl("create", "namespace", self.ns, check=False)
        _apply(self.c, queues.local_queue(self.ns, "q", p))

    def submit(self, j: LiveJob) -> None:
        _apply(self.c, queues.jobset(j.name, self.ns, j.replicas, j.gpus, "q", "Required" if j.large else "None",
                                     CLIQUE if j.large else None, pod_labels={LABEL: j.name},
                                     pod_annotations=queues.KWOK_KEEP_RUNNING))

    def admitted(self) -> dict[str, float]:
        out = {}
        for wl in _list(self.c, "workloads.kueue.x-k8s.io", self.ns):
            owner = next((o["name"] for o in wl["metadata"].get("ownerReferences") or [] if o["kind"] == "JobSet"), None)
            adm = next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == "Admitted"), {})
            if owner and adm.get("status") == "True":
                out[owner] = time.time()
        return out

    def report(self, j: LiveJob) -> None:
        """Kueue reads no progress."""

    def end(self, j: LiveJob) -> None:
        self.c.kubectl("delete", "jobset", j.name, "-n", self.ns, "--wait=false", check=False)

    def teardown(self) -> None:
        self.c.kubectl("delete", "namespace", self.ns, "--wait=false", check=False)
        self.c.kubectl("wait", "--for=delete", f"namespace/{self.ns}", "--timeout=120s", check=False, timeout=150)
        self.c.kubectl("delete", "clusterqueue,resourceflavor,topology", self.ns, "--ignore-not-found", check=False)
        stop_peers(self.c)


def _apply(c, *objs: dict) -> None:
    c.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))


def _list(c, kind: str, ns: str) -> list[dict]:
    return json.loads(c.kubectl("get", kind, "-n", ns, "-o", "json").stdout)["items"]


def run(system, jobs: list[LiveJob], settle: float) -> dict:
    """Submit on time, mark admissions (polled every second), report ETAs, end jobs on time;
    returns the waits and the mean GPUs held while jobs arrive."""
    system.setup()
    t0 = time.time()
    pending, live = list(jobs), []
    held: list[int] = []
    last = max(j.at for j in jobs)
    while True:
        now = time.time() - t0
        while pending and pending[0].at <= now:
            j = pending.pop(0)
            system.submit(j)
            j.created = time.time() - t0
            live.append(j)
        seen = system.admitted()
        for j in live:
            if j.admitted is None and j.name in seen:
                j.admitted = time.time() - t0
                system.report(j)
            if j.admitted is not None and not j.deleted and now >= j.admitted + j.duration:
                system.end(j)
                j.deleted = True
        if now <= last:
            held.append(sum(j.replicas * j.gpus for j in live if j.admitted is not None and not j.deleted))
        if not pending and (all(j.deleted for j in live) or now > last + settle):
            break
        time.sleep(max(0.0, 1.0 - (time.time() - t0 - now)))
    system.teardown()
    return {"jobs": jobs, "held": sum(held) / max(1, len(held))}


def report(name: str, res: dict, horizon: float) -> None:
    """One system's line."""
    def waits(large: bool) -> list[float]:
        return [(j.admitted if j.admitted is not None else horizon) - (j.created or j.at)
                for j in res["jobs"] if j.large == large]
    big, small = waits(True), waits(False)
    print(f"{name:<10} large wait p50 {pct(big, 50):6.0f} s  max {max(big, default=0):6.0f} s   small wait p50 "
          f"{pct(small, 50):5.0f} s  p95 {pct(small, 95):5.0f} s   GPUs held {res['held']:5.1f} of 128   "
          f"never admitted {sum(1 for j in res['jobs'] if j.admitted is None)}")


def main(argv: list[str] | None = None) -> int:
    """Run the scenario on each system, then print both; returns 0."""
    ap = argparse.ArgumentParser(prog="python -m e2e.bench.backfill.live", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=os.environ.get("KUBEFORGE_BENCH_CLUSTER", "kubeforge-backfill"))
    ap.add_argument("--systems", default="kubeforge,kueue")
    ap.add_argument("--minutes", type=float, default=8.0, help="live minutes of arrivals (x60 compressed)")
    ap.add_argument("--large-every", type=float, default=100.0, help="seconds between large gangs")
    ap.add_argument("--settle", type=float, default=240.0, help="seconds after the last arrival before giving up")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    a = ap.parse_args(argv)
    systems = [s for s in a.systems.split(",") if s]
    if "kueue" in systems and peers_bin() is None:
        say(f"skipping Kueue: {BUILD_HINT}")
        systems.remove("kueue")
    from kubeforge.sim.cluster import Cluster
    from kubeforge.sim.fleet import load_fleet

    fleet = load_fleet(ROOT / "e2e/fleets/preempt-16.yaml")
    c = Cluster(a.cluster)
    results = {}
    try:
        c.up(None, log=say)
        apply_fleet(c, open_api(c, 4), fleet)
        apply_crds(c, ROOT / "crds")
        for s in systems:
            jobs = scenario(a.minutes, a.large_every, a.seed)
            system = (Kubeforge if s == "kubeforge" else Kueue)(c, f"bf-{s}", fleet.name)
            say(f"{s}: {len(jobs)} jobs over {a.minutes:g} min")
            results[s] = run(system, jobs, a.settle)
    finally:
        if not a.keep:
            c.down(log=say)
    print(f"\nlive backfill: 16 kwok nodes x 8 GPUs (4 NVLink cliques of 4), 1 s = 1 min; large gangs 4 x 8 GPUs in "
          f"one clique every {a.large_every:g} s; small jobs of 4-8 GPUs, 30-120 s")
    horizon = a.minutes * 60 + a.settle
    for s, res in results.items():
        report(s, res, horizon)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
