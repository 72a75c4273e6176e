"""AMD: what kubeforge knows about AMD GPUs today.

An AMD pool is a device-plugin pool whose ``spec.gpuResourceName`` is :data:`GPU_RESOURCE_NAME`
(the ROCm device plugin's resource): its capacity is the nodes' allocatable ``amd.com/gpu`` and
its pods request it in their limits. kubeforge reads none of AMD's node labeller labels yet and
detects no AMD interconnect level (:data:`TOPOLOGY_LEVELS` is empty: an AMD pool names its
levels in ``spec.topologyLevels``, or uses the cloud levels detection finds). A DRA pool of AMD's
driver names its driver and DeviceClass in ``spec.dra``; no device ``type`` values of its own
are known (:data:`DRA_GPU_DEVICE_TYPES`).

Pure constants; imports nothing from kubeforge (see :mod:`kubeforge.accelerators`).

Source: ROCm k8s-device-plugin (``amd.com/gpu``).
"""

from __future__ import annotations

NAME = "amd"
"""The vendor's short name."""

GPU_RESOURCE_NAME = "amd.com/gpu"
"""The extended resource AMD's ROCm device plugin advertises GPUs under."""

TOPOLOGY_LEVELS: tuple[tuple[int, str, str], ...] = ()
"""``(tier, level name, node label)`` of AMD's well-known topology labels: none yet."""

DRA_GPU_DEVICE_TYPES: tuple[str, ...] = ()
"""Values of a DRA device's ``type`` attribute that are whole AMD GPUs: none known yet."""
