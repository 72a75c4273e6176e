"""Label, annotation and scheduling-gate names kubeforge puts on the objects it makes.

Our own prefix ``kubeforge.io/``, in the shapes JobSet and Kubeflow use
(``jobset.sigs.k8s.io/job-index``, ``training.kubeflow.org/replica-index``).
"""

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "kubeforge"
JOB_NAME = "kubeforge.io/job-name"
REPLICA_INDEX = "kubeforge.io/replica-index"
RESTART_ATTEMPT = "kubeforge.io/restart-attempt"
SERVICE_NAME = "kubeforge.io/inference-service"
POOL_LABEL = "kubeforge.io/pool"
ROLE_LABEL = "kubeforge.io/role"
WORKER_ROLE = "worker"
ADMISSION_GATE = "kubeforge.io/admission"
"""Scheduling gate on InferenceService replicas: the admission round lifts it once it has
given the replica a node from the GPU ledger."""
ASSIGNED_NODE = "kubeforge.io/assigned-node"
"""Annotation: the node kubeforge chose for a pod; the ledger counts the pod's GPUs there
from the moment the pod exists, before kube-scheduler binds it."""
TEMPLATE_HASH = "kubeforge.io/template-hash"
"""Annotation on a Deployment: hash of the pod template kubeforge last wrote, so a spec edit
is rolled out once and nothing else is rewritten."""
GANG_GATE = "kubeforge.io/gang"
"""Scheduling gate of TrainingJob workers made by kubeforge 0.1 (created gated, ungated
together). Workers are now created already placed and ungated; a worker still carrying this
gate (made before an upgrade) has it lifted."""
GROUP_INDEX = "kubeforge.io/group-index"
"""Label on an InferenceService's pods: the replica group they belong to (LeaderWorkerSet's
``leaderworkerset.sigs.k8s.io/group-index``; ours, so LWS's pod webhook leaves them alone)."""
WORKER_INDEX = "kubeforge.io/worker-index"
"""Label on an InferenceService's pods: their index inside the group, 0 for the leader
(LeaderWorkerSet's ``leaderworkerset.sigs.k8s.io/worker-index``)."""
GROUP_ROLE = "kubeforge.io/group-role"
"""Label on an InferenceService's pods: ``leader`` or ``worker``."""
LEADER_ROLE = "leader"
VOLUME_GATE = "kubeforge.io/checkpoint-claim"
"""Scheduling gate of TrainingJob workers created while the gang's own checkpoint claim, of a
StorageClass that binds immediately, is not Bound yet: the pods exist as soon as the placement
is written (the claim is created in the same step), and kube-scheduler, which would only
refuse them ("unbound immediate PersistentVolumeClaims") and back them off, sees them once the
claim is Bound and the operator lifts the gate."""
