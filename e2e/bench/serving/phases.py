"""The serving placement benchmark's phases: one driver per way of running the same workload.

A driver turns the bench's steps into API calls and tells the observer which pods form which
group (:meth:`classify`). Phases are pluggable: a driver is a class with the methods of
:class:`Driver`, registered in :data:`DRIVERS` (issue 16's real LeaderWorkerSet phase plugs in
here beside these two).

- :class:`KubeforgeDriver`: InferenceServices (replicas driven through ``minReplicas =
  maxReplicas``; ``prometheusURL`` is a closed loopback port, so the autoscaler holds its count
  within those bounds) and TrainingJobs (topology ``Required`` at ``nvlink``), one GPUPool over
  the fleet, the operator running (``kubeforge.demo.start_operator``).
- :class:`BaselineDriver`: the same groups as plain pods left to kube-scheduler, with the
  constraints LeaderWorkerSet puts on its pods: every pod of a multi-pod group (serving replica
  or training gang) carries the group's key as a label and a
  ``requiredDuringSchedulingIgnoredDuringExecution`` podAffinity to that key on
  ``nvidia.com/gpu.clique`` (what LWS's ``leaderworkerset.sigs.k8s.io/exclusive-topology``
  annotation writes); with ``exclusive`` also LWS's podAntiAffinity against every other group
  on the same key. Single-node replicas are plain pods. Scaling creates or deletes whole
  groups (the highest index first, as LWS's StatefulSet scales down).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from e2e.bench.lib.cluster import (
    CLIQUE, GPU, GROUP, POOL, VERSION, make_namespace, operator_log, shared_claim, start_operator, stop_operator,
    wait_for_pool,
)
from e2e.bench.lib.procs import alive, log_digest, log_lines_since
from e2e.bench.serving.observe import PodInfo
from e2e.bench.serving.workload import Gang, Service

__all__ = ["BaselineDriver", "DRIVERS", "Driver", "Env", "KubeforgeDriver"]

CLAIM = "bench-checkpoint"
GROUP_KEY = "bench.kubeforge.io/group"  # LWS: leaderworkerset.sigs.k8s.io/group-key
OWNER = "bench.kubeforge.io/owner"
KIND = "bench.kubeforge.io/kind"
SIZE = "bench.kubeforge.io/group-size"


@dataclass
class Env:
    """What a driver may use: the cluster handle, the API client, the fleet's name and GPUs,
    a log function, and a dict the driver fills with figures of its own (printed by the bench)."""

    cluster: object
    api: object
    fleet: str
    capacity: int
    log: Callable[[str], None]
    notes: dict = field(default_factory=dict)


def pod_gpus(pod: dict) -> int:
    """GPUs a pod requests (sum over its containers; limits when no request)."""
    n = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        r = c.get("resources") or {}
        v = (r.get("requests") or {}).get(GPU) or (r.get("limits") or {}).get(GPU) or 0
        n += int(v)
    return n


class Driver(Protocol):
    """What a phase does; every call is made from the bench's threads (API client shared)."""

    name: str

    def setup(self) -> None:
        """Prepare the namespace (and what the phase needs: operator, pool, claim)."""

    def classify(self, pod: dict) -> PodInfo | None:
        """The group of a pod of this phase, or None."""

    def scale(self, svc: Service, old: int, new: int) -> None:
        """Make ``svc`` have ``new`` replicas (``old`` 0: create it)."""

    def gang(self, gang: Gang, present: bool) -> None:
        """Create (``present``) or delete a training gang."""

    def teardown(self) -> None:
        """Stop what :meth:`setup` started (the namespace is deleted by the bench)."""


class KubeforgeDriver:
    """InferenceServices and TrainingJobs, placed by the operator (see the module docstring)."""

    name = "kubeforge"

    def __init__(self, env: Env, ns: str, services: list[Service], gangs: list[Gang], polling_s: int = 1) -> None:
        from kubernetes import client

        self.env, self.ns, self.polling_s = env, ns, polling_s
        self.core, self.custom = client.CoreV1Api(env.api), client.CustomObjectsApi(env.api)
        self.sizes = {s.name: s.pods for s in services} | {g.name: g.nodes for g in gangs}
        self.pid: int | None = None

    def setup(self) -> None:
        """One GPUPool over the fleet, the operator (waits for the pool to show every GPU), the
        namespace and the one checkpoint claim every TrainingJob mounts (no PVC per gang: the
        baseline's pods mount none)."""
        c = self.env.cluster
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUPool", "metadata": {"name": POOL},
            "spec": {"nodeSelector": {"matchLabels": {"kubeforge.io/sim-fleet": self.env.fleet}}}}))
        op_log = operator_log(c)
        self.env.notes["log_offset"] = op_log.stat().st_size if op_log.exists() else 0
        t = time.monotonic()
        self.pid = start_operator(c)
        self.env.log(f"operator started (pid {self.pid}, log {op_log})")
        if not wait_for_pool(self.custom, self.pid, op_log, self.env.capacity, 120):
            self.env.notes["pool_not_ready"] = "the GPUPool did not show every GPU within 120 s; went on"
        self.env.notes["operator_ready_s"] = time.monotonic() - t
        make_namespace(c, self.env.api, self.ns)
        shared_claim(c, self.core, self.ns, CLAIM)

    def classify(self, pod: dict) -> PodInfo | None:
        lb = (pod.get("metadata") or {}).get("labels") or {}
        attempt = lb.get("kubeforge.io/restart-attempt", "0")
        svc = lb.get("kubeforge.io/inference-service")
        if svc in self.sizes:
            return PodInfo(f"{svc}/{lb.get('kubeforge.io/group-index')}/{attempt}", svc, "serving", self.sizes[svc],
                           pod_gpus(pod))
        job = lb.get("kubeforge.io/job-name")
        if job in self.sizes:
            return PodInfo(f"{job}/{attempt}", job, "training", self.sizes[job], pod_gpus(pod))
        return None

    def service_body(self, svc: Service, replicas: int) -> dict:
        """The InferenceService of ``svc`` at ``replicas`` (minReplicas = maxReplicas)."""
        spec: dict = {
            "pools": [POOL], "minReplicas": replicas, "maxReplicas": replicas, "drainSeconds": 0,
            "topology": {"mode": "Required", "level": "nvlink"},
            "autoscaling": {"prometheusURL": "http://127.0.0.1:1", "pollingIntervalSeconds": self.polling_s},
            "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.6.4", "command": ["vllm", "serve", "model"]}]}},
        }
        if svc.multi:
            spec["parallelism"] = {"tensor": 8, "pipeline": svc.pods * svc.gpus_per_pod // 8}
        else:
            spec["gpusPerReplica"] = svc.gpus_per_pod
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
                "metadata": {"name": svc.name, "namespace": self.ns}, "spec": spec}

    def scale(self, svc: Service, old: int, new: int) -> None:
        if old == 0:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "inferenceservices",
                                                        self.service_body(svc, new), _preload_content=False)
        else:
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "inferenceservices", svc.name,
                                                       {"spec": {"minReplicas": new, "maxReplicas": new}},
                                                       _preload_content=False)

    def gang(self, gang: Gang, present: bool) -> None:
        if not present:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs", gang.name,
                                                        _preload_content=False)
            return
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
            "metadata": {"name": gang.name, "namespace": self.ns},
            "spec": {"pools": [POOL], "replicas": gang.nodes, "gpusPerReplica": gang.gpus_per_pod,
                     "topology": {"mode": "Required", "level": "nvlink"},
                     "checkpoint": {"existingClaimName": CLAIM},
                     "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
                         {"name": "trainer", "image": "example.com/train:1", "command": ["torchrun", "train.py"]}]}}},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs", body,
                                                    _preload_content=False)

    def teardown(self) -> None:
        """Stop the operator; keep the tail of its log for the report."""
        c = self.env.cluster
        self.env.notes["operator_alive"] = alive(self.pid)
        stop_operator(c)
        op_log = operator_log(c)
        lines = log_lines_since(op_log, self.env.notes.get("log_offset", 0))
        if lines is not None:
            self.env.notes.update(log_digest(lines))
            self.env.notes["log_path"] = str(op_log)


class BaselineDriver:
    """Plain pods with LWS-style constraints, kube-scheduler alone (see the module docstring)."""

    name = "baseline"

    def __init__(self, env: Env, ns: str, services: list[Service], gangs: list[Gang], exclusive: bool = False) -> None:
        from kubernetes import client

        self.env, self.ns, self.exclusive = env, ns, exclusive
        self.core = client.CoreV1Api(env.api)
        self.groups: dict[str, list[int]] = {}  # service -> group indexes alive, oldest first
        self.next_index: dict[str, int] = {}

    def setup(self) -> None:
        """The namespace."""
        make_namespace(self.env.cluster, self.env.api, self.ns)

    def classify(self, pod: dict) -> PodInfo | None:
        lb = (pod.get("metadata") or {}).get("labels") or {}
        if OWNER not in lb:
            return None
        return PodInfo(lb[OWNER + "-group"], lb[OWNER], lb[KIND], int(lb[SIZE]), pod_gpus(pod))

    def pods(self, owner: str, key: str, kind: str, size: int, gpus: int) -> list[dict]:
        """The pods of one group: leader (index 0) and workers; the LWS constraints when ``size`` > 1."""
        out = []
        for w in range(size):
            labels = {OWNER: owner, OWNER + "-group": key, KIND: kind, SIZE: str(size), "bench.kubeforge.io/bench": "baseline"}
            spec: dict = {
                "restartPolicy": "Always" if kind == "serving" else "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "vllm/vllm-openai:v0.6.4" if kind == "serving" else "example.com/train:1",
                                "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}],
            }
            if size > 1:
                labels[GROUP_KEY] = key
                aff: dict = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {GROUP_KEY: key}}, "topologyKey": CLIQUE}]}}
                if self.exclusive:  # LWS exclusive-topology: no other group in the same domain
                    aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchExpressions": [
                            {"key": GROUP_KEY, "operator": "Exists"},
                            {"key": GROUP_KEY, "operator": "NotIn", "values": [key]}]}, "topologyKey": CLIQUE}]}
                spec["affinity"] = aff
            name = f"{key}-{w}".replace("/", "-")
            out.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": self.ns, "labels": labels}, "spec": spec})
        return out

    def _create(self, bodies: list[dict]) -> None:
        for b in bodies:
            self.core.create_namespaced_pod(self.ns, b, _preload_content=False)

    def _delete(self, key: str) -> None:
        self.core.delete_collection_namespaced_pod(self.ns, label_selector=f"{OWNER}-group={key}",
                                                   grace_period_seconds=0, _preload_content=False)

    def scale(self, svc: Service, old: int, new: int) -> None:
        alive = self.groups.setdefault(svc.name, [])
        while len(alive) > new:  # LWS scales down from the highest index
            self._delete(f"{svc.name}.{alive.pop()}")
        while len(alive) < new:
            i = self.next_index.get(svc.name, 0)
            self.next_index[svc.name] = i + 1
            alive.append(i)
            self._create(self.pods(svc.name, f"{svc.name}.{i}", "serving", svc.pods, svc.gpus_per_pod))

    def gang(self, gang: Gang, present: bool) -> None:
        key = f"{gang.name}.0"
        if present:
            self._create(self.pods(gang.name, key, "training", gang.nodes, gang.gpus_per_pod))
        else:
            self._delete(key)

    def teardown(self) -> None:
        pass


DRIVERS = {"baseline": BaselineDriver, "kubeforge": KubeforgeDriver}
"""Phase name -> driver class (constructor ``(env, ns, services, gangs, **options)``)."""


def describe_baseline(exclusive: bool) -> str:
    """One line on what the baseline's pods carry."""
    return ("plain pods, kube-scheduler alone; multi-pod groups: required podAffinity to their group key on "
            f"{CLIQUE}" + (" + LWS exclusive-topology podAntiAffinity against other groups" if exclusive else
                           " (no exclusive-topology anti-affinity: groups may share a domain, as kubeforge's do)"))

