"""Reservations against the real control plane, with the operator running for real: a gang that
does not fit gets CapacityReserved (condition and Event) on the domain whose job reported the
sooner ETA, a later job without a time limit stays off the reserved node, and the gang runs there
once that job ends."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from conftest import apply, condition, events_for, job_status, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def report_eta(cluster, namespace: str, job: str, eta: float) -> None:
    """What a worker's progress report leaves in the status (the sim's pods run nothing)."""
    body = {"status": {"progress": {"step": 10, "eta": _iso(eta), "lastReportTime": _iso(time.time())}}}
    cluster.kubectl("patch", "trainingjob", job, "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps(body))


def test_a_gang_gets_a_reservation_and_runs_there_once_the_job_ends(cluster, namespace, fleet):
    fleet(cliques=2, nodes=2)  # two NVLink domains of 2 x 8 GPUs
    apply(cluster, training_job("whole", namespace))  # 2 x 8 Required: a whole domain, no ETA
    wait_for(lambda: len(running_pods(cluster, namespace, "whole")) == 2, timeout=60, what="whole running")
    apply(cluster, training_job("half", namespace, replicas=1, mode="None", level=None))
    wait_for(lambda: len(running_pods(cluster, namespace, "half")) == 1, timeout=60, what="half running")
    report_eta(cluster, namespace, "half", time.time() + 600)

    apply(cluster, training_job("big", namespace))  # 2 x 8 in one domain: only half's can free
    st = wait_for(lambda: (s := job_status(cluster, namespace, "big")) and (c := condition(s, "Admitted"))
                  and c["reason"] == "CapacityReserved" and s, timeout=60, what="big's reservation")
    msg = condition(st, "Admitted")["message"]
    assert "reserved for it" in msg and f"{namespace}/half" in msg, msg
    assert any(e["reason"] == "CapacityReserved" and e["type"] == "Normal"
               for e in events_for(cluster, namespace, "big"))

    apply(cluster, training_job("later", namespace, replicas=1, mode="None", level=None))  # no time limit
    wait_for(lambda: condition(job_status(cluster, namespace, "later"), "Admitted"), timeout=30, what="later waits")
    time.sleep(3)
    assert running_pods(cluster, namespace, "later") == [], "a job without a time limit took the reserved node"

    cluster.kubectl("delete", "trainingjob", "half", "-n", namespace)
    wait_for(lambda: len(running_pods(cluster, namespace, "big")) == 2, timeout=90, what="big running once half ended")
    assert running_pods(cluster, namespace, "later") == []
