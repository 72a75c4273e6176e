"""The fluent builders of the core kinds (issue 30, item 7): :class:`Node`, :class:`Pod` (a pod
of neither a job nor a service), :class:`WorkerPod` (a gang worker as ``build_worker_pod`` makes
it) and :class:`ServingPod` (a pod of an InferenceService's replica group as ``build_group_pod``
makes it).

``builders`` re-exports them: tests write ``import builders as b; b.Node("n0")...``. The class
names clash with ``kubeforge`` ones: import the module, not the names.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Iterable, Mapping

from builder_basics import GPU, NOW, iso, uids
from kubeforge.builders.serving import build_group_pod, serving_hash
from kubeforge.builders.training import build_worker_pod
from kubeforge.objects import Node as NodeRecord
from kubeforge.objects import Pod as PodRecord
from kubeforge.objects import (
    GroupRecord, InferenceServiceRecord, PlacementRecord, Taint, TrainingJobRecord, placement_of, pod_from_k8s,
)

__all__ = ["Node", "Pod", "WorkerPod", "ServingPod"]


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
