"""Table-driven tests of the TrainingJob rules new in the rewritten lifecycle, up to a running
gang: admission writing its placement, the waiting message, spec changes, refused creates, the
startup timeout and lost placements (the rest: tests/test_lifecycle_running.py). Builders:
tests/training_builders.py.
"""

from __future__ import annotations

import pytest

from kubeforge.admission import JobView, awaiting_admission
from kubeforge.builders.training import spec_hash
from kubeforge.lifecycle import WAIT_MESSAGE_REFRESH_SECONDS, CreateError
from kubeforge.objects import (
    KUBELET_REJECTIONS, SCHEDULE_TIMEOUT, PlacementRecord, Pod, parse_time, rejected_by_kubelet, rfc3339,
)
from training_builders import (
    GENERATION, NAME, NOW, OD, SPOT, admitted, cond, event_reasons, job, job_body, merged, node_names, nodes, placement,
    plan, pod, pods, record, restarts,
)

ASSUMED = PlacementRecord(pool=SPOT, nodes=tuple(node_names(2)), level="nvlink", domain="sim-ib0.0",
                          reason="best fit: nvlink domain sim-ib0.0")


def startup(n=2, admitted_ago=600.0, phase="Pending", **extra):
    """The status of a gang admitted ``admitted_ago`` seconds before NOW, with its spec hash."""
    return admitted(n, phase=phase, placement=placement(n, admittedAt=rfc3339(NOW - admitted_ago), specHash="h1"),
                    **extra)


# --------------------------------------------------------------------------- admission writes the placement


@pytest.mark.parametrize("replicas", [1, 2, 4])
@pytest.mark.parametrize("phase", [None, "Pending", "Restarting"])
def test_assumed_placement_is_written_with_admitted_at_and_spec_hash_and_every_rank_created(replicas, phase):
    st = {"phase": phase} if phase else {}
    if phase == "Restarting":
        st.update(attempt=1, restarts=restarts(failures=1), restartNotBefore=rfc3339(NOW - 1))
    assumed = PlacementRecord(SPOT, tuple(node_names(replicas)), "nvlink", "sim-ib0.0", "best fit")
    p = plan(job(replicas, status=st), [], nodes(replicas), assumed=assumed, spec_hash="h1")
    s = p.status
    assert s["placement"] == {"pool": SPOT, "level": "nvlink", "domain": "sim-ib0.0", "nodes": node_names(replicas),
                              "reason": "best fit", "admittedAt": rfc3339(NOW), "specHash": "h1"}
    assert s.get("phase", phase) == ("Restarting" if phase == "Restarting" else "Pending")
    assert s.get("restartNotBefore", None) is None
    assert s.get("restarts", st.get("restarts")) == (restarts(failures=1) if phase == "Restarting" else restarts())
    adm = cond(s, "Admitted")
    assert (adm["status"], adm["reason"], adm["message"]) == ("True", "Placed", "best fit")
    assert adm["observedGeneration"] == GENERATION
    assert "Admitted" in event_reasons(p) and p.forget_assumed
    # the same decision creates the whole gang (no second reconcile, no gates to lift)
    assert p.create_ranks == list(range(replicas)) and p.ensure_claim and p.ensure_service
    assert p.ungate == [] and p.delete_pods == [] and not p.release


def test_assumed_placement_with_an_existing_claim_creates_no_claim():
    j = job(2, checkpoint={"existingClaimName": "shared-fs"})
    p = plan(j, [], nodes(2), assumed=ASSUMED, spec_hash="h1")
    assert p.create_ranks == [0, 1] and not p.ensure_claim and p.ensure_service


def test_assumed_placement_then_the_gang_runs():
    j = job(2, status={})
    first = plan(j, [], nodes(2), assumed=ASSUMED, spec_hash="h1")
    j = merged(j, first)
    p = plan(j, pods(2), nodes(2), now=NOW + 20, spec_hash="h1")
    assert p.status["phase"] == "Running" and cond(p.status, "Ready")["status"] == "True"
    assert p.create_ranks == [] and not p.release and "placement" not in p.status


# --------------------------------------------------------------------------- waiting for admission


def waiting_status(reason="InsufficientGPUs", message="needs 16 GPUs, 8 free"):
    return {"phase": "Pending", "conditions": [
        {"type": "Admitted", "status": "False", "reason": reason, "message": message,
         "lastTransitionTime": rfc3339(NOW - 100), "observedGeneration": GENERATION}]}


@pytest.mark.parametrize(
    "old, waiting, last_write_ago, written, event",
    [
        (None, ("InsufficientGPUs", "needs 16 GPUs, 8 free"), 0, True, True),          # first word: at once
        ("same", ("InsufficientGPUs", "needs 16 GPUs, 8 free"), 3600, False, False),  # nothing new
        ("same", ("InsufficientGPUs", "needs 16 GPUs, 0 free"), 0, False, False),     # new numbers: not yet
        ("same", ("InsufficientGPUs", "needs 16 GPUs, 0 free"), WAIT_MESSAGE_REFRESH_SECONDS - 0.5, False, False),
        ("same", ("InsufficientGPUs", "needs 16 GPUs, 0 free"), WAIT_MESSAGE_REFRESH_SECONDS, True, False),
        ("same", ("InsufficientGPUs", "needs 16 GPUs, 0 free"), 3600, True, False),
        ("same", ("NoFit", "no nvlink domain has 16 GPUs"), 0, True, True),            # new reason: at once
    ],
)
def test_waiting_message_refresh_is_limited(old, waiting, last_write_ago, written, event):
    st = waiting_status() if old else {"phase": "Pending"}
    p = plan(job(2, status=st), waiting=waiting, last_wait_write=NOW - last_write_ago)
    adm = cond(p.status, "Admitted")
    assert p.wrote_wait == written
    if written:
        assert (adm["status"], adm["reason"], adm["message"]) == ("False", waiting[0], waiting[1])
    else:
        assert adm is None
    assert (("Warning", waiting[0], waiting[1]) in p.events) == event
    # a newer message held back by the limit asks for the reconcile that writes it
    held = not written and old is not None and waiting[1] != waiting_status()["conditions"][0]["message"]
    assert p.requeue_after == (pytest.approx(WAIT_MESSAGE_REFRESH_SECONDS - last_write_ago) if held else None)
    # Ready says NotAdmitted when the reason changes, not on every refresh
    assert (cond(p.status, "Ready") or {}).get("reason") == ("NotAdmitted" if event else None)
    assert p.create_ranks == [] and not p.release


def test_waiting_without_a_reason_writes_nothing_new():
    p = plan(job(2, status={"phase": "Pending"}))
    assert p.status is None and p.events == [] and not p.wrote_wait


# --------------------------------------------------------------------------- spec change


@pytest.mark.parametrize(
    "stored, current, restarted",
    [("h1", "h1", False), ("h1", "h2", True), (None, "h2", False), ("h1", "", False)],
)
def test_spec_change_restarts_the_gang_as_a_new_attempt(stored, current, restarted):
    extra = {"specHash": stored} if stored else {}
    st = admitted(2, phase="Running", attempt=4, restarts=restarts(1, 2, 1), runningSince=rfc3339(NOW - 3600),
                  placement=placement(2, **extra))
    p = plan(job(2, status=st), pods(2, attempt=4), nodes(2), spec_hash=current, pool_prices={SPOT: 1.0})
    if not restarted:
        assert p.status is None or "placement" not in p.status
        return
    s = p.status
    assert (s["phase"], s["placement"], s["attempt"]) == ("Pending", None, 5)
    assert "restarts" not in s  # neither a failure, a preemption nor a startup failure
    assert s.get("restartNotBefore") is None  # at once, no backoff
    for type_ in ("Admitted", "Running", "Ready"):
        assert cond(s, type_)["status"] == "False" and cond(s, type_)["reason"] == "SpecChanged"
    assert "SpecChanged" in event_reasons(p) and p.release and p.forget_assumed
    assert sorted(p.delete_pods) == [f"{NAME}-worker-0-4", f"{NAME}-worker-1-4"]
    assert s["gpuHours"] == pytest.approx(16.0) and s["cost"] == pytest.approx(16.0)  # the segment is closed


@pytest.mark.parametrize(
    "change, moves",
    [
        ({"replicas": 4}, True), ({"gpusPerReplica": 4}, True), ({"pools": [OD]}, True),
        ({"topology": {"mode": "Preferred", "level": "nvlink"}}, True),
        ({"template": {"spec": {"containers": [{"name": "trainer", "image": "pytorch:3"}]}}}, True),
        ({"priority": 100}, False), ({"suspend": True}, False),
        ({"failurePolicy": {"maxRestarts": 9}}, False), ({"startupTimeoutSeconds": 60}, False),
    ],
)
def test_spec_hash_covers_what_the_pods_are_made_from(change, moves):
    before = job(2)
    body = job_body(2)
    body["spec"].update(change)
    after = record(body)
    assert (spec_hash(before) != spec_hash(after)) == moves
    assert spec_hash(before) == spec_hash(job(2))


# --------------------------------------------------------------------------- refused creates


@pytest.mark.parametrize(
    "code, kind, invalid",
    [(422, "Pod", True), (400, "Pod", True), (422, "PersistentVolumeClaim", True),
     (403, "Pod", False), (403, "PersistentVolumeClaim", False), (500, "Service", False)],
)
def test_create_errors(code, kind, invalid):
    err = CreateError(attempt=2, kind=kind, name="x", code=code, message="forbidden: exceeded quota")
    st = startup(2, admitted_ago=5, attempt=2, restarts=restarts(1, 1, 0))
    p = plan(job(2, status=st), [pod(0, attempt=2, phase="Pending")], nodes(2), spec_hash="h1", create_error=err)
    s = p.status
    assert (s["placement"], s["attempt"]) == (None, 3) and p.release
    # rank 1's pod the index never showed goes by name (a 404 if it was never made)
    assert p.delete_pods == [f"{NAME}-worker-0-2", f"{NAME}-worker-1-2"]
    adm = cond(s, "Admitted")
    assert f"HTTP {code}" in adm["message"] and "exceeded quota" in adm["message"]
    if invalid:
        # only an edit can fix it: wait for one, at this generation, without a counter or a backoff
        assert adm["reason"] == "InvalidSpec" and adm["observedGeneration"] == GENERATION
        assert "restarts" not in s and s.get("restartNotBefore") is None and s["phase"] == "Pending"
        assert "InvalidSpec" in event_reasons(p)
    else:
        assert adm["reason"] == "CreateFailed"
        assert s["restarts"] == restarts(1, 1, 1)
        assert parse_time(s["restartNotBefore"]) == pytest.approx(NOW + 10)
        assert "CreateFailed" in event_reasons(p)


def test_create_error_of_another_attempt_is_ignored():
    err = CreateError(attempt=1, kind="Pod", name="x", code=422, message="bad")
    st = startup(2, admitted_ago=5, attempt=2)
    p = plan(job(2, status=st), [], nodes(2), spec_hash="h1", create_error=err)
    assert p.create_ranks == [0, 1] and not p.release


def test_invalid_create_blocks_admission_until_the_spec_changes():
    err = CreateError(attempt=0, kind="Pod", name="x", code=422, message="spec.containers[0].image: Required")
    j = job(2, status=startup(2, admitted_ago=5))
    j = merged(j, plan(j, [], nodes(2), spec_hash="h1", create_error=err))
    assert not awaiting_admission(JobView(j, j.status), NOW + 1)
    edited = record(job_body(2, generation=GENERATION + 1, status=j.status, priority=1))
    assert awaiting_admission(JobView(edited, edited.status), NOW + 1)


# --------------------------------------------------------------------------- startup timeout


def unsched(rank, since, message="0/3 nodes are available: 1 Insufficient nvidia.com/gpu", **kw):
    return pod(rank, phase="Pending", node=None, ready=False, unschedulable_since=since, unschedulable_message=message,
               **kw)


@pytest.mark.parametrize(
    "workers, reason, detail",
    [
        ([], "StartupTimeout", "rank 0: no pod"),
        ([pod(0), pod(1, phase="Pending", waiting="ErrImagePull: pull access denied")], "ErrImagePull",
         "rank 1: ErrImagePull: pull access denied"),
        ([pod(0, phase="Pending", waiting="CreateContainerConfigError: secret not found"),
          pod(1, phase="Pending", waiting="ImagePullBackOff: back-off")], "CreateContainerConfigError", "rank 0"),
        ([pod(0), unsched(1, NOW - 5)], "Unschedulable", "Insufficient nvidia.com/gpu"),  # not yet a lost placement
        ([pod(0), unsched(1, NOW - 500, "pod has unbound immediate PersistentVolumeClaims")], "Unschedulable",
         "PersistentVolumeClaims"),  # a volume that never binds
        ([pod(0), pod(1, phase="Pending")], "StartupTimeout", "rank 1: Pending on node ib0-nvl0-1"),
        ([pod(0)], "StartupTimeout", "rank 1: no pod"),
    ],
)
def test_startup_timeout_reason_is_taken_from_the_pods(workers, reason, detail):
    p = plan(job(2, status=startup(2, admitted_ago=600)), workers, nodes(2), spec_hash="h1")
    s = p.status
    assert (s["phase"], s["placement"], s["attempt"]) == ("Pending", None, 1)
    assert s["restarts"] == restarts(startup=1)
    assert parse_time(s["restartNotBefore"]) == pytest.approx(NOW + 10)
    adm = cond(s, "Admitted")
    assert adm["reason"] == reason and detail in adm["message"]
    assert "600s after admission" in adm["message"] and "retry 1/5" in adm["message"]
    running = sum(1 for w in workers if w.phase == "Running")
    assert f"{running} of 2 workers Running" in adm["message"]
    assert cond(s, "Running")["reason"] == reason and cond(s, "Ready")["reason"] == reason
    assert reason in event_reasons(p) and p.release
    assert p.delete_pods == [f"{NAME}-worker-{r}-0" for r in range(2)]  # seen or not: by name


@pytest.mark.parametrize("timeout, admitted_ago, fires, requeue", [
    (600, 0, False, 600), (600, 599, False, 1), (600, 600, True, None), (60, 59, False, 1), (60, 61, True, None)])
def test_startup_timeout_counts_from_admitted_at(timeout, admitted_ago, fires, requeue):
    p = plan(job(2, status=startup(2, admitted_ago=admitted_ago), startupTimeoutSeconds=timeout),
             [pod(0), pod(1, phase="Pending")], nodes(2), spec_hash="h1")
    assert (cond(p.status, "Admitted") is not None) == fires
    if requeue is not None:
        assert p.requeue_after == pytest.approx(requeue)


def test_startup_timeout_is_not_checked_once_the_gang_ran():
    p = plan(job(2, status=startup(2, admitted_ago=100_000, phase="Running")), pods(2), nodes(2), spec_hash="h1")
    assert p.status is None and p.requeue_after is None


@pytest.mark.parametrize("used, limit, fails", [(0, 5, False), (4, 5, False), (5, 5, True), (0, 0, True), (2, 1, True)])
def test_startup_retry_limit(used, limit, fails):
    fp = {"maxRestarts": 3, "backoffSeconds": 10, "maxBackoffSeconds": 600, "maxStartupRetries": limit}
    st = startup(2, admitted_ago=600, attempt=used, restarts=restarts(startup=used))
    p = plan(job(2, status=st, failurePolicy=fp), [], nodes(2), spec_hash="h1")
    s = p.status
    if fails:
        assert s["phase"] == "Failed" and s["completionTime"] == rfc3339(NOW)
        assert cond(s, "Failed")["reason"] == "StartupRetryLimitExceeded"
        assert cond(s, "Admitted")["reason"] == "StartupTimeout"
        assert s.get("restarts", st["restarts"])["startupFailures"] == used and "attempt" not in s
        assert p.release and p.requeue_after is None
    else:
        assert s["phase"] == "Pending" and s["restarts"] == restarts(startup=used + 1)
        delay = min(600, 10 * 2 ** used)
        assert parse_time(s["restartNotBefore"]) == pytest.approx(NOW + delay)
        assert p.requeue_after == pytest.approx(delay)


def test_gang_all_running_at_the_deadline_is_not_a_startup_timeout():
    p = plan(job(2, status=startup(2, admitted_ago=700)), pods(2), nodes(2), spec_hash="h1")
    assert p.status["phase"] == "Running"
    assert not p.release and p.delete_pods == []


# --------------------------------------------------------------------------- lost placement


@pytest.mark.parametrize(
    "reason, lost",
    [("OutOfnvidia.com/gpu", True), ("OutOfcpu", True), ("OutOfmemory", True), ("NodeAffinity", True),
     ("NodeSelectorMismatching", True), ("UnexpectedAdmissionError", True), ("Taint", True),
     ("Error", False), (None, False), ("DeadlineExceeded", False)],
)
def test_kubelet_rejection_is_a_lost_placement(reason, lost):
    refused = pod(1, phase="Failed", reason=reason, exit_code=None if lost else 1)
    assert rejected_by_kubelet(refused) == lost
    p = plan(job(2, status=startup(2, admitted_ago=5)), [pod(0), refused], nodes(2), spec_hash="h1")
    s = p.status
    assert (s["placement"], s["attempt"]) == (None, 1) and p.release
    if lost:
        adm = cond(s, "Admitted")
        assert adm["reason"] == "PlacementLost" and reason in adm["message"] and "ib0-nvl0-1" in adm["message"]
        assert s["restarts"] == restarts(startup=1) and s["phase"] == "Pending"
        assert p.delete_pods == [f"{NAME}-worker-0-0"]
    else:
        assert cond(s, "Running")["reason"] == "WorkerFailed" and s["restarts"] == restarts(failures=1)


def test_kubelet_rejections_list():
    assert set(KUBELET_REJECTIONS) >= {"NodeAffinity", "UnexpectedAdmissionError"}
    assert not rejected_by_kubelet(pod(0, phase="Pending", reason="OutOfnvidia.com/gpu"))  # only once Failed


def test_kubelet_rejection_of_a_running_gang_restarts_it():
    p = plan(job(2, status=startup(2, admitted_ago=5000, phase="Running")),
             [pod(0), pod(1, phase="Failed", reason="UnexpectedAdmissionError")], nodes(2), spec_hash="h1")
    assert p.status is not None and p.status["placement"] is None and p.release


def test_schedule_timeout_default():
    stuck = unsched(1, NOW - SCHEDULE_TIMEOUT)
    p = plan(job(2, status=startup(2, admitted_ago=5)), [pod(0), stuck], nodes(2), spec_hash="h1")
    assert cond(p.status, "Admitted")["reason"] == "PlacementLost"
