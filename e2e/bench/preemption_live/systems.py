"""The live preemption scenario's two systems, behind one small interface.

:mod:`e2e.bench.preemption_live` drives both the same way: ``setup()``, ``submit(gang)`` (a 2 x 8
GPU gang, topology Required at the NVLink domain, the gang's priority, in its team's
namespace), ``checkpoint(gang, step, t)`` when the gang's workload reports a checkpoint,
``state()`` (who is admitted, on which nodes, how often the system preempted it, by whom) and
``teardown()``. Victims are counted from each system's own counter (kubeforge:
``status.restarts.preemptions``; Kueue: ``status.schedulingStats.evictions`` with reason
``Preempted``), so a victim that is preempted and admitted again between two polls still counts.

- :class:`KubeforgeSystem`: one GPUPool with two quotas (``nominalGPUs`` each, borrowing
  unlimited, preemption ``withinQuota: LowerPriority``, ``reclaimQuota: Any``, the defaults,
  with ``minRuntimeSeconds`` scaled by the scenario's time compression);
  TrainingJobs with ``spec.priority``; a checkpoint is reported in
  ``status.lastCheckpoint`` (step, path, time), what the operator records from a worker's
  termination message, written here through the status subresource since the sim runs no
  workload.
- :class:`KueueSystem`: Kueue + JobSet with the same shape: one TAS ResourceFlavor, two
  ClusterQueues in one cohort (``nominalQuota`` each, no borrowing limit,
  ``reclaimWithinCohort: Any``, ``withinClusterQueue: LowerPriority``), a LocalQueue per
  team namespace, WorkloadPriorityClasses for the priorities; JobSets with
  ``podset-required-topology``. Kueue does not read checkpoints: ``checkpoint`` is a no-op.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from e2e.bench.lib.cluster import start_operator, stop_operator
from e2e.bench.lib.timing import iso as _iso
from e2e.bench.lib.timing import ts as _ts
from e2e.peers import queues
from e2e.peers.stack import start_jobset, start_kueue, stop_peers

CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
JOB_LABEL = "kubeforge.io/job-name"


@dataclass(frozen=True)
class Gang:
    """One job of the scenario (every gang is 2 pods x 8 GPUs, Required inside one NVLink domain).

    Attributes:
        name: job name.
        team: ``research`` or ``product`` (its namespace is ``<prefix>-<team>``).
        priority: higher wins (kubeforge ``spec.priority``; Kueue WorkloadPriorityClass value).
        interval: seconds between its checkpoints (running gangs only).
        age: age of its last checkpoint at the first arrival, seconds (running gangs only).
        arrival: seconds after the first arrival when it is submitted (arrivals only).
    """

    name: str
    team: str
    priority: int
    interval: float = 0.0
    age: float = 0.0
    arrival: float | None = None
    replicas: int = 2
    gpus: int = 8

    @property
    def total(self) -> int:
        """GPUs of the gang."""
        return self.replicas * self.gpus


@dataclass
class GangState:
    """What one poll saw of a gang."""

    admitted: bool = False
    nodes: tuple[str, ...] = ()
    admitted_at: float | None = None  # API server time of the Admitted transition (1 s resolution)
    preempted: str = ""  # the system's reason/message when it was preempted
    checkpoint_at: float | None = None  # the last checkpoint the system knows of (kubeforge's status)
    preemptions: int = 0  # times the system preempted it so far (its own counter)
    preempted_by: str = ""  # the preemptor the system names, when it names one


def _cond(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


class _Base:
    def __init__(self, c, prefix: str, fleet_name: str, nominal: int, preemption: dict | None = None) -> None:
        self.c, self.prefix, self.fleet, self.nominal = c, prefix, fleet_name, nominal
        self.teams = ("research", "product")
        self.preemption = {"withinQuota": "LowerPriority", "reclaimQuota": "Any", **(preemption or {})}

    def ns(self, team: str) -> str:
        """The team's namespace."""
        return f"{self.prefix}-{team}"

    def _apply(self, *objs: dict) -> None:
        self.c.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))

    def _list(self, kind: str) -> list[dict]:
        out = []
        for t in self.teams:
            out += json.loads(self.c.kubectl("get", kind, "-n", self.ns(t), "-o", "json").stdout)["items"]
        return out

    def _nodes(self, owner_label: str) -> dict[str, tuple[str, ...]]:
        by: dict[str, list[str]] = {}
        for p in self._list("pods"):
            j = (p["metadata"].get("labels") or {}).get(owner_label)
            if j and p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
                by.setdefault(j, []).append(p["spec"]["nodeName"])
        return {j: tuple(sorted(n)) for j, n in by.items()}

    def teardown(self) -> None:
        """Delete the team namespaces and wait (at most 120 s each) while the controllers still
        run, since their finalizers need them."""
        for t in self.teams:
            self.c.kubectl("delete", "namespace", self.ns(t), "--wait=false", "--ignore-not-found", check=False)
        for t in self.teams:
            self.c.kubectl("wait", "--for=delete", f"namespace/{self.ns(t)}", "--timeout=120s", check=False, timeout=150)


class KubeforgeSystem(_Base):
    """kubeforge: the operator, one GPUPool with two team quotas, TrainingJobs."""

    name = "kubeforge"

    def setup(self) -> None:
        """Create the namespaces and the pool, start the operator."""
        for t in self.teams:
            self.c.kubectl("create", "namespace", self.ns(t), check=False)
        self._apply({"apiVersion": "kubeforge.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": self.prefix},
                     "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/sim-fleet": self.fleet}},
                              "quotas": [{"name": t, "namespaces": [self.ns(t)], "nominalGPUs": self.nominal}
                                         for t in self.teams],
                              "preemption": self.preemption}})
        start_operator(self.c)

    def submit(self, g: Gang) -> None:
        """Create the gang's TrainingJob."""
        self._apply({"apiVersion": "kubeforge.io/v1alpha1", "kind": "TrainingJob",
                     "metadata": {"name": g.name, "namespace": self.ns(g.team)},
                     "spec": {"pools": [self.prefix], "replicas": g.replicas, "gpusPerReplica": g.gpus,
                              "priority": g.priority, "topology": {"mode": "Required", "level": "nvlink"},
                              "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                                  {"name": "trainer", "image": "example.com/train:1"}]}}}})

    def checkpoint(self, g: Gang, step: int, t: float) -> None:
        """Report a checkpoint as the operator records it (``status.lastCheckpoint``)."""
        body = {"status": {"lastCheckpoint": {"step": step, "path": f"/checkpoints/step-{step}", "time": _iso(t)}}}
        self.c.kubectl("patch", "trainingjob", g.name, "-n", self.ns(g.team), "--subresource=status",
                       "--type=merge", "-p", json.dumps(body))

    def state(self) -> dict[str, GangState]:
        """Every gang's state now."""
        nodes = self._nodes(JOB_LABEL)
        out = {}
        for tj in self._list("trainingjobs"):
            n = tj["metadata"]["name"]
            adm, pre = _cond(tj, "Admitted"), _cond(tj, "Preempted")
            ok = adm.get("status") == "True"
            st = tj.get("status") or {}
            ck = (st.get("lastCheckpoint") or {}).get("time")
            by = re.search(r"preempted by [^/ ]+/([^ ]+)", pre.get("message", ""))
            out[n] = GangState(ok, nodes.get(n, ()), _ts(adm["lastTransitionTime"]) if ok else None,
                               pre.get("message", "") if pre.get("status") == "True" else "", _ts(ck) if ck else None,
                               int((st.get("restarts") or {}).get("preemptions") or 0), by.group(1) if by else "")
        return out

    def teardown(self) -> None:
        """Stop the operator, delete the namespaces and the pool."""
        super().teardown()
        stop_operator(self.c)
        self.c.kubectl("delete", "gpupool", self.prefix, "--ignore-not-found", "--wait=false", check=False)


class KueueSystem(_Base):
    """Kueue + JobSet: a cohort of two ClusterQueues over one TAS flavor, JobSets."""

    name = "kueue"

    def setup(self) -> None:
        """Start JobSet and Kueue, create the queues, flavors and priority classes."""
        start_jobset(self.c)
        start_kueue(self.c)
        p = self.prefix
        objs = [queues.topology(p, [BLOCK, CLIQUE]),
                queues.resource_flavor(p, {"kubeforge.io/sim-fleet": self.fleet}, p)]
        objs += [queues.cluster_queue(f"{p}-{t}", p, self.nominal, cohort=p, reclaim_within_cohort="Any",
                                      within_cluster_queue="LowerPriority") for t in self.teams]
        self._apply(*objs)
        for t in self.teams:
            self.c.kubectl("create", "namespace", self.ns(t), check=False)
            self._apply(queues.local_queue(self.ns(t), "q", f"{p}-{t}"))

    def priority_classes(self, priorities: set[int]) -> None:
        """One WorkloadPriorityClass ``<prefix>-p<value>`` per priority used."""
        self._apply(*[queues.workload_priority_class(f"{self.prefix}-p{v}", v) for v in sorted(priorities)])

    def submit(self, g: Gang) -> None:
        """Create the gang's JobSet."""
        self._apply(queues.jobset(g.name, self.ns(g.team), g.replicas, g.gpus, "q", "Required", CLIQUE,
                                  pod_labels={JOB_LABEL: g.name}, priority_class=f"{self.prefix}-p{g.priority}",
                                  pod_annotations=queues.KWOK_KEEP_RUNNING))

    def checkpoint(self, g: Gang, step: int, t: float) -> None:
        """Kueue does not read checkpoints: nothing to report."""

    def state(self) -> dict[str, GangState]:
        """Every gang's state now (from its Workload)."""
        nodes = self._nodes(JOB_LABEL)
        out = {}
        for wl in self._list("workloads.kueue.x-k8s.io"):
            owner = next((o["name"] for o in wl["metadata"].get("ownerReferences") or [] if o["kind"] == "JobSet"), None)
            if owner is None:
                continue
            adm, pre, ev = _cond(wl, "Admitted"), _cond(wl, "Preempted"), _cond(wl, "Evicted")
            ok = adm.get("status") == "True"
            why = pre if pre.get("status") == "True" else ev if ev.get("status") == "True" else {}
            evictions = ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
            out[owner] = GangState(ok, nodes.get(owner, ()), _ts(adm["lastTransitionTime"]) if ok else None,
                                   f"{why.get('reason', '')}: {why.get('message', '')}" if why else "",
                                   preemptions=sum(int(e.get("count") or 0) for e in evictions
                                                   if e.get("reason") == "Preempted"))
        return out

    def teardown(self) -> None:
        """Delete the namespaces, queues and flavor while Kueue runs (its finalizers need it),
        then stop the managers."""
        super().teardown()
        p = self.prefix
        self.c.kubectl("delete", "clusterqueue", f"{p}-research", f"{p}-product", "--ignore-not-found", "--wait=false",
                       check=False)
        self.c.kubectl("delete", "resourceflavor,topology", p, "--ignore-not-found", "--wait=false", check=False)
        self.c.kubectl("wait", "--for=delete", f"clusterqueue/{p}-research", f"clusterqueue/{p}-product",
                       f"resourceflavor/{p}", "--timeout=60s", check=False, timeout=90)
        stop_peers(self.c)
