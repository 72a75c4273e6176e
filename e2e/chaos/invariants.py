"""What must hold once the operator has converged, read straight from the API server.

:func:`check` returns one line per violation (empty: all hold):

- **duplicates**: at most one pod not being deleted per (job, attempt, rank);
- **orphan pods**: every pod labelled ``kubeforge.io/job-name`` belongs to an existing job (its
  owner reference's uid is the job's) or is being deleted;
- **orphan claims and Services**: a checkpoint PVC without its job only when the job used
  ``deletionPolicy: Retain`` (``retained``); a kubeforge Service without an owner only when it
  is the namespace's shared ``kubeforge-workers``;
- **over-commit**: on every node, the GPU requests of its non-terminal pods fit its allocatable;
- **ledger**: each pool's ``status.gpus.allocated`` equals the GPUs of the non-terminal pods on
  its usable nodes plus admitted placements whose pods do not exist yet, and each job's entry
  in ``status.workloads`` equals what the job holds;
- **job states**: a job not suspended and not finished is Running with every rank Running in
  its current attempt, or waits (``Admitted=False``) holding nothing (no placement, no live
  pod); a suspended or finished job holds nothing.

``during=True`` checks only what must hold at every instant (duplicates, over-commit), for
sampling while chaos goes on.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from .kube import Kube, condition, gpus_of, jobs_path, live, pools_path

JOB_LABEL = "kubeforge.io/job-name"
ATTEMPT_LABEL = "kubeforge.io/restart-attempt"
RANK_LABEL = "kubeforge.io/replica-index"
WORKERS_SERVICE = "kubeforge-workers"
INTERRUPTION_TAINTS = ("aws-node-termination-handler/", "karpenter.sh/disrupted", "cloud.google.com/impending-node-termination",
                       "node.kubernetes.io/out-of-service")


def _usable(node: dict) -> bool:
    if node.get("spec", {}).get("unschedulable"):
        return False
    for t in node.get("spec", {}).get("taints") or []:
        if t.get("effect") in ("NoSchedule", "NoExecute") or t["key"].startswith(INTERRUPTION_TAINTS):
            return False
    ready = next((c for c in node.get("status", {}).get("conditions") or [] if c["type"] == "Ready"), None)
    return bool(ready and ready.get("status") == "True")


def _matches(pool: dict, node: dict) -> bool:
    sel = (pool.get("spec") or {}).get("nodeSelector") or {}
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (sel.get("matchLabels") or {}).items())


def check(kube: Kube, namespaces: Iterable[str], pools: Iterable[str], retained: set[tuple[str, str]] = frozenset(),
          during: bool = False) -> list[str]:
    """See the module docstring. ``retained``: (namespace, job) whose claim may outlive the job."""
    namespaces = list(namespaces)
    jobs = {(ns, j["metadata"]["name"]): j for ns in namespaces for j in kube.items(jobs_path(ns))}
    pods = [p for ns in namespaces for p in kube.items(f"/api/v1/namespaces/{ns}/pods")]
    nodes = {n["metadata"]["name"]: n for n in kube.items("/api/v1/nodes")}
    everything = kube.items("/api/v1/pods")  # every pod of the cluster counts, as kube-scheduler counts
    out = _duplicates(pods) + _over_commit(everything, nodes)
    if during:
        return out
    out += _orphan_pods(pods, jobs) + _orphan_claims_and_services(kube, namespaces, jobs, retained)
    states, unborn = _job_states(jobs, pods)
    return out + states + _ledger(kube, pools, namespaces, jobs, pods, nodes, everything, unborn)


def _labels(obj: dict) -> dict:
    return obj["metadata"].get("labels") or {}


def _non_terminal(p: dict) -> bool:
    return p["status"].get("phase") not in ("Succeeded", "Failed")


def _duplicates(pods: list[dict]) -> list[str]:
    """At most one pod not being deleted per (job, attempt, rank)."""
    seen: dict[tuple, list[str]] = defaultdict(list)
    for p in pods:
        lab = _labels(p)
        if JOB_LABEL in lab and not p["metadata"].get("deletionTimestamp"):
            seen[(p["metadata"]["namespace"], lab[JOB_LABEL], lab.get(ATTEMPT_LABEL), lab.get(RANK_LABEL))].append(
                p["metadata"]["name"])
    return [f"duplicate pods for {k}: {v}" for k, v in seen.items() if len(v) > 1]


def _over_commit(everything: list[dict], nodes: dict[str, dict]) -> list[str]:
    """On every node, the GPU requests of its non-terminal pods fit its allocatable."""
    held: dict[str, int] = defaultdict(int)
    for p in everything:
        node = p.get("spec", {}).get("nodeName")
        if node and _non_terminal(p):
            held[node] += gpus_of(p)
    out = []
    for name, gpus in held.items():
        alloc = int(((nodes.get(name) or {}).get("status") or {}).get("allocatable", {}).get("nvidia.com/gpu", 0) or 0)
        if name in nodes and gpus > alloc:
            out.append(f"node {name} over-committed: {gpus} GPUs requested by non-terminal pods, {alloc} allocatable")
    return out


def _orphan_pods(pods: list[dict], jobs: dict[tuple[str, str], dict]) -> list[str]:
    """Every job pod belongs to an existing job (its owner's uid is the job's) or is being deleted."""
    out = []
    for p in pods:
        lab = _labels(p)
        if JOB_LABEL not in lab or p["metadata"].get("deletionTimestamp"):
            continue
        job = jobs.get((p["metadata"]["namespace"], lab[JOB_LABEL]))
        owners = {o.get("uid") for o in p["metadata"].get("ownerReferences") or []}
        if job is None or job["metadata"]["uid"] not in owners:
            out.append(f"orphan pod {p['metadata']['namespace']}/{p['metadata']['name']} (job {lab[JOB_LABEL]} gone)")
    return out


def _orphan_claims_and_services(kube: Kube, namespaces: list[str], jobs: dict[tuple[str, str], dict],
                                retained: set[tuple[str, str]]) -> list[str]:
    """A checkpoint claim outlives its job only if retained; a kubeforge Service has an owner
    unless it is the namespace's shared workers Service."""
    out = []
    for ns in namespaces:
        for c in kube.items(f"/api/v1/namespaces/{ns}/persistentvolumeclaims"):
            lab = _labels(c)
            if JOB_LABEL not in lab or c["metadata"].get("deletionTimestamp"):
                continue
            if (ns, lab[JOB_LABEL]) not in jobs and (ns, lab[JOB_LABEL]) not in retained:
                out.append(f"orphan PVC {ns}/{c['metadata']['name']} (job deleted with deletionPolicy Delete)")
        for s in kube.items(f"/api/v1/namespaces/{ns}/services"):
            md = s["metadata"]
            if (md.get("labels") or {}).get("app.kubernetes.io/managed-by") != "kubeforge" or md.get("deletionTimestamp"):
                continue
            if md["name"] == WORKERS_SERVICE:
                continue
            if not md.get("ownerReferences"):
                out.append(f"orphan Service {ns}/{md['name']} (no owner)")
    return out


def _job_states(jobs: dict[tuple[str, str], dict], pods: list[dict]) -> tuple[list[str], dict[str, int]]:
    """Each job's state against what it holds (:func:`_job_state`), and the GPUs per node of
    admitted ranks whose pods do not exist yet."""
    by_job: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for p in pods:
        lab = _labels(p)
        if JOB_LABEL in lab:
            by_job[(p["metadata"]["namespace"], lab[JOB_LABEL])].append(p)
    out: list[str] = []
    unborn: dict[str, int] = defaultdict(int)  # node -> GPUs of admitted ranks with no pod yet
    for key, job in jobs.items():
        if not job["metadata"].get("deletionTimestamp"):
            out += _job_state(key, job, by_job.get(key, []), unborn)
    return out, unborn


def _job_state(key: tuple[str, str], job: dict, mine: list[dict], unborn: dict[str, int]) -> list[str]:
    """A job not suspended and not finished is Running with every rank Running in its current
    attempt, or waits (``Admitted=False``) holding nothing; a suspended or finished job holds
    nothing. Its admitted ranks with no pod yet are added to ``unborn``."""
    spec, st = job.get("spec") or {}, job.get("status") or {}
    attempt = str(st.get("attempt", 0))
    alive = [p for p in mine if live(p)]
    current = [p for p in alive if _labels(p).get(ATTEMPT_LABEL) == attempt]
    placement = st.get("placement")
    if placement:
        have = {_labels(p).get(RANK_LABEL) for p in mine if _labels(p).get(ATTEMPT_LABEL) == attempt}
        for r, node in enumerate(placement.get("nodes") or []):
            if str(r) not in have:
                unborn[node] += int(spec.get("gpusPerReplica") or 0)
    name = f"{key[0]}/{key[1]}"
    phase = st.get("phase")
    if phase in ("Succeeded", "Failed") or spec.get("suspend"):
        if alive or placement:
            return [f"job {name} ({'suspended' if spec.get('suspend') else phase}) still holds "
                    f"{len(alive)} live pods / placement {bool(placement)}"]
        return []
    running = [p for p in current if p["status"].get("phase") == "Running"]
    ranks = {_labels(p).get(RANK_LABEL) for p in running}
    if phase == "Running" and len(ranks) == int(spec.get("replicas") or 0) and len(alive) == len(current):
        return []
    adm = condition(job, "Admitted")
    if adm and adm.get("status") == "False" and not placement and not alive:
        return []
    return [f"job {name} neither Running with all ranks nor waiting empty-handed: phase {phase}, "
            f"Admitted {adm and (adm.get('status'), adm.get('reason'))}, placement {bool(placement)}, "
            f"{len(running)}/{spec.get('replicas')} ranks running, {len(alive)} live pods"]


def _ledger(kube: Kube, pools: Iterable[str], namespaces: list[str], jobs: dict[tuple[str, str], dict],
            pods: list[dict], nodes: dict[str, dict], everything: list[dict], unborn: dict[str, int]) -> list[str]:
    """Each pool's ``status.gpus.allocated`` equals the GPUs of the non-terminal pods on its usable
    nodes plus the unborn placements there, and each job's ``status.workloads`` entry covers what
    its pods hold there (and a deleted job is not listed)."""
    out = []
    for pool_name in pools:
        pool = kube.get(pools_path(pool_name))
        if pool is None:
            continue
        members = {n for n, node in nodes.items() if _matches(pool, node) and _usable(node)}
        on_pool = sum(gpus_of(p) for p in everything if p.get("spec", {}).get("nodeName") in members and _non_terminal(p))
        want = on_pool + sum(g for n, g in unborn.items() if n in members)
        got = ((pool.get("status") or {}).get("gpus") or {}).get("allocated")
        if got != want:
            out.append(f"pool {pool_name}: status.gpus.allocated {got} != {want} held by pods and unborn placements")
        per_job: dict[tuple[str, str], int] = defaultdict(int)
        for p in pods:
            lab = _labels(p)
            if JOB_LABEL in lab and p.get("spec", {}).get("nodeName") in members and _non_terminal(p):
                per_job[(p["metadata"]["namespace"], lab[JOB_LABEL])] += gpus_of(p)
        listed = {(w["namespace"], w["name"]): w["gpus"] for w in (pool.get("status") or {}).get("workloads") or []
                  if w.get("kind") == "TrainingJob"}
        for key in set(per_job) | set(listed):
            if key[0] not in namespaces:
                continue
            if listed.get(key, 0) < per_job.get(key, 0):  # placements of unborn pods may add to the listing
                out.append(f"pool {pool_name}: job {key[0]}/{key[1]} listed with {listed.get(key, 0)} GPUs, "
                           f"its pods hold {per_job.get(key, 0)}")
            if key not in jobs and listed.get(key):
                out.append(f"pool {pool_name}: deleted job {key[0]}/{key[1]} still listed with {listed[key]} GPUs")
    return out


def pool_allocated(kube: Kube, pool: str) -> int | None:
    p = kube.get(pools_path(pool))
    return (((p or {}).get("status") or {}).get("gpus") or {}).get("allocated")
