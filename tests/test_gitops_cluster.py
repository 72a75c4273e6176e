"""GitOps without drift: a GPUPool, a TrainingJob and an InferenceService applied server-side
under a GitOps controller's field manager (as Argo CD does with ``ServerSideApply=true``) stay
exactly as applied while the operator reconciles them. The API server is the judge: its
server-side dry-run diff, its conflict detection, its ``generation`` counter and its
``managedFields`` bookkeeping.
"""

from __future__ import annotations

import json

import pytest

import builders as b
from conftest import condition, get_json, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster

MANAGER = "argocd-controller"


def manifests(namespace: str) -> list[dict]:
    """The GitOps repository: the namespace's pool (the fleet's nodes), a 2 x 8 TrainingJob and
    1 to 2 one-GPU vLLM replicas, as a user writes them (no status, no server-set metadata)."""
    pool = b.GPUPool(namespace).selector({"matchLabels": {"kubeforge.io/test-fleet": namespace}}).manifest()
    job = training_job("llm", namespace, replicas=2, gpus=8)
    isvc = (b.InferenceService("chat").ns(namespace).without("topology").pools(namespace).gpus(1)
            # no Prometheus answers here: a closed loopback port fails fast (ScalingActive False)
            .spec(port=8000, minReplicas=1, maxReplicas=2,
                  autoscaling={"prometheusURL": "http://127.0.0.1:9", "pollingIntervalSeconds": 1})
            .template({"spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.4"}]}})
            .manifest())
    return [pool, job, isvc]


def as_stream(objs: list[dict]) -> str:
    return "\n---\n".join(json.dumps(o) for o in objs)


def live(cluster, obj: dict) -> dict:
    md = obj["metadata"]
    ns = ("-n", md["namespace"]) if md.get("namespace") else ()
    return get_json(cluster, f"{obj['kind'].lower()}.kubeforge.io", md["name"], *ns, "--show-managed-fields")


def test_operator_causes_no_drift_under_server_side_apply(cluster, namespace, fleet):
    fleet(cliques=1, nodes=3, gpus=8)  # nodes; the pool below replaces the fixture's own
    cluster.kubectl("delete", "gpupool", namespace)
    objs = manifests(namespace)
    # Two sync waves, pool + job then the service: a serving replica created in the same
    # instant as the gang could be scheduled onto a node the gang was just placed on (a race
    # between placement and kube-scheduler that is not what this test is about).
    out = cluster.kubectl("apply", "--server-side", f"--field-manager={MANAGER}", "-f", "-", input=as_stream(objs[:2]))
    assert out.stdout.count("serverside-applied") == 2, out.stdout
    wait_for(lambda: len(running_pods(cluster, namespace, "llm")) == 2, timeout=60, what="2 running workers")
    out = cluster.kubectl("apply", "--server-side", f"--field-manager={MANAGER}", "-f", "-", input=as_stream(objs))
    assert out.stdout.count("serverside-applied") == 3, out.stdout

    # the operator reconciles: the job runs, the service and the pool get a status
    wait_for(lambda: (live(cluster, objs[1]).get("status") or {}).get("phase") == "Running", timeout=30,
             what="TrainingJob status Running")
    wait_for(lambda: condition(live(cluster, objs[2]).get("status") or {}, "ScalingActive"), timeout=60,
             what="InferenceService status with conditions")
    wait_for(lambda: (live(cluster, objs[0]).get("status") or {}).get("gpus", {}).get("allocated", 0) >= 16,
             timeout=30, what="GPUPool status counting the job's GPUs")
    before = {o["kind"]: live(cluster, o) for o in objs}

    # (a) the GitOps tool's view: no diff between git and the cluster
    diff = cluster.kubectl("diff", "--server-side", f"--field-manager={MANAGER}", "-f", "-",
                           input=as_stream(objs), check=False)
    assert diff.returncode == 0, f"drift (exit {diff.returncode}):\n{diff.stdout}\n{diff.stderr}"

    # (b) a re-sync: no conflict without --force-conflicts, and nothing changes
    again = cluster.kubectl("apply", "--server-side", f"--field-manager={MANAGER}", "-f", "-",
                            input=as_stream(objs), check=False)
    assert again.returncode == 0 and "conflict" not in again.stderr.lower(), again.stderr
    for o in objs:
        after = live(cluster, o)
        assert after["metadata"]["generation"] == before[o["kind"]]["metadata"]["generation"] == 1, o["kind"]
        assert after["spec"] == before[o["kind"]]["spec"], o["kind"]

    for o in objs:
        obj = live(cluster, o)
        md, kind = obj["metadata"], o["kind"]
        entries = md["managedFields"]
        # (c) the GitOps manager owns the spec; everyone else (the operator) owns only status,
        # written through the status subresource
        mine = [e for e in entries if e["manager"] == MANAGER]
        assert [(e["operation"], e.get("subresource")) for e in mine] == [("Apply", None)], (kind, mine)
        assert "f:spec" in mine[0]["fieldsV1"], kind
        others = [e for e in entries if e["manager"] != MANAGER]
        assert others, f"{kind}: the operator wrote no status at all"
        for e in others:
            assert e.get("subresource") == "status" and set(e["fieldsV1"]) == {"f:status"}, (kind, e)
        # (d) the operator added no finalizers and no annotations (no kopf progress/diff-base
        # storage, no finalizer: children are garbage-collected through ownerReferences)
        assert not md.get("finalizers"), (kind, md.get("finalizers"))
        assert not md.get("annotations"), (kind, md.get("annotations"))
        assert set(md.get("labels") or {}) <= set(o["metadata"].get("labels") or {}), (kind, md.get("labels"))
