"""Tests of simulated fleet files (kubeforge.sim.fleet) and the default fleet examples/fleet-h100.yaml."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pydantic
import pytest
import yaml

from kubeforge.sim.fleet import (
    CAPACITY_TYPE_LABEL,
    FLEET_LABEL,
    KWOK_NODE_ANNOTATION,
    load_fleet,
    node_manifests,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FLEET = ROOT / "examples" / "fleet-h100.yaml"
CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
GFD = ("nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory")


@pytest.fixture(scope="module")
def default_nodes():
    return node_manifests(load_fleet(DEFAULT_FLEET))


def write(tmp_path, data, name="fleet.yaml"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


# --------------------------------------------------------------------------- the default fleet


def test_default_fleet_size(default_nodes):
    fleet = load_fleet(DEFAULT_FLEET)
    assert fleet.name == "h100-demo"
    assert fleet.node_count == 32
    assert len(default_nodes) == 32
    assert sum(int(n["status"]["capacity"]["nvidia.com/gpu"]) for n in default_nodes) == 256
    assert sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in default_nodes) == 256
    assert len({n["metadata"]["name"] for n in default_nodes}) == 32


def test_default_fleet_topology(default_nodes):
    cliques = Counter(n["metadata"]["labels"][CLIQUE] for n in default_nodes)
    assert len(cliques) == 8 and set(cliques.values()) == {4}
    blocks = Counter(n["metadata"]["labels"][BLOCK] for n in default_nodes)
    assert blocks == {"ib0": 16, "ib1": 16}
    # each NVLink domain sits inside one block
    for clique in cliques:
        assert len({n["metadata"]["labels"][BLOCK] for n in default_nodes if n["metadata"]["labels"][CLIQUE] == clique}) == 1


def test_default_fleet_spot_is_block_ib1(default_nodes):
    spot = [n for n in default_nodes if n["metadata"]["labels"][CAPACITY_TYPE_LABEL] == "spot"]
    assert len(spot) == 16
    assert {n["metadata"]["labels"][BLOCK] for n in spot} == {"ib1"}
    on_demand = [n for n in default_nodes if n["metadata"]["labels"][CAPACITY_TYPE_LABEL] == "on-demand"]
    assert len(on_demand) == 16


def test_default_fleet_every_node_is_kwok_with_gfd_labels(default_nodes):
    for n in default_nodes:
        md = n["metadata"]
        assert n["kind"] == "Node" and n["apiVersion"] == "v1"
        assert md["annotations"][KWOK_NODE_ANNOTATION] == "fake"
        labels = md["labels"]
        for key in GFD:
            assert key in labels, (md["name"], key)
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.memory"] == "81559"
        assert labels["kubernetes.io/hostname"] == md["name"]
        assert labels["type"] == "kwok"
        assert labels[FLEET_LABEL] == "h100-demo"
        # defaults' labels reach every node
        assert labels["node.kubernetes.io/instance-type"] == "a3-megagpu-8g"
        assert labels["topology.kubernetes.io/zone"] == "sim-zone-a"
        cap = n["status"]["capacity"]
        assert cap["cpu"] == "192" and cap["memory"] == "2Ti" and cap["pods"] == "110"
        assert n["status"]["allocatable"] == cap


def test_default_fleet_node_names_and_order(default_nodes):
    names = [n["metadata"]["name"] for n in default_nodes]
    assert names[:5] == ["ib0-nvl0-0", "ib0-nvl0-1", "ib0-nvl0-2", "ib0-nvl0-3", "ib0-nvl1-0"]
    assert names[-1] == "ib1-nvl3-3"
    assert node_manifests(load_fleet(DEFAULT_FLEET)) == default_nodes  # stable


# --------------------------------------------------------------------------- small fleets


def test_defaults_merge_group_wins(tmp_path):
    data = {
        "name": "mix",
        "nodePrefix": "sim-",
        "defaults": {"gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8, "memoryMiB": 81920},
                     "cpu": "96", "labels": {"zone": "a", "tier": "x"},
                     "taints": [{"key": "gpu", "effect": "NoSchedule"}]},
        "groups": [
            {"name": "g1", "count": 2, "labels": {"tier": "y"}},
            {"name": "g2", "count": 1, "capacityType": "spot", "cpu": "48", "pods": 64,
             "gpu": {"product": "NVIDIA-L4", "count": 1, "memoryMiB": 23034, "resourceName": "nvidia.com/mig-1g"}},
            {"name": "empty", "count": 0},
        ],
    }
    nodes = node_manifests(load_fleet(write(tmp_path, data)))
    assert [n["metadata"]["name"] for n in nodes] == ["sim-g1-0", "sim-g1-1", "sim-g2-0"]
    g1, g2 = nodes[0], nodes[2]
    assert g1["metadata"]["labels"]["tier"] == "y" and g1["metadata"]["labels"]["zone"] == "a"
    assert g1["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert g1["metadata"]["labels"][CAPACITY_TYPE_LABEL] == "on-demand"
    assert g1["status"]["capacity"]["cpu"] == "96"
    assert g1["spec"]["taints"] == [{"key": "gpu", "effect": "NoSchedule"}]
    assert g2["metadata"]["labels"][CAPACITY_TYPE_LABEL] == "spot"
    assert g2["status"]["capacity"]["nvidia.com/mig-1g"] == "1"
    assert "nvidia.com/gpu" not in g2["status"]["capacity"]
    assert g2["status"]["capacity"]["cpu"] == "48" and g2["status"]["capacity"]["pods"] == "64"


def test_fleet_without_defaults(tmp_path):
    nodes = node_manifests(load_fleet(write(tmp_path, {"groups": [{"name": "a", "count": 3}]})))
    assert len(nodes) == 3
    assert nodes[0]["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert nodes[0]["metadata"]["labels"][FLEET_LABEL] == "fleet"
    assert nodes[0]["spec"] == {}


# --------------------------------------------------------------------------- invalid fleets


@pytest.mark.parametrize(
    "data, field",
    [
        ({"name": "Bad_Name", "groups": [{"name": "a"}]}, "name"),
        ({"groups": [{"name": "Bad_Group"}]}, "name"),
        ({"groups": [{"name": "-a"}]}, "name"),
        ({"groups": [{"name": "a", "count": -1}]}, "count"),
        ({"groups": [{"name": "a", "count": 5001}]}, "count"),
        ({"groups": [{"name": "a", "cuont": 2}]}, "cuont"),
        ({"groups": [{"name": "a"}], "extra": 1}, "extra"),
        ({"groups": [{"name": "a", "gpu": {"count": -8}}]}, "count"),
        ({"groups": [{"name": "a", "gpu": {"product": "x", "colour": "green"}}]}, "colour"),
        ({"groups": [{"name": "a", "capacityType": "preemptible"}]}, "capacityType"),
        ({"groups": []}, "groups"),
        ({"name": "x"}, "groups"),
    ],
)
def test_invalid_fleet_raises_naming_the_field(tmp_path, data, field):
    with pytest.raises(pydantic.ValidationError) as err:
        load_fleet(write(tmp_path, data))
    assert field in str(err.value)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", ""])
def test_non_mapping_fleet_file_raises(tmp_path, text):
    with pytest.raises(ValueError, match="mapping"):
        load_fleet(write(tmp_path, text))


def test_missing_fleet_file_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        load_fleet(tmp_path / "nope.yaml")
