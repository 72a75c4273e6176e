"""Why a gang's own template keeps it off a node: the one predicate placement filters nodes
with before it places a gang, and the lifecycle asks again before it blames anyone else for a
worker kube-scheduler will not bind (issue 18: diagnose before blaming).

The checks are kube-scheduler's filters as they would answer on an otherwise empty node, so a
"no" is the template's doing, never another workload's: ``NodeResourcesFit`` (a replica asks
more GPUs, cpu, memory or another extended resource than the node offers at all),
``NodeAffinity`` (the template's nodeSelector and required node affinity), ``TaintToleration``
(a taint neither the pool nor the template tolerates) and ``InterPodAffinity`` on the gang's
own pods (a required anti-affinity between its ranks). Pure.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from kubeforge.objects import NATIVE_RESOURCES, tolerates

from ._model import GangRequest, NodeInfo

HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The node label a pod anti-affinity uses to mean "not on the same node"."""


def format_quantity(resource: str, value: int) -> str:
    """A resource amount as a user wrote it: cpu in cores (``0.5``, ``96``), memory in GiB,
    counts as they are."""
    if resource == "cpu":
        return f"{value / 1000:g} cpu"
    if resource == "memory":
        return f"{value / 2**30:.4g}Gi memory"
    return f"{value} {resource}"


def _offered(node: NodeInfo, resource: str) -> int | None:
    have = node.resources.get(resource)
    if have is None and resource in NATIVE_RESOURCES:
        return None  # the node does not report it: unknown, never a reason to refuse
    return have or 0


def needs_misfit(request: GangRequest, node: NodeInfo) -> str | None:
    """The first resource (besides GPUs) one replica requests beyond what ``node`` offers in
    total, as ``"<asked> per replica; node <name> offers <had>"``, or None."""
    for resource, asked in sorted(request.needs.items()):
        have = _offered(node, resource)
        if have is not None and asked > have:
            return (f"a replica requests {format_quantity(resource, asked)} (its containers, sidecars and "
                    f"init containers by the scheduler's rule); node {node.name} offers "
                    f"{format_quantity(resource, have)}")
    return None


def node_misfit(request: GangRequest, node: NodeInfo) -> str | None:
    """Why no replica of ``request`` can ever run on ``node``, whatever else runs there, as a
    sentence naming the template's part at fault; None when one can.

    Checks GPUs against the node's allocatable, every other resource (:func:`needs_misfit`),
    the template's node selector and required node affinity, and the blocking taints the pool
    and the template leave untolerated. Readiness, cordons and interruptions are the node's
    state, not the template's: they are not checked here.
    """
    if request.gpus_per_replica > node.gpus_allocatable:
        return (f"a replica requests {request.gpus_per_replica} GPUs (gpusPerReplica with its sidecars and "
                f"init containers by the scheduler's rule); node {node.name} has {node.gpus_allocatable}")
    why = needs_misfit(request, node)
    if why:
        return why
    if request.node_filter is not None and not request.node_filter.matches(node.name, node.labels):
        return f"node {node.name} does not match the template's {request.node_filter.describe()}"
    untolerated = [t for t in node.taints if not tolerates(request.tolerations, t)]
    if untolerated and not node.cordoned:
        t = untolerated[0]
        return (f"node {node.name} has taint {t.key}{'=' + t.value if t.value else ''}:{t.effect}, which "
                "neither the pool nor the template tolerates")
    return None


def needs_nofit_reason(request: GangRequest, nodes: Sequence[NodeInfo]) -> str:
    """Why no node of a pool can hold one replica because of what it requests besides GPUs:
    the first resource no node offers enough of, with the most any node offers."""
    for resource, asked in sorted(request.needs.items()):
        offers = [h for n in nodes if (h := _offered(n, resource)) is not None]
        if offers and asked > max(offers):
            return (f"a replica requests {format_quantity(resource, asked)} (its containers, sidecars and "
                    f"init containers by the scheduler's rule); the largest offer of any node of the pool is "
                    f"{format_quantity(resource, max(offers))}")
    return "no node of the pool offers what one replica requests"


def spread_violation(request: GangRequest, nodes: Mapping[str, NodeInfo], chosen: Sequence[str]) -> str | None:
    """Why the chosen nodes break the template's required anti-affinity between the gang's own
    pods on a key other than the hostname (two ranks on nodes sharing a value), or None.
    Nodes without the label are in no domain of that key (kube-scheduler ignores them)."""
    for key in request.spread_keys:
        values = [v for n in chosen if n in nodes and (v := nodes[n].labels.get(key)) is not None]
        dup = next((v for v in values if values.count(v) > 1), None)
        if dup is not None:
            return (f"the template's required podAntiAffinity on {key} keeps the gang's ranks in different "
                    f"{key} domains, but its GPUs are only to be had with two ranks in {key}={dup}"
                    + (" (topology Required keeps the gang inside one domain)" if request.mode == "Required" else ""))
    return None
