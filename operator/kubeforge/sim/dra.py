"""The sim's DRA driver: ResourceSlices for the fleet's DRA nodes, DeviceClasses, NVIDIA's
ComputeDomain CRD, and a stand-in for the ComputeDomain controller and IMEX daemons
(:mod:`kubeforge.sim.imex`).

The real control plane does the rest: kube-controller-manager's resourceclaim controller makes each
pod's ResourceClaims from its templates, and kube-scheduler (1.34, ``resource.k8s.io/v1``) allocates
them from these slices on the node the pod is pinned to, evaluating the DeviceClasses' CEL.

Names: GPUs are published by the simulated driver :data:`GPU_DRIVER` (``gpu.sim.kubeforge.io``, a
name that does not pretend to be NVIDIA's) with DeviceClass :data:`GPU_CLASS` of the same name;
IMEX channels by :data:`CHANNEL_DRIVER` with DeviceClass :data:`CHANNEL_CLASS`. A pool uses them with
``deviceAllocation: DRA, dra: {deviceClassName: gpu.sim.kubeforge.io, driver: gpu.sim.kubeforge.io}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from kubeforge.accelerators.nvidia import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL
from kubeforge.sim._process import start_detached, stop_pidfile
from kubeforge.sim.fleet import DRA_NODE_LABEL

GPU_DRIVER = "gpu.sim.kubeforge.io"
GPU_CLASS = GPU_DRIVER
CHANNEL_DRIVER = "compute-domain.sim.kubeforge.io"
CHANNEL_CLASS = "compute-domain-default-channel.sim.kubeforge.io"
CHANNELS_PER_NODE = 8
"""IMEX channel devices per node (one per pod of a domain on the node)."""
CRD_FIXTURE = Path(__file__).parent / "fixtures" / "computedomains.resource.nvidia.com.yaml"


def device_classes() -> list[dict[str, Any]]:
    """The sim's DeviceClasses (``resource.k8s.io/v1``): whole GPUs, and IMEX channels (NVIDIA's
    ``compute-domain-default-channel.nvidia.com`` selects channel 0 only; the sim offers any
    channel so several pods of a domain may share a node)."""
    def cls(name: str, expr: str) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expr}}]}}
    return [
        cls(GPU_CLASS, f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'"),
        cls(CHANNEL_CLASS, f"device.driver == '{CHANNEL_DRIVER}' && device.attributes['{CHANNEL_DRIVER}'].type == 'channel'"),
    ]


def slice_manifests(nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One GPU slice and one channel slice per node labelled :data:`~kubeforge.sim.fleet.DRA_NODE_LABEL`
    (GPU count from ``nvidia.com/gpu.count``, product from ``nvidia.com/gpu.product``), as NVIDIA's
    kubelet plugins publish them: pool = the node's name, devices ``gpu-<i>`` with attributes
    ``type: gpu``, ``productName``, ``index``, ``uuid`` and capacity ``memory``."""
    out = []
    for n in nodes:
        labels = n["metadata"].get("labels") or {}
        if labels.get(DRA_NODE_LABEL) != "true":
            continue
        name = n["metadata"]["name"]
        count = int(labels.get(COUNT_LABEL) or 0)
        mem = int(labels.get(MEMORY_LABEL) or 0)
        gpus = [{"name": f"gpu-{i}", "attributes": {
            "type": {"string": "gpu"}, "productName": {"string": labels.get(PRODUCT_LABEL, "")},
            "index": {"int": i}, "uuid": {"string": f"GPU-{name}-{i}"}},
            "capacity": {"memory": {"value": f"{mem}Mi"}}} for i in range(count)]
        chans = [{"name": f"channel-{i}", "attributes": {"type": {"string": "channel"}, "id": {"int": i}}}
                 for i in range(CHANNELS_PER_NODE)]
        for driver, devices in ((GPU_DRIVER, gpus), (CHANNEL_DRIVER, chans)):
            out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": f"{name}-{driver.split('.')[0]}"},
                        "spec": {"driver": driver, "nodeName": name,
                                 "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                                 "devices": devices}})
    return out


def install(cluster: Any, nodes: Sequence[Mapping[str, Any]], log=print, ready_delay: float = 3.0) -> None:
    """Install the sim's DRA pieces on ``cluster`` (a :class:`~kubeforge.sim.cluster.Cluster`): the
    ComputeDomain CRD, the DeviceClasses, the slices of ``nodes`` (Node manifests), and start the
    IMEX stand-in (once per cluster; its pid in ``<cluster dir>/imex.pid``). Idempotent."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FIXTURE))
    cluster.kubectl("wait", "--for=condition=Established", "crd/computedomains.resource.nvidia.com", "--timeout=60s")
    docs = device_classes() + slice_manifests(nodes)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=kubeforge-sim", "-f", "-",
                    input="\n---\n".join(yaml.safe_dump(d) for d in docs), timeout=300)
    pid = start_detached(cluster.dir / "imex.pid", cluster.dir / "imex.log",
                         ["kubeforge.sim.imex", "--kubeconfig", cluster.kubeconfig,
                          "--channel-class", CHANNEL_CLASS, "--ready-delay", str(ready_delay)])
    if pid is not None:
        log(f"sim IMEX daemons started (pid {pid})")


def stop(cluster: Any) -> None:
    """Stop the IMEX stand-in of ``cluster`` (if running)."""
    stop_pidfile(cluster.dir / "imex.pid", grace=0)


def published(slices_json: str) -> dict[str, int]:
    """GPUs per node in ``kubectl get resourceslices -o json`` output (for tests and the CLI)."""
    out: dict[str, int] = {}
    for s in json.loads(slices_json).get("items") or []:
        spec = s.get("spec") or {}
        if spec.get("driver") == GPU_DRIVER and spec.get("nodeName"):
            out[spec["nodeName"]] = out.get(spec["nodeName"], 0) + len(spec.get("devices") or [])
    return out
