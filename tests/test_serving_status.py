"""kubeforge.serving's status composition (serving/_status.py): given the autoscaler's outcome, the
plan holds the whole status patch (the autoscaling conditions, desiredReplicas, lastScaleTime,
lastMetricValue, url) and every Event of the reconcile (Scaled, and a Warning per
ScalingActive / ScalingLimited transition), so the runtime only applies it (issue 30.2)."""

from __future__ import annotations

from kubeforge.admission import GroupShape
from kubeforge.autoscaling import AutoscalerState, AutoscalingPolicy, decide
from kubeforge.autoscaling import reasons as scaling
from kubeforge.autoscaling.prometheus import QueryResult
from kubeforge.objects import rfc3339
from kubeforge.objects import NORMAL, SCALED, WARNING
from kubeforge.serving import ScalingOutcome, ServingContext, plan_serving, scaling_events, scaling_status
from records import NOW, NS, mk_service

SHAPE = GroupShape(pool="p", pods=1, gpus=1, held=1)
URL = "http://prometheus.monitoring.svc:9090"


def svc(status=None, **autoscaling):
    return mk_service("chat", minReplicas=1, maxReplicas=4, autoscaling={"prometheusURL": URL, **autoscaling},
                      status=status)


def outcome(rec, metric: QueryResult, current: int, placeable: int | None = None, note: str | None = None):
    d = decide(AutoscalingPolicy.from_spec(rec.spec), AutoscalerState(), current, metric.value, NOW, placeable)
    return ScalingOutcome(d, metric, current, note)


def cond(status, type_):
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_without_the_autoscaler_the_plan_is_the_groups_part_only():
    p = plan_serving(svc(), ServingContext(now=NOW, desired=1, shape=SHAPE))
    assert "desiredReplicas" not in p.status and "url" not in p.status
    assert {c["type"] for c in p.status["conditions"]} == {"Ready", "ReplicaGroupFailed"}


def test_a_scale_up_is_in_the_status_and_its_event_comes_first():
    rec = svc()
    out = outcome(rec, QueryResult(12.0, NOW - 1, None), current=1)
    p = plan_serving(rec, ServingContext(now=NOW, desired=out.decision.desired, shape=SHAPE, scaling=out))
    st = p.status
    assert st["desiredReplicas"] == out.decision.desired > 1
    assert (st["lastScaleTime"], st["lastScaleDirection"]) == (rfc3339(NOW), "Up")
    assert (st["lastMetricValue"], st["lastMetricTime"]) == (12.0, rfc3339(NOW - 1))
    assert st["url"] == f"http://chat.{NS}.svc:8000" and "groups" in st
    assert cond(st, scaling.SCALING_ACTIVE)["status"] == "True"
    assert p.events[0][:2] == (NORMAL, SCALED) and p.events[0][2].startswith(f"replicas 1 -> {out.decision.desired}: ")


def test_a_failed_read_says_why_once_per_transition():
    rec = svc()
    out = outcome(rec, QueryResult(None, None, "connection failed"), current=1)
    patch = scaling_status(rec, out, None, NOW)
    active = cond(patch, scaling.SCALING_ACTIVE)
    assert (active["status"], active["reason"]) == ("False", scaling.FAILED_GET_METRIC)
    assert active["message"].startswith("Prometheus query failed (connection failed); ")
    assert "lastMetricValue" not in patch and "lastScaleTime" not in patch  # held, nothing read
    assert scaling_events(rec, out, patch) == [(WARNING, scaling.FAILED_GET_METRIC, active["message"])]
    again = svc(status={"conditions": patch["conditions"], "desiredReplicas": 1})
    assert scaling_events(again, out, scaling_status(again, out, None, NOW + 5)) == []


def test_insufficient_capacity_names_the_next_replica():
    rec = svc()
    out = outcome(rec, QueryResult(12.0, NOW, None), current=1, placeable=1, note="no node has 1 free GPU")
    patch = scaling_status(rec, out, None, NOW)
    limited = cond(patch, scaling.SCALING_LIMITED)
    assert (limited["status"], limited["reason"]) == ("True", scaling.INSUFFICIENT_CAPACITY)
    assert limited["message"].endswith("; the next replica: no node has 1 free GPU")
    assert (WARNING, scaling.INSUFFICIENT_CAPACITY, limited["message"]) in scaling_events(rec, out, patch)
