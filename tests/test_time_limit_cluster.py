"""``spec.maxRunSeconds`` against the real control plane, with the operator running for real: the
job is stopped at its limit (no resync: the reconcile is requeued for the deadline), Failed with
reason MaxRunSecondsExceeded and a Warning Event, and the GPUs go to the job that waited."""

from __future__ import annotations

import pytest

from conftest import apply, condition, events_for, job_status, running_pods, training_job, wait_for

pytestmark = pytest.mark.cluster


def test_a_job_is_stopped_at_its_time_limit_and_the_waiting_job_runs(cluster, namespace, fleet):
    fleet(cliques=1, nodes=2)  # room for one 2 x 8 gang
    apply(cluster, training_job("limited", namespace, maxRunSeconds=60))
    wait_for(lambda: len(running_pods(cluster, namespace, "limited")) == 2, timeout=60, what="the limited job running")
    apply(cluster, training_job("next", namespace))
    wait_for(lambda: condition(job_status(cluster, namespace, "next"), "Admitted"), timeout=30, what="next waiting")

    st = wait_for(lambda: (s := job_status(cluster, namespace, "limited")).get("phase") == "Failed" and s,
                  timeout=120, what="the limited job Failed at its limit")
    failed = condition(st, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "MaxRunSecondsExceeded", failed
    assert 60 <= st["runSeconds"] < 90, st["runSeconds"]
    assert not st.get("placement")
    assert any(e["reason"] == "MaxRunSecondsExceeded" and e["type"] == "Warning"
               for e in events_for(cluster, namespace, "limited"))
    wait_for(lambda: len(running_pods(cluster, namespace, "next")) == 2, timeout=60, what="the waiting job running")
