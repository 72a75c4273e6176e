"""Drive many small TrainingJobs through whole lifecycles, one state machine per job.

A lifecycle: create the job, wait until every rank runs, then one disturbance picked with a
seeded RNG, wait for the operator's answer, delete the job, wait until it is gone:

- ``delete``: nothing more (admit, run, delete);
- ``delete-early``: deleted 0-3 s after creation, mid-admission, whatever its state;
- ``suspend``: ``spec.suspend`` true, wait Suspended with no pods, false, wait Running again;
- ``taint``: the interruption taint ``aws-node-termination-handler/spot-itn`` on the node of
  one rank, kept (as a real interruption keeps it) until the preemption shows in the job's
  status, then lifted; wait for the gang Running again. Lifted after a fixed few seconds
  instead, the taint could come and go while the operator was down between a kill and its
  restart, and the job would wait for a preemption nothing asked for;
- ``disrupt``: a ``DisruptionTarget`` condition on one pod, same wait;
- ``fail``: one pod's status patched to ``Failed`` with exit code 1, wait for a failure
  restart and the gang Running again;
- ``succeed``: every pod ``Succeeded`` (exit 0), wait for the job to succeed.

Every wait is bounded by :data:`STEP_TIMEOUT`; a step that times out is recorded as stuck
and the job deleted. :meth:`Driver.tick` reads the jobs and pods of the namespace once (two
LIST calls) and moves every state machine by at most one step; nothing here sleeps.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .kube import Kube, jobs_path, live, pods_path

ACTIONS = (("delete", 3), ("delete-early", 2), ("suspend", 2), ("taint", 2), ("disrupt", 2), ("fail", 2), ("succeed", 1))
STEP_TIMEOUT = 120.0
TAINT = "aws-node-termination-handler/spot-itn"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Life:
    name: str
    action: str
    replicas: int
    gpus: int
    retain: bool
    created: float
    state: str = "wait-running"
    since: float = 0.0
    mark: int = 0
    early_after: float = 0.0
    done_action: bool = False
    node: str = ""  # the node this life's taint holds, until its preemption shows
    interruptions: int = 0  # preemptions when a 'fail' step failed a pod


@dataclass
class Driver:
    kube: Kube
    namespace: str
    pool: str
    rng: random.Random
    concurrency: int = 20
    lives: dict[str, Life] = field(default_factory=dict)
    created: int = 0
    finished: int = 0
    completed: int = 0
    stuck: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    by_action: dict[str, int] = field(default_factory=dict)
    taints: dict[str, float] = field(default_factory=dict)  # node -> lift it at (a bound, in case)
    holders: dict[str, set[str]] = field(default_factory=dict)  # node -> lives waiting for its preemption
    retained: set[tuple[str, str]] = field(default_factory=set)

    # --- manifests and actions -------------------------------------------------------------

    def _manifest(self, life: Life) -> dict:
        mode = self.rng.choice(("Preferred", "None"))
        return {
            "apiVersion": "kubeforge.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": life.name, "namespace": self.namespace},
            "spec": {
                "pools": [self.pool], "replicas": life.replicas, "gpusPerReplica": life.gpus,
                "topology": {"mode": mode, **({"level": "nvlink"} if mode == "Preferred" else {})},
                "startupTimeoutSeconds": 120,
                "failurePolicy": {"maxRestarts": 100, "backoffSeconds": 0, "maxBackoffSeconds": 0, "maxStartupRetries": 100},
                "checkpoint": {"deletionPolicy": "Retain" if life.retain else "Delete", "size": "1Gi"},
                "template": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [
                    {"name": "trainer", "image": "example.com/train:1", "command": ["torchrun", "train.py"]}]}},
            },
        }

    def spawn(self, now: float) -> None:
        self.created += 1
        actions, weights = zip(*ACTIONS)
        life = Life(name=f"lc-{self.created:03d}", action=self.rng.choices(actions, weights)[0],
                    replicas=self.rng.choice((1, 1, 2)), gpus=self.rng.choice((2, 4)), retain=self.rng.random() < 0.5,
                    created=now, since=now, early_after=self.rng.uniform(0, 3))
        self.lives[life.name] = life
        if life.retain:
            self.retained.add((self.namespace, life.name))
        self._call(life, "create", lambda: self.kube.create(jobs_path(self.namespace), self._manifest(life)))

    def _call(self, life: Life, what: str, fn) -> bool:
        try:
            fn()
            return True
        except Exception as e:  # noqa: BLE001 - the API server may be slow; the step retries on the next tick
            self.errors.append(f"{life.name} {what}: {type(e).__name__}: {str(e)[:200]}")
            return False

    def _delete(self, life: Life, now: float) -> None:
        self._release(life)
        if self._call(life, "delete", lambda: self.kube.delete(jobs_path(self.namespace, life.name))):
            self._go(life, "deleting", now)

    def _go(self, life: Life, state: str, now: float) -> None:
        life.state, life.since = state, now

    def _set_taint(self, node: str, on: bool) -> None:
        """Node taints are a plain list (no strategic merge key): read, change, write back."""
        cur = self.kube.get(f"/api/v1/nodes/{node}") or {}
        taints = [t for t in (cur.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT]
        if on:
            taints.append({"key": TAINT, "value": "true", "effect": "NoSchedule"})
        self.kube.merge(f"/api/v1/nodes/{node}", {"metadata": {"resourceVersion": cur["metadata"]["resourceVersion"]},
                                                  "spec": {"taints": taints or None}})

    def taint(self, node: str, now: float, life: Life) -> None:
        self._set_taint(node, True)
        self.taints[node] = max(self.taints.get(node, 0.0), now + STEP_TIMEOUT)
        self.holders.setdefault(node, set()).add(life.name)
        life.node = node

    def _release(self, life: Life) -> None:
        """The life no longer needs its node tainted: lift the taint (at the next tick) once
        no other life waits on it."""
        if not life.node:
            return
        held = self.holders.get(life.node, set())
        held.discard(life.name)
        if not held:
            self.holders.pop(life.node, None)
            if life.node in self.taints:
                self.taints[life.node] = 0.0
        life.node = ""

    def untaint(self, node: str) -> None:
        self._set_taint(node, False)
        self.taints.pop(node, None)
        self.holders.pop(node, None)

    def untaint_all(self, tries: int = 5) -> None:
        for _ in range(tries):
            for node in list(self.taints):
                try:
                    self.untaint(node)
                except Exception as e:  # noqa: BLE001 - a conflict: read and write again
                    self.errors.append(f"untaint {node}: {type(e).__name__}")
            if not self.taints:
                return
            time.sleep(1)

    # --- the step --------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        for node, until in list(self.taints.items()):
            if now >= until:
                try:
                    self.untaint(node)
                except Exception as e:  # noqa: BLE001
                    self.errors.append(f"untaint {node}: {e}")
        jobs = {j["metadata"]["name"]: j for j in self.kube.items(jobs_path(self.namespace))}
        pods: dict[str, list[dict]] = {}
        for p in self.kube.items(pods_path(self.namespace), labelSelector="kubeforge.io/job-name"):
            pods.setdefault(p["metadata"]["labels"]["kubeforge.io/job-name"], []).append(p)
        for life in list(self.lives.values()):
            self._step(life, jobs.get(life.name), pods.get(life.name, []), now)

    def _current(self, job: dict, pods: list[dict]) -> list[dict]:
        attempt = str((job.get("status") or {}).get("attempt", 0))
        return [p for p in pods if p["metadata"]["labels"].get("kubeforge.io/restart-attempt") == attempt and live(p)]

    def _running(self, life: Life, job: dict | None, pods: list[dict]) -> list[dict] | None:
        if job is None or (job.get("status") or {}).get("phase") != "Running":
            return None
        cur = [p for p in self._current(job, pods) if p["status"].get("phase") == "Running"]
        return cur if len({p["metadata"]["labels"].get("kubeforge.io/replica-index") for p in cur}) == life.replicas else None

    def _count(self, job: dict | None, what: str) -> int:
        return int((((job or {}).get("status") or {}).get("restarts") or {}).get(what, 0))

    def _step(self, life: Life, job: dict | None, pods: list[dict], now: float) -> None:
        st = (job or {}).get("status") or {}
        if life.state == "deleting":
            if job is None:
                del self.lives[life.name]
                self.finished += 1
                self.completed += life.done_action
                self.by_action[life.action] = self.by_action.get(life.action, 0) + 1
            elif now - life.since > 30:
                self._delete(life, now)  # the delete did not take (API server busy): again
            return
        if now - life.since > STEP_TIMEOUT:
            self.stuck.append(f"{life.name} ({life.action}) stuck in {life.state} for {now - life.since:.0f}s: phase "
                              f"{st.get('phase')}, restarts {st.get('restarts')}, {len(self._current(job, pods)) if job else 0} live pods")
            self._delete(life, now)
            return
        if life.action == "delete-early" and life.state == "wait-running":
            if now - life.created >= life.early_after:
                life.done_action = True
                self._delete(life, now)
            return
        if life.state == "wait-running":
            running = self._running(life, job, pods)
            if running is None:
                return
            self._act(life, job, running, now)
        elif life.state == "wait-suspended":
            if st.get("phase") == "Suspended" and not [p for p in pods if live(p)]:
                if self._call(life, "resume", lambda: self.kube.merge(jobs_path(self.namespace, life.name), {"spec": {"suspend": False}})):
                    self._go(life, "wait-resumed", now)
        elif life.state == "wait-resumed":
            if self._running(life, job, pods) is not None:
                self._finish(life, now)
        elif life.state == "wait-preempted":
            if self._count(job, "preemptions") > life.mark:
                self._release(life)
            if self._count(job, "preemptions") > life.mark and self._running(life, job, pods) is not None:
                self._finish(life, now)
        elif life.state == "wait-failed":
            # A pod failed on a node another life tainted (or deleted) at the same time is part of
            # that interruption, counted as a preemption, not a failure (the core's interruption
            # rule): either count moving on ends the step.
            moved = (self._count(job, "failures") > life.mark
                     or self._count(job, "preemptions") > life.interruptions)
            if moved and self._running(life, job, pods) is not None:
                self._finish(life, now)
        elif life.state == "wait-succeeded":
            if st.get("phase") == "Succeeded":
                self._finish(life, now)

    def _finish(self, life: Life, now: float) -> None:
        life.done_action = True
        self._delete(life, now)

    def _act(self, life: Life, job: dict, running: list[dict], now: float) -> None:
        ns = self.namespace
        victim = self.rng.choice(running)
        vname = victim["metadata"]["name"]
        if life.action == "delete":
            self._finish(life, now)
        elif life.action == "suspend":
            if self._call(life, "suspend", lambda: self.kube.merge(jobs_path(ns, life.name), {"spec": {"suspend": True}})):
                self._go(life, "wait-suspended", now)
        elif life.action == "taint":
            life.mark = self._count(job, "preemptions")
            if self._call(life, "taint", lambda: self.taint(victim["spec"]["nodeName"], now, life)):
                self._go(life, "wait-preempted", now)
        elif life.action == "disrupt":
            life.mark = self._count(job, "preemptions")
            cond = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                    "message": "chaos: preempted by a higher-priority pod", "lastTransitionTime": now_rfc3339()}
            if self._call(life, "disrupt", lambda: self.kube.strategic(pods_path(ns, vname) + "/status", {"status": {"conditions": [cond]}})):
                self._go(life, "wait-preempted", now)
        elif life.action == "fail":
            life.mark, life.interruptions = self._count(job, "failures"), self._count(job, "preemptions")
            if self._call(life, "fail", lambda: self.kube.merge(pods_path(ns, vname) + "/status", _terminated("Failed", 1))):
                self._go(life, "wait-failed", now)
        elif life.action == "succeed":
            ok = all(self._call(life, "succeed", lambda p=p: self.kube.merge(pods_path(ns, p["metadata"]["name"]) + "/status",
                                                                              _terminated("Succeeded", 0)))
                     for p in running)
            if ok:
                self._go(life, "wait-succeeded", now)


def _terminated(phase: str, code: int) -> dict:
    return {"status": {"phase": phase, "containerStatuses": [{
        "name": "trainer", "ready": False, "restartCount": 0, "image": "example.com/train:1", "imageID": "",
        "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                 "message": '{"step": 7, "path": "/checkpoints/step-7"}'}}}]}}
