"""kubeforge.accelerators: GPU vendor knowledge, one module per vendor.

Each vendor module (:mod:`~kubeforge.accelerators.nvidia`, :mod:`~kubeforge.accelerators.amd`)
holds that vendor's names (device-plugin resource, node labels, DRA driver and its objects) as
constants and small pure functions, and imports nothing from kubeforge: this package sits at the
bottom of the import graph, so :mod:`kubeforge.api` and every layer above may import it. Code
that must work for any vendor loops over :data:`VENDORS` (or the tables below) instead of naming
one; code about one vendor's objects (NVIDIA's ComputeDomains) imports that vendor's module.

Every vendor module has (the :class:`Vendor` protocol):

- ``NAME``: its short name;
- ``GPU_RESOURCE_NAME``: its device plugin's extended resource;
- ``TOPOLOGY_LEVELS``: ``(tier, level name, node label)`` of its well-known topology labels,
  narrowest first. Tiers: 0 the accelerator interconnect domain across nodes (NVLink), 1 the first
  network tier above a node, 2 the second, 3 the widest;
- ``DRA_GPU_DEVICE_TYPES``: values of its DRA driver's device ``type`` attribute that are whole
  GPUs.

Adding a vendor: add its module with those names and list it in :data:`VENDORS`.

Cloud topology and spot labels (GKE, AWS, Azure, OCI, Karpenter) are cloud knowledge, not a GPU
vendor's: they stay with their one reader, :mod:`kubeforge.placement`.
"""

from __future__ import annotations

from typing import Protocol

from . import amd, nvidia


class Vendor(Protocol):
    """What every vendor module provides (see the package docstring)."""

    NAME: str
    GPU_RESOURCE_NAME: str
    TOPOLOGY_LEVELS: tuple[tuple[int, str, str], ...]
    DRA_GPU_DEVICE_TYPES: tuple[str, ...]


VENDORS: tuple[Vendor, ...] = (nvidia, amd)  # modules satisfy the protocol
"""The vendor modules, in the order their tables are merged."""

GPU_RESOURCE_NAMES: tuple[str, ...] = tuple(v.GPU_RESOURCE_NAME for v in VENDORS)
"""Every vendor's device-plugin GPU resource (``nvidia.com/gpu``, ``amd.com/gpu``)."""

TOPOLOGY_LEVELS: tuple[tuple[int, str, str], ...] = tuple(lvl for v in VENDORS for lvl in v.TOPOLOGY_LEVELS)
"""Every vendor's ``(tier, level name, node label)``, vendor by vendor, each narrowest first."""

DRA_GPU_DEVICE_TYPES: tuple[str, ...] = tuple(dict.fromkeys(t for v in VENDORS for t in v.DRA_GPU_DEVICE_TYPES))
"""Every vendor's whole-GPU device ``type`` values, without repeats (``("gpu",)``)."""


def vendor_of(resource_name: str) -> Vendor | None:
    """The vendor module whose device-plugin resource is ``resource_name``, or None (a MIG
    profile, another vendor's resource, a DRA ledger key)."""
    return next((v for v in VENDORS if v.GPU_RESOURCE_NAME == resource_name), None)


__all__ = ["DRA_GPU_DEVICE_TYPES", "GPU_RESOURCE_NAMES", "TOPOLOGY_LEVELS", "VENDORS", "Vendor", "amd", "nvidia",
           "vendor_of"]
