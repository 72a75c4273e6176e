"""The checkpoint claim off the critical path (issue 20): a placed gang's pods are created at
once with its claim, behind the volume gate while the claim is not Bound and binds
immediately; the gate lifts on Bound, level-based. Never gated: WaitForFirstConsumer, a user's
existing claim, a Bound claim (a restart after a preemption).
"""

from __future__ import annotations

import pytest

from kubeforge.objects import rfc3339
from kubeforge.builders.training import build_worker_pod
from kubeforge.lifecycle import VOLUME_NOT_BOUND, claim_wait
from kubeforge.lifecycle._volume import gates_to_lift
from kubeforge.objects import GANG_GATE, PlacementRecord
from kubeforge.objects._labels import VOLUME_GATE
from kubeforge.runtime.training import _ungate_patch
from kubeforge.sim.provisioner import CreateLatency, should_provision
from training_builders import NOW, admitted, cond, job, nodes, plan, pod, pods, restarts

WAITING = "checkpoint claim llm-checkpoint is Pending, waiting for it to bind"


# --------------------------------------------------------------------------- the decision


@pytest.mark.parametrize("checkpoint, claim, mode, waits", [
    ({}, None, None, True),                                     # created in this step, class unknown yet
    ({}, None, "Immediate", True),
    ({"storageClassName": "wffc"}, None, "WaitForFirstConsumer", False),
    ({}, ("Pending", "standard"), "Immediate", True),           # provisioning
    ({}, ("Lost", "standard"), "Immediate", True),
    ({}, ("Pending", "wffc"), "WaitForFirstConsumer", False),   # binds because a pod is scheduled
    ({}, ("Bound", "standard"), "Immediate", False),            # a restart after a preemption
    ({}, ("Bound", "standard"), None, False),
    ({"existingClaimName": "shared"}, None, None, False),       # the user's claim: kube-scheduler's business
    ({"existingClaimName": "shared"}, ("Pending", "standard"), "Immediate", False),
])
def test_claim_wait(checkpoint, claim, mode, waits):
    why = claim_wait(job(checkpoint=checkpoint), claim, mode)
    assert (why is not None) == waits
    if waits:
        assert "llm-checkpoint" in why


def test_admitted_gang_is_created_at_once_behind_the_gate_while_its_claim_is_pending():
    p = plan(job(4, status=admitted(4)), [], nodes(4), claim_wait=WAITING)
    assert p.create_ranks == [0, 1, 2, 3] and p.volume_gate  # not held back until the claim binds
    assert p.ensure_claim and p.ensure_service  # the claim in the same step
    assert p.ungate == []


@pytest.mark.parametrize("checkpoint", [{}, {"existingClaimName": "shared"}])
def test_gang_whose_claim_does_not_hold_it_back_is_created_ungated(checkpoint):
    # claim_wait None: Bound, WaitForFirstConsumer, or an existing claim.
    p = plan(job(2, status=admitted(2), checkpoint=checkpoint), [], nodes(2), claim_wait=None)
    assert p.create_ranks == [0, 1] and not p.volume_gate


def test_restart_after_a_preemption_with_the_claim_bound_is_never_gated():
    st = admitted(2, phase="Restarting", attempt=1, restarts=restarts(preemptions=1))
    bound = claim_wait(job(2), ("Bound", "standard"), "Immediate")
    p = plan(job(2, status=st), [], nodes(2), claim_wait=bound)
    assert p.create_ranks == [0, 1] and not p.volume_gate


def test_gate_stays_while_the_claim_is_pending():
    gated = pods(2, phase="Pending", gates=(VOLUME_GATE,))
    p = plan(job(2, status=admitted(2)), gated, nodes(2), claim_wait=WAITING)
    assert p.ungate == [] and p.create_ranks == [] and p.status is None


def test_gate_lifts_once_the_claim_is_bound_whoever_made_the_pods():
    # Level-based: gated pods and a Bound claim mean "lift", also after an operator restart
    # between the create and the lift.
    gated = pods(2, phase="Pending", gates=(VOLUME_GATE,))
    p = plan(job(2, status=admitted(2)), gated, nodes(2), claim_wait=None)
    assert p.ungate == ["llm-worker-0-0", "llm-worker-1-0"] and p.create_ranks == []


def test_missing_rank_is_created_ungated_and_the_gated_ones_lifted_in_the_same_step():
    p = plan(job(2, status=admitted(2)), [pod(0, phase="Pending", gates=(VOLUME_GATE,))], nodes(2), claim_wait=None)
    assert p.create_ranks == [1] and not p.volume_gate and p.ungate == ["llm-worker-0-0"]


@pytest.mark.parametrize("gates, claim_waits, all_ranks, lifted", [
    ((VOLUME_GATE,), False, True, True),
    ((VOLUME_GATE,), True, True, False),
    ((VOLUME_GATE,), False, False, True),        # the volume gate does not wait for the other ranks
    ((GANG_GATE,), False, False, False),         # the legacy gang gate does
    ((GANG_GATE,), True, True, True),
    ((GANG_GATE, VOLUME_GATE), True, True, False),
    ((GANG_GATE, VOLUME_GATE), False, True, True),
    (("example.com/other",), False, True, False),  # somebody else's gate is theirs to lift
    (("example.com/other", VOLUME_GATE), False, True, True),  # ours goes, theirs stays (see the patch)
    ((), False, True, False),
])
def test_gates_to_lift(gates, claim_waits, all_ranks, lifted):
    p = pod(0, phase="Pending", gates=gates, node=None)
    assert gates_to_lift([p], claim_waits, all_ranks) == (["llm-worker-0-0"] if lifted else [])


def test_ungate_patch_removes_only_kubeforge_gates_and_tests_them_first():
    ours = _ungate_patch((VOLUME_GATE,))
    assert ours == [{"op": "test", "path": "/spec/schedulingGates", "value": [{"name": VOLUME_GATE}]},
                    {"op": "remove", "path": "/spec/schedulingGates"}]
    mixed = _ungate_patch(("example.com/a", VOLUME_GATE, "example.com/b", GANG_GATE))
    assert mixed[0]["op"] == "test" and len(mixed[0]["value"]) == 4
    assert [op["path"] for op in mixed[1:]] == ["/spec/schedulingGates/3", "/spec/schedulingGates/1"]


def test_claim_that_never_binds_ends_the_attempt_as_volume_not_bound_and_releases_the_gpus():
    st = admitted(2, placement={"pool": "h100-spot", "level": "nvlink", "domain": "sim-ib0.0",
                                "nodes": ["ib0-nvl0-0", "ib0-nvl0-1"], "admittedAt": rfc3339(NOW - 601)})
    gated = pods(2, phase="Pending", gates=(VOLUME_GATE,))
    p = plan(job(2, status=st, startupTimeoutSeconds=600), gated, nodes(2), claim_wait=WAITING)
    adm = cond(p.status, "Admitted")
    assert adm["status"] == "False" and adm["reason"] == VOLUME_NOT_BOUND
    assert "llm-checkpoint is Pending" in adm["message"]
    assert p.release and sorted(p.delete_pods) == ["llm-worker-0-0", "llm-worker-1-0"]  # nothing held silently
    assert p.status["restarts"]["startupFailures"] == 1


def test_gated_pods_before_the_timeout_are_not_a_lost_placement():
    st = admitted(2, placement={"pool": "h100-spot", "level": "nvlink", "domain": "sim-ib0.0",
                                "nodes": ["ib0-nvl0-0", "ib0-nvl0-1"], "admittedAt": rfc3339(NOW - 100)})
    gated = pods(2, phase="Pending", gates=(VOLUME_GATE,))
    p = plan(job(2, status=st, startupTimeoutSeconds=600), gated, nodes(2), claim_wait=WAITING)
    assert not p.release and p.delete_pods == [] and p.requeue_after == pytest.approx(500)


def test_builder_puts_the_gate_after_the_template_s_own():
    j = job(2, status=admitted(2), template={"spec": {"schedulingGates": [{"name": "example.com/mine"}],
                                                      "containers": [{"name": "trainer", "image": "pytorch:2"}]}})
    pl = PlacementRecord("h100-spot", ("ib0-nvl0-0", "ib0-nvl0-1"), "nvlink", "sim-ib0.0")
    gated = build_worker_pod(j, rank=0, attempt=0, placement=pl, scheduling_gates=(VOLUME_GATE,))
    assert gated["spec"]["schedulingGates"] == [{"name": "example.com/mine"}, {"name": VOLUME_GATE}]
    plain = build_worker_pod(j, rank=0, attempt=0, placement=pl)
    assert plain["spec"]["schedulingGates"] == [{"name": "example.com/mine"}]


# --------------------------------------------------------------------------- the sim provisioner


def test_create_latency_follows_the_ebs_driver_s_figures():
    lat = CreateLatency()
    draws = sorted(lat.for_claim(f"uid-{i}") for i in range(4000))
    assert draws[0] >= 1.25  # the driver's first DescribeVolumes poll
    assert draws[len(draws) // 2] == pytest.approx(1.75)  # median 1.5 s, seen at the 1.75 s poll
    assert 3.0 <= draws[int(0.95 * len(draws))] <= 3.7
    assert lat.for_claim("uid-7") == lat.for_claim("uid-7")  # the same on a rerun
    created = sorted(lat.created_after((i + 0.5) / 1000) for i in range(1000))
    assert created[500] == pytest.approx(1.5, rel=0.02) and created[990] == pytest.approx(4.0, rel=0.05)
    assert CreateLatency(median=0).for_claim("x") == 0.0


def _claim(ann=None, cls="standard", volume=None, deleting=False):
    md = {"name": "c", "namespace": "n", "uid": "u", "annotations": ann or {}}
    if deleting:
        md["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    return {"metadata": md, "spec": {"storageClassName": cls, **({"volumeName": volume} if volume else {})}}


SIM = {"volume.kubernetes.io/storage-provisioner": "kubeforge.io/sim"}


@pytest.mark.parametrize("claim, served", [
    (_claim(), False),  # the PV controller has not handed it over yet
    (_claim(SIM), True),
    (_claim({"volume.beta.kubernetes.io/storage-provisioner": "kubeforge.io/sim"}), True),
    (_claim({"volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}), False),
    (_claim(SIM, volume="pv-1"), False),
    (_claim(SIM, deleting=True), False),
    (_claim(SIM, cls="wffc"), False),  # WaitForFirstConsumer: no node chosen yet
    (_claim({**SIM, "volume.kubernetes.io/selected-node": "n1"}, cls="wffc"), True),
])
def test_should_provision_like_the_external_provisioner(claim, served):
    modes = {"standard": "Immediate", "wffc": "WaitForFirstConsumer"}
    assert should_provision(claim, modes.get) == served
