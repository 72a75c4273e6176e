"""Kueue objects and JobSets, as a Kueue + JobSet user writes them (plain dicts).

The names are Kueue's (``kueue.x-k8s.io/v1beta2``) and JobSet's (``jobset.x-k8s.io/v1alpha2``):
a Topology lists node labels from the widest level to the narrowest (the host last); a
ResourceFlavor selects the fleet's nodes and names the Topology (that turns on
TopologyAwareScheduling for it); a ClusterQueue holds a team's quota of that flavor (in a
cohort to lend and borrow, with a preemption policy); a LocalQueue in a namespace points at
it; a JobSet carries the LocalQueue in label ``kueue.x-k8s.io/queue-name`` and its pods ask
for a topology domain with ``kueue.x-k8s.io/podset-required-topology`` or
``-preferred-topology`` on the pod template.
"""

from __future__ import annotations

from ._kwok import KEEP_RUNNING

KUEUE = "kueue.x-k8s.io/v1beta2"
JOBSET = "jobset.x-k8s.io/v1alpha2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
KWOK_KEEP_RUNNING = {KEEP_RUNNING: "true"}
"""Pod annotation for the sim: kwok completes Running pods owned by a Job within a second (see
:mod:`e2e.peers._kwok`); with this annotation a JobSet's pods stay Running, like the benches' other
pods, so both sides hold their GPUs alike."""


def topology(name: str, levels: list[str]) -> dict:
    """A Topology; ``levels`` are node labels, widest first (``kubernetes.io/hostname`` is
    appended when missing, so pods are assigned to nodes)."""
    labels = list(levels) + ([] if levels and levels[-1] == HOSTNAME else [HOSTNAME])
    return {"apiVersion": KUEUE, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]}}


def resource_flavor(name: str, node_labels: dict[str, str], topology_name: str | None) -> dict:
    """A ResourceFlavor for the nodes with ``node_labels``; TAS when ``topology_name`` is set."""
    spec: dict = {"nodeLabels": dict(node_labels)}
    if topology_name:
        spec["topologyName"] = topology_name
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor: str, gpus: int, cohort: str | None = None, borrowing_limit: int | None = None,
                  reclaim_within_cohort: str = "Never", within_cluster_queue: str = "Never") -> dict:
    """A ClusterQueue with ``gpus`` nominal GPUs of ``flavor`` for every namespace.

    Args:
        name: its name.
        flavor: the ResourceFlavor.
        gpus: ``nominalQuota`` of ``nvidia.com/gpu``.
        cohort: ``cohortName`` (queues of one cohort lend their idle quota to each other).
        borrowing_limit: ``borrowingLimit`` (None: unlimited inside the cohort).
        reclaim_within_cohort: ``preemption.reclaimWithinCohort`` (Never, LowerPriority, Any).
        within_cluster_queue: ``preemption.withinClusterQueue`` (Never, LowerPriority,
            LowerOrNewerEqualPriority).
    """
    res: dict = {"name": GPU, "nominalQuota": gpus}
    if borrowing_limit is not None:
        res["borrowingLimit"] = borrowing_limit
    spec: dict = {"namespaceSelector": {},
                  "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": flavor, "resources": [res]}]}],
                  "preemption": {"reclaimWithinCohort": reclaim_within_cohort,
                                 "withinClusterQueue": within_cluster_queue}}
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict:
    """A LocalQueue ``name`` in ``namespace`` feeding ``cluster_queue_name``."""
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


def workload_priority_class(name: str, value: int) -> dict:
    """A WorkloadPriorityClass (Kueue's priority for workloads, apart from pod priority)."""
    return {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}


def jobset(name: str, namespace: str, replicas: int, gpus: int, queue: str, mode: str = "Preferred",
           level_label: str | None = None, labels: dict[str, str] | None = None,
           pod_labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
           priority_class: str | None = None, pod_annotations: dict[str, str] | None = None) -> dict:
    """A JobSet of one replicated Job: ``replicas`` indexed pods of ``gpus`` GPUs each, queued in
    LocalQueue ``queue`` (the same gang as a kubeforge TrainingJob of ``replicas`` x ``gpus``).

    Args:
        name, namespace: the JobSet's.
        replicas: pods of the gang (Job parallelism = completions, completionMode Indexed).
        gpus: ``nvidia.com/gpu`` requested and limited per pod.
        queue: the LocalQueue (label ``kueue.x-k8s.io/queue-name``).
        mode: ``Required`` / ``Preferred`` (the podset topology annotation at ``level_label``)
            or ``None`` (``podset-unconstrained-topology``).
        level_label: the node label of the topology level (e.g. ``nvidia.com/gpu.clique``).
        labels, annotations: extra metadata of the JobSet.
        pod_labels: labels of its pods (the bench finds a gang's pods by them).
        pod_annotations: extra annotations of its pods (e.g. :data:`KWOK_KEEP_RUNNING`).
        priority_class: a WorkloadPriorityClass name (label ``kueue.x-k8s.io/priority-class``).
    """
    if mode in ("Required", "Preferred") and not level_label:
        raise ValueError(f"topology mode {mode} needs a level label")
    topo = {"Required": {REQUIRED: level_label or ""}, "Preferred": {PREFERRED: level_label or ""}}.get(
        mode, {UNCONSTRAINED: "true"})
    md_labels = {QUEUE_LABEL: queue, **(labels or {})}
    if priority_class:
        md_labels[PRIORITY_LABEL] = priority_class
    pod = {"metadata": {"labels": dict(pod_labels or {}), "annotations": {**topo, **(pod_annotations or {})}},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "trainer", "image": "example.com/train:1", "command": ["torchrun", "train.py"],
                                    "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}}
    return {
        "apiVersion": JOBSET, "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": md_labels, "annotations": dict(annotations or {})},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "worker", "replicas": 1, "template": {"spec": {
            "parallelism": replicas, "completions": replicas, "completionMode": "Indexed", "backoffLimit": 0,
            "template": pod}}}]},
    }
