"""The training bench's start breakdown from the API server's own audit log.

Every time here comes from the API server itself, not from this bench's watches (which lag by
seconds when the machine is busy): the bench creates its cluster with an audit policy
(:data:`AUDIT_POLICY`: Metadata level, writes of pods, claims and TrainingJobs only), so the API
server logs every create, bind, status write and gate lift with microsecond timestamps and the
client's user agent; :func:`breakdown` reads that log into the steps of each gang's first start:
created -> Admitted (the operator's status write with the placement) -> pods created (-> claim
Bound -> gate lifted) -> bound (kube-scheduler's ``pods/binding``) -> Running (kwok's status
write), p50/p95 each, and the claims' create -> Bound latencies.

The rest of the claim figures: :mod:`~e2e.bench.training.components` (the PV controller's and
kube-scheduler's own metrics, the operator's profile), :mod:`~e2e.bench.training.restart` (the
spot restart) and :mod:`~e2e.bench.training.claims_report` (what is printed). Everything prints
figures; nothing asserts a time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from e2e.bench.lib.timing import ts

__all__ = ["AUDIT_POLICY", "KCM_API_QPS", "SPOT_TAINT", "STEPS", "Gang", "Timeline", "audit_policy_file", "breakdown",
           "kcm_args", "pod_steps", "read_audit"]

KCM_API_QPS = 0
"""kube-controller-manager ``--kube-api-qps`` = ``--kube-api-burst`` for the bench's cluster; 0
keeps upstream's 20 / 30. Every controller in it has its own client and rate limiter; the PV
controller spends ~6 writes on each dynamically provisioned claim (the provisioner annotation,
its ExternalProvisioning Events, then PV status, claim, claim status), so at 20 qps it binds
~4-6 claims a second, as kubernetes/kubernetes#95497 measured. Kubernetes' own scale tests
(clusterloader2) run it at 100 / 100."""

SPOT_TAINT = "aws-node-termination-handler/spot-itn"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch"]
  resources:
  - group: ""
    resources: ["pods", "pods/binding", "pods/status", "persistentvolumeclaims", "persistentvolumeclaims/status"]
  - group: "kubeforge.io"
    resources: ["trainingjobs", "trainingjobs/status"]
- level: None
"""
_POD = re.compile(r"^(?P<job>.+)-worker-(?P<rank>\d+)-(?P<attempt>\d+)$")
_PLAIN_POD = re.compile(r"^(?P<job>.+)-worker-(?P<rank>\d+)$")  # the baseline's: no attempt


def kcm_args(qps: int) -> tuple[str, ...]:
    """kwokctl ``--extra-args`` giving kube-controller-manager ``qps`` (none for 0)."""
    if qps <= 0:
        return ()
    return (f"kube-controller-manager=kube-api-qps={qps}", f"kube-controller-manager=kube-api-burst={qps}")


def audit_policy_file(directory: Path) -> str:
    """Write :data:`AUDIT_POLICY` into ``directory`` (created) and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bench-audit-policy.yaml"
    path.write_text(AUDIT_POLICY)
    return str(path)


@dataclass
class Gang:
    """One attempt of one job as the API server logged it (unix seconds; None: not seen)."""

    created: dict[str, float] = field(default_factory=dict)  # pod -> create
    ungated: dict[str, float] = field(default_factory=dict)  # pod -> last spec patch (the gate lift)
    bound: dict[str, float] = field(default_factory=dict)  # pod -> pods/binding
    running: dict[str, float] = field(default_factory=dict)  # pod -> kwok's first status write after binding


@dataclass
class Timeline:
    """The audit log of one namespace, by object."""

    job_created: dict[str, float] = field(default_factory=dict)
    job_status: dict[str, list[float]] = field(default_factory=dict)
    job_status_received: dict[tuple[str, float], float] = field(default_factory=dict)
    """(job, a status write's ``stageTimestamp``) -> its ``requestReceivedTimestamp``."""
    claim_created: dict[str, float] = field(default_factory=dict)
    claim_bound: dict[str, float] = field(default_factory=dict)
    gangs: dict[tuple[str, int], Gang] = field(default_factory=dict)
    events: int = 0


def read_audit(path: Path, ns: str) -> Timeline | None:
    """The writes of ``ns`` in the API server's audit log at ``path`` (None if there is none)."""
    if not path.exists():
        return None
    tl = Timeline()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:  # bounded by the file: one bench run's writes of a few objects
            if f'"namespace":"{ns}"' not in line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ref = ev.get("objectRef") or {}
            if ref.get("namespace") != ns or (ev.get("responseStatus") or {}).get("code", 500) >= 300:
                continue
            tl.events += 1
            t, res, sub, name = ts(ev["stageTimestamp"]), ref.get("resource"), ref.get("subresource"), ref.get("name") or ""
            agent, verb = ev.get("userAgent") or "", ev.get("verb")
            if res == "trainingjobs":
                if verb == "create":
                    tl.job_created.setdefault(name, t)
                elif sub == "status":
                    tl.job_status.setdefault(name, []).append(t)
                    tl.job_status_received[(name, t)] = ts(ev.get("requestReceivedTimestamp") or ev["stageTimestamp"])
            elif res == "persistentvolumeclaims":
                if verb == "create":
                    tl.claim_created.setdefault(name, t)
                elif sub == "status" and "persistent-volume-binder" in agent:
                    tl.claim_bound.setdefault(name, t)
            elif res == "pods" and (m := _POD.match(name) or _PLAIN_POD.match(name)):
                g = tl.gangs.setdefault((m["job"], int(m.groupdict().get("attempt") or 0)), Gang())
                if verb == "create" and not sub:
                    g.created.setdefault(name, t)
                elif verb == "create" and sub == "binding":
                    g.bound.setdefault(name, t)
                elif verb == "patch" and not sub and name in g.created:
                    g.ungated[name] = t
                elif sub == "status" and agent.startswith("kwok") and name in g.bound:
                    g.running.setdefault(name, t)
    return tl


STEPS = ("created -> Admitted", "  created -> Admitted write received", "  Admitted write: received -> answered",
         "Admitted -> all pods created", "Admitted -> claim created",
         "claim created -> Bound", "pods created -> gate lifted (gated gangs)",
         "gate lifted (or created) -> all bound", "all bound -> all Running",
         "created -> all pods bound", "created -> all Running")


def breakdown(tl: Timeline, replicas: dict[str, int], attempt: int = 0) -> dict:
    """The steps of each job's start (``attempt``), from the API server's timestamps.

    Admitted is the operator's last ``trainingjobs/status`` write before the gang's first pod
    create (the runtime writes the placement, then creates: crash-safe order), so it is exact
    to the write. It is split at the API server's receipt of that write
    (``requestReceivedTimestamp``): before it, the create's delivery to the operator by its
    watch, the operator's decision, its work queue and client; after it, the API server's own
    handling of the PATCH. A gang counts once all ``replicas`` pods reached the step.

    Returns:
        ``{"steps": [(label, seconds)], "claims": [seconds], "gated": n, "jobs": n}``.
    """
    steps: dict[str, list[float]] = {k: [] for k in STEPS}
    gated = 0
    for job, n in replicas.items():
        g = tl.gangs.get((job, attempt))
        t0 = tl.job_created.get(job)
        if g is None or t0 is None or len(g.created) < n:
            continue
        first, created = min(g.created.values()), max(g.created.values())
        adm = max((t for t in tl.job_status.get(job, []) if t <= first), default=None)
        claim = f"{job}-checkpoint"
        if adm is not None:
            steps["created -> Admitted"].append(adm - t0)
            received = tl.job_status_received.get((job, adm), adm)
            steps["  created -> Admitted write received"].append(received - t0)
            steps["  Admitted write: received -> answered"].append(adm - received)
            steps["Admitted -> all pods created"].append(created - adm)
            if claim in tl.claim_created:
                steps["Admitted -> claim created"].append(tl.claim_created[claim] - adm)
        if claim in tl.claim_created and claim in tl.claim_bound:
            steps["claim created -> Bound"].append(tl.claim_bound[claim] - tl.claim_created[claim])
        lifted = created
        if len(g.ungated) == n:
            gated += 1
            lifted = max(g.ungated.values())
            steps["pods created -> gate lifted (gated gangs)"].append(lifted - created)
        if len(g.bound) == n:
            bound = max(g.bound.values())
            steps["gate lifted (or created) -> all bound"].append(bound - lifted)
            steps["created -> all pods bound"].append(bound - t0)
            if len(g.running) == n:
                running = max(g.running.values())
                steps["all bound -> all Running"].append(running - bound)
                steps["created -> all Running"].append(running - t0)
    claims = [tl.claim_bound[c] - t for c, t in tl.claim_created.items() if c in tl.claim_bound]
    return {"steps": list(steps.items()), "claims": claims, "gated": gated, "jobs": len(replicas)}


def pod_steps(tl: Timeline, replicas: dict[str, int]) -> list[tuple[str, list[float]]]:
    """The baseline's plain pods (no TrainingJob): each job's last pod created -> all bound ->
    all Running, from the audit log, to set beside the kubeforge phase's same steps."""
    bound, running = [], []
    for job, n in replicas.items():
        g = tl.gangs.get((job, 0))
        if g is None or len(g.created) < n or len(g.bound) < n:
            continue
        bound.append(max(g.bound.values()) - max(g.created.values()))
        if len(g.running) == n:
            running.append(max(g.running.values()) - max(g.bound.values()))
    return [("all pods created -> all bound", bound), ("all bound -> all Running", running)]
