"""The names and labels of the objects kubeforge makes for its jobs and services, pure.

One home for the naming rules, so the layers that decide (admission looks up a job's checkpoint
claim, the lifecycle its ComputeDomain, serving its group pods) and the builders that make the
objects agree on every name without the deciding layers importing the builders.

TrainingJob children: the checkpoint claim (and, in the other checkpoint modes, the claim or the
object-store prefix the job's checkpoints go to), the worker pods and their stable hostnames, the
rendezvous address, the DRA claim templates and the ComputeDomain. InferenceService children:
the group pods and hostnames, the leader's address, the EndpointSlice. Both kinds' pods share the
namespace's headless Service :data:`WORKERS_SERVICE`.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from kubeforge.api import Checkpoint, CheckpointMode
from kubeforge.objects._labels import JOB_NAME, MANAGED_BY, MANAGER, SERVICE_NAME

WORKERS_SERVICE = "kubeforge-workers"
"""The headless Service, one per namespace, whose name is every worker's ``subdomain``."""
MAX_HOSTNAME = 63
"""The longest pod hostname (a DNS label), characters."""


def _short(text: str, n: int = 6) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


# --- TrainingJob ---------------------------------------------------------------------------------


def job_labels(job_name: str) -> dict[str, str]:
    """Labels every child of a job carries (selectors use the job-name one)."""
    return {MANAGED_BY: MANAGER, JOB_NAME: job_name}


def pvc_name(job_name: str) -> str:
    """The checkpoint PVC the operator creates for a job: ``<job>-checkpoint``."""
    return f"{job_name}-checkpoint"


def owns_checkpoint_claim(checkpoint: Checkpoint) -> bool:
    """Whether kubeforge makes the job's checkpoint claim (:func:`pvc_name`; and deletes it with
    the job under ``deletionPolicy: Delete``): mode ClaimPerJob without ``existingClaimName``. In
    every other case the claim, if any, is the user's, and kubeforge never deletes it."""
    return checkpoint.mode == CheckpointMode.CLAIM_PER_JOB and not checkpoint.existing_claim_name


def checkpoint_claim_name(job_name: str, checkpoint: Checkpoint) -> str | None:
    """The PersistentVolumeClaim a job's workers mount for their checkpoints: the job's own
    (:func:`pvc_name`) or ``existingClaimName`` in mode ClaimPerJob, ``sharedClaim.claimName`` in
    mode SharedClaim, None in mode ObjectStore (no volume)."""
    if checkpoint.mode == CheckpointMode.OBJECT_STORE:
        return None
    if checkpoint.mode == CheckpointMode.SHARED_CLAIM:
        assert checkpoint.shared_claim is not None
        return checkpoint.shared_claim.claim_name
    return checkpoint.existing_claim_name or pvc_name(job_name)


def checkpoint_path(template: str, namespace: str, job_name: str, uid: str) -> str:
    """A job's own directory in a shared claim, or its prefix in an object store, from
    ``subPathTemplate`` / ``pathTemplate``: ``{namespace}``, ``{name}`` and ``{uid}`` replaced by
    the job's (the API refuses any other variable and every ``.`` or ``..`` segment), e.g.
    ``team-a/llama-pretrain``."""
    return template.replace("{namespace}", namespace).replace("{name}", job_name).replace("{uid}", uid)


def checkpoint_uri(uri: str, prefix: str) -> str:
    """``KUBEFORGE_CHECKPOINT_URI``: the object store's ``uri`` and the job's ``prefix`` joined
    by one ``/`` (``s3://bucket/ckpt`` + ``team-a/job`` -> ``s3://bucket/ckpt/team-a/job``)."""
    return f"{uri.rstrip('/')}/{prefix}"


def worker_hostname(job_name: str, rank: int) -> str:
    """The stable hostname of rank ``rank``: ``<job>-worker-<rank>`` (kept across restarts)."""
    return f"{job_name}-worker-{rank}"


def worker_pod_name(job_name: str, rank: int, attempt: int) -> str:
    """A worker pod's name: ``<job>-worker-<rank>-<attempt>``; a restart makes new pods, never reuses names."""
    return f"{job_name}-worker-{rank}-{attempt}"


def master_address(job_name: str, namespace: str) -> str:
    """Rank 0's DNS name, the rendezvous address."""
    return f"{worker_hostname(job_name, 0)}.{WORKERS_SERVICE}.{namespace}.svc"


def gpu_claim_template_name(job_name: str, device_class: str, count: int) -> str:
    """The ResourceClaimTemplate of one job shape: ``<job>-gpus-<count>-<hash of the class>``
    (a template's spec is immutable, so another count or class is another template)."""
    return f"{job_name}-gpus-{count}-{_short(device_class, 5)}"


def compute_domain_name(job_name: str, cliques: Sequence[str]) -> str:
    """The ComputeDomain of a gang on ``cliques``: ``<job>-imex-<hash of the cliques>``. A restart
    in the same cliques finds the same domain; a move names a new one."""
    return f"{job_name}-imex-{_short(','.join(sorted(cliques)))}"


def channel_template_name(domain: str) -> str:
    """The ResourceClaimTemplate of a ComputeDomain's IMEX channel (the driver's controller makes
    it from ``spec.channel.resourceClaimTemplate.name``): ``<domain>-channel``."""
    return f"{domain}-channel"


# --- InferenceService ----------------------------------------------------------------------------


def service_labels(name: str) -> dict[str, str]:
    """Labels on every child of the service; selectors use ``kubeforge.io/inference-service``."""
    return {MANAGED_BY: MANAGER, SERVICE_NAME: name}


def group_pod_name(service: str, group: int, worker: int, attempt: int) -> str:
    """A group pod's name: ``<service>-<group>-<worker>-<attempt>``; a recreated group makes new
    pods, never reuses names."""
    return f"{service}-{group}-{worker}-{attempt}"


def group_hostname(service: str, group: int, worker: int) -> str:
    """A group pod's stable hostname (a DNS label): ``<service>-<group>`` for the leader,
    ``<service>-<group>-<worker>`` for workers; a long service name is cut and given a hash."""
    suffix = f"-{group}" if worker == 0 else f"-{group}-{worker}"
    if len(service) + len(suffix) <= MAX_HOSTNAME:
        return service + suffix
    digest = hashlib.sha256(service.encode()).hexdigest()[:6]
    return f"{service[:MAX_HOSTNAME - len(suffix) - 7].rstrip('-')}-{digest}{suffix}"


def leader_address(service: str, group: int, namespace: str) -> str:
    """``LWS_LEADER_ADDRESS``: the leader's name through the namespace's headless Service, in
    LWS's form ``<leader hostname>.<headless service>.<namespace>``."""
    return f"{group_hostname(service, group, 0)}.{WORKERS_SERVICE}.{namespace}"


def slice_name(service: str) -> str:
    """``kubeforge-<service>``: the one EndpointSlice the operator writes for a service."""
    return f"kubeforge-{service}"
