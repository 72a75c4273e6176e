"""One fluent builder per kind, for every test (issue 30, item 7).

Each builder states an object in the shape the API server holds it and hands back that body
(:meth:`body`), the manifest a user applies (:meth:`manifest`: the three kubeforge kinds, for
the cluster tests) or the record the operator makes of it (:meth:`record`), through the
operator's own parsers (``record_from_k8s``, ``pod_from_k8s``, ``build_worker_pod``)::

    import builders as b

    job = b.TrainingJob("llm").ns("team-a").replicas(2).gpus(8).pools("p") \\
        .topology("Required", "nvlink").status({"phase": "Pending"}).record()
    pool = b.GPUPool("p").levels(("nvlink", CLIQUE)).spec(reservations=[...]).record()
    node = b.Node("n0").gpus(8).labels({CLIQUE: "c0"}).record()

Kinds: :class:`TrainingJob`, :class:`InferenceService`, :class:`GPUPool`, :class:`Node`,
:class:`Pod` (a pod of neither a job nor a service), :class:`WorkerPod` (a gang worker as
``build_worker_pod`` makes it) and :class:`ServingPod` (a pod of an InferenceService's replica
group as ``build_group_pod`` makes it). The defaults are those of ``tests/records.py``'s keyword
helpers, now thin wrappers over these. Setters return the builder; ``body()`` is a fresh
deep copy. The class names clash with ``kubeforge`` ones: import the module, not the names.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from kubeforge.api import GPUPoolSpec, InferenceServiceSpec, TrainingJobSpec
from kubeforge.builders.serving import build_group_pod, serving_hash
from kubeforge.builders.training import build_worker_pod
from kubeforge.objects import Node as NodeRecord
from kubeforge.objects import Pod as PodRecord
from kubeforge.objects import (
    GroupRecord, InferenceServiceRecord, PlacementRecord, Taint, TrainingJobRecord, placement_of, pod_from_k8s,
    record_from_k8s,
)

GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z: every test's clock
NS = "team-a"
API = "kubeforge.io/v1alpha1"
TRAINER = {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}]}}
SERVER = {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai", "command": ["vllm", "serve", "m"]}]}}

#: One counter for every made-up uid (``job-N``, ``svc-N``, ``pool-N``, ``pod-N``).
uids = itertools.count(1)


def iso(ts: float) -> str:
    """``ts`` (unix seconds) as the RFC 3339 UTC string the API server writes, to the second."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Custom:
    """What the three kubeforge kinds share: metadata, a spec dict kept in key order, a status."""

    kind = ""
    spec_type: Any = None
    uid_prefix = ""
    age = 0.0  # seconds before NOW the object was created

    def __init__(self, name: str, namespace: str | None = None) -> None:
        self._meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {}),
                                      "uid": f"{self.uid_prefix}-{next(uids)}", "generation": 1}
        self._created = NOW - self.age
        self._spec: dict[str, Any] = {}
        self._status: dict[str, Any] = {}

    def _put(self, key: str, value: Any, into: dict[str, Any] | None = None) -> Any:
        """Sets ``key`` in the spec (or ``into``); None removes it."""
        into = self._spec if into is None else into
        if value is None:
            into.pop(key, None)
        else:
            into[key] = value
        return self

    def ns(self, namespace: str | None) -> Any:
        """Sets ``metadata.namespace``; None leaves it out (``kubectl apply -n`` then says where)."""
        return self._put("namespace", namespace, self._meta)

    def uid(self, uid: str | None) -> Any:
        """Sets ``metadata.uid``; None leaves it out (as a user submits it)."""
        return self._put("uid", uid, self._meta)

    def generation(self, generation: int) -> Any:
        """Sets ``metadata.generation``."""
        return self._put("generation", generation, self._meta)

    def resource_version(self, rv: str) -> Any:
        """Sets ``metadata.resourceVersion``."""
        return self._put("resourceVersion", rv, self._meta)

    def created(self, when: float | str) -> Any:
        """Sets ``metadata.creationTimestamp``: unix seconds, or an RFC 3339 string as is."""
        self._created = when
        return self

    def spec(self, **fields: Any) -> Any:
        """Sets spec fields by their camelCase API names (``failurePolicy={...}``...)."""
        self._spec.update(fields)
        return self

    def without(self, *keys: str) -> Any:
        """Removes spec keys, set or defaulted here, to leave them to the API server's defaults."""
        for key in keys:
            self._spec.pop(key, None)
        return self

    def status(self, status: Mapping[str, Any] | None) -> Any:
        """Replaces ``status`` (None: empty)."""
        self._status = copy.deepcopy(dict(status or {}))
        return self

    def body(self) -> dict[str, Any]:
        """The object as the API server holds it (a fresh deep copy)."""
        meta = dict(self._meta)
        meta["creationTimestamp"] = self._created if isinstance(self._created, str) else iso(self._created)
        return copy.deepcopy({"apiVersion": API, "kind": self.kind, "metadata": meta,
                              "spec": self._spec, "status": self._status})

    def manifest(self) -> dict[str, Any]:
        """The object as a user submits it (``kubectl apply``): :meth:`body` without what the API
        server sets (uid, generation, resourceVersion, creationTimestamp) and without a status."""
        body = self.body()
        for key in ("uid", "generation", "resourceVersion", "creationTimestamp"):
            body["metadata"].pop(key, None)
        del body["status"]
        return body

    def record(self) -> Any:
        """The operator's record of :meth:`body` (``record_from_k8s``).

        Raises:
            AssertionError: The spec does not parse (the record's ``spec_error`` says why).
        """
        rec = record_from_k8s(self.spec_type, self.body())
        assert rec.spec is not None, rec.spec_error
        return rec


class _Workload(_Custom):
    """What TrainingJob and InferenceService share: pools, GPUs a replica, topology, template."""

    def pools(self, *names: str) -> Any:
        """Sets ``spec.pools``, in order of preference."""
        return self._put("pools", list(names))

    def gpus(self, n: int | None) -> Any:
        """Sets ``spec.gpusPerReplica``; None leaves it out."""
        return self._put("gpusPerReplica", n)

    def topology(self, mode: str = "None", level: str | None = None, **more: Any) -> Any:
        """Sets ``spec.topology``: ``mode`` (None/Preferred/Required), ``level``, more keys."""
        topo: dict[str, Any] = {"mode": mode}
        if level is not None:
            topo["level"] = level
        return self._put("topology", {**topo, **more})

    def template(self, template: Mapping[str, Any]) -> Any:
        """Sets ``spec.template`` (a PodTemplateSpec dict)."""
        return self._put("template", copy.deepcopy(dict(template)))


class TrainingJob(_Workload):
    """A TrainingJob: by default one replica of 8 GPUs in pool ``p``, topology None, priority
    0, in ``team-a``, created 600 s before NOW, generation 1, resourceVersion "1"."""

    kind, spec_type, uid_prefix, age = "TrainingJob", TrainingJobSpec, "job", 600.0

    def __init__(self, name: str) -> None:
        super().__init__(name, NS)
        self._meta["resourceVersion"] = "1"
        self._spec = {"pools": ["p"], "replicas": 1, "gpusPerReplica": 8, "topology": {"mode": "None"},
                      "priority": 0, "template": copy.deepcopy(TRAINER)}

    def replicas(self, n: int) -> TrainingJob:
        """Sets ``spec.replicas`` (ranks of the gang)."""
        return self._put("replicas", n)

    def priority(self, p: int | None) -> TrainingJob:
        """Sets ``spec.priority``; None leaves it out."""
        return self._put("priority", p)

    def checkpoint(self, checkpoint: Mapping[str, Any] | None) -> TrainingJob:
        """Sets ``spec.checkpoint`` (None leaves it out)."""
        return self._put("checkpoint", copy.deepcopy(dict(checkpoint)) if checkpoint is not None else None)


class InferenceService(_Workload):
    """An InferenceService: by default vLLM on 1 GPU a replica in pool ``p``, topology None,
    in ``team-a``, created an hour before NOW, generation 1."""

    kind, spec_type, uid_prefix, age = "InferenceService", InferenceServiceSpec, "svc", 3600.0

    def __init__(self, name: str) -> None:
        super().__init__(name, NS)
        self._spec = {"pools": ["p"], "template": copy.deepcopy(SERVER), "gpusPerReplica": 1,
                      "topology": {"mode": "None"}}


class GPUPool(_Custom):
    """A GPUPool (cluster-scoped): by default an empty spec (every GPU node, levels
    detected), created a day before NOW, generation 1."""

    kind, spec_type, uid_prefix, age = "GPUPool", GPUPoolSpec, "pool", 86400.0

    def selector(self, selector: Mapping[str, Any]) -> GPUPool:
        """Sets ``spec.nodeSelector`` (a LabelSelector dict)."""
        return self._put("nodeSelector", dict(selector))

    def resource(self, name: str) -> GPUPool:
        """Sets ``spec.gpuResourceName``."""
        return self._put("gpuResourceName", name)

    def levels(self, *levels: tuple[str, str]) -> GPUPool:
        """Sets ``spec.topologyLevels`` from (name, node label) pairs, narrowest first."""
        return self._put("topologyLevels", [{"name": n, "nodeLabel": lb} for n, lb in levels])

    def capacity_type(self, capacity_type: str) -> GPUPool:
        """Sets ``spec.capacityType`` (OnDemand/Spot/Reserved)."""
        return self._put("capacityType", capacity_type)

    def tolerations(self, tolerations: list[dict]) -> GPUPool:
        """Sets ``spec.tolerations`` (core/v1 Toleration dicts)."""
        return self._put("tolerations", tolerations)

    def price(self, per_gpu_hour: float) -> GPUPool:
        """Sets ``spec.pricePerGPUHour``."""
        return self._put("pricePerGPUHour", per_gpu_hour)

    def preemption(self, preemption: Mapping[str, Any]) -> GPUPool:
        """Sets ``spec.preemption``."""
        return self._put("preemption", dict(preemption))

    def quotas(self, quotas: list[dict]) -> GPUPool:
        """Sets ``spec.quotas`` (the teams' nominal and borrowing GPUs)."""
        return self._put("quotas", quotas)


class Node:
    """A Node: by default Ready, schedulable, 8 ``nvidia.com/gpu`` (allocatable = capacity),
    no labels, no taints. The body also offers 96 CPUs and 1 TiB of memory."""

    def __init__(self, name: str) -> None:
        self._name, self._gpus, self._resource, self._ready, self._unschedulable = name, 8, GPU, True, False
        self._labels: dict[str, str] = {}
        self._taints: list[Taint | dict[str, str]] = []
        self._extra: dict[str, int] = {}

    def gpus(self, n: int, resource: str = GPU) -> Node:
        """Sets the GPUs it offers, of extended resource ``resource``."""
        self._gpus, self._resource = n, resource
        return self

    def labels(self, labels: Mapping[str, str] | None) -> Node:
        """Adds labels."""
        self._labels.update(labels or {})
        return self

    def taints(self, taints: Iterable[Taint | Mapping[str, str]]) -> Node:
        """Adds taints: :class:`kubeforge.objects.Taint` values or core/v1 Taint dicts."""
        self._taints.extend(t if isinstance(t, Taint) else dict(t) for t in taints)
        return self

    def ready(self, ready: bool = True) -> Node:
        """Sets whether the Ready condition is True."""
        self._ready = ready
        return self

    def unschedulable(self, cordoned: bool = True) -> Node:
        """Sets ``spec.unschedulable``."""
        self._unschedulable = cordoned
        return self

    def extra(self, resources: Mapping[str, int] | None) -> Node:
        """Adds other extended resources (name: count), besides the GPUs."""
        self._extra.update(resources or {})
        return self

    def body(self) -> dict[str, Any]:
        """The Node as the API server holds it (taint dicts as given, Taint values as dicts)."""
        res = {self._resource: str(self._gpus), **{k: str(v) for k, v in self._extra.items()},
               "cpu": "96", "memory": "1Ti"}
        taints = [dict(t) if isinstance(t, dict) else {"key": t.key, "value": t.value, "effect": t.effect}
                  for t in self._taints]
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        if self._unschedulable:
            spec["unschedulable"] = True
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self._name, "labels": dict(self._labels)},
                "spec": spec, "status": {"allocatable": dict(res), "capacity": dict(res),
                                         "conditions": [{"type": "Ready", "status": "True" if self._ready else "False"}]}}

    def record(self) -> NodeRecord:
        """The :class:`kubeforge.objects.Node` the cache holds, with the GPUs and extra resources
        only (no CPUs or memory, so native-resource fits stay out of a test's way) and no
        Ready transition time. ``node_from_k8s(body())`` is the parsed one."""
        res = {self._resource: self._gpus, **self._extra}
        taints = tuple(t if isinstance(t, Taint) else
                       Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule")) for t in self._taints)
        return NodeRecord(name=self._name, labels=dict(self._labels), taints=taints,
                          unschedulable=self._unschedulable, ready=self._ready, ready_changed=None,
                          allocatable=dict(res), capacity=dict(res))


class Pod:
    """A pod of neither a job nor a service (another tenant's): by default in ``other``,
    unbound, Running, one container asking for 0 GPUs, created 100 s before NOW."""

    def __init__(self, name: str) -> None:
        self._name, self._ns, self._node = name, "other", None
        self._gpus, self._resource, self._phase = 0, GPU, "Running"
        self._spec: dict[str, Any] | None = None

    def ns(self, namespace: str) -> Pod:
        """Sets ``metadata.namespace``."""
        self._ns = namespace
        return self

    def on(self, node: str | None) -> Pod:
        """Binds it to ``node`` (``spec.nodeName``; None: unbound)."""
        self._node = node
        return self

    def gpus(self, n: int, resource: str = GPU) -> Pod:
        """Sets its container's GPU limit."""
        self._gpus, self._resource = n, resource
        return self

    def phase(self, phase: str) -> Pod:
        """Sets ``status.phase``."""
        self._phase = phase
        return self

    def spec(self, spec: Mapping[str, Any]) -> Pod:
        """Replaces its pod spec (the GPU limit is then whatever ``spec`` asks)."""
        self._spec = copy.deepcopy(dict(spec))
        return self

    def body(self) -> dict[str, Any]:
        """The Pod as the API server holds it."""
        spec = copy.deepcopy(self._spec) if self._spec is not None else {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {self._resource: str(self._gpus)}}}]}
        body = {"metadata": {"name": self._name, "namespace": self._ns, "creationTimestamp": iso(NOW - 100)},
                "spec": spec, "status": {"phase": self._phase}}
        if self._node:
            body["spec"]["nodeName"] = self._node
        return body

    def record(self) -> PodRecord:
        """The :class:`kubeforge.objects.Pod` of :meth:`body` (``pod_from_k8s``)."""
        return pod_from_k8s(self.body())


class WorkerPod:
    """Rank ``rank`` of ``job``'s gang as ``build_worker_pod`` makes it: by default attempt 0,
    on the job's ``status.placement``, bound, Running, created 60 s before NOW."""

    def __init__(self, job: TrainingJobRecord, rank: int) -> None:
        self._job, self._rank, self._attempt = job, rank, 0
        self._placement = placement_of(job.status)
        self._resource, self._gates, self._bound, self._created = GPU, (), True, NOW - 60
        self._changes: dict[str, Any] = {"phase": "Running", "deleting": False}

    def attempt(self, attempt: int) -> WorkerPod:
        """Sets the gang attempt it belongs to."""
        self._attempt = attempt
        return self

    def placed(self, nodes: Iterable[str], pool: str = "p") -> WorkerPod:
        """Places the gang on ``nodes`` in ``pool``, not on the job's ``status.placement``."""
        self._placement = PlacementRecord(pool, tuple(nodes))
        return self

    def resource(self, name: str) -> WorkerPod:
        """Sets the GPU resource name its containers ask for."""
        self._resource = name
        return self

    def gates(self, *gates: str) -> WorkerPod:
        """Sets its scheduling gates."""
        self._gates = gates
        return self

    def created(self, when: float) -> WorkerPod:
        """Sets its creationTimestamp (unix seconds)."""
        self._created = when
        return self

    def unbound(self, unbound: bool = True) -> WorkerPod:
        """Leaves it unbound (no node)."""
        self._bound = not unbound
        return self

    def phase(self, phase: str) -> WorkerPod:
        """Sets its phase."""
        return self.changes(phase=phase)

    def changes(self, **fields: Any) -> WorkerPod:
        """Sets :class:`kubeforge.objects.Pod` fields on the record (``deleting=True``, ``ready=False``...)."""
        self._changes.update(fields)
        return self

    def body(self) -> dict[str, Any]:
        """The manifest ``build_worker_pod`` makes, with a creationTimestamp and a uid."""
        assert self._placement is not None, "the job has no status.placement: call placed()"
        m = build_worker_pod(self._job, rank=self._rank, attempt=self._attempt, placement=self._placement,
                             gpu_resource=self._resource, scheduling_gates=self._gates)
        m["metadata"]["creationTimestamp"] = iso(self._created)
        m["metadata"]["uid"] = f"pod-{next(uids)}"
        return m

    def record(self) -> PodRecord:
        """The :class:`kubeforge.objects.Pod` the index holds for it."""
        p = pod_from_k8s(self.body())
        assert self._placement is not None
        return replace(p, node=self._placement.nodes[self._rank] if self._bound else None, **self._changes)


class ServingPod:
    """Worker ``worker`` (0: the leader) of replica group ``group`` of ``svc`` as
    ``build_group_pod`` makes it, with the labels the operator reads back (``kubeforge.io/
    group-index``, ``worker-index``, ``restart-attempt``, ``role``, the pool) and the assigned-node
    annotation. By default: attempt 0, on node ``n<worker>``, bound, Running and Ready, pod IP
    ``10.0.<group>.<worker>``, created 60 s before NOW, the group in the service's first pool with
    as many 8-GPU pods as its replica needs (a 16-GPU replica: 2 pods of 8; 2 GPUs: 1 pod of 2),
    its template hash the service's ``serving_hash``."""

    def __init__(self, svc: InferenceServiceRecord, group: int = 0, worker: int = 0) -> None:
        assert svc.spec is not None, svc.spec_error
        gpus = svc.spec.replica_gpus
        self._svc, self._group, self._worker, self._attempt = svc, group, worker, 0
        self._pods = max(worker + 1, -(-gpus // 8))
        self._gpus, self._pool, self._node = gpus // max(1, -(-gpus // 8)), svc.spec.pools[0], f"n{worker}"
        self._hash, self._resource, self._bound, self._created = serving_hash(svc), GPU, True, NOW - 60
        self._phase, self._ready, self._ip = "Running", True, f"10.0.{group}.{worker}"
        self._changes: dict[str, Any] = {}

    def attempt(self, attempt: int) -> ServingPod:
        """Sets the group's attempt (``kubeforge.io/restart-attempt``, the pod name's last part)."""
        self._attempt = attempt
        return self

    def on(self, node: str) -> ServingPod:
        """Sets the node kubeforge assigned it (and, while bound, ``spec.nodeName``)."""
        self._node = node
        return self

    def shape(self, pods: int, gpus: int, resource: str = GPU) -> ServingPod:
        """Sets the group's shape: ``pods`` a group, ``gpus`` of ``resource`` each."""
        self._pods, self._gpus, self._resource = pods, gpus, resource
        return self

    def pool(self, pool: str) -> ServingPod:
        """Sets the group's GPUPool (the pool label)."""
        self._pool = pool
        return self

    def template_hash(self, template_hash: str) -> ServingPod:
        """Sets the ``kubeforge.io/template-hash`` annotation."""
        self._hash = template_hash
        return self

    def created(self, when: float) -> ServingPod:
        """Sets its creationTimestamp (unix seconds)."""
        self._created = when
        return self

    def unbound(self, unbound: bool = True) -> ServingPod:
        """Leaves it unbound (no ``spec.nodeName``; still assigned its node)."""
        self._bound = not unbound
        return self

    def phase(self, phase: str) -> ServingPod:
        """Sets ``status.phase``."""
        self._phase = phase
        return self

    def ready(self, ready: bool = True) -> ServingPod:
        """Sets whether its Ready condition is True."""
        self._ready = ready
        return self

    def ip(self, ip: str | None) -> ServingPod:
        """Sets ``status.podIP`` (None: none yet)."""
        self._ip = ip
        return self

    def changes(self, **fields: Any) -> ServingPod:
        """Sets :class:`kubeforge.objects.Pod` fields on the record (``deleting=True``, ``exit_code=1``...)."""
        self._changes.update(fields)
        return self

    def body(self) -> dict[str, Any]:
        """The manifest ``build_group_pod`` makes, with a creationTimestamp, a uid, its node
        when bound and a status (phase, Ready condition, pod IP)."""
        nodes = tuple(self._node if w == self._worker else f"n{w}" for w in range(self._pods))
        group = GroupRecord(self._group, self._attempt, pool=self._pool, nodes=nodes, gpus_per_pod=self._gpus)
        m = build_group_pod(self._svc, group=group, worker=self._worker, pods=self._pods, gpus_per_pod=self._gpus,
                            template_hash=self._hash, gpu_resource=self._resource)
        m["metadata"]["creationTimestamp"] = iso(self._created)
        m["metadata"]["uid"] = f"pod-{next(uids)}"
        if self._bound:
            m["spec"]["nodeName"] = self._node
        m["status"] = {"phase": self._phase, "conditions": [{"type": "Ready", "status": str(self._ready)}],
                       **({"podIP": self._ip} if self._ip else {})}
        return m

    def record(self) -> PodRecord:
        """The :class:`kubeforge.objects.Pod` the index holds for it (``pod_from_k8s``), with
        :meth:`changes` applied."""
        return replace(pod_from_k8s(self.body()), **self._changes)
