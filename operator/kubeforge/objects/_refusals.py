"""Why a pod that was placed does not start, as the kubelet and kube-scheduler say it, pure.

Facts about a pod's start that a training gang (:mod:`kubeforge.lifecycle`) and a serving
replica group (:mod:`kubeforge.serving`) read the same way: a pod the kubelet refused at
admission never ran (a lost placement, not a failure of the workload); a pod kube-scheduler
holds Unschedulable for its volumes waits on storage, not on GPUs; a pod refused because of
its template's own hard inter-pod constraints will be refused again wherever it goes; and how
long an Unschedulable pod is given (:data:`SCHEDULE_TIMEOUT`) before its placement counts as lost.
"""

from __future__ import annotations

from typing import Any, Mapping

from kubeforge.objects._pod import Pod

SCHEDULE_TIMEOUT = 30.0
"""Seconds a created worker may stay Unschedulable (for a reason other than its volumes)
before the gang's placement counts as lost: something outside kubeforge took its GPUs."""

KUBELET_REJECTIONS = ("NodeAffinity", "NodeSelectorMismatching", "UnexpectedAdmissionError", "Taint")
"""``status.reason`` of a pod the kubelet refused at admission (with ``OutOf<resource>``): the
pod never ran, so it is a lost placement, not a failure of the workload."""

SCHEDULER_OWN_CONSTRAINT_REASONS: dict[str, str] = {
    "didn't match pod affinity rules": "podAffinity",
    "didn't match pod anti-affinity rules": "podAntiAffinity",
    "didn't match pod topology spread constraints": "topologySpreadConstraints",
}
"""kube-scheduler's filter reasons that only a pod's own constraints produce (the
``InterPodAffinity`` plugin's ``ErrReasonAffinityRulesNotMatch`` /
``ErrReasonAntiAffinityRulesNotMatch`` and ``PodTopologySpread``'s ``ErrReasonConstraintsNotMatch``,
kubernetes/pkg/scheduler/framework/plugins), with the template field each points at. Another
pod's anti-affinity against ours ("didn't satisfy existing pods anti-affinity rules") is not
among them: that one is someone else's doing."""


def rejected_by_kubelet(p: Pod) -> bool:
    """The kubelet refused the pod at admission (see :data:`KUBELET_REJECTIONS`)."""
    return p.phase == "Failed" and bool(p.reason) and (
        p.reason in KUBELET_REJECTIONS or str(p.reason).startswith("OutOf"))


def waits_for_volume(message: str | None) -> bool:
    """kube-scheduler's Unschedulable ``message`` says the pod waits for its volumes (an unbound
    claim, a claim not found yet): the GPUs are still ours, the storage is slow; the startup
    timeout covers it. (kube-scheduler's message is the only place that says so.)"""
    return "volume" in (message or "").lower()


def _requires(template: Mapping[str, Any], field: str) -> bool:
    """Whether the pod template sets a hard constraint of ``field`` (required podAffinity /
    podAntiAffinity, or a topology spread constraint that does not schedule when unmet)."""
    if field == "topologySpreadConstraints":
        return any((c or {}).get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
                   for c in template.get("topologySpreadConstraints") or [])
    aff = ((template.get("affinity") or {}).get(field) or {})
    return bool(aff.get("requiredDuringSchedulingIgnoredDuringExecution"))


def own_constraint_cause(template: Mapping[str, Any], pod: Pod) -> str | None:
    """Why kube-scheduler refuses ``pod`` on its node because of the template's own hard
    inter-pod constraints (the scheduler's message names their filter, and the template sets
    them: :data:`SCHEDULER_OWN_CONSTRAINT_REASONS`), or None."""
    message = pod.unschedulable_message or ""
    for text, field in SCHEDULER_OWN_CONSTRAINT_REASONS.items():
        if text in message and _requires(template, field):
            return f"the template's {field} cannot be met on node {pod.where} (kube-scheduler: {message[:300]})"
    return None
