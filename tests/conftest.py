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
    c.up(None, log=lambda m: print(f"[cluster] {m}"))
    c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
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


@pytest.fixture
def namespace(cluster):
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
             timeout=30, what="default ServiceAccount")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def k8s(cluster):
    from kubernetes import client, config

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
