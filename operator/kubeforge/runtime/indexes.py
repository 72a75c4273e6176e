"""Indexes: in-memory mirrors of what the loops read, kept current by watches.

Pods and nodes are watched by :mod:`kubeforge.runtime.informer` (list + watch without kopf:
kopf's per-event machinery was a quarter of the operator's CPU, pods above all), which calls
:func:`kf_pods` / :func:`kf_nodes` per object and :func:`kf_pods_gone` / :func:`kf_nodes_gone`
when one is deleted; every other index is kopf's (``@kopf.index``).

Each index keeps a small frozen record (:mod:`kubeforge.objects`), not the object, so memory
grows with the number of GPU nodes and pods, not with the size of every object. Index
handlers also wake what must react (a job's reconcile, the admission round), and only when
the change can matter. kopf calls no index handler when an object is deleted (it drops the
entry): a deletion of one of its kinds is noticed by the reconcile that finds its object gone,
and the admission round runs at least every second; a deleted pod or node calls its ``*_gone``
hook (the informer's). There are no ``on.event`` handlers for pods or jobs on purpose:
kopf works out change causes for every event of a resource that has one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kopf

from kubeforge import GROUP, VERSION
from kubeforge.api import (
    MAX_JOB_NAME_LENGTH, MAX_LABEL_LENGTH, GPUPoolSpec, InferenceServiceSpec, TrainingJobSpec, name_error,
)
from kubeforge.modelcache import node_cache_from_k8s
from kubeforge.objects import (
    ADMISSION_GATE, JOB_NAME, SERVICE_NAME, TERMINAL_JOB_PHASES, Pod, claim_from_k8s, groups_of,
    compute_domain_from_k8s, deployment_from_k8s, node_from_k8s, placement_of, pod_from_k8s, record_from_k8s,
    slice_from_k8s,
)
from kubeforge.runtime.cache import service_key

def _frees_gpus(pod: Pod) -> bool:
    return pod.terminal or pod.deleting


async def kf_nodes(name: str, body: Any, memo: Any, **_: Any) -> dict:
    """node name -> :class:`~kubeforge.objects.Node`. Wakes admission only when something it
    reads changed (heartbeats do not), and the jobs placed there when taints or readiness did.

    An event that changes nothing kubeforge reads (a kubelet's heartbeat, a status PATCH of
    conditions' times) keeps the very record the index holds, not an equal copy: the admission
    round reuses a pool's view and placement index only while it sees the same node objects
    (:func:`~kubeforge.admission.pool_view`), and at 5,000 nodes some node heartbeats in
    every round (e2e/README-scale-bench.md, "Live at 5,000 nodes")."""
    rt = memo.rt
    node = node_from_k8s(body)
    old = rt.cache.node(name)
    if old == node:
        return {name: old}
    rt.wake_admission()
    if old is not None and (old.taints != node.taints or old.ready != node.ready):
        _queue_jobs_on(rt, (name,))  # a gang with a rank there may have to move
    return {name: node}


def kf_nodes_gone(entries: Any, memo: Any) -> None:
    """A node was deleted (its entries, node name -> Node): admission looks again, and the jobs
    with a rank there may have to move."""
    memo.rt.wake_admission()
    _queue_jobs_on(memo.rt, entries)


def _queue_jobs_on(rt: Any, nodes: Any) -> None:
    """Queue every job whose placement has a rank on one of ``nodes`` (a scan of the jobs
    index, only when a node's taints or readiness changed or it went away)."""
    for rec in rt.cache.jobs():
        pl = placement_of(rec.status)
        if pl is not None and any(n in pl.nodes for n in nodes):
            rt.queue_job(rec.key)


async def kf_pods(body: Any, memo: Any, **_: Any) -> dict:
    """One index for every pod kubeforge reads, under up to three kinds of keys (one handler
    call per pod event):

    - ``("node", name)``: pods holding extended resources on that node (bound, or assigned by
      kubeforge), for the ledger; terminal pods drop out;
    - ``("job", namespace, job)``: a TrainingJob's pods, every attempt;
    - ``("svc", namespace, service)``: an InferenceService's replicas.

    Returns ``{}`` (never None) for a pod of none of these: kopf keeps an object's previous
    entries when a handler returns None, and a pod that just finished must drop out.
    """
    rt = memo.rt
    pod = pod_from_k8s(body)
    out: dict = {}
    if (pod.requests or pod.claims) and pod.where is not None:
        if not pod.terminal:
            out[("node", pod.where)] = pod
        if pod.job is None and pod.service is None and _frees_gpus(pod):
            rt.wake_admission()
    if pod.job is not None:
        key = (pod.namespace, pod.job)
        out[("job",) + key] = pod
        rt.cache.expectations.created_observed(key, pod.name)
        if _changed(pod, rt.cache.job_pods(key)):
            rt.queue_job_batched(key)
        if _frees_gpus(pod):
            rt.wake_admission()
    if pod.service is not None:
        key = (pod.namespace, pod.service)
        out[("svc",) + key] = pod
        rt.cache.expectations.created_observed(service_key(key), pod.name)
        if _changed(pod, rt.cache.service_pods(key)):
            rt.queue_service(key)
        if ADMISSION_GATE in pod.gates or _frees_gpus(pod):
            rt.wake_admission()  # a replica waits for a node, or one gives its GPUs back
    return out


def _changed(pod: Pod, known: list[Pod]) -> bool:
    """Whether ``pod``'s record differs from the one its owner's index holds (a new pod
    included): an event that changes nothing the record keeps (managed fields, a kubelet's
    heartbeat of a condition's probe time) changes no decision, so it queues no reconcile."""
    return next((p for p in known if p.name == pod.name), None) != pod


def kf_pods_gone(entries: Any, memo: Any) -> None:
    """A pod was deleted (its last entries from :func:`kf_pods`): its job or service is queued
    and the admission round woken when it held or waited for GPUs."""
    rt = memo.rt
    for key in entries:
        if key[0] == "job":
            rt.queue_job_batched(key[1:])
        elif key[0] == "svc":
            rt.queue_service(key[1:])
    rt.wake_admission()


def _named_record(spec_cls: Any, kind: str, body: Any, max_length: int) -> Any:
    """The object's record, its spec refused (``spec_error``) when its name could not make
    the objects built from it (the CRD's CEL rule refuses such names; this covers objects
    created before the rule)."""
    rec = record_from_k8s(spec_cls, body)
    bad = name_error(kind, rec.name, max_length)
    return replace(rec, spec=None, spec_error=bad) if bad else rec


@kopf.index(GROUP, VERSION, "trainingjobs")
async def kf_jobs(body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> :class:`~kubeforge.objects.TrainingJobRecord`. Queues the job,
    except for the watch event that echoes the operator's own last status write of it
    (:meth:`Cache.own_write`): the reconcile that wrote it decided on all it holds, and every
    status write otherwise came back as a reconcile that found nothing to do."""
    rec = _named_record(TrainingJobSpec, "TrainingJob", body, MAX_JOB_NAME_LENGTH)
    cache = memo.rt.cache
    cache.echo.saw(rec.key, rec.resource_version)
    if not cache.own_write(rec.key, rec.resource_version):
        memo.rt.queue_job(rec.key)
    if placement_of(rec.status) is None:
        memo.rt.wake_admission()
        status = cache.effective(rec.key, rec).status  # a lagging event from before our own write is not a new wait
        if placement_of(status) is None and (status or {}).get("phase") not in TERMINAL_JOB_PHASES:
            cache.admission_clock.seen_waiting(rec.key, rec.created, new=not rec.status)
    return {rec.key: rec}


@kopf.index(GROUP, VERSION, "gpupools")
async def kf_pools(body: Any, memo: Any, **_: Any) -> dict:
    """pool name -> :class:`~kubeforge.objects.PoolRecord`."""
    rec = record_from_k8s(GPUPoolSpec, body)
    memo.rt.wake_admission()
    return {rec.name: rec}


@kopf.index(GROUP, VERSION, "inferenceservices")
async def kf_services(body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> :class:`~kubeforge.objects.InferenceServiceRecord`."""
    rec = _named_record(InferenceServiceSpec, "InferenceService", body, MAX_LABEL_LENGTH)
    memo.rt.queue_service(rec.key)
    return {rec.key: rec}


@kopf.index("apps", "v1", "deployments", labels={SERVICE_NAME: kopf.PRESENT})
async def kf_deployments(namespace: str, labels: Any, body: Any, **_: Any) -> dict:
    """(namespace, service) -> :class:`~kubeforge.objects.DeploymentState` of its Deployment."""
    return {(namespace, labels[SERVICE_NAME]): deployment_from_k8s(body)}


async def kf_claims(namespace: str, name: str, body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> (phase, storageClassName) of every PersistentVolumeClaim (a job's
    checkpoint claim must exist before it holds GPUs, and be bound before its pods exist
    when its class binds immediately). Fed by an informer
    (:mod:`kubeforge.runtime.informer`), not kopf: the claims are only read.

    Wakes only what the change can matter to: the admission round reads whether a claim
    exists (``existingClaimName``), so it runs again only when a claim appears; the job of a
    claim with kubeforge's job label is queued when the claim's phase or class changed (in the
    work queue's urgent lane once Bound). A
    dynamically provisioned claim has four or five events on its way to Bound (the PV
    controller's annotation, the provisioner's volume, the bind, the status), and a round per
    event was most of the operator's CPU in the training bench (441 rounds for 199 claims)."""
    rt = memo.rt
    labels = (body.get("metadata") or {}).get("labels") or {}
    value = (((body.get("status") or {}).get("phase") or "Pending"), (body.get("spec") or {}).get("storageClassName") or "")
    old = rt.cache.claim((namespace, name))
    if old is None:
        rt.wake_admission()
    if old != value and labels.get(JOB_NAME):
        # Bound: the job's gated pods hold their GPUs idle until it lifts the gate, which is
        # as urgent as an admission (the urgent lane), and must not wait behind a burst of them.
        rt.queue_job((namespace, labels[JOB_NAME]), urgent=value[0] == "Bound")
    return {(namespace, name): value}


def kf_claims_gone(entries: Any, memo: Any) -> None:
    """A claim was deleted: the admission round looks again (it reads whether a claim
    exists, for ``existingClaimName``)."""
    memo.rt.wake_admission()


@kopf.index("storage.k8s.io", "v1", "storageclasses")
async def kf_storage_classes(name: str, body: Any, memo: Any, **_: Any) -> dict:
    """StorageClass name -> volumeBindingMode."""
    memo.rt.wake_admission()
    return {name: body.get("volumeBindingMode") or "Immediate"}


@kopf.index("namespaces")
async def kf_namespaces(name: str, body: Any, memo: Any, **_: Any) -> dict:
    """Namespaces being deleted -> True (others are left out). When one starts terminating,
    its jobs and services are looked at at once: the namespace controller is about to delete
    their pods, which must not be taken for preemptions (issue 18)."""
    md = body.get("metadata") or {}
    terminating = bool(md.get("deletionTimestamp")) or (body.get("status") or {}).get("phase") == "Terminating"
    if not terminating:
        return {}
    rt = memo.rt
    if not rt.cache.namespace_terminating(name):
        for rec in rt.cache.jobs():
            if rec.namespace == name:
                rt.queue_job(rec.key)
    return {name: True}


@kopf.index("resource.k8s.io", "v1", "resourceslices")
async def kf_slices(name: str, body: Any, memo: Any, **_: Any) -> dict:
    """ResourceSlice name -> :class:`~kubeforge.objects.SliceView` (the GPUs DRA drivers publish per
    node: a DRA pool's capacity). Absent on clusters without ``resource.k8s.io/v1`` (kopf then
    serves the rest)."""
    view = slice_from_k8s(body)
    memo.rt.wake_admission()
    return {name: view}


@kopf.index("resource.k8s.io", "v1", "deviceclasses")
async def kf_device_classes(name: str, memo: Any, **_: Any) -> dict:
    """DeviceClass name -> True: the classes a DRA pool's ``spec.dra.deviceClassName`` may name
    (a pool naming none that exists admits nothing and says ``DeviceClassNotFound``). A few
    cluster-scoped objects, written by DRA drivers' installers; a new one wakes admission."""
    known = memo.rt.cache.device_classes()
    if known is not None and name not in known:
        memo.rt.wake_admission()
    return {name: True}


@kopf.index("resource.k8s.io", "v1", "resourceclaims")
async def kf_resource_claims(namespace: str, name: str, body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> :class:`~kubeforge.objects.ClaimView` of every allocated ResourceClaim
    (its devices are held); an unallocated claim drops out."""
    view = claim_from_k8s(body)
    rt = memo.rt
    old = rt.cache.resource_claim((namespace, name))
    if old != view:
        rt.wake_admission()
    return {(namespace, name): view} if view.allocated else {}


@kopf.index(GROUP, VERSION, "modelcachenodes")
async def kf_model_caches(name: str, body: Any, memo: Any, **_: Any) -> dict:
    """node name -> :class:`~kubeforge.modelcache.NodeCache` of its ModelCacheNode (issue 29).
    When a copy's phase or progress changed (not on the agent's heartbeat alone), admission looks
    again (placement prefers nodes that hold a service's model) and the services with a group
    on the node are queued (their ``groups[].weights``)."""
    view = node_cache_from_k8s(body)
    rt = memo.rt
    old = rt.cache.model_cache(name)
    if old is None or old.copies != view.copies:
        rt.wake_admission()
        for key, svc in rt.cache.services().items():
            if svc.spec is not None and svc.spec.model is not None and \
                    any(name in g.nodes for g in groups_of(svc.status)):
                rt.queue_service(key)
    return {name: view}


async def kf_compute_domains(namespace: str, name: str, body: Any, memo: Any, **_: Any) -> dict:
    """(namespace, name) -> :class:`~kubeforge.objects.ComputeDomainView` of the ComputeDomains
    kubeforge made (NVIDIA's DRA driver's CRD; absent where it is not installed), fed by an
    informer (:mod:`kubeforge.runtime.informer`) that notices the CRD when it is installed after
    the operator started. Each event queues its job (its IMEX daemons' readiness, its deletion)."""
    view = compute_domain_from_k8s(body)
    if view.job:
        memo.rt.queue_job((namespace, view.job))
    return {(namespace, name): view}


def kf_compute_domains_gone(entries: Any, memo: Any) -> None:
    """A ComputeDomain was deleted (its last entries): its job is queued (it waits for the
    domain's deletion before it lets go of the gang, or makes it again)."""
    for (namespace, _), view in entries.items():
        if view.job:
            memo.rt.queue_job((namespace, view.job))


@kopf.on.event("namespaces", when=lambda memo, **_: not memo.rt.ready.is_set())
async def kf_indexes_ready(memo: Any, **_: Any) -> None:
    """kopf runs non-index handlers only once every index is filled; the first namespace
    event (there is always one: ``default``) therefore marks readiness, once the informers
    (pods, claims, nodes) have listed too."""
    rt = memo.rt
    for synced in rt.informers_synced:
        await synced.wait()
    rt.ready.set()
