"""The shared object model (kubeforge.objects): the one interruption predicate, the one pod
model read from a Kubernetes Pod, kube-scheduler's request rule, and the one definition of a
job's current attempt. Ported from test_lifecycle.py (pod_view, interruption_reason,
restart_attempt), plus the rules new in the rewrite."""

from __future__ import annotations

import pytest

from kubeforge.objects import (
    ADMISSION_GATE, GANG_GATE, Node, Taint, current_attempt, interruption_reason, is_terminal, node_from_k8s,
    not_ready_wait, placement_of, pod_from_k8s, pod_requests,
)

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NAME = "llm"


# --------------------------------------------------------------------------- interruption_reason


@pytest.mark.parametrize(
    "node, expected",
    [
        (None, "node n deleted"),
        (Node("n"), None),
        (Node("n", ready=False, ready_changed=None), None),
        (Node("n", ready=False, ready_changed=NOW - 10), None),
        (Node("n", ready=False, ready_changed=NOW - 60), "NotReady for 60s"),  # the grace itself: lost
        (Node("n", ready=False, ready_changed=NOW - 120), "NotReady"),
        (Node("n", ready=True, ready_changed=NOW - 120), None),
        (Node("n", taints=(Taint("karpenter.sh/disrupted", effect="NoSchedule"),)), "karpenter.sh/disrupted"),
        (Node("n", taints=(Taint("aws-node-termination-handler/spot-itn", effect="NoExecute"),)), "spot-itn"),
        (Node("n", taints=(Taint("cloud.google.com/impending-node-termination", effect="PreferNoSchedule"),)),
         "impending-node-termination"),  # whatever its effect
        (Node("n", taints=(Taint("node.kubernetes.io/out-of-service", effect="NoExecute"),)), "out-of-service"),
        (Node("n", taints=(Taint("node.kubernetes.io/not-ready"),)), None),
        (Node("n", taints=(Taint("node.kubernetes.io/unschedulable"),), unschedulable=True), None),  # cordoned only
    ],
)
def test_interruption_reason(node, expected):
    got = interruption_reason(node, "n", NOW, 60.0)
    if expected is None:
        assert got is None
    else:
        assert got is not None and expected in got


@pytest.mark.parametrize(
    "node, expected",
    [(Node("n"), None), (Node("n", ready=False), None), (Node("n", ready=False, ready_changed=NOW - 20), 40.0),
     (Node("n", ready=False, ready_changed=NOW - 90), -30.0)],
)
def test_not_ready_wait(node, expected):
    assert not_ready_wait(node, NOW, 60.0) == expected


def test_node_from_k8s():
    n = node_from_k8s({
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.clique": "c1"}},
        "spec": {"unschedulable": True, "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2027-01-15T07:59:00Z"}],
                   "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "example.com/bad": "1.5"},
                   "capacity": {"nvidia.com/gpu": 8}},
    })
    assert (n.name, n.unschedulable, n.ready, n.ready_changed) == ("gpu-1", True, False, NOW - 60)
    assert n.labels == {"nvidia.com/gpu.clique": "c1"}
    assert n.taints == (Taint("karpenter.sh/disrupted", "", "NoSchedule"),)
    # cpu in millicores (so a replica asking more than any node offers is refused up front)
    assert n.allocatable == {"nvidia.com/gpu": 8, "cpu": 96000, "example.com/bad": 0}
    assert n.capacity == {"nvidia.com/gpu": 8}
    assert interruption_reason(n, n.name, NOW) is not None
    empty = node_from_k8s({})
    assert (empty.name, empty.ready, empty.taints) == ("", False, ())


# --------------------------------------------------------------------------- current_attempt, placement_of


@pytest.mark.parametrize(
    "status, expected",
    [
        (None, 0), ({}, 0), ({"restarts": {}}, 0), ({"restarts": {"failures": 2}}, 2),
        ({"restarts": {"failures": 2, "preemptions": 3}}, 5),
        # new: status.attempt is the one definition; the sum is only for statuses written before it
        ({"attempt": 7, "restarts": {"failures": 2, "preemptions": 3}}, 7),
        ({"attempt": 0, "restarts": {"failures": 2, "preemptions": 3}}, 0),
        ({"attempt": None, "restarts": {"failures": 1, "preemptions": 1}}, 2),
        # startup failures never were part of the legacy sum
        ({"restarts": {"failures": 1, "preemptions": 1, "startupFailures": 4}}, 2),
    ],
)
def test_current_attempt(status, expected):
    assert current_attempt(status) == expected


@pytest.mark.parametrize(
    "status, expected",
    [
        (None, None), ({}, None), ({"placement": None}, None), ({"placement": {"pool": "p", "nodes": []}}, None),
        ({"placement": {"pool": "p", "nodes": ["a", "b"], "level": "nvlink", "domain": "d", "reason": "fit",
                        "admittedAt": "2027-01-15T08:00:00Z", "specHash": "h"}},
         ("p", ("a", "b"), "nvlink", "d", "fit")),
    ],
)
def test_placement_of(status, expected):
    pl = placement_of(status)
    if expected is None:
        assert pl is None
    else:
        assert (pl.pool, pl.nodes, pl.level, pl.domain, pl.reason) == expected


# --------------------------------------------------------------------------- pod_from_k8s


def k8s_pod(rank=1, attempt=2, phase="Running", conditions=(), container_statuses=(), gates=None,
            deleting=False, containers=("trainer",), **extra_status):
    p = {
        "metadata": {"name": f"{NAME}-worker-{rank}-{attempt}", "namespace": "team-a",
                     "labels": {"kubeforge.io/replica-index": str(rank), "kubeforge.io/restart-attempt": str(attempt)}},
        "spec": {"nodeName": "n1", "containers": [{"name": c, "image": "i"} for c in containers]},
        "status": {"phase": phase, "conditions": list(conditions), "containerStatuses": list(container_statuses),
                   **extra_status},
    }
    if gates:
        p["spec"]["schedulingGates"] = gates
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    return p


def test_pod_from_k8s_basic_fields():
    v = pod_from_k8s(k8s_pod(conditions=[{"type": "Ready", "status": "True"}]))
    assert (v.namespace, v.name, v.rank, v.attempt, v.phase, v.node) == ("team-a", f"{NAME}-worker-1-2", 1, 2, "Running", "n1")
    assert v.ready and not v.gated and not v.deleting and v.disruption is None and v.exit_code is None
    assert v.where == "n1" and not v.terminal and not is_terminal(v)


def test_pod_from_k8s_gate_deletion_and_disruption():
    v = pod_from_k8s(k8s_pod(phase="Pending", gates=[{"name": GANG_GATE}], deleting=True,
                             conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"},
                                         {"type": "Ready", "status": "False"}]))
    assert v.gated and v.gates == (GANG_GATE,) and v.deleting and not v.ready
    assert v.disruption == "PreemptionByScheduler"
    v = pod_from_k8s(k8s_pod(conditions=[{"type": "DisruptionTarget", "status": "False", "reason": "X"}]))
    assert v.disruption is None
    v = pod_from_k8s(k8s_pod(conditions=[{"type": "DisruptionTarget", "status": "True"}]))
    assert v.disruption == "DisruptionTarget"


def test_pod_from_k8s_reads_gpu_container_termination():
    cs = [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "message": "sidecar"}}},
        {"name": "trainer", "state": {"terminated": {"exitCode": 3, "message": '{"step": 5, "path": "/c/5"}'}}},
    ]
    v = pod_from_k8s(k8s_pod(phase="Failed", container_statuses=cs, containers=("sidecar", "trainer")))
    assert v.exit_code == 3 and v.message == '{"step": 5, "path": "/c/5"}'
    assert v.terminal and is_terminal(v)
    v = pod_from_k8s(k8s_pod(phase="Failed", container_statuses=list(reversed(cs)), containers=("sidecar", "trainer")))
    assert v.exit_code == 3 and v.message == '{"step": 5, "path": "/c/5"}'


def test_pod_from_k8s_does_not_take_sidecar_message_for_gpu_container():
    cs = [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0, "message": '{"step": 999, "path": "/side"}'}}},
        {"name": "trainer", "state": {"terminated": {"exitCode": 1}}},
    ]
    v = pod_from_k8s(k8s_pod(phase="Failed", container_statuses=cs, containers=("sidecar", "trainer")))
    assert v.exit_code == 1
    assert v.message is None


def test_pod_from_k8s_defaults_on_empty_pod():
    v = pod_from_k8s({})
    assert (v.name, v.rank, v.attempt, v.phase) == ("", 0, 0, "Pending")
    assert (v.node, v.assigned, v.job, v.service, v.pool, v.reason, v.waiting) == (None,) * 7
    assert v.requests == {} and v.created == 0.0 and not v.annotated and v.affinity is None


def test_pod_from_k8s_bad_labels_count_as_zero():
    p = k8s_pod()
    p["metadata"]["labels"] = {"kubeforge.io/replica-index": "x", "kubeforge.io/restart-attempt": ""}
    v = pod_from_k8s(p)
    assert (v.rank, v.attempt) == (0, 0)


def test_pod_from_k8s_new_fields():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}
    body = {
        "metadata": {"name": "chat-abc", "namespace": "ml", "creationTimestamp": "2027-01-15T07:00:00Z",
                     "labels": {"kubeforge.io/job-name": "j", "kubeforge.io/inference-service": "chat",
                                "kubeforge.io/pool": "h100"},
                     "annotations": {"kubeforge.io/assigned-node": "gpu-7"}},
        "spec": {"schedulingGates": [{"name": ADMISSION_GATE}], "affinity": affinity,
                 "containers": [{"name": "vllm", "image": "v", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Failed", "reason": "OutOfnvidia.com/gpu",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                   "message": "0/4 nodes are available", "lastTransitionTime": "2027-01-15T07:59:30Z"}]},
    }
    v = pod_from_k8s(body)
    assert (v.namespace, v.job, v.service, v.pool, v.assigned) == ("ml", "j", "chat", "h100", "gpu-7")
    assert v.node is None and v.where == "gpu-7"
    assert v.reason == "OutOfnvidia.com/gpu"
    assert v.unschedulable_since == NOW - 30 and v.unschedulable_message == "0/4 nodes are available"
    assert v.created == NOW - 3600
    assert v.requests == {"nvidia.com/gpu": 2}
    assert v.annotated and v.affinity == affinity  # kept for a pod behind the admission gate
    assert v.gates == (ADMISSION_GATE,)
    # the affinity is kept only for pods the admission round will narrow
    body["spec"]["schedulingGates"] = [{"name": GANG_GATE}]
    assert pod_from_k8s(body).affinity is None


@pytest.mark.parametrize(
    "statuses, init_statuses, expected",
    [
        ([{"name": "trainer", "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}], [],
         "ErrImagePull: not found"),
        ([{"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff"}}}], [], "ImagePullBackOff"),
        ([{"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}}}], [], None),  # not stuck
        ([{"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}],
         [{"name": "init", "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "no secret"}}}],
         "CreateContainerConfigError: no secret"),
        ([{"name": "trainer", "state": {"running": {}}}], [], None),
        ([{"name": "trainer", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "x" * 2000}}}], [],
         "CrashLoopBackOff: " + "x" * 512),
    ],
)
def test_pod_from_k8s_stuck_waiting_reason(statuses, init_statuses, expected):
    v = pod_from_k8s(k8s_pod(phase="Pending", container_statuses=statuses, initContainerStatuses=init_statuses))
    assert v.waiting == expected


def test_pod_from_k8s_last_state_termination_and_unschedulable_other_reasons():
    cs = [{"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}},
           "lastState": {"terminated": {"exitCode": 137, "message": "oom"}}}]
    v = pod_from_k8s(k8s_pod(container_statuses=cs))
    assert (v.exit_code, v.message) == (137, "oom")
    # PodScheduled=False for a reason other than Unschedulable (e.g. SchedulingGated) is not "unschedulable"
    v = pod_from_k8s(k8s_pod(phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "lastTransitionTime": "2027-01-15T07:00:00Z"}]))
    assert v.unschedulable_since is None and v.unschedulable_message is None


# --------------------------------------------------------------------------- pod_requests


def c(name="c", limits=None, requests=None, restart=None):
    out = {"name": name, "image": "i", "resources": {}}
    if limits is not None:
        out["resources"]["limits"] = limits
    if requests is not None:
        out["resources"]["requests"] = requests
    if restart:
        out["restartPolicy"] = restart
    return out


G = "nvidia.com/gpu"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({}, {}),
        ({"containers": [c()]}, {}),
        ({"containers": [c(limits={G: "8"})]}, {G: 8}),                        # requests default to limits
        ({"containers": [c(limits={G: "8"}, requests={G: "4"})]}, {G: 4}),     # an explicit request wins
        ({"containers": [c(limits={G: 2}), c(requests={G: "3"})]}, {G: 5}),    # app containers add up
        ({"containers": [c(limits={G: "1", "cpu": "4", "memory": "1Gi"})]}, {G: 1}),  # only extended resources
        ({"containers": [c(limits={G: "0", "amd.com/gpu": "1"})]}, {"amd.com/gpu": 1}),  # zeros dropped
        ({"containers": [c(limits={"example.com/foo": "2k"})]}, {"example.com/foo": 2000}),
        ({"containers": [c(limits={G: "abc"})]}, {}),                          # malformed: 0, never raises
        # init containers run one at a time: the largest counts, not the sum
        ({"containers": [c(limits={G: "2"})], "initContainers": [c(limits={G: "4"}), c(limits={G: "3"})]}, {G: 4}),
        ({"containers": [c(limits={G: "8"})], "initContainers": [c(limits={G: "4"})]}, {G: 8}),
        # a sidecar (restartPolicy Always) runs beside the app containers: added
        ({"containers": [c(limits={G: "2"})], "initContainers": [c(limits={G: "1"}, restart="Always")]}, {G: 3}),
        # an init container after a sidecar runs beside it: 4 + 1 = 5 > 2 + 1
        ({"containers": [c(limits={G: "2"})],
          "initContainers": [c(limits={G: "1"}, restart="Always"), c(limits={G: "4"})]}, {G: 5}),
        # the same init container before the sidecar: only its own 4 (> 2 + 1)
        ({"containers": [c(limits={G: "2"})],
          "initContainers": [c(limits={G: "4"}), c(limits={G: "1"}, restart="Always")]}, {G: 4}),
        # two sidecars, then an init container: 1 + 2 + 3 = 6 against 1 + 1 + 2 = 4
        ({"containers": [c(limits={G: "1"})],
          "initContainers": [c(limits={G: "1"}, restart="Always"), c(limits={G: "2"}, restart="Always"),
                             c(limits={G: "3"})]}, {G: 6}),
        # per resource: the max is taken name by name
        ({"containers": [c(limits={G: "2", "amd.com/gpu": "1"})], "initContainers": [c(limits={"amd.com/gpu": "3"})]},
         {G: 2, "amd.com/gpu": 3}),
    ],
)
def test_pod_requests_follow_the_scheduler(spec, expected):
    assert pod_requests(spec) == expected
