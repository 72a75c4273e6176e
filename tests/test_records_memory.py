"""What keeps the operator's memory per pod small (issue 16's 250 MiB at 20,000 pods): pod records
share one copy of their namespace, node, job and phase strings and of their request dict, and the
informer's store keeps per object only the keys it put."""

from __future__ import annotations

import json

from kubeforge.objects import pod_from_k8s
from kubeforge.runtime.informer import IndexStore


def _pod(i: int) -> dict:
    return json.loads(json.dumps({
        "metadata": {"name": f"j-{i}", "namespace": "team-a", "labels": {"kubeforge.io/job-name": "j"}},
        "spec": {"nodeName": "node-0001", "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running"},
    }))  # through JSON, as a watch event arrives: every string a fresh object


def test_pods_share_their_strings_and_requests():
    a, b = pod_from_k8s(_pod(0)), pod_from_k8s(_pod(1))
    assert a.namespace is b.namespace and a.node is b.node and a.job is b.job and a.phase is b.phase
    assert a.requests is b.requests and a.requests == {"nvidia.com/gpu": 8}
    assert a.name != b.name and a == pod_from_k8s(_pod(0))


def test_store_returns_what_a_dropped_object_held_and_forgets_it():
    s = IndexStore()
    s.put(("ns", "p"), {("node", "n1"): "x", ("job", "ns", "j"): "x"})
    s.put(("ns", "q"), {("node", "n1"): "y"})
    assert s.drop(("ns", "p")) == {("node", "n1"): "x", ("job", "ns", "j"): "x"}
    assert s.drop(("ns", "p")) is None and s.get(("node", "n1")) == ("y",) and ("job", "ns", "j") not in s
