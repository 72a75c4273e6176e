"""The runtime's side of DRA pools and ComputeDomains: the kinds the client may write, what a
placed gang needs before its pods (its GPU ResourceClaimTemplate, its ComputeDomain) and releasing
a domain (kubeforge's finalizer first, then the delete). Decisions are the core's
(the ComputeDomain plan in :mod:`kubeforge.lifecycle`, :func:`kubeforge.admission.nvlink_request`);
this only applies.
"""

from __future__ import annotations

import logging
from typing import Any

from kubeforge.accelerators import nvidia
from kubeforge.admission import PoolView, clique_level, gang_request, is_dra_pool
from kubeforge.builders.training import COMPUTE_DOMAIN_FINALIZER, build_compute_domain, build_gpu_claim_template
from kubeforge.objects import (
    Key, PlacementRecord, TrainingJobRecord, channel_template_name, compute_domain_name, gpu_claim_template_name,
)
from kubeforge.runtime.client import RESOURCES, ApiError, Resource
from kubeforge.runtime.state import Runtime

log = logging.getLogger("kubeforge.dra")

RESOURCES.setdefault("ResourceClaimTemplate", Resource("/apis/resource.k8s.io/v1", "resourceclaimtemplates"))
RESOURCES.setdefault(nvidia.COMPUTE_DOMAIN_KIND,
                     Resource(f"/apis/{nvidia.COMPUTE_DOMAIN_API_VERSION}", nvidia.COMPUTE_DOMAIN_PLURAL))


def domain_cliques(rt: Runtime, view: PoolView | None, placement: PlacementRecord | None,
                   job: TrainingJobRecord) -> tuple[str, ...] | None:
    """The NVLink cliques of a placement that needs a ComputeDomain: a gang whose topology level is
    the clique level of a DRA pool (:func:`~kubeforge.admission.clique_level`), on several nodes,
    every one of them in a clique (:func:`kubeforge.accelerators.nvidia.gang_cliques`); else None."""
    if view is None or placement is None or not is_dra_pool(view.record) or len(set(placement.nodes)) < 2:
        return None
    try:
        if job.spec is None or clique_level(view, gang_request(job, view.resource)) is None:
            return None
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
    nodes = (rt.cache.node(name) for name in placement.nodes)
    return nvidia.gang_cliques(node.labels if node is not None else None for node in nodes)


def claim_templates(view: PoolView | None, job: TrainingJobRecord, cliques: tuple[str, ...] | None) -> tuple[str | None, str | None]:
    """(the job's GPU ResourceClaimTemplate, its ComputeDomain's channel template) for pods in
    ``view``'s pool; (None, None) for a device-plugin pool."""
    if view is None or not is_dra_pool(view.record) or job.spec is None:
        return None, None
    dra = view.record.spec.dra  # type: ignore[union-attr]
    gpu = gpu_claim_template_name(job.name, dra.device_class_name, job.spec.gpus_per_replica)
    channel = channel_template_name(compute_domain_name(job.name, cliques)) if cliques else None
    return gpu, channel


def before_pods(view: PoolView | None, job: TrainingJobRecord, domain: tuple[str, tuple[str, ...]] | None) -> list[tuple[str, str, dict[str, Any]]]:
    """``(kind, name, body)`` to create before a DRA gang's pods: its GPU claim template and, when
    the plan asks, its ComputeDomain."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    if view is None or not is_dra_pool(view.record) or job.spec is None:
        return out
    dra = view.record.spec.dra  # type: ignore[union-attr]
    body = build_gpu_claim_template(job, dra.device_class_name, job.spec.gpus_per_replica)
    out.append(("ResourceClaimTemplate", body["metadata"]["name"], body))
    if domain is not None:
        cd = build_compute_domain(job, domain[1])
        out.append((nvidia.COMPUTE_DOMAIN_KIND, cd["metadata"]["name"], cd))
    return out


async def release_domains(rt: Runtime, key: Key, names: list[str]) -> None:
    """Remove kubeforge's finalizer from each ComputeDomain, then delete it (the driver's
    controller then cleans up what it made for it)."""
    ns = key[0]
    # A release sent is expected until the index shows the domain gone (EXPECTATION_TTL): the
    # old pods' deletions bring the job back several times before the watch does.
    sent = rt.cache.expectations.pending_deletes(key)
    names = [n for n in names if f"computedomain:{n}" not in sent]
    rt.cache.expectations.expect_deleted(key, [f"computedomain:{n}" for n in names])
    for name in names:
        try:
            await _release(rt, ns, name)
        except BaseException:
            rt.cache.expectations.deleted_observed(key, f"computedomain:{name}")  # decided again on the retry
            raise
        log.info("trainingjob %s/%s: ComputeDomain %s released", ns, key[1], name)


async def _release(rt: Runtime, ns: str, name: str) -> None:
    cd = rt.cache.compute_domain((ns, name))
    if cd is not None and COMPUTE_DOMAIN_FINALIZER in cd.finalizers:
        keep = [f for f in cd.finalizers if f != COMPUTE_DOMAIN_FINALIZER]
        ops = [{"op": "test", "path": "/metadata/finalizers", "value": list(cd.finalizers)},
               {"op": "replace", "path": "/metadata/finalizers", "value": keep}]
        try:  # the test keeps a finalizer the driver added meanwhile (a 422: the retry decides again)
            await rt.client.patch(nvidia.COMPUTE_DOMAIN_KIND, ns, name, ops, patch_type="json")
        except ApiError as e:
            if e.code != 404:
                raise
    try:
        await rt.client.delete(nvidia.COMPUTE_DOMAIN_KIND, ns, name)
    except ApiError as e:
        if e.code != 404:
            raise
