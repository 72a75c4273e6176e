"""Fleet files: the simulated GPU nodes of the local cluster, as YAML.

A fleet file describes groups of identical nodes. Each group becomes ``count`` Node objects
that kwok manages (annotation ``kwok.x-k8s.io/node: fake``), with ``nvidia.com/gpu`` capacity,
GPU Feature Discovery labels, cloud topology labels and a capacity type::

    name: h100-demo
    defaults:                       # merged into every group
      gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8, memoryMiB: 81559}
      cpu: "192"
      memory: 2Ti
    groups:
      - name: ib0-nvl0              # node names: <group>-<index>
        count: 4
        capacityType: spot          # spot | on-demand (label karpenter.sh/capacity-type)
        labels:                     # topology and anything else
          nvidia.com/gpu.clique: cluster-a.0
          cloud.google.com/gce-topology-block: ib0

A group's GPUs may be DRA devices instead (``gpu: {allocation: DRA}``): the node then has no
``nvidia.com/gpu`` capacity and the sim publishes a ResourceSlice of its GPUs under the simulated
driver (:mod:`kubeforge.sim.dra`). ``nodesPerClique: 18`` makes NVL72 racks: node i of the group
gets ``nvidia.com/gpu.clique: <fleet>.<group>-<i // 18>`` (an 8-rack NVL72 fleet is
``e2e/fleets/nvl72-8.yaml``)::

      - name: rack
        count: 144
        nodesPerClique: 18
        gpu: {product: NVIDIA-GB200, count: 4, memoryMiB: 189471, allocation: DRA}

Node names are ``<fleet-prefix><group name>-<index>`` where the prefix is ``nodePrefix``
(default empty). Everything here is pure: :func:`load_fleet` parses and validates,
:func:`node_manifests` turns a fleet into Node dicts ready for the API server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from kubeforge.accelerators.nvidia import (
    CLIQUE_LABEL, COUNT_LABEL, GPU_RESOURCE_NAME, MEMORY_LABEL, PRESENT_LABEL, PRODUCT_LABEL,
)

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FLEET_LABEL = "kubeforge.io/sim-fleet"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"


class GPUSpec(BaseModel):
    """The GPUs of one node: GPU Feature Discovery's product, count and memory (MiB)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    product: str = Field("NVIDIA-H100-80GB-HBM3", description="nvidia.com/gpu.product label value.")
    count: int = Field(8, ge=0, le=64, description="GPUs per node: nvidia.com/gpu capacity.")
    memory_mib: int = Field(81559, alias="memoryMiB", ge=0, description="nvidia.com/gpu.memory label, MiB.")
    resource_name: str = Field(GPU_RESOURCE_NAME, alias="resourceName", description="Device-plugin resource name.")
    allocation: Literal["DevicePlugin", "DRA"] = Field(
        "DevicePlugin", description="DevicePlugin: node capacity of resourceName; DRA: a ResourceSlice of the "
        "simulated DRA driver lists the GPUs (kubeforge.sim.dra).")


class NodeGroup(BaseModel):
    """``count`` identical nodes. Fields left out come from the fleet's ``defaults``."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    name: str = Field("defaults", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    count: int = Field(1, ge=0, le=5000)
    capacity_type: Literal["spot", "on-demand"] | None = Field(None, alias="capacityType")
    gpu: GPUSpec | None = None
    cpu: str | None = None
    memory: str | None = None
    pods: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, Any]] = Field(default_factory=list)
    nodes_per_clique: int | None = Field(None, alias="nodesPerClique", ge=1, le=1000,
                                         description="NVLink clique size: node i gets clique <fleet>.<group>-<i // size>.")


DRA_NODE_LABEL = "kubeforge.io/sim-dra"
"""Label of a sim node whose GPUs are published as DRA devices."""


class Fleet(BaseModel):
    """A whole simulated fleet: a name, defaults and node groups."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    name: str = Field("fleet", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    node_prefix: str = Field("", alias="nodePrefix", max_length=40)
    defaults: NodeGroup | None = None
    groups: list[NodeGroup] = Field(..., min_length=1, max_length=1000)

    def resolved_groups(self) -> list[NodeGroup]:
        """Groups with the defaults filled in (labels and taints are merged, group wins)."""
        d = self.defaults
        out = []
        for g in self.groups:
            if d is None:
                out.append(g)
                continue
            merged = g.model_copy(
                update={
                    "capacity_type": g.capacity_type or d.capacity_type,
                    "gpu": g.gpu or d.gpu,
                    "cpu": g.cpu or d.cpu,
                    "memory": g.memory or d.memory,
                    "pods": g.pods or d.pods,
                    "labels": {**d.labels, **g.labels},
                    "taints": g.taints or d.taints,
                    "nodes_per_clique": g.nodes_per_clique or d.nodes_per_clique,
                }
            )
            out.append(merged)
        return out

    @property
    def node_count(self) -> int:
        """Total nodes in the fleet."""
        return sum(g.count for g in self.groups)


def load_fleet(path: str | Path) -> Fleet:
    """Read and validate a fleet file.

    Raises:
        pydantic.ValidationError: the file does not describe a fleet (message names the field).
        OSError: the file cannot be read.
    """
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a fleet file must be a YAML mapping")
    return Fleet.model_validate(data)


def node_manifests(fleet: Fleet) -> list[dict[str, Any]]:
    """Node objects for every node of the fleet, in a stable order.

    Each node carries: ``kubernetes.io/hostname``, ``type: kwok``, the fleet label
    (``kubeforge.io/sim-fleet``), GPU Feature Discovery labels (``nvidia.com/gpu.present``,
    ``.product``, ``.count``, ``.memory``), ``karpenter.sh/capacity-type``, the group's labels,
    and ``status.capacity`` / ``status.allocatable`` with cpu, memory, pods and the GPU resource.
    """
    nodes = []
    for g in fleet.resolved_groups():
        gpu = g.gpu or GPUSpec()
        for i in range(g.count):
            name = f"{fleet.node_prefix}{g.name}-{i}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                FLEET_LABEL: fleet.name,
                PRESENT_LABEL: "true",
                PRODUCT_LABEL: gpu.product,
                COUNT_LABEL: str(gpu.count),
                MEMORY_LABEL: str(gpu.memory_mib),
                CAPACITY_TYPE_LABEL: g.capacity_type or "on-demand",
                **g.labels,
            }
            if g.nodes_per_clique:
                labels[CLIQUE_LABEL] = f"{fleet.name}.{g.name}-{i // g.nodes_per_clique}"
            resources = {
                "cpu": g.cpu or "192",
                "memory": g.memory or "2Ti",
                "pods": str(g.pods or 110),
            }
            if gpu.allocation == "DRA":
                labels[DRA_NODE_LABEL] = "true"
            else:
                resources[gpu.resource_name] = str(gpu.count)
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    },
                    "spec": {"taints": list(g.taints)} if g.taints else {},
                    "status": {
                        "capacity": dict(resources),
                        "allocatable": dict(resources),
                        "nodeInfo": {
                            "kubeletVersion": "fake",
                            "kubeProxyVersion": "fake",
                            "operatingSystem": "linux",
                            "architecture": "amd64",
                        },
                    },
                }
            )
    return nodes
