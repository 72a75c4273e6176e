"""Manifests of an InferenceService's children: the pods of its replica groups, its Service and
the EndpointSlice behind it. Pure functions of (service, group, shape): the serving plan
(:mod:`kubeforge.serving`) decides, these only build.

A replica is a *group* of ``nodesPerReplica`` pods (one for a model that fits one node), the
LeaderWorkerSet way: worker 0 is the leader (it serves and is the Service's endpoint), the others
join it. Pod ``w`` of group ``g`` at attempt ``a`` is ``<service>-<g>-<w>-<a>``, pinned to
``group.nodes[w]`` by required node affinity (the ledger reserved those GPUs when the group was
admitted), with the pool's tolerations.

LeaderWorkerSet compatibility (images and scripts written for LWS run unchanged):

==========================  ===========================================================
LWS                          kubeforge
==========================  ===========================================================
``LWS_LEADER_ADDRESS``       the same env var: ``<leader hostname>.kubeforge-workers.<ns>``
``LWS_GROUP_SIZE``           the same env var: pods per group (``status.nodesPerReplica``)
``LWS_WORKER_INDEX``         the same env var: 0 for the leader
``...lws/group-index``       label ``kubeforge.io/group-index`` (and env ``KUBEFORGE_GROUP_INDEX``)
``...lws/worker-index``      label ``kubeforge.io/worker-index``
headless Service per LWS     the namespace's ``kubeforge-workers`` headless Service
``RecreateGroupOnPodRestart``  always, for groups of several pods
==========================  ===========================================================

Our own labels, not LWS's: LWS's pod webhook acts on pods that carry its labels.

The Service ``<service>`` has no selector: the operator writes its endpoints (one EndpointSlice,
``kubeforge-<service>``): the Ready leaders that are not draining, or, while there is none, the
kubeforge activator's pods, which hold requests until a replica is Ready (see
:class:`kubeforge.api.Activation`). A draining replica leaves the slice before it is deleted.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shlex
from typing import Any, Mapping, Sequence

from kubeforge.api import (
    DEFAULT_GPU_RESOURCE_NAME, ENDPOINT_PORT_NAME, ENDPOINTS_ACTIVATOR, ENDPOINTS_LABEL, ENDPOINTS_REPLICAS, Engine,
    InferenceServiceSpec, ModelCachePolicy,
)
from kubeforge.builders.common import owner_reference
from kubeforge.builders.model import add_model
from kubeforge.objects import (
    ASSIGNED_NODE, GROUP_INDEX, GROUP_ROLE, LEADER_ROLE, POOL_LABEL, RESTART_ATTEMPT, ROLE_LABEL, TEMPLATE_HASH,
    WORKER_INDEX, WORKER_ROLE, WORKERS_SERVICE, GroupRecord, InferenceServiceRecord, group_hostname,
    group_pod_name, leader_address, service_labels, set_main_gpus, slice_name,
)
from kubeforge.placement import Placement, TopologyLevel, node_affinity

KIND = "InferenceService"
RAY_PORT = 6379
"""The ray head's port (ray's default)."""
SGLANG_DIST_PORT = 5000
"""The port of SGLang's ``--dist-init-addr`` on the leader (SGLang's multi-node examples)."""
SLICE_MANAGER = "kubeforge.io"
"""``endpointslice.kubernetes.io/managed-by`` of the operator's slices (the EndpointSlice
controller leaves slices of other managers alone)."""


SLEEP_MODE_FLAG = "--enable-sleep-mode"
"""vLLM's flag that lets an engine sleep (``vllm serve --enable-sleep-mode``)."""
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
"""vLLM serves ``/sleep``, ``/wake_up`` and ``/is_sleeping`` only with this set to 1
(``vllm/entrypoints/serve/sleep/api_router.py``: ``if not envs.VLLM_SERVER_DEV_MODE: return``)."""


def sleep_mode(spec: InferenceServiceSpec) -> bool:
    """Whether the leaders run with vLLM's sleep mode: a service with standby replicas (engine vllm)."""
    return spec.standby.replicas > 0 and spec.engine == Engine.VLLM


def serving_hash(svc: InferenceServiceRecord) -> str:
    """A short hash of what a group's pods are made from (template, GPUs, parallelism, engine,
    multiNode, port, pools, topology, the model when set, and sleep mode when standby replicas
    need it): a group made from another one is rolled out. Sleep mode and the model are hashed
    only when set, so a service without them hashes as before they existed
    (tests/test_builders_spec_hash.py)."""
    spec = svc.spec
    assert spec is not None
    data = spec.model_dump(mode="json", by_alias=True, include={
        "template", "gpus_per_replica", "parallelism", "engine", "multi_node", "port", "pools", "topology"})
    if sleep_mode(spec):
        data["sleepMode"] = True
    if spec.model is not None:  # a pod's volume, mount and engine flag come from it
        data["model"] = spec.model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _command(container: Mapping[str, Any]) -> str | None:
    words = list(container.get("command") or []) + list(container.get("args") or [])
    return shlex.join(words) if words else None


def _with_flags(cmd: str, flags: Sequence[tuple[str, str]]) -> str:
    """``cmd`` with each ``(flag, value)`` appended unless the command sets that flag already."""
    out = cmd
    for flag, value in flags:
        if flag not in cmd and flag.replace("-", "_") not in cmd:
            out += f" {flag} {value}"
    return out


def _ray_wait(size: int) -> str:
    """Shell: wait until the ray cluster has ``size`` alive nodes (what vLLM's
    ``multi-node-serving.sh leader --ray_cluster_size`` does), checked every 2 s."""
    probe = 'import ray; ray.init(address="auto", logging_level="ERROR"); print(sum(1 for n in ray.nodes() if n["Alive"]))'
    return f'until [ "$(python3 -c {shlex.quote(probe)} 2>/dev/null)" -ge {size} ]; do sleep 2; done'


def engine_command(spec: InferenceServiceSpec, container: Mapping[str, Any], worker: int, pods: int,
                   leader: str) -> list[str] | None:
    """The ``[shell, -c, script]`` a multi-node group's pod runs in place of the template's
    command, or None to leave it alone (one pod per group, engine ``none``, or no command).

    vLLM (LeaderWorkerSet's vLLM example): the leader starts a ray head, waits for the group's
    ``pods`` ray nodes, then runs the template's command with ``--tensor-parallel-size``,
    ``--pipeline-parallel-size`` and ``--distributed-executor-backend ray``; a worker joins the
    leader's ray cluster and blocks. SGLang: every pod runs the template's command with
    ``--tp-size``, ``--pp-size``, ``--nnodes``, ``--node-rank`` and ``--dist-init-addr``.
    """
    cmd = _command(container)
    if pods <= 1 or spec.engine == Engine.NONE or cmd is None:
        return None
    par = spec.parallelism
    tp, pp = (par.tensor, par.pipeline) if par is not None else (spec.replica_gpus, 1)
    if spec.engine == Engine.SGLANG:
        script = _with_flags(cmd, [("--tp-size", str(tp)), ("--pp-size", str(pp)), ("--nnodes", str(pods)),
                                   ("--node-rank", str(worker)), ("--dist-init-addr", f"{leader}:{SGLANG_DIST_PORT}")])
        return ["/bin/sh", "-c", script]
    if worker > 0:
        return ["/bin/sh", "-c", f"exec ray start --address={leader}:{RAY_PORT} --block"]
    serve = _with_flags(cmd, [("--tensor-parallel-size", str(tp)), ("--pipeline-parallel-size", str(pp)),
                              ("--distributed-executor-backend", "ray")])
    if sleep_mode(spec) and SLEEP_MODE_FLAG not in serve:
        serve += f" {SLEEP_MODE_FLAG}"
    return ["/bin/sh", "-c", f"ray start --head --port={RAY_PORT} && {_ray_wait(pods)} && exec {serve}"]


def _set_env(container: dict[str, Any], env: Mapping[str, str]) -> None:
    existing = [e for e in container.get("env") or [] if e.get("name") not in env]
    container["env"] = existing + [{"name": k, "value": v} for k, v in env.items()]


def build_group_pod(
    svc: InferenceServiceRecord,
    *,
    group: GroupRecord,
    worker: int,
    pods: int,
    gpus_per_pod: int,
    template_hash: str,
    levels: Sequence[TopologyLevel] = (),
    gpu_resource: str = DEFAULT_GPU_RESOURCE_NAME,
    tolerations: Sequence[Mapping[str, Any]] = (),
    model_cache: ModelCachePolicy | None = None,
) -> dict[str, Any]:
    """Pod ``worker`` of ``group``, pinned to ``group.nodes[worker]``.

    Args:
        svc: The InferenceService (spec parsed, defaults applied).
        group: The group (its index, attempt, pool, nodes, level and domain).
        worker: 0 (the leader) .. pods-1.
        pods: Pods per group (``LWS_GROUP_SIZE``).
        gpus_per_pod: GPUs of ``gpu_resource`` given to the pod's main container.
        template_hash: :func:`serving_hash` of the spec the pod is made from.
        levels: The pool's topology levels (to pin the domain label too).
        gpu_resource: The pool's GPU resource.
        tolerations: The pool's tolerations, appended to the template's.
        model_cache: The pool's ``spec.modelCache`` (None: it caches nothing), for ``spec.model``'s
            volume, mount and engine flag (:func:`kubeforge.builders.model.add_model`).

    Raises:
        IndexError: ``worker`` outside ``group.nodes``.
    """
    spec = svc.spec
    assert spec is not None
    name, ns = svc.name, svc.namespace
    node = group.nodes[worker]
    tmd = copy.deepcopy(spec.template.metadata)
    pod_spec = copy.deepcopy(spec.template.spec)
    main = set_main_gpus(pod_spec, gpus_per_pod, gpu_resource)
    leader = leader_address(name, group.index, ns)
    if worker == 0 and not any(p.get("containerPort") == spec.port for p in main.get("ports") or []):
        main["ports"] = list(main.get("ports") or []) + [{"name": "http", "containerPort": spec.port}]
    add_model(pod_spec, main, spec, ns, model_cache, worker, pods)  # before engine_command reads the command
    command = engine_command(spec, main, worker, pods, leader)
    if command is not None:
        main["command"], main["args"] = command[:2], command[2:]
    elif worker == 0 and sleep_mode(spec) and SLEEP_MODE_FLAG not in (_command(main) or ""):
        main["args"] = list(main.get("args") or []) + [SLEEP_MODE_FLAG]
    if worker == 0 and sleep_mode(spec):
        _set_env(main, {DEV_MODE_ENV: "1"})  # standby replicas sleep and wake through its endpoints
    if worker > 0 and spec.engine == Engine.VLLM and pods > 1:
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):  # a ray worker serves no HTTP
            main.pop(probe, None)
    env = {"LWS_LEADER_ADDRESS": leader, "LWS_GROUP_SIZE": str(pods), "LWS_WORKER_INDEX": str(worker),
           "KUBEFORGE_GROUP_INDEX": str(group.index)}
    for c in pod_spec["containers"]:
        _set_env(c, env)
    if pods > 1:
        pod_spec["hostname"] = group_hostname(name, group.index, worker)
        pod_spec["subdomain"] = WORKERS_SERVICE
    known = group.level in {lv.name for lv in levels}
    pinned = Placement(group.level if known else None, group.domain if known else None, group.nodes, {}, "")
    affinity = dict(pod_spec.get("affinity") or {})
    affinity["nodeAffinity"] = node_affinity(pinned, worker, levels, affinity.get("nodeAffinity"))
    pod_spec["affinity"] = affinity
    pod_spec["tolerations"] = list(pod_spec.get("tolerations") or []) + [dict(t) for t in tolerations]
    labels = {**(tmd.get("labels") or {}), **service_labels(name), POOL_LABEL: group.pool,
              GROUP_INDEX: str(group.index), WORKER_INDEX: str(worker), RESTART_ATTEMPT: str(group.attempt),
              GROUP_ROLE: LEADER_ROLE if worker == 0 else WORKER_ROLE}
    if pods > 1:
        labels[ROLE_LABEL] = WORKER_ROLE  # in the namespace's headless Service: LWS_LEADER_ADDRESS resolves
    annotations = {**(tmd.get("annotations") or {}), ASSIGNED_NODE: node, TEMPLATE_HASH: template_hash}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": group_pod_name(name, group.index, worker, group.attempt), "namespace": ns, "labels": labels,
                     "annotations": annotations, "ownerReferences": [owner_reference(KIND, name, svc.uid)]},
        "spec": pod_spec,
    }


def build_service(svc: InferenceServiceRecord) -> dict[str, Any]:
    """The ClusterIP Service in front of the replicas, ``<name>.<namespace>.svc:<port>``, with no
    selector: its endpoints are the operator's EndpointSlice (:func:`build_endpoint_slice`)."""
    assert svc.spec is not None
    port = svc.spec.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": svc.name, "namespace": svc.namespace, "labels": service_labels(svc.name),
                     "ownerReferences": [owner_reference(KIND, svc.name, svc.uid)]},
        "spec": {"ports": [{"name": ENDPOINT_PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}]},
    }


def build_endpoint_slice(
    svc: InferenceServiceRecord,
    *,
    leaders: Sequence[tuple[str, str, str | None]] = (),
    activator: Sequence[str] = (),
    activator_port: int | None = None,
) -> dict[str, Any]:
    """The service's EndpointSlice: ``leaders`` (pod name, IP, node) at the model port when there
    are any (``kubeforge.io/endpoints: replicas``); else, when an activator is known, its
    addresses at its port (``activator``, with the hold annotations from ``spec.activation``);
    else no endpoint at all (``replicas``: requests are refused, nothing is held)."""
    spec = svc.spec
    assert spec is not None
    labels = {**service_labels(svc.name), "kubernetes.io/service-name": svc.name,
              "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER}
    annotations: dict[str, str] = {}
    if leaders or not activator or activator_port is None:
        labels[ENDPOINTS_LABEL] = ENDPOINTS_REPLICAS
        endpoints = [{"addresses": [ip], "conditions": {"ready": True, "serving": True, "terminating": False},
                      "targetRef": {"kind": "Pod", "namespace": svc.namespace, "name": pod},
                      **({"nodeName": node} if node else {})} for pod, ip, node in sorted(leaders)]
        port = spec.port
    else:
        labels[ENDPOINTS_LABEL] = ENDPOINTS_ACTIVATOR
        annotations = spec.activation.annotations()
        endpoints = [{"addresses": [ip], "conditions": {"ready": True, "serving": True, "terminating": False}}
                     for ip in sorted(activator)]
        port = activator_port
    md: dict[str, Any] = {"name": slice_name(svc.name), "namespace": svc.namespace, "labels": labels,
                          "ownerReferences": [owner_reference(KIND, svc.name, svc.uid)]}
    if annotations:
        md["annotations"] = annotations
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": md, "addressType": "IPv4",
            "endpoints": endpoints, "ports": [{"name": ENDPOINT_PORT_NAME, "port": port, "protocol": "TCP"}]}
