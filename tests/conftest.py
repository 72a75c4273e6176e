"""Test harness: one real control plane per session, the operator running for real.

Tests marked ``cluster`` get:

- ``cluster``: a :class:`kubeforge.sim.cluster.Cluster` (``.kubeconfig``, ``.kubectl(...)``),
  started once per session (name ``kubeforge-test``) with the CRDs applied and the operator
  running as a subprocess (``kubeforge run``), log at ``<cluster dir>/operator.log``;
- ``namespace``: a fresh namespace per test, deleted afterwards;
- ``k8s``: a kubernetes ``ApiClient`` for the cluster.

Set ``KUBEFORGE_KEEP_CLUSTER=1`` to leave the cluster running after the session (faster reruns).
Unit tests (no marker) never start anything.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest

import builders as b

ROOT = Path(__file__).resolve().parents[1]
TEST_CLUSTER = os.environ.get("KUBEFORGE_TEST_CLUSTER", "kubeforge-test")


def pytest_collection_modifyitems(config, items):
    # Unit tests first: they fail fast and need no cluster.
    items.sort(key=lambda it: 1 if it.get_closest_marker("cluster") else 0)


@pytest.fixture(scope="session")
def cluster():
    from kubeforge.demo import start_operator, stop_operator
    from kubeforge.sim.cluster import Cluster

    c = Cluster(TEST_CLUSTER)
    if not os.environ.get("KUBEFORGE_KEEP_CLUSTER"):
        c.down(log=lambda m: print(f"[cluster] {m}"))  # a clean start: nothing left from an earlier session
    c.up(None, log=lambda m: print(f"[cluster] {m}"))
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    # NVIDIA's DRA driver's ComputeDomain CRD is NOT installed here: the DRA tests' fixture installs
    # it after the operator started, as on a cluster where the driver comes after kubeforge (the
    # ComputeDomain informer lists it again every few seconds until it is served).
    c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    start_operator(c)
    yield c
    stop_operator(c)
    log = c.dir / "operator.log"
    if log.exists():
        tail = log.read_text(errors="replace").splitlines()[-40:]
        print("\n--- operator.log (tail) ---\n" + "\n".join(tail))
    if not os.environ.get("KUBEFORGE_KEEP_CLUSTER"):
        c.down(log=lambda m: print(f"[cluster] {m}"))


def new_namespace(cluster):
    """A fresh ``t-xxxxxxxx`` namespace with its default ServiceAccount (a generator: yields the
    name, deletes the namespace without waiting when resumed). Fixtures ``yield from`` it."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
             timeout=30, what="default ServiceAccount")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(cluster):
    yield from new_namespace(cluster)


@pytest.fixture(scope="session")
def k8s(cluster):
    from kubernetes import config

    return config.new_client_from_config(config_file=cluster.kubeconfig)


def wait_for(pred: Callable[[], object], timeout: float = 60, interval: float = 0.25, what: str = "condition"):
    """Poll ``pred`` until truthy (returned) or fail after ``timeout`` seconds (bounded)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def get_json(cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


# --- builders for cluster tests -----------------------------------------------------------


def apply(cluster, obj: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


DRA_GPUS = 4
"""GPUs per node of :func:`dra_fleet` (a GB200 tray)."""


@pytest.fixture
def dra_fleet(request, cluster, namespace):
    """NVL72 racks (18 DRA nodes x 4 GPUs per clique; one rack unless the test is parametrized with
    ``indirect`` racks) plus 2 device-plugin nodes, private to the test; a DRA pool over the racks
    and a device-plugin pool over the others; the sim's DRA driver, ComputeDomain CRD and IMEX
    stand-in installed. Returns the names (``rack``, ``dp``, ``pool``, ``cliques``)."""
    from kubeforge.sim import dra
    from kubeforge.sim.fleet import Fleet, node_manifests

    pool = namespace
    racks = getattr(request, "param", 1)
    f = Fleet.model_validate({"name": pool, "nodePrefix": f"{pool}-", "groups": [
        {"name": "rack", "count": 18 * racks, "nodesPerClique": 18, "labels": {"kubeforge.io/test-fleet": pool},
         "gpu": {"count": DRA_GPUS, "product": "NVIDIA-GB200", "allocation": "DRA"}},
        {"name": "dp", "count": 2, "labels": {"kubeforge.io/test-fleet": f"{pool}-dp"}, "gpu": {"count": DRA_GPUS}},
    ]})
    nodes = node_manifests(f)
    cluster.apply_nodes(nodes)
    dra.install(cluster, nodes, log=lambda m: None, ready_delay=2.0)
    names = [n["metadata"]["name"] for n in nodes]
    apply(cluster, b.GPUPool(pool).selector({"matchLabels": {"kubeforge.io/test-fleet": pool}})
          .spec(deviceAllocation="DRA", dra={"deviceClassName": dra.GPU_CLASS, "driver": dra.GPU_DRIVER})
          .levels(("nvlink", "nvidia.com/gpu.clique")).manifest())
    apply(cluster, b.GPUPool(f"{pool}-dp").selector({"matchLabels": {"kubeforge.io/test-fleet": f"{pool}-dp"}}).manifest())
    cliques: dict[str, list[str]] = {}
    for n in nodes:
        if "-rack-" in n["metadata"]["name"]:
            cliques.setdefault(n["metadata"]["labels"]["nvidia.com/gpu.clique"], []).append(n["metadata"]["name"])
    yield {"rack": [n for n in names if "-rack-" in n], "dp": [n for n in names if "-dp-" in n], "pool": pool,
           "cliques": cliques}
    cluster.kubectl("delete", "gpupool", pool, f"{pool}-dp", "--ignore-not-found", "--wait=false", check=False)
    slices = [s["metadata"]["name"] for s in dra.slice_manifests(nodes)]
    cluster.kubectl("delete", "resourceslice", *slices, "--ignore-not-found", "--wait=false", check=False)
    cluster.kubectl("delete", "node", *names, "--ignore-not-found", "--wait=false", check=False)


@pytest.fixture
def fleet(cluster, namespace):
    """Make small fleets of kwok GPU nodes private to this test; returns a factory.

    ``fleet(cliques=2, nodes=2, gpus=8, blocks=1, spot=False, pool=None)`` creates nodes named
    ``<pool>-b<block>-c<clique>-<i>`` labelled ``kubeforge.io/test-fleet=<pool>``, with
    ``nvidia.com/gpu.clique`` and ``cloud.google.com/gce-topology-block`` labels, and a GPUPool
    named ``<pool>`` (default: the namespace's name) selecting exactly them. Returns the node
    names. Nodes and pools are deleted afterwards.
    """
    from kubeforge.sim.fleet import Fleet, node_manifests

    made: list[str] = []
    pools: list[str] = []

    def make(cliques: int = 2, nodes: int = 2, gpus: int = 8, blocks: int = 1, spot: bool = False,
             pool_spec: dict | None = None, pool: str | None = None) -> list[str]:
        pool = pool or namespace
        groups = []
        for blk in range(blocks):
            for c in range(cliques):
                groups.append({
                    "name": f"b{blk}-c{c}", "count": nodes, "capacityType": "spot" if spot else "on-demand",
                    "gpu": {"count": gpus},
                    "labels": {"kubeforge.io/test-fleet": pool, "nvidia.com/gpu.clique": f"{pool}.b{blk}c{c}",
                               "cloud.google.com/gce-topology-block": f"{pool}-b{blk}"},
                })
        f = Fleet.model_validate({"name": "test", "nodePrefix": f"{pool}-", "groups": groups})
        manifests = node_manifests(f)
        cluster.apply_nodes(manifests)
        names = [m["metadata"]["name"] for m in manifests]
        made.extend(names)
        wait_for(lambda: all(_node_ready(cluster, n) for n in names), timeout=60, what="kwok nodes Ready")
        apply(cluster, b.GPUPool(pool).selector({"matchLabels": {"kubeforge.io/test-fleet": pool}})
              .spec(**(pool_spec or {})).manifest())
        pools.append(pool)
        return names

    yield make
    if pools:
        cluster.kubectl("delete", "gpupool", *pools, "--ignore-not-found", "--wait=false", check=False)
    if made:
        cluster.kubectl("delete", "node", *made, "--ignore-not-found", "--wait=false", check=False)


def _node_ready(cluster, name: str) -> bool:
    out = cluster.kubectl("get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return out.stdout.strip() == "True"


TRAINER = {"spec": {"terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "trainer", "image": "example.com/train:1", "command": ["torchrun", "train.py"]}]}}
"""The cluster tests' trainer: torchrun in a container the sim runs, gone 5 s after a delete."""


def training_job(name: str, namespace: str, replicas: int = 2, gpus: int = 8, mode: str = "Required",
                 level: str | None = "nvlink", pools: list[str] | None = None, **spec) -> dict:
    """A TrainingJob manifest (:class:`builders.TrainingJob`, priority left to the API server's
    default) in ``pools`` (default: the pool named after the namespace); ``spec`` keys (camelCase)
    override or extend the spec."""
    return (b.TrainingJob(name).ns(namespace).priority(None).pools(*(pools or [namespace])).replicas(replicas)
            .gpus(gpus).topology(mode, level or None).template(TRAINER).spec(**spec).manifest())


def job_pods(cluster, namespace: str, job: str) -> list[dict]:
    return get_json(cluster, "pods", "-n", namespace, "-l", f"kubeforge.io/job-name={job}")["items"]


def job_status(cluster, namespace: str, job: str) -> dict:
    return get_json(cluster, "trainingjob", job, "-n", namespace).get("status") or {}


def condition(status: dict, type_: str) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def running_pods(cluster, namespace: str, job: str) -> list[dict]:
    return [p for p in job_pods(cluster, namespace, job)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def events_for(cluster, namespace: str, name: str) -> list[dict]:
    return get_json(cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")["items"]
