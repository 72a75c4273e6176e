"""NVIDIA: everything kubeforge knows about NVIDIA GPUs, in one place.

- The device plugin's extended resource (:data:`GPU_RESOURCE_NAME`).
- GPU Feature Discovery's node labels: product, memory, count, present, and the multi-node
  NVLink clique (:data:`CLIQUE_LABEL`, ``<cluster-uuid>.<clique-id>`` on MNNVL systems such as
  GB200 NVL72), plus NVIDIA Topograph's network labels (``network.topology.nvidia.com/*``):
  the topology levels detection may find (:data:`TOPOLOGY_LEVELS`).
- NVIDIA's DRA driver (k8s-dra-driver-gpu): its driver and DeviceClass names, the device
  ``type`` values that are whole GPUs (MIG devices are ``mig``, not counted).
- ComputeDomain (``resource.nvidia.com/v1beta1``, spec immutable): the object the driver turns
  into an IMEX domain across a multi-node NVLink gang's nodes. ``spec.numNodes`` is deprecated
  (set 0: the IMEX daemons start as the workers land), ``spec.channel.resourceClaimTemplate.name``
  names the template the driver's controller makes and pods claim their IMEX channel from,
  ``status.status`` is ``Ready`` / ``NotReady`` (updated only when ``numNodes`` is not 0, so
  readiness is read per node from ``status.nodes[].status``).
- IMEX: a node's IMEX daemon serves one domain at a time (:data:`IMEX_DOMAINS_PER_NODE`), so a
  multi-node NVLink gang takes whole nodes of one clique (a node shared with another gang could
  not join its domain), and its pods wait in ContainerCreating until their node's daemon is Ready.

Pure constants and small pure functions; imports nothing from kubeforge (the bottom of the
import graph: :mod:`kubeforge.api` and every layer above may import it).

Sources: NVIDIA GPU Feature Discovery (``nvidia.com/gpu.*`` labels); NVIDIA k8s-dra-driver-gpu
(DeviceClasses ``gpu.nvidia.com`` and ``compute-domain-default-channel.nvidia.com``, the
ComputeDomain CRD ``computedomains.resource.nvidia.com``); NVIDIA Topograph
(``network.topology.nvidia.com/{accelerator,leaf,spine,core}``).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

NAME = "nvidia"
"""The vendor's short name."""

# --- the device plugin --------------------------------------------------------------------------

GPU_RESOURCE_NAME = "nvidia.com/gpu"
"""The extended resource NVIDIA's device plugin advertises whole GPUs under."""

# --- GPU Feature Discovery node labels ----------------------------------------------------------

PRESENT_LABEL = "nvidia.com/gpu.present"
"""``"true"`` on a node with NVIDIA GPUs."""
PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The GPU model, e.g. ``NVIDIA-H100-80GB-HBM3``."""
MEMORY_LABEL = "nvidia.com/gpu.memory"
"""Memory of one GPU, in MiB."""
COUNT_LABEL = "nvidia.com/gpu.count"
"""GPUs on the node."""
CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""The node's multi-node NVLink clique (``<cluster-uuid>.<clique-id>``): nodes with the same value
share one NVLink domain (an NVL72 rack's 18 trays)."""
CLIQUE_LEVEL = "nvlink"
"""The topology level name kubeforge gives :data:`CLIQUE_LABEL`."""

TOPOGRAPH_PREFIX = "network.topology.nvidia.com/"
"""NVIDIA Topograph's node labels: accelerator < leaf < spine < core."""

TOPOLOGY_LEVELS: tuple[tuple[int, str, str], ...] = (
    (0, CLIQUE_LEVEL, CLIQUE_LABEL),
    (0, "accelerator", f"{TOPOGRAPH_PREFIX}accelerator"),
    (1, "leaf", f"{TOPOGRAPH_PREFIX}leaf"),
    (2, "spine", f"{TOPOGRAPH_PREFIX}spine"),
    (3, "core", f"{TOPOGRAPH_PREFIX}core"),
)
"""``(tier, level name, node label)`` of NVIDIA's well-known topology labels, narrowest first
(tiers: see :mod:`kubeforge.accelerators`). Tier 0 is the NVLink domain: GFD's clique on MNNVL
systems, Topograph's accelerator label."""

# --- the DRA driver (k8s-dra-driver-gpu) --------------------------------------------------------

DRA_DRIVER = "gpu.nvidia.com"
"""The driver name NVIDIA's DRA driver publishes its GPUs' ResourceSlices under."""
DRA_DEVICE_CLASS = "gpu.nvidia.com"
"""The DeviceClass NVIDIA's DRA driver installs for whole GPUs."""
DRA_CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
"""The DeviceClass of a ComputeDomain's IMEX channels (channel 0 only); the driver's controller
puts it in the channel template it makes for each domain."""
DRA_GPU_DEVICE_TYPES: tuple[str, ...] = ("gpu",)
"""Values of a device's ``type`` attribute that are whole GPUs (``mig`` devices and others are
not GPUs of a pool)."""

# --- ComputeDomain (resource.nvidia.com/v1beta1) ------------------------------------------------

COMPUTE_DOMAIN_GROUP = "resource.nvidia.com"
COMPUTE_DOMAIN_VERSION = "v1beta1"
COMPUTE_DOMAIN_API_VERSION = f"{COMPUTE_DOMAIN_GROUP}/{COMPUTE_DOMAIN_VERSION}"
COMPUTE_DOMAIN_KIND = "ComputeDomain"
COMPUTE_DOMAIN_PLURAL = "computedomains"
DOMAIN_READY = "Ready"
"""``status.status`` (and ``status.nodes[].status``) of a Ready domain (daemon)."""
DOMAIN_NOT_READY = "NotReady"
"""``status.status`` of a domain not Ready, and what kubeforge reads when it is absent."""

IMEX_DOMAINS_PER_NODE = 1
"""IMEX domains one node may join at a time: a multi-node NVLink gang takes whole nodes of its
clique, and a node moves to another gang's domain only once the old one's pods are gone."""


def compute_domain_spec(channel_template: str) -> dict[str, Any]:
    """The ``spec`` of a ComputeDomain whose IMEX channel template is ``channel_template``.

    Args:
        channel_template: The name the driver's controller gives the channel's
            ResourceClaimTemplate (in the domain's namespace).

    Returns:
        ``{"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": channel_template}}}``
        (``numNodes`` is deprecated: 0 lets the IMEX daemons start as the workers land).
    """
    return {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": channel_template}}}


def channel_template_of(spec: Mapping[str, Any] | None) -> str:
    """``spec.channel.resourceClaimTemplate.name`` of a ComputeDomain's ``spec`` ("" when absent)."""
    return str((((spec or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get("name") or "")


def domain_status(status: Mapping[str, Any] | None) -> str:
    """``status.status`` of a ComputeDomain's ``status`` (:data:`DOMAIN_NOT_READY` when absent)."""
    return str((status or {}).get("status") or DOMAIN_NOT_READY)


def ready_daemon_nodes(status: Mapping[str, Any] | None) -> frozenset[str]:
    """Nodes whose IMEX daemon is Ready: the names of ``status.nodes[]`` entries whose ``status``
    is :data:`DOMAIN_READY` (odd entries are skipped)."""
    return frozenset(str(n.get("name")) for n in (status or {}).get("nodes") or []
                     if isinstance(n, Mapping) and n.get("status") == DOMAIN_READY and n.get("name"))


def domain_ready(status: str, ready_nodes: Iterable[str], nodes: Iterable[str]) -> bool:
    """Whether a gang on ``nodes`` may use its ComputeDomain: the global ``status`` is
    :data:`DOMAIN_READY`, or every one of ``nodes`` is in ``ready_nodes`` (the driver leaves the
    global status alone while ``numNodes`` is 0). True for no nodes."""
    ready = set(ready_nodes)
    return status == DOMAIN_READY or all(n in ready for n in nodes)


def gang_cliques(node_labels: Iterable[Mapping[str, str] | None]) -> tuple[str, ...] | None:
    """The NVLink cliques of a gang's nodes, given each node's labels (None for a node not
    known), sorted and distinct; None when any node is unknown or carries no
    :data:`CLIQUE_LABEL` (such a gang can get no IMEX domain)."""
    cliques: set[str] = set()
    for labels in node_labels:
        clique = labels.get(CLIQUE_LABEL) if labels is not None else None
        if clique is None:
            return None
        cliques.add(clique)
    return tuple(sorted(cliques))
