"""The training bench's start breakdown, checkpoint-claim figures and spot-restart scenario.

Used by ``e2e/bench_training.py`` through a few hook lines; kept apart so the main bench stays
readable. Every time here comes from the API server itself, not from this bench's watches
(which lag by seconds when the machine is busy):

- the bench creates its cluster with an audit policy (:data:`AUDIT_POLICY`: Metadata level,
  writes of pods, claims and TrainingJobs only), so the API server logs every create, bind,
  status write and gate lift with microsecond timestamps and the client's user agent;
- :func:`breakdown` reads that log into the steps of each gang's first start: created →
  Admitted (the operator's status write with the placement) → pods created (→ claim Bound →
  gate lifted) → bound (kube-scheduler's ``pods/binding``) → Running (kwok's status write),
  p50/p95 each, and the claims' create → Bound latencies;
- :class:`ComponentMetrics` reads kube-controller-manager's and kube-scheduler's own
  ``/metrics`` before and after the phase: the PV controller's ``claims`` work queue (one
  worker), its client-side rate limiter, and kube-scheduler's attempts by result. That is the
  profile of where a claim's time goes;
- :func:`restart_after_spot_preemption`: after the phase, frees room, puts the spot
  interruption taint (``aws-node-termination-handler/spot-itn``) on a few nodes running gangs
  whose claims are Bound, and measures taint → every worker of the new attempt Running.

Everything prints figures; nothing asserts a time.
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

KCM_API_QPS = 0
"""kube-controller-manager ``--kube-api-qps`` = ``--kube-api-burst`` for the bench's cluster; 0
keeps upstream's 20 / 30. Every controller in it has its own client and rate limiter; the PV
controller spends ~6 writes on each dynamically provisioned claim (the provisioner annotation,
its ExternalProvisioning Events, then PV status, claim, claim status), so at 20 qps it binds
~4-6 claims a second, as kubernetes/kubernetes#95497 measured. Kubernetes' own scale tests
(clusterloader2) run it at 100 / 100."""

JOB_LABEL = "kubeforge.io/job-name"
SPOT_TAINT = "aws-node-termination-handler/spot-itn"
GROUP, VERSION = "kubeforge.io", "v1alpha1"
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


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100); NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(q / 100 * (len(s) - 1)))))]


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the audit log ------------------------------------------------------------------------------


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
    claim_created: dict[str, float] = field(default_factory=dict)
    claim_bound: dict[str, float] = field(default_factory=dict)
    gangs: dict[tuple[str, int], Gang] = field(default_factory=dict)
    events: int = 0


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


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
            t, res, sub, name = _ts(ev["stageTimestamp"]), ref.get("resource"), ref.get("subresource"), ref.get("name") or ""
            agent, verb = ev.get("userAgent") or "", ev.get("verb")
            if res == "trainingjobs":
                if verb == "create":
                    tl.job_created.setdefault(name, t)
                elif sub == "status":
                    tl.job_status.setdefault(name, []).append(t)
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


STEPS = ("created -> Admitted", "Admitted -> all pods created", "Admitted -> claim created",
         "claim created -> Bound", "pods created -> gate lifted (gated gangs)",
         "gate lifted (or created) -> all bound", "all bound -> all Running",
         "created -> all pods bound", "created -> all Running")


def breakdown(tl: Timeline, replicas: dict[str, int], attempt: int = 0) -> dict:
    """The steps of each job's start (``attempt``), from the API server's timestamps.

    Admitted is the operator's last ``trainingjobs/status`` write before the gang's first pod
    create (the runtime writes the placement, then creates: crash-safe order), so it is exact
    to the write. A gang counts once all ``replicas`` pods reached the step.

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


# --- kube-controller-manager and kube-scheduler metrics ---------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)')
WANTED = {
    "kube-controller-manager": re.compile(r'^(workqueue_(adds_total|work_duration_seconds_(sum|count)|'
                                          r'queue_duration_seconds_(sum|count))\{name="(claims|volumes)"\}|'
                                          r'rest_client_rate_limiter_duration_seconds_(sum|count)\{.*\})$'),
    "kube-scheduler": re.compile(r'^(scheduler_schedule_attempts_total\{.*\}|'
                                 r'scheduler_(pod_scheduling_sli|scheduling_attempt)_duration_seconds_(sum|count)\{.*\})$'),
}


def component_port(pid: int | None) -> int | None:
    """``--secure-port`` of a control-plane process, from its command line."""
    try:
        for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
            if a.startswith(b"--secure-port="):
                return int(a.split(b"=", 1)[1])
    except (OSError, ValueError, TypeError):
        pass
    return None


def scrape(port: int | None, component: str) -> dict[str, float]:
    """The samples of :data:`WANTED` from ``https://127.0.0.1:<port>/metrics`` (kwokctl lets
    /metrics through without credentials); {} when unreadable."""
    if not port:
        return {}
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=10, context=ctx) as r:
            text = r.read().decode(errors="replace")
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            key = m.group(1) + (m.group(2) or "")
            if WANTED[component].match(key):
                out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


class ComponentMetrics:
    """Scrapes kube-controller-manager and kube-scheduler now; :meth:`finish` returns the deltas.

    Args:
        pids: pid by component name (``kube-controller-manager``, ``kube-scheduler``).
    """

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.ports = {k: component_port(p) for k, p in pids.items()}
        self.before = {k: scrape(p, k) for k, p in self.ports.items()}

    def finish(self) -> dict[str, dict[str, float]]:
        out = {}
        for k, port in self.ports.items():
            after = scrape(port, k)
            out[k] = {m: v - self.before[k].get(m, 0.0) for m, v in after.items() if v - self.before[k].get(m, 0.0)}
        return out


# --- restart after a spot preemption ------------------------------------------------------------


def _items(call) -> list[dict]:
    return json.loads(call(_preload_content=False).data)["items"]


def restart_after_spot_preemption(core, custom, ns: str, nodes: int, timeout: float, audit: Path) -> dict:
    """Taint ``nodes`` nodes that run gangs with a Bound claim and measure their restarts.

    Room first: every job still waiting is deleted, then placed jobs on other nodes until the
    free GPUs are at least twice what the tainted nodes' gangs hold (bounded waits), so the
    restarted gangs are placed at once, away from the tainted nodes. Then the taint
    ``aws-node-termination-handler/spot-itn:NoSchedule`` goes on every chosen node at ``t0``
    (wall clock, the API server's too: same machine); a gang has restarted when every worker
    of its next attempt is Running, read from the audit log afterwards.

    Returns:
        ``{"jobs", "nodes", "latency": [s], "steps": [(label, [s])], "gated": gangs whose new
        pods were gated, "missing": jobs not Running again within ``timeout``}``.
    """
    jobs = _items(lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", **kw))
    pods = _items(lambda **kw: core.list_namespaced_pod(ns, **kw))
    bound = {c["metadata"]["name"] for c in _items(lambda **kw: core.list_namespaced_persistent_volume_claim(ns, **kw))
             if (c.get("status") or {}).get("phase") == "Bound"}
    on_node: dict[str, set[str]] = {}
    for p in pods:
        job, node = p["metadata"]["labels"].get(JOB_LABEL), p["spec"].get("nodeName")
        if job and node and (p.get("status") or {}).get("phase") == "Running":
            on_node.setdefault(node, set()).add(job)
    running = {j["metadata"]["name"]: j for j in jobs if (j.get("status") or {}).get("phase") == "Running"}
    gpus = {n: j["spec"]["replicas"] * j["spec"]["gpusPerReplica"] for n, j in running.items()}
    chosen: list[str] = []
    hit: set[str] = set()
    for node in sorted(on_node):
        js = on_node[node]
        if len(chosen) < nodes and all(j in running and f"{j}-checkpoint" in bound for j in js):
            chosen.append(node)
            hit |= js
    hit_nodes = {n for n, js in on_node.items() if js & hit}
    waiting = [j["metadata"]["name"] for j in jobs if not (j.get("status") or {}).get("placement")]
    drop, freed = [], 0
    for name in sorted(running):
        if freed >= 2 * sum(gpus[j] for j in hit):
            break
        if name not in hit and not any(name in on_node.get(x, ()) for x in hit_nodes):
            drop.append(name)
            freed += gpus[name]
    say(f"restart scenario: deleting {len(waiting)} waiting and {len(drop)} running jobs ({freed} GPUs) for room, "
        f"then tainting {len(chosen)} nodes running {len(hit)} gangs")
    for name in waiting + drop:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", name, _preload_content=False)
    gone = set(drop)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # bounded: until the dropped jobs' pods are gone
        if not any(p["metadata"]["labels"].get(JOB_LABEL) in gone for p in _items(lambda **kw: core.list_namespaced_pod(ns, **kw))):
            break
        time.sleep(1)
    time.sleep(3)  # the operator's pool view catches up with the freed GPUs
    attempts = {j: int((running[j].get("status") or {}).get("attempt") or 0) for j in hit}
    t0 = time.time()
    for node in chosen:
        core.patch_node(node, {"spec": {"taints": [{"key": SPOT_TAINT, "value": "bench", "effect": "NoSchedule"}]}},
                        _preload_content=False)
    deadline = time.monotonic() + timeout
    back: set[str] = set()
    while time.monotonic() < deadline and len(back) < len(hit):  # bounded by the timeout
        for j in _items(lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", **kw)):
            st, name = j.get("status") or {}, j["metadata"]["name"]
            if name in hit and st.get("phase") == "Running" and int(st.get("attempt") or 0) > attempts[name]:
                back.add(name)
        time.sleep(0.5)
    for node in chosen:  # leave the nodes as they were
        core.patch_node(node, {"spec": {"taints": None}}, _preload_content=False)
    time.sleep(1)  # the audit log is written as requests complete
    tl = read_audit(audit, ns)
    out = {"jobs": len(hit), "nodes": len(chosen), "latency": [], "steps": [], "gated": 0,
           "missing": sorted(hit - back)}
    if tl is None:
        return out
    steps: dict[str, list[float]] = {k: [] for k in (
        "taint -> gang stopped (status write)", "stopped -> placed again (status write)",
        "placed -> new pods all created", "pods created -> all bound", "all bound -> all Running")}
    for j in back:
        g = next((g for (jj, a), g in sorted(tl.gangs.items()) if jj == j and a > attempts[j]), None)
        n = running[j]["spec"]["replicas"]
        if g is None or len(g.running) < n or len(g.bound) < n:
            continue
        first, created = min(g.created.values()), max(g.created.values())
        writes = [t for t in tl.job_status.get(j, []) if t0 <= t <= first]
        out["latency"].append(max(g.running.values()) - t0)
        if writes:
            steps["taint -> gang stopped (status write)"].append(writes[0] - t0)
            steps["stopped -> placed again (status write)"].append(writes[-1] - writes[0])
            steps["placed -> new pods all created"].append(created - writes[-1])
        steps["pods created -> all bound"].append(max(g.bound.values()) - created)
        steps["all bound -> all Running"].append(max(g.running.values()) - max(g.bound.values()))
        out["gated"] += bool(g.ungated)
    out["steps"] = list(steps.items())
    return out


# --- report ------------------------------------------------------------------------------------


def _row(label: str, v: list[float]) -> str:
    return (f"    {label:<44} n={len(v):>4}  p50 {pct(v, 50):6.2f}  p95 {pct(v, 95):6.2f}  "
            f"max {max(v, default=float('nan')):6.2f}")


def _scheduler_line(who: str, sch: dict[str, float]) -> str | None:
    att: dict[str, float] = {}
    for k, v in sch.items():
        m = re.search(r'result="(\w+)"', k)
        if k.startswith("scheduler_schedule_attempts_total") and m:
            att[m.group(1)] = att.get(m.group(1), 0) + v

    def mean(name: str) -> tuple[float, int]:
        s_ = sum(v for k, v in sch.items() if k.startswith(f"scheduler_{name}_duration_seconds_sum"))
        n = sum(v for k, v in sch.items() if k.startswith(f"scheduler_{name}_duration_seconds_count"))
        return s_ / max(1, n), int(n)

    if not att:
        return None
    sli, n = mean("pod_scheduling_sli")
    attempt, _ = mean("scheduling_attempt")
    return (f"  profile ({who}): kube-scheduler attempts {', '.join(f'{k} {int(v)}' for k, v in sorted(att.items()))}; "
            f"one attempt (filter, score, bind call) {1000 * attempt:.0f} ms on average; pod scheduling SLI (from "
            f"entering its queue, gated time excluded, to bound) mean {sli:.2f}s over {n} pods")


def report(claims_mode: str, figures: dict | None, metrics: dict | None, restart: dict | None,
           baseline_bind: tuple[float, float] | None, baseline_metrics: dict | None = None) -> None:
    """Print the breakdown, the claim-bind distribution, the component profile and the restart."""
    if figures is None:
        print("\n  kubeforge: no audit log (a cluster kept from before this bench's audit policy?): no breakdown")
    elif figures:
        print(f"\n  kubeforge: where a gang's start goes ({claims_mode} claims; seconds between the API server's own "
              f"audit timestamps, so no watch lag; {figures['gated']} of the gangs were created behind the volume gate)")
        for label, v in figures["steps"]:
            if v:
                print(_row(label, v))
        for label, v in figures.get("baseline") or []:
            if v:
                print(_row(f"baseline: {label}", v))
        c = figures["claims"]
        if c:
            edges = (1, 2, 3, 5, 10, 20, 60)
            hist, lo = [], 0.0
            for hi in edges:
                hist.append(f"{lo:g}-{hi:g}s: {sum(1 for x in c if lo <= x < hi)}")
                lo = hi
            hist.append(f">={lo:g}s: {sum(1 for x in c if x >= lo)}")
            print(f"  kubeforge: checkpoint claim created -> Bound: n={len(c)} p50 {pct(c, 50):.2f} p90 {pct(c, 90):.2f} "
                  f"p95 {pct(c, 95):.2f} p99 {pct(c, 99):.2f} max {max(c):.2f} s; " + ", ".join(hist))
    if metrics:
        kcm = metrics.get("kube-controller-manager") or {}
        for q in ("claims", "volumes"):
            adds = kcm.get(f'workqueue_adds_total{{name="{q}"}}', 0)
            work = kcm.get(f'workqueue_work_duration_seconds_sum{{name="{q}"}}', 0)
            wait = kcm.get(f'workqueue_queue_duration_seconds_sum{{name="{q}"}}', 0)
            n = kcm.get(f'workqueue_queue_duration_seconds_count{{name="{q}"}}', 0)
            if adds or n:
                print(f"  profile: PV controller '{q}' queue (one worker): {int(adds)} adds, {work:.1f}s of work "
                      f"({1000 * work / max(1, n):.0f} ms per item), items waited {wait / max(1, n):.2f}s on average")
        waits: dict[str, list[float]] = {}
        for k, v in kcm.items():
            m = re.match(r'rest_client_rate_limiter_duration_seconds_(sum|count)\{.*verb="(\w+)"', k)
            if m:
                waits.setdefault(m.group(2), [0.0, 0.0])[m.group(1) == "count"] += v
        if waits:
            print("  profile: kube-controller-manager's client-side rate limiter (all its controllers; the PV "
                  "controller's writes are PUT, its Events POST/PATCH): " + ", ".join(
                      f"{verb} {int(n)} requests waited {s:.1f}s ({1000 * s / max(1, n):.0f} ms each)"
                      for verb, (s, n) in sorted(waits.items()) if n))
        for who, m in (("baseline", (baseline_metrics or {}).get("kube-scheduler")),
                       ("kubeforge", metrics.get("kube-scheduler"))):
            line = _scheduler_line(who, m or {})
            if line:
                print(line)
    if restart:
        lat = restart["latency"]
        ref = ""
        if baseline_bind:
            ref = (f"; target 1.3 x the baseline's create -> bound p50 {baseline_bind[0]:.2f}s + grace 0s = "
                   f"{1.3 * baseline_bind[0]:.2f}s (p95 {1.3 * baseline_bind[1]:.2f}s)")
        print(f"\n  kubeforge: restart after a spot preemption (taint {SPOT_TAINT} on {restart['nodes']} nodes, "
              f"{restart['jobs']} gangs with a Bound claim, grace period 0 s): taint -> every worker of the new attempt "
              f"Running p50 {pct(lat, 50):.2f}s p95 {pct(lat, 95):.2f}s max {max(lat, default=float('nan')):.2f}s "
              f"(n={len(lat)}; created gated: {restart['gated']}; not Running again: {len(restart['missing'])}){ref}")
        for label, v in restart["steps"]:
            if v:
                print(_row(label, v))


# --- the operator's own profile (py-spy) -------------------------------------------------------


class OperatorProfile:
    """``py-spy record`` of the operator for the phase (``--nonblocking``: the operator is never
    paused), summarised as where its main thread spends its samples: idle in the event loop's
    ``select`` (waiting for the API server) or running which kubeforge function.

    Args:
        pid: the operator's pid.
        out: where to write the raw (collapsed) stacks.
    """

    def __init__(self, pid: int | None, out: Path) -> None:
        import shutil
        import subprocess

        self.out = out
        self.proc = None
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if pid and Path(exe).exists():
            self.proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "50", "--nonblocking", "--idle",
                                          "--format", "raw", "--output", str(out)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finish(self) -> dict | None:
        """Stop recording (SIGINT makes py-spy write its file) and summarise it."""
        import signal

        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a py-spy that hangs is killed; no profile then
            self.proc.kill()
            return None
        if not self.out.exists():
            return None
        total = idle = 0
        funcs: dict[str, int] = {}
        for line in self.out.read_text(errors="replace").splitlines():
            stack, _, n = line.rpartition(" ")  # "frame (file:line);frame (file:line);... count"
            if not stack or not n.isdigit():
                continue
            count = int(n)
            frames = stack.split(";")
            if not any(f.startswith("_run_once (") for f in frames):
                continue  # not the event loop's thread (kopf's and the client's helper threads)
            total += count
            if frames[-1].startswith("select (selectors.py"):
                idle += count
                continue
            seen = set()
            for f in frames:
                if "kubeforge/" in f and f not in seen:
                    seen.add(f)
                    name = f.split(" (")[0] + " (" + f.split("kubeforge/")[-1].split(":")[0] + ")"
                    funcs[name] = funcs.get(name, 0) + count
        return {"total": total, "idle": idle, "top": sorted(funcs.items(), key=lambda kv: -kv[1])[:8]}


OPERATOR_WANTED = re.compile(r'^kubeforge_(admission_round|reconcile)_duration_seconds_(sum|count)(\{.*\})?$')


def scrape_operator(port: int | None) -> dict[str, float]:
    """The operator's admission-round and reconcile duration sums and counts ({} if unreadable)."""
    if not port:
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode(errors="replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and OPERATOR_WANTED.match(m.group(1) + (m.group(2) or "")):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def report_profile(p: dict | None, op: dict[str, float] | None = None) -> None:
    """Print :meth:`OperatorProfile.finish`'s summary and the operator's round and reconcile times."""
    if op:
        def mean(prefix: str) -> tuple[float, int]:
            s_ = sum(v for k, v in op.items() if k.startswith(prefix + "_sum"))
            n = sum(v for k, v in op.items() if k.startswith(prefix + "_count"))
            return s_ / max(1, n), int(n)
        rnd, n_rnd = mean("kubeforge_admission_round_duration_seconds")
        rec, n_rec = mean('kubeforge_reconcile_duration_seconds')
        print(f"  profile: the operator ran {n_rnd} admission rounds of {1000 * rnd:.0f} ms on average (each followed by "
              f"as long a yield, at most 1 s) and {n_rec} reconciles of {1000 * rec:.0f} ms on average (16 at a time)")
    if not p or not p["total"]:
        return
    busy = p["total"] - p["idle"]
    print(f"  profile: the operator's event loop (py-spy, {p['total']} samples at 50 Hz): idle, waiting for the API "
          f"server, {100 * p['idle'] / p['total']:.0f}%; busy {100 * busy / p['total']:.0f}%, of which (inclusive):")
    for name, n in p["top"]:
        print(f"    {100 * n / p['total']:5.1f}%  {name}")
