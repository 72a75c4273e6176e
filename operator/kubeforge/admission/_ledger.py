"""The one GPU ledger: who holds which GPUs on which node.

Kueue's cache in miniature. Admitted work is *assumed*: a TrainingJob's placement (and an
InferenceService replica group's nodes, ``status.groups[].nodes``) holds its
GPUs on its nodes from the moment it is decided (``status.placement``, or an assumed placement
not yet written), whether or not its pods exist or are bound, so two gangs are never promised
the same GPUs while pods are being created, and the ledger is rebuilt after a restart from what
the API server keeps (placements in status, pods). Every other non-terminal pod that requests
the resource and is bound to (or assigned to) a node holds its request there: InferenceService
replicas, other workloads, and a job's pods of an older attempt that are still terminating. A
job's pods of its current attempt (a group's pods of its current attempt) are counted through
the placement (the group), never twice.

Dynamic Resource Allocation: a DRA pool's GPUs are counted under ``dra:<driver>``. Every
allocated ResourceClaim (``status.allocation.devices.results``) holds its GPU devices on the node
whose ResourceSlice publishes them, whoever's claim it is, except the claims of pods counted
through their placement. Keys that name the same physical GPUs (a DRA pool's driver and its
``gpuResourceName``: :func:`~kubeforge.admission._snapshot.same_gpus`) are counted together, so a
node whose GPUs are requested both through the device plugin and through claims is never
over-committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeforge.admission._snapshot import Snapshot, pool_resource, same_gpus
from kubeforge.objects import TERMINAL_JOB_PHASES, dra_key, groups_of, is_dra_key, rank_gpus

WorkloadKey = tuple[str, str, str]
"""(kind, namespace, name): ``("TrainingJob", ns, name)``, ``("InferenceService", ns, name)``,
``("Pod", ns, name)`` for pods of neither, or ``("ResourceClaim", ns, name)`` for an allocated
claim whose pod is not known."""


@dataclass
class Ledger:
    """GPUs held per node for one GPU resource, and by whom.

    Attributes:
        resource: The extended resource counted, e.g. ``nvidia.com/gpu``.
        per_node: Node name -> GPUs held there.
        per_workload: Workload -> {node -> GPUs}.
    """

    resource: str
    per_node: dict[str, int] = field(default_factory=dict)
    per_workload: dict[WorkloadKey, dict[str, int]] = field(default_factory=dict)

    def hold(self, who: WorkloadKey, node: str, gpus: int) -> None:
        """Record ``gpus`` more held by ``who`` on ``node``."""
        if gpus <= 0:
            return
        self.per_node[node] = self.per_node.get(node, 0) + gpus
        mine = self.per_workload.setdefault(who, {})
        mine[node] = mine.get(node, 0) + gpus

    def held_by(self, who: WorkloadKey) -> int:
        """Total GPUs ``who`` holds."""
        return sum(self.per_workload.get(who, {}).values())


def build_ledger(snapshot: Snapshot, resource: str) -> Ledger:
    """The ledger of ``resource`` for ``snapshot`` (see the module docstring for the rules).

    A placement counts under the GPU resource of its pool only (a pool counts only its own
    ``gpuResourceName``), each of its nodes holding what one rank's pod requests by the
    scheduler's rule (:func:`kubeforge.objects.rank_gpus`: sidecars and init containers that
    ask for GPUs included), exactly what the pods will hold once bound. A placement of a finished or suspended job holds nothing (its
    placement is cleared in the same status write anyway).
    """
    led = Ledger(resource)
    keys = same_gpus(snapshot.pools, resource)
    covered: dict[tuple[str, str], int] = {}
    for job in snapshot.jobs.values():
        pl = job.placement
        if pl is None or job.phase in TERMINAL_JOB_PHASES or job.record.spec is None:
            continue
        held_as = pool_resource(snapshot.pools.get(pl.pool))
        if held_as not in keys:
            continue
        per = rank_gpus(job.record, held_as)
        who = ("TrainingJob",) + job.key
        for node in pl.nodes:
            led.hold(who, node, per)
        covered[job.key] = job.attempt
    groups: dict[tuple[str, str, int], int] = {}
    for key, svc in snapshot.services.items():
        for g in groups_of(svc.status):
            if g.holds and pool_resource(snapshot.pools.get(g.pool)) in keys:
                for node in g.nodes:
                    led.hold(("InferenceService",) + key, node, g.gpus_per_pod)
                groups[key + (g.index,)] = g.attempt
    for (key, index), a in snapshot.assumed_groups.items():
        if key + (index,) in groups or pool_resource(snapshot.pools.get(a.placement.pool)) not in keys:
            continue
        for node in a.placement.nodes:
            led.hold(("InferenceService",) + key, node, a.gpus_per_pod)
        groups[key + (index,)] = 0
    plugin = [k for k in keys if not is_dra_key(k)]
    by_name = {}
    for pod in snapshot.pods:
        by_name[(pod.namespace, pod.name)] = pod
        gpus = sum(pod.requests.get(k, 0) for k in plugin)
        node = pod.where
        if not gpus or node is None or pod.terminal:
            continue
        if _covered(pod, covered, groups):
            continue
        led.hold(_owner(pod), node, gpus)
    if any(is_dra_key(k) for k in keys):
        for claim in snapshot.resource_claims:
            pod = by_name.get((claim.namespace, claim.pod)) if claim.pod else None
            if pod is not None and _covered(pod, covered, groups):
                continue
            for driver, pool, device in claim.devices:
                if dra_key(driver) not in keys:
                    continue
                node = snapshot.devices.node_of(driver, pool, claim.node)
                if node is None or not snapshot.devices.is_gpu(driver, node, device):
                    continue
                who = _owner(pod) if pod is not None else ("ResourceClaim", claim.namespace, claim.name)
                led.hold(who, node, 1)
    return led


def _covered(pod, covered: dict, groups: dict) -> bool:
    """Whether a pod's GPUs are counted through its job's placement or its group's nodes."""
    if pod.job is not None and covered.get((pod.namespace, pod.job)) == pod.attempt:
        return True
    return pod.service is not None and pod.group is not None and \
        groups.get((pod.namespace, pod.service, pod.group)) == pod.attempt


def _owner(pod) -> WorkloadKey:
    if pod.service is not None:
        return ("InferenceService", pod.namespace, pod.service)
    if pod.job is not None:
        return ("TrainingJob", pod.namespace, pod.job)
    return ("Pod", pod.namespace, pod.name)


def build_ledgers(snapshot: Snapshot) -> dict[str, Ledger]:
    """One ledger per GPU resource named by the snapshot's pools."""
    resources = {pool_resource(p) for p in snapshot.pools.values()}
    return {r: build_ledger(snapshot, r) for r in sorted(resources)}
