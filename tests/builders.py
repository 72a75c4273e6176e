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

Kinds: :class:`TrainingJob`, :class:`InferenceService` and :class:`GPUPool` here; :class:`Node`,
:class:`Pod` (a pod of neither a job nor a service), :class:`WorkerPod` (a gang worker as
``build_worker_pod`` makes it) and :class:`ServingPod` (a pod of an InferenceService's replica
group as ``build_group_pod`` makes it) in ``pod_builders``; the shared constants (``NOW``, ``NS``,
``GPU``, ``API``), ``uids`` and ``iso`` in ``builder_basics``. This module re-exports both, so
``b.ServingPod(...)``, ``b.NOW`` and ``from builders import iso`` work as before. The defaults are those of ``tests/records.py``'s keyword
helpers, now thin wrappers over these. Setters return the builder; ``body()`` is a fresh
deep copy. The class names clash with ``kubeforge`` ones: import the module, not the names.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from builder_basics import API, GPU, NOW, NS, iso, uids
from kubeforge.api import GPUPoolSpec, InferenceServiceSpec, TrainingJobSpec
from kubeforge.objects import record_from_k8s
from pod_builders import Node, Pod, ServingPod, WorkerPod

__all__ = ["API", "GPU", "NOW", "NS", "SERVER", "TRAINER", "iso", "uids",
           "TrainingJob", "InferenceService", "GPUPool", "Node", "Pod", "WorkerPod", "ServingPod"]

TRAINER = {"spec": {"containers": [{"name": "trainer", "image": "pytorch:2"}]}}
SERVER = {"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai", "command": ["vllm", "serve", "m"]}]}}


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
