"""Smoke tests of the peers the benches compare with, run for real on the sim's control plane.

So that the baselines cannot rot silently: Kueue (TopologyAwareScheduling) + JobSet admit a
gang and its pods bind inside one NVLink domain, and refuse (keep pending) a gang that no
domain can hold; LeaderWorkerSet creates a group of two pods that bind, inside one domain with
``exclusive-topology``. Skipped, with the command that builds them, when the peers are not
built (``make test-peers`` builds them and runs these).
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import apply, get_json, wait_for

from e2e.peers import BUILD_HINT, peers_bin

pytestmark = [pytest.mark.cluster, pytest.mark.peers,
              pytest.mark.skipif(peers_bin() is None, reason=BUILD_HINT)]

CLIQUE = "nvidia.com/gpu.clique"
BLOCK = "cloud.google.com/gce-topology-block"
JOBSET_POD = "jobset.sigs.k8s.io/jobset-name"


@pytest.fixture(scope="module")
def kueue(cluster):
    """JobSet and Kueue running against the session's cluster for this module."""
    from e2e.peers.stack import start_jobset, start_kueue, stop_peers

    start_jobset(cluster)
    start_kueue(cluster)
    yield cluster
    stop_peers(cluster)


def _workload(cluster, ns: str, jobset: str) -> dict | None:
    for wl in get_json(cluster, "workloads.kueue.x-k8s.io", "-n", ns)["items"]:
        if any(o.get("kind") == "JobSet" and o.get("name") == jobset for o in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def _cond(obj: dict | None, type_: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _bound(cluster, ns: str, selector: str) -> list[dict]:
    return [p for p in get_json(cluster, "pods", "-n", ns, "-l", selector)["items"] if p["spec"].get("nodeName")]


def test_kueue_with_tas_admits_a_gang_inside_one_nvlink_domain(kueue, namespace, fleet, capsys):
    from e2e.peers import queues

    cluster = kueue
    nodes = fleet(cliques=2, nodes=2, gpus=8)  # 2 NVLink domains of 2 nodes x 8 GPUs
    clique_of = {n: get_json(cluster, "node", n)["metadata"]["labels"][CLIQUE] for n in nodes}
    name = f"tas-{namespace}"
    try:
        for o in (queues.topology(name, [BLOCK, CLIQUE]),
                  queues.resource_flavor(name, {"kubeforge.io/test-fleet": namespace}, name),
                  queues.cluster_queue(name, name, 32), queues.local_queue(namespace, "q", name)):
            apply(cluster, o)
        wait_for(lambda: _cond(get_json(cluster, "clusterqueue", name), "Active").get("status") == "True",
                 timeout=60, what="ClusterQueue Active")
        t0 = time.monotonic()
        apply(cluster, queues.jobset("fits", namespace, 2, 8, "q", "Required", CLIQUE,
                                     pod_annotations=queues.KWOK_KEEP_RUNNING))
        wait_for(lambda: len(_bound(cluster, namespace, f"{JOBSET_POD}=fits")) == 2, timeout=90,
                 what="the JobSet's 2 pods bound")
        took = time.monotonic() - t0
        pods = _bound(cluster, namespace, f"{JOBSET_POD}=fits")
        domains = {clique_of[p["spec"]["nodeName"]] for p in pods}
        assert len(domains) == 1, domains  # TAS kept the gang inside one NVLink domain
        wl = _workload(cluster, namespace, "fits")
        assert _cond(wl, "Admitted").get("status") == "True", wl
        assert wl["status"]["admission"]["podSetAssignments"][0].get("topologyAssignment"), wl["status"]["admission"]

        # 3 x 8 GPUs fit the quota (32) but no NVLink domain (2 nodes each): TAS must not admit it.
        apply(cluster, queues.jobset("too-wide", namespace, 3, 8, "q", "Required", CLIQUE,
                                     pod_annotations=queues.KWOK_KEEP_RUNNING))
        wait_for(lambda: _cond(_workload(cluster, namespace, "too-wide"), "QuotaReserved").get("status") == "False",
                 timeout=60, what="Kueue to evaluate the 3-pod gang")
        time.sleep(3)
        wl = _workload(cluster, namespace, "too-wide")
        assert _cond(wl, "Admitted").get("status") != "True", wl["status"]
        assert not _bound(cluster, namespace, f"{JOBSET_POD}=too-wide")
        with capsys.disabled():
            print(f"\n[peers] Kueue + JobSet: 2x8 gang bound in {took:.1f}s inside {domains.pop()}; 3x8 Required gang "
                  f"pending: {_cond(wl, 'QuotaReserved').get('message', '')[:160]}")
    finally:
        cluster.kubectl("delete", "jobsets.jobset.x-k8s.io", "--all", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "localqueue", "q", "-n", namespace, "--wait=false", check=False)
        cluster.kubectl("delete", "clusterqueue,resourceflavor,topology", name, "--ignore-not-found", "--wait=false",
                        check=False)


def test_leaderworkerset_of_two_binds_inside_one_domain(cluster, namespace, fleet, capsys):
    from e2e.peers import lws

    nodes = fleet(cliques=2, nodes=2, gpus=8)
    clique_of = {n: get_json(cluster, "node", n)["metadata"]["labels"][CLIQUE] for n in nodes}
    lws.install(cluster)
    try:
        t0 = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(lws.leader_worker_set(
            "llm", namespace, size=2, gpus=8, exclusive_topology=CLIQUE,
            node_selector={"kubeforge.io/test-fleet": namespace})))
        pods = lws.wait_for_pods(cluster, namespace, "llm", count=2, timeout=90)
        took = time.monotonic() - t0
        assert len(pods) == 2
        idx = sorted((p["metadata"]["labels"][lws.GROUP_INDEX_LABEL], p["metadata"]["labels"][lws.WORKER_INDEX_LABEL])
                     for p in pods)
        assert idx == [("0", "0"), ("0", "1")], idx  # one group: the leader and one worker
        domains = {clique_of.get(p["spec"]["nodeName"]) for p in pods}
        assert len(domains) == 1 and None not in domains, domains
        with capsys.disabled():
            print(f"\n[peers] LeaderWorkerSet size 2 bound in {took:.1f}s inside {domains.pop()}")
    finally:
        cluster.kubectl("delete", "leaderworkersets.leaderworkerset.x-k8s.io", "--all", "-n", namespace,
                        "--wait=false", check=False)
        lws.uninstall(cluster)
