"""The hostile corpus (``e2e/hostile/*.yaml``): load, apply, classify.

Each file is one case: one or more YAML documents and a header of ``# key: value`` comments:

``tries``
    what the manifest tries, in a few words;
``expect``
    ``refused`` (the API server should refuse the last document) or ``reported`` (it is
    accepted, and the operator must say why it cannot run it);
``reasons``
    comma-separated condition reasons that count as the report (any reason when absent);
``event``
    ``Warning`` (the default), ``Normal <Reason>`` or ``none``: the Event that goes with the
    report;
``between``
    what to wait for after each document but the last, comma-separated: ``running`` (the
    default: every rank Running) or ``none``;
``then``
    ``delete-when-admitted``: delete the object as soon as it is admitted; the report is then
    the release (object, pods and pool entry gone).

Placeholders ``${NS}``, ``${POOL}``, ``${TAINTED_POOL}``, ``${NS_PSA}``, ``${NS_QUOTA}`` are
filled from the test's namespaces and pools.

Outcomes: ``refused`` (kubectl apply failed; its message is kept), ``reported`` (a condition
with a reason and a message, at the object's current generation, and the Event, within
:data:`REPORT_SECONDS` of the last apply), ``reported-no-event`` (the condition but not the
Event), ``misreported`` (a condition says something is wrong, but with none of the expected
reasons: the real cause is not named), ``silent`` (none of these), ``setup-failed`` (an earlier document did not apply or never ran).
"""

from __future__ import annotations

import json
import re
import string
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from .kube import Kube, condition, jobs_path, live, object_path, pools_path

REPORT_SECONDS = 30.0
SETUP_SECONDS = 90.0
HAPPY = {("Admitted", "True"), ("Running", "True"), ("Ready", "True"), ("ScalingActive", "True"),
         ("ScalingLimited", "False"), ("Suspended", "False"), ("Preempted", "False"), ("ReplicaGroupFailed", "False"),
         ("SLOMet", "True"), ("TopologyReady", "True")}


@dataclass
class Case:
    name: str
    tries: str
    expect: str
    docs: list[str]
    reasons: tuple[str, ...] = ()
    event: tuple[str, str | None] | None = ("Warning", None)
    between: tuple[str, ...] = ()
    then: str | None = None


@dataclass
class Outcome:
    case: Case
    kind: str = ""
    namespace: str | None = None
    name: str = ""
    outcome: str = "silent"
    detail: str = ""
    seconds: float | None = None
    notes: list[str] = field(default_factory=list)


def load(directory: Path) -> list[Case]:
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        text = path.read_text()
        head = {}
        for line in text.splitlines():
            m = re.match(r"^#\s*([a-z]+):\s*(.*)$", line)
            if m:
                head[m.group(1)] = m.group(2).strip()
            elif line.strip() and not line.startswith("#"):
                break
        docs = [d for d in re.split(r"^---\s*$", text, flags=re.M) if re.search(r"^kind:", d, flags=re.M)]
        ev = head.get("event", "Warning")
        event = None if ev == "none" else (ev.split()[0], ev.split()[1] if len(ev.split()) > 1 else None)
        reasons = tuple(r.strip() for r in head.get("reasons", "").split(",") if r.strip())
        between = tuple(b.strip() for b in head.get("between", "").split(",") if b.strip())
        cases.append(Case(path.stem, head.get("tries", ""), head.get("expect", "reported"), docs, reasons, event,
                          between, head.get("then")))
    return cases


def render(doc: str, subs: dict[str, str]) -> dict:
    return yaml.safe_load(string.Template(doc).safe_substitute(subs))


def first_line(text: str) -> str:
    text = (text or "").strip().replace("\n", " ")
    return re.sub(r"\s+", " ", text)[:300]


class Runner:
    """Runs cases against a cluster: ``apply(doc_json) -> (ok, message)`` applies with kubectl."""

    def __init__(self, kube: Kube, apply: Callable[[str], tuple[bool, str]], subs: dict[str, str],
                 delete: Callable[[str, str | None, str], None]):
        self.kube = kube
        self.apply = apply
        self.subs = subs
        self.delete = delete

    def run(self, case: Case) -> Outcome:
        out = Outcome(case)
        objs = [render(d, self.subs) for d in case.docs]
        last = objs[-1]
        out.kind = last.get("kind", "")
        out.namespace = (last.get("metadata") or {}).get("namespace")
        out.name = str((last.get("metadata") or {}).get("name", ""))
        for i, obj in enumerate(objs):
            ok, msg = self.apply(json.dumps(obj))
            if not ok:
                if i < len(objs) - 1:
                    out.outcome, out.detail = "setup-failed", f"document {i + 1} refused: {first_line(msg)}"
                else:
                    out.outcome, out.detail = "refused", first_line(msg)
                return out
            if i < len(objs) - 1:
                wait = case.between[i] if i < len(case.between) else "running"
                if wait == "running" and not self._wait_running(out):
                    out.outcome, out.detail = "setup-failed", f"document {i + 1} never ran within {SETUP_SECONDS:.0f}s"
                    return out
        t0 = time.monotonic()
        if case.then == "delete-when-admitted":
            return self._delete_when_admitted(out, t0)
        return self._await_report(out, t0)

    # --- waits ---------------------------------------------------------------------------

    def _get(self, out: Outcome) -> dict | None:
        return self.kube.get(object_path(out.kind, out.namespace, out.name))

    def _wait_running(self, out: Outcome) -> bool:
        deadline = time.monotonic() + SETUP_SECONDS
        while time.monotonic() < deadline:
            obj = self._get(out)
            st = (obj or {}).get("status") or {}
            if st.get("phase") == "Running" and st.get("observedGeneration") == obj["metadata"].get("generation"):
                return True
            time.sleep(1)
        return False

    def _event(self, out: Outcome, obj: dict, reasons: tuple[str, ...]) -> dict | None:
        want_type, want_reason = out.case.event  # type: ignore[misc]
        ns = out.namespace or "default"
        sel = f"involvedObject.name={out.name},involvedObject.kind={out.kind}"
        for e in self.kube.items(f"/api/v1/namespaces/{ns}/events", fieldSelector=sel):
            if e.get("involvedObject", {}).get("uid") not in (None, obj["metadata"]["uid"]):
                continue
            if e.get("type") != want_type:
                continue
            if want_reason and e.get("reason") != want_reason:
                continue
            if not want_reason and reasons and e.get("reason") not in reasons:
                continue
            return e
        return None

    def _report(self, out: Outcome, obj: dict) -> dict | None:
        st = obj.get("status") or {}
        gen = obj["metadata"].get("generation")
        if st.get("observedGeneration") != gen:
            return None
        for c in st.get("conditions") or []:
            if out.case.reasons:
                if c.get("reason") not in out.case.reasons:
                    continue
            elif (c.get("type"), c.get("status")) in HAPPY:
                continue
            if c.get("observedGeneration") not in (None, gen) or not c.get("message"):
                continue
            return c
        return None

    def _await_report(self, out: Outcome, t0: float) -> Outcome:
        deadline = t0 + REPORT_SECONDS
        found = None
        obj = None
        while True:
            obj = self._get(out)
            if obj is not None:
                c = self._report(out, obj)
                if c is not None:
                    found = found or c
                    why = f"{c['type']}={c['status']} {c['reason']}: {c['message']}"
                    if out.case.event is None or self._event(out, obj, out.case.reasons):
                        out.outcome, out.detail, out.seconds = "reported", first_line(why), time.monotonic() - t0
                        return out
            if time.monotonic() >= deadline:
                break
            time.sleep(1)
        if found is not None:
            out.outcome, out.seconds = "reported-no-event", None
            out.detail = first_line(f"{found['type']}={found['status']} {found['reason']}: {found['message']}; "
                                    f"no {' '.join(x for x in out.case.event if x)} Event")  # type: ignore[union-attr]
            return out
        st = (obj or {}).get("status") or {}
        gen = (obj or {}).get("metadata", {}).get("generation")
        other = [c for c in st.get("conditions") or [] if (c.get("type"), c.get("status")) not in HAPPY
                 and c.get("message") and st.get("observedGeneration") == gen]
        if out.case.reasons and other:
            c = other[0]
            out.outcome = "misreported"
            out.detail = first_line(f"{c['type']}={c['status']} {c['reason']} (expected {', '.join(out.case.reasons)}): "
                                    f"{c['message']}")
            return out
        conds = "; ".join(f"{c.get('type')}={c.get('status')} {c.get('reason')}" for c in st.get("conditions") or [])
        out.outcome = "silent"
        out.detail = first_line(f"after {REPORT_SECONDS:.0f}s: phase {st.get('phase')}, observedGeneration "
                                f"{st.get('observedGeneration')} of {(obj or {}).get('metadata', {}).get('generation')}, "
                                f"conditions [{conds}]")
        return out

    def _delete_when_admitted(self, out: Outcome, t0: float) -> Outcome:
        deadline = t0 + REPORT_SECONDS
        admitted = False
        while time.monotonic() < deadline:
            obj = self._get(out)
            if obj and ((obj.get("status") or {}).get("placement") or (condition(obj, "Admitted") or {}).get("status") == "True"):
                admitted = True
                break
            time.sleep(0.1)
        if not admitted:
            out.outcome, out.detail = "setup-failed", "never admitted"
            return out
        self.delete(out.kind, out.namespace, out.name)
        t1 = time.monotonic()
        while time.monotonic() < t1 + REPORT_SECONDS:
            gone = self._get(out) is None
            pods = [p for p in self.kube.items(f"/api/v1/namespaces/{out.namespace}/pods",
                                               labelSelector=f"kubeforge.io/job-name={out.name}") if live(p)]
            pool = self.kube.get(pools_path(self.subs["POOL"])) or {}
            listed = [w for w in (pool.get("status") or {}).get("workloads") or []
                      if w.get("kind") == "TrainingJob" and w.get("namespace") == out.namespace and w.get("name") == out.name]
            if gone and not pods and not listed:
                out.outcome, out.seconds = "reported", time.monotonic() - t1
                out.detail = "deleted once admitted: the job, its pods and its GPUs in the pool's status all gone"
                return out
            time.sleep(1)
        out.outcome = "silent"
        out.detail = f"deleted once admitted: after {REPORT_SECONDS:.0f}s job gone {gone}, live pods {len(pods)}, pool lists it {bool(listed)}"
        return out


class HeldMonitor:
    """Samples, while the corpus runs, whether a job holds GPUs past its startup timeout with
    not every worker Running (``status.placement.admittedAt`` older than
    ``startupTimeoutSeconds`` + ``slack``)."""

    def __init__(self, kube: Kube, namespaces: list[str], slack: float = 10.0):
        self.kube = kube
        self.namespaces = namespaces
        self.slack = slack
        self.violations: dict[str, str] = {}
        self.samples = 0

    def sample(self) -> None:
        from kubeforge.objects import parse_time

        now = time.time()
        for ns in self.namespaces:
            pods = self.kube.items(f"/api/v1/namespaces/{ns}/pods", labelSelector="kubeforge.io/job-name")
            for j in self.kube.items(jobs_path(ns)):
                st, spec = j.get("status") or {}, j.get("spec") or {}
                pl = st.get("placement")
                if not pl or not pl.get("admittedAt"):
                    continue
                admitted = parse_time(pl["admittedAt"]) or now
                timeout = float(spec.get("startupTimeoutSeconds") or 600)
                if now - admitted <= timeout + self.slack:
                    continue
                attempt = str(st.get("attempt", 0))
                name = j["metadata"]["name"]
                running = [p for p in pods if p["metadata"]["labels"].get("kubeforge.io/job-name") == name
                           and p["metadata"]["labels"].get("kubeforge.io/restart-attempt") == attempt
                           and p["status"].get("phase") == "Running" and live(p)]
                if len(running) < int(spec.get("replicas") or 0):
                    self.violations[f"{ns}/{name}"] = (f"holds {pl.get('nodes')} {now - admitted:.0f}s after admission "
                                                       f"(startupTimeoutSeconds {timeout:.0f}) with {len(running)} "
                                                       f"of {spec.get('replicas')} workers Running")
        self.samples += 1

    def deadline(self, longest: float = 60.0) -> float:
        """Unix time by which every placement on record now has passed its startup timeout
        (plus the slack), counting only timeouts up to ``longest`` seconds (the corpus's own;
        the default 600 s cannot pass within a test). Sampling until then checks them all."""
        from kubeforge.objects import parse_time

        now = time.time()
        out = now
        for ns in self.namespaces:
            for j in self.kube.items(jobs_path(ns)):
                pl = (j.get("status") or {}).get("placement") or {}
                timeout = float((j.get("spec") or {}).get("startupTimeoutSeconds") or 600)
                if pl.get("admittedAt") and timeout <= longest:
                    out = max(out, (parse_time(pl["admittedAt"]) or now) + timeout + self.slack)
        return out
