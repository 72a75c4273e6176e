"""The gang's checkpoint claim: whether its workers wait behind the volume gate, and when the
gate lifts.

A placed gang's pods are created at once, in the same step as its claim, so that the claim's
provisioning overlaps everything else the gang's start needs. While the job's own claim is
not Bound and its StorageClass binds immediately, kube-scheduler would only refuse the pods
(``pod has unbound immediate PersistentVolumeClaims``) and back each off (1 s doubling to
10 s, kube-scheduler's ``podInitialBackoffSeconds`` / ``podMaxBackoffSeconds``), writing a
``PodScheduled=False`` status and an Event per attempt: such pods are created behind
:data:`kubeforge.objects.VOLUME_GATE` instead, and the gate is lifted as soon as the
claim is Bound. Level-based: gated pods and a Bound claim mean "lift", whoever made the pods
and whenever the operator restarted in between.

Never gated: a claim kubeforge does not make (``existingClaimName``, a ``SharedClaim``: left to
kube-scheduler, as before; mode ``ObjectStore`` and a ``localTier`` have no claim to wait for,
an ephemeral local tier's claims being made per pod, after it), a Bound claim
(a restart after a preemption), and a StorageClass with ``volumeBindingMode:
WaitForFirstConsumer``, whose claim binds only *because* a pod was scheduled (kube-scheduler's
VolumeBinding plugin picks the node, then the provisioner creates the volume there).
"""

from __future__ import annotations

from typing import Sequence

from kubeforge.objects import GANG_GATE, VOLUME_GATE, Pod, TrainingJobRecord, owns_checkpoint_claim, pvc_name

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
"""``volumeBindingMode`` of a StorageClass whose claims bind once a pod using them is scheduled."""

OUR_GATES = (GANG_GATE, VOLUME_GATE)
"""Scheduling gates kubeforge puts on TrainingJob workers (and lifts: nobody else's)."""


def claim_wait(job: TrainingJobRecord, claim: tuple[str, str] | None, binding_mode: str | None) -> str | None:
    """Why a placed gang's workers wait behind the volume gate, or None to let them schedule.

    Only the job's own claim ``<job>-checkpoint`` (mode ClaimPerJob, no ``existingClaimName``:
    :func:`kubeforge.objects.owns_checkpoint_claim`) is waited for, only while it is not Bound
    and its StorageClass binds immediately (see the module's docstring).

    Args:
        job: The job.
        claim: ``(phase, storageClassName)`` of its claim ``<job>-checkpoint``, None if absent.
        binding_mode: ``volumeBindingMode`` of that claim's StorageClass or, while the claim
            does not exist yet, of ``spec.checkpoint.storageClassName``; None if unknown (an
            absent claim of an unknown class is waited for: it is created in the same step,
            Pending, and the gate lifts at once if its class turns out WaitForFirstConsumer).

    Returns:
        A message naming the claim and its phase, or None.
    """
    if job.spec is None or not owns_checkpoint_claim(job.spec.checkpoint) or binding_mode == WAIT_FOR_FIRST_CONSUMER:
        return None
    name = pvc_name(job.name)
    if claim is None:
        return f"checkpoint claim {name} not created yet"
    phase, _ = claim
    if phase == "Bound":
        return None
    return f"checkpoint claim {name} is {phase}, waiting for it to bind"


def gates_to_lift(current: Sequence[Pod], claim_waits: bool, all_ranks_exist: bool) -> list[str]:
    """Names of the workers whose kubeforge gates may all be lifted now.

    The volume gate lifts once the claim no longer holds the gang back (``claim_waits`` is
    False); the legacy gang gate of kubeforge 0.1 once every rank has its pod. A pod carrying
    both is lifted when both may go; gates of others are never touched (the runtime removes
    :data:`OUR_GATES` only).
    """
    out = []
    for p in current:
        ours = [g for g in p.gates if g in OUR_GATES]
        if not ours or p.deleting:
            continue
        if VOLUME_GATE in ours and claim_waits:
            continue
        if GANG_GATE in ours and not all_ranks_exist:
            continue
        out.append(p.name)
    return sorted(out)
