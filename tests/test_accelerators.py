"""kubeforge.accelerators: what each GPU vendor module answers, the registry that merges them, and
the rule that keeps the package at the bottom of the import graph (issue 30, item 3)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kubeforge import accelerators
from kubeforge.accelerators import amd, nvidia
from kubeforge.api import DEFAULT_DEVICE_CLASS_NAME, DEFAULT_DRA_DRIVER, DEFAULT_GPU_RESOURCE_NAME
from kubeforge.placement import WELL_KNOWN_LEVELS

PACKAGE = Path(accelerators.__file__).parent
VENDOR_FILES = sorted(p for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


# --- the package's shape ------------------------------------------------------------------------

@pytest.mark.parametrize("path", VENDOR_FILES, ids=lambda p: p.name)
def test_vendor_modules_import_no_kubeforge_module(path: Path) -> None:
    """A vendor module imports only the standard library: no kubeforge package, no sibling."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("kubeforge"), f"{path.name}: {ast.dump(node)}"
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("kubeforge") for a in node.names), f"{path.name}: {ast.dump(node)}"


def test_every_vendor_file_is_listed() -> None:
    """Adding a vendor is adding its file and listing it: no file is left out of VENDORS."""
    assert sorted(v.__name__.rsplit(".", 1)[1] for v in accelerators.VENDORS) == sorted(p.stem for p in VENDOR_FILES)


@pytest.mark.parametrize("vendor", accelerators.VENDORS, ids=lambda v: v.NAME)
def test_vendor_protocol(vendor) -> None:
    """Every vendor module has the names detection loops over, with their types."""
    assert isinstance(vendor.NAME, str) and vendor.NAME == vendor.__name__.rsplit(".", 1)[1]
    assert isinstance(vendor.GPU_RESOURCE_NAME, str) and "/" in vendor.GPU_RESOURCE_NAME
    assert all(isinstance(t, str) for t in vendor.DRA_GPU_DEVICE_TYPES)
    tiers = [tier for tier, _, _ in vendor.TOPOLOGY_LEVELS]
    assert tiers == sorted(tiers) and all(0 <= t <= 3 for t in tiers)  # narrowest first
    for _, name, label in vendor.TOPOLOGY_LEVELS:
        assert name and "/" in label


# --- what the vendors answer --------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value"), [
    (nvidia.GPU_RESOURCE_NAME, "nvidia.com/gpu"),
    (nvidia.PRESENT_LABEL, "nvidia.com/gpu.present"),
    (nvidia.PRODUCT_LABEL, "nvidia.com/gpu.product"),
    (nvidia.MEMORY_LABEL, "nvidia.com/gpu.memory"),
    (nvidia.COUNT_LABEL, "nvidia.com/gpu.count"),
    (nvidia.CLIQUE_LABEL, "nvidia.com/gpu.clique"),
    (nvidia.CLIQUE_LEVEL, "nvlink"),
    (nvidia.DRA_DRIVER, "gpu.nvidia.com"),
    (nvidia.DRA_DEVICE_CLASS, "gpu.nvidia.com"),
    (nvidia.DRA_CHANNEL_DEVICE_CLASS, "compute-domain-default-channel.nvidia.com"),
    (nvidia.DRA_GPU_DEVICE_TYPES, ("gpu",)),
    (nvidia.COMPUTE_DOMAIN_API_VERSION, "resource.nvidia.com/v1beta1"),
    (nvidia.COMPUTE_DOMAIN_KIND, "ComputeDomain"),
    (nvidia.COMPUTE_DOMAIN_PLURAL, "computedomains"),
    (nvidia.DOMAIN_READY, "Ready"),
    (nvidia.DOMAIN_NOT_READY, "NotReady"),
    (nvidia.IMEX_DOMAINS_PER_NODE, 1),
    (amd.GPU_RESOURCE_NAME, "amd.com/gpu"),
    (amd.TOPOLOGY_LEVELS, ()),
    (amd.DRA_GPU_DEVICE_TYPES, ()),
])
def test_vendor_names(name, value) -> None:
    assert name == value


def test_nvidia_topology_levels() -> None:
    assert nvidia.TOPOLOGY_LEVELS == (
        (0, "nvlink", "nvidia.com/gpu.clique"),
        (0, "accelerator", "network.topology.nvidia.com/accelerator"),
        (1, "leaf", "network.topology.nvidia.com/leaf"),
        (2, "spine", "network.topology.nvidia.com/spine"),
        (3, "core", "network.topology.nvidia.com/core"),
    )


def test_compute_domain_spec() -> None:
    assert nvidia.compute_domain_spec("d-channel") == {
        "numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "d-channel"}}}


@pytest.mark.parametrize(("spec", "template"), [
    (None, ""),
    ({}, ""),
    ({"channel": None}, ""),
    ({"channel": {"resourceClaimTemplate": {}}}, ""),
    ({"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "d-channel"}}}, "d-channel"),
])
def test_channel_template_of(spec, template) -> None:
    assert nvidia.channel_template_of(spec) == template
    if spec is not None and template:
        assert nvidia.channel_template_of(nvidia.compute_domain_spec(template)) == template


@pytest.mark.parametrize(("status", "global_status", "ready"), [
    (None, "NotReady", frozenset()),
    ({}, "NotReady", frozenset()),
    ({"status": ""}, "NotReady", frozenset()),
    ({"status": "Ready"}, "Ready", frozenset()),
    ({"status": "NotReady", "nodes": [{"name": "a", "status": "Ready"}, {"name": "b", "status": "NotReady"}]},
     "NotReady", frozenset({"a"})),
    ({"nodes": [None, "x", {"status": "Ready"}, {"name": "", "status": "Ready"}, {"name": "c", "status": "Ready"}]},
     "NotReady", frozenset({"c"})),  # odd entries skipped
])
def test_domain_status_and_ready_daemons(status, global_status, ready) -> None:
    assert nvidia.domain_status(status) == global_status
    assert nvidia.ready_daemon_nodes(status) == ready


@pytest.mark.parametrize(("status", "ready_nodes", "nodes", "ready"), [
    ("Ready", (), ("a", "b"), True),                 # the driver says so (numNodes set)
    ("NotReady", ("a", "b"), ("a", "b"), True),      # every node's daemon is Ready (numNodes 0)
    ("NotReady", ("a", "b", "z"), ("a",), True),     # other nodes' daemons do not matter
    ("NotReady", ("a",), ("a", "b"), False),
    ("NotReady", (), ("a",), False),
    ("NotReady", (), (), True),
])
def test_domain_ready(status, ready_nodes, nodes, ready) -> None:
    assert nvidia.domain_ready(status, ready_nodes, nodes) is ready


C = nvidia.CLIQUE_LABEL


@pytest.mark.parametrize(("labels", "cliques"), [
    ([], ()),
    ([{C: "r1"}, {C: "r0"}, {C: "r1"}], ("r0", "r1")),  # sorted, distinct
    ([{C: "r0"}, {"other": "x"}], None),                 # a node outside every clique
    ([{C: "r0"}, None], None),                           # a node not known
])
def test_gang_cliques(labels, cliques) -> None:
    assert nvidia.gang_cliques(labels) == cliques


# --- the registry and its readers ---------------------------------------------------------------

def test_registry_tables() -> None:
    assert accelerators.GPU_RESOURCE_NAMES == ("nvidia.com/gpu", "amd.com/gpu")
    assert accelerators.TOPOLOGY_LEVELS == nvidia.TOPOLOGY_LEVELS + amd.TOPOLOGY_LEVELS
    assert accelerators.DRA_GPU_DEVICE_TYPES == ("gpu",)


@pytest.mark.parametrize(("resource", "vendor"), [
    ("nvidia.com/gpu", nvidia),
    ("amd.com/gpu", amd),
    ("nvidia.com/mig-1g.10gb", None),
    ("dra:gpu.nvidia.com", None),
    ("cpu", None),
])
def test_vendor_of(resource, vendor) -> None:
    assert accelerators.vendor_of(resource) is vendor


def test_api_defaults_are_nvidia() -> None:
    assert (DEFAULT_GPU_RESOURCE_NAME, DEFAULT_DEVICE_CLASS_NAME, DEFAULT_DRA_DRIVER) == (
        nvidia.GPU_RESOURCE_NAME, nvidia.DRA_DEVICE_CLASS, nvidia.DRA_DRIVER)


def test_detection_table_holds_every_vendor_level() -> None:
    """Detection reads the vendors' levels through the registry: each one is in the table."""
    table = {(lvl.name, lvl.node_label) for lvl in WELL_KNOWN_LEVELS}
    for vendor in accelerators.VENDORS:
        for _, name, label in vendor.TOPOLOGY_LEVELS:
            assert (name, label) in table


def test_detection_table_order() -> None:
    """The merged table, tier by tier (each tier's cloud levels, then the vendors'), is the
    order detection falls back to: the same as when it was one literal in placement."""
    assert [(lvl.name, lvl.node_label) for lvl in WELL_KNOWN_LEVELS] == [
        ("nvlink", "nvidia.com/gpu.clique"),
        ("accelerator", "network.topology.nvidia.com/accelerator"),
        ("subblock", "cloud.google.com/gce-topology-subblock"),
        ("aws-layer-3", "topology.k8s.aws/network-node-layer-3"),
        ("local-block", "oci.oraclecloud.com/rdma.local_block_id"),
        ("leaf", "network.topology.nvidia.com/leaf"),
        ("block", "cloud.google.com/gce-topology-block"),
        ("aws-layer-2", "topology.k8s.aws/network-node-layer-2"),
        ("network-block", "oci.oraclecloud.com/rdma.network_block_id"),
        ("spine", "network.topology.nvidia.com/spine"),
        ("aws-layer-1", "topology.k8s.aws/network-node-layer-1"),
        ("hpc-island", "oci.oraclecloud.com/rdma.hpc_island_id"),
        ("core", "network.topology.nvidia.com/core"),
    ]


def test_objects_reexports_are_nvidias() -> None:
    """kubeforge.objects keeps exporting the names callers found there first: the same objects."""
    from kubeforge import objects

    assert objects.CLIQUE_LABEL is nvidia.CLIQUE_LABEL
    assert objects.COMPUTE_DOMAIN_API_VERSION is nvidia.COMPUTE_DOMAIN_API_VERSION
    assert (objects.COMPUTE_DOMAIN_GROUP, objects.COMPUTE_DOMAIN_VERSION) == (
        nvidia.COMPUTE_DOMAIN_GROUP, nvidia.COMPUTE_DOMAIN_VERSION)
