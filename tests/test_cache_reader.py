"""kubeforge.runtime.cache_reader.IndexReader on its own, over indexes shaped as kopf's
(index name -> key -> store of values): typed reads, empty before attach, copies handed out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kubeforge.runtime.cache_reader import IndexReader

J = ("ns", "a")
POD_J, POD_S, POD_N = SimpleNamespace(name="a-0"), SimpleNamespace(name="s-0"), SimpleNamespace(name="x")
CD1, CD2, CD3 = (SimpleNamespace(name="cd1", job="a"), SimpleNamespace(name="cd2", job="b"),
                 SimpleNamespace(name="cd3", job="a"))
INDEXES = {
    "kf_jobs": {J: ["job-a"], ("ns", "b"): ["job-b"]},
    "kf_services": {J: ["svc-a"]},
    "kf_pools": {"h100": ["pool-h100"], "a100": ["pool-a100"]},
    "kf_nodes": {"n1": ["node-1"], "n2": ["node-2"]},
    "kf_pods": {("job",) + J: [POD_J], ("svc",) + J: [POD_S], ("node", "n1"): [POD_N, POD_J], ("job", "ns", "b"): []},
    "kf_deployments": {J: ["dep-a"]},
    "kf_claims": {("ns", "a-checkpoint"): [("Bound", "standard")], ("ns", "c"): [("Pending", "fast")]},
    "kf_storage_classes": {"standard": ["WaitForFirstConsumer"], "fast": ["Immediate"]},
    "kf_namespaces": {"gone": [True]},
    "kf_resource_claims": {("ns", "rc"): ["claim-rc"]},
    "kf_compute_domains": {("ns", "cd1"): [CD1], ("ns", "cd2"): [CD2], ("other", "cd3"): [CD3]},
    "kf_slices": {"s1": ["slice-1"], "s2": ["slice-2"]},
}

READS = [
    ("job", (J,), "job-a", None),
    ("job", (("ns", "zz"),), None, None),
    ("service", (J,), "svc-a", None),
    ("pool", ("h100",), "pool-h100", None),
    ("node", ("n2",), "node-2", None),
    ("deployment", (J,), "dep-a", None),
    ("claim", (("ns", "a-checkpoint"),), ("Bound", "standard"), None),
    ("binding_mode", ("fast",), "Immediate", None),
    ("binding_mode", ("slow",), None, None),
    ("namespace_terminating", ("gone",), True, False),
    ("namespace_terminating", ("ns",), False, False),
    ("resource_claim", (("ns", "rc"),), "claim-rc", None),
    ("compute_domain", (("ns", "cd2"),), CD2, None),
    ("job_pods", (J,), [POD_J], []),
    ("job_pods", (("ns", "b"),), [], []),
    ("service_pods", (J,), [POD_S], []),
    ("node_pods", (), [POD_N, POD_J], []),
    ("services", (), {J: "svc-a"}, {}),
    ("pools", (), {"h100": "pool-h100", "a100": "pool-a100"}, {}),
    ("nodes", (), {"n1": "node-1", "n2": "node-2"}, {}),
    ("storage_classes", (), frozenset({"standard", "fast"}), frozenset()),
    ("claim_phases", (), {("ns", "a-checkpoint"): "Bound", ("ns", "c"): "Pending"}, {}),
    ("terminating_namespaces", (), frozenset({"gone"}), frozenset()),
    ("resource_claims", (), ["claim-rc"], []),
    ("job_compute_domains", (J,), [CD1], []),
]


def _plain(value):
    return list(value) if hasattr(value, "__next__") else value


@pytest.mark.parametrize("method, args, attached, before", READS, ids=[f"{m}{a}" for m, a, _, _ in READS])
def test_reads(method, args, attached, before):
    r = IndexReader()
    assert _plain(getattr(r, method)(*args)) == before  # nothing attached: nothing found
    r.attach(INDEXES)
    assert _plain(getattr(r, method)(*args)) == attached


@pytest.mark.parametrize("method, want", [("jobs", ["job-a", "job-b"]), ("slices", ["slice-1", "slice-2"])])
def test_iterations(method, want):
    r = IndexReader()
    assert list(getattr(r, method)()) == []
    r.attach(INDEXES)
    assert list(getattr(r, method)()) == want


@pytest.mark.parametrize("method, args, want", [
    ("job", (J,), None), ("job_pods", (J,), []), ("pools", (), {}), ("claim_phases", (), {}),
    ("terminating_namespaces", (), frozenset()), ("job_compute_domains", (J,), []),
])
def test_an_index_not_attached_reads_as_empty(method, args, want):
    r = IndexReader()
    r.attach({"kf_pods": {}})
    assert getattr(r, method)(*args) == want


def test_what_is_handed_out_is_a_copy():
    store = {("job",) + J: [POD_J]}
    r = IndexReader()
    r.attach({"kf_pods": store})
    r.job_pods(J).append(POD_S)
    assert store[("job",) + J] == [POD_J]
    pods = r.node_pods()
    store[("node", "n9")] = [POD_N]  # a watch event lands: what was read does not change
    assert pods == []


def test_an_iteration_survives_the_index_changing_under_it():
    jobs = {("ns", k): [k] for k in "abc"}
    r = IndexReader()
    r.attach({"kf_jobs": jobs})
    seen = []
    for rec in r.jobs():
        seen.append(rec)
        jobs.pop(("ns", "c"), None)  # kopf changes an index between two awaits
    assert seen == ["a", "b"]
