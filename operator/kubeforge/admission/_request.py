"""What a TrainingJob asks placement for: one function, used by the admission round for every
pool it tries and by the lifecycle when it asks why a worker will not bind. Pure."""

from __future__ import annotations

from typing import Any, Mapping

from kubeforge.api import DEFAULT_GPU_RESOURCE_NAME, TrainingJobSpec
from kubeforge.builders.training import job_labels
from kubeforge.objects import ROLE_LABEL, WORKER_ROLE, Record, rank_requests
from kubeforge.placement import HOSTNAME_LABEL, GangRequest, NodeFilter
from kubeforge.selectors import selector_matches


def own_anti_affinity(pod_spec: Mapping[str, Any], own_labels: Mapping[str, str]) -> tuple[bool, tuple[str, ...]]:
    """The template's required pod anti-affinity between a gang's own pods: (one replica per
    node, other topology keys whose domains must hold at most one replica). A term counts when
    its labelSelector matches the labels every pod of the gang carries (``own_labels``) and it
    looks in the pod's own namespace (no ``namespaces`` / ``namespaceSelector`` elsewhere)."""
    terms = ((((pod_spec.get("affinity") or {}).get("podAntiAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution")) or [])
    one, keys = False, []
    for term in terms:
        if not isinstance(term, Mapping) or term.get("namespaces") or term.get("namespaceSelector"):
            continue
        sel = term.get("labelSelector")
        if not isinstance(sel, Mapping) or not selector_matches(sel, own_labels):
            continue
        key = term.get("topologyKey") or ""
        if key == HOSTNAME_LABEL:
            one = True
        elif key and key not in keys:
            keys.append(key)
    return one, tuple(keys)


def gang_request(job: Record, resource: str = DEFAULT_GPU_RESOURCE_NAME) -> GangRequest:
    """The placement request of a job in a pool counting ``resource``: its shape and topology,
    what one rank holds (:func:`kubeforge.objects.rank_requests`: ``gpusPerReplica`` plus what
    sidecars and init containers request, by the scheduler's rule; and the cpu, memory and other
    resources it needs), the template's own tolerations and node constraints, and its own
    anti-affinity (so the nodes chosen are ones kube-scheduler accepts).

    Raises:
        ValueError: The template cannot be read (caught by :func:`plan_admission`).
    """
    spec: TrainingJobSpec = job.spec  # type: ignore[assignment]
    tmpl = spec.template.spec
    mode = spec.topology.mode.value
    needs = dict(rank_requests(job, resource))
    gpus = needs.pop(resource, spec.gpus_per_replica)
    own = {**(spec.template.metadata.get("labels") or {}), **job_labels(job.name), ROLE_LABEL: WORKER_ROLE}
    one, keys = own_anti_affinity(tmpl, own)
    return GangRequest(
        replicas=spec.replicas,
        gpus_per_replica=gpus,
        mode=mode,  # type: ignore[arg-type]
        level=spec.topology.level if mode != "None" else None,
        tolerations=tuple(tmpl.get("tolerations") or ()),
        node_filter=NodeFilter.from_pod_spec(tmpl),
        needs=needs,
        one_per_node=one,
        spread_keys=keys,
    )
