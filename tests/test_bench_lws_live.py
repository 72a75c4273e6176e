"""The live LWS bench's pure parts (e2e/bench/lws_live): which group a pod is in, the times a
group is created, bound and Ready (the first time, all its pods at once), the percentiles, the
ratio against issue 28's target and the JSON bench-autoscaling reads back."""

from __future__ import annotations

import math

import pytest

from e2e.bench.lws_live import summary
from e2e.bench.lws_live.cli import parse_args, round_order
from e2e.bench.lws_live.track import Tracker, group_of, pod_ready


def pod(name: str, owner: str, index: int, ns: str = "ns", node: str = "", ready: bool = False, lws: bool = False,
        deleting: bool = False) -> dict:
    labels = ({"leaderworkerset.sigs.k8s.io/name": owner, "leaderworkerset.sigs.k8s.io/group-index": str(index)}
              if lws else {"kubeforge.io/inference-service": owner, "kubeforge.io/group-index": str(index)})
    md = {"name": name, "namespace": ns, "labels": labels}
    if deleting:
        md["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return {"metadata": md, "spec": {"nodeName": node} if node else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_a_pod_belongs_to_its_services_or_its_leaderworkersets_group():
    assert group_of(pod("a", "llm", 3)) == ("ns", "llm", 3)
    assert group_of(pod("a", "llm", 1, lws=True)) == ("ns", "llm", 1)
    assert group_of({"metadata": {"name": "x", "namespace": "ns", "labels": {"app": "y"}}}) is None
    bad = pod("a", "llm", 0)
    bad["metadata"]["labels"]["kubeforge.io/group-index"] = "x"
    assert group_of(bad) is None
    assert pod_ready(pod("a", "llm", 0, ready=True)) and not pod_ready(pod("a", "llm", 0, ready=True, deleting=True))


def test_a_group_is_ready_when_all_its_pods_are_ready_at_once_and_the_first_time_stays():
    t = Tracker()
    t.start("kubeforge", "ns", "llm", groups=2, size=2, t0=10.0)
    t.pod_event("ADDED", pod("l", "llm", 0), 10.5)
    t.pod_event("ADDED", pod("w", "llm", 0), 10.7)
    t.pod_event("MODIFIED", pod("l", "llm", 0, node="n1"), 11.0)
    t.pod_event("MODIFIED", pod("l", "llm", 0, node="n1", ready=True), 11.5)
    t.pod_event("MODIFIED", pod("w", "llm", 0, node="n2"), 12.0)
    assert t.groups[("ns", "llm", 0)].ready is None  # one of two Ready
    t.pod_event("MODIFIED", pod("w", "llm", 0, node="n2", ready=True), 12.5)
    g = t.groups[("ns", "llm", 0)]
    assert (g.since_create("created"), g.since_create("bound"), g.since_create("ready")) == (pytest.approx(0.7), 2.0, 2.5)
    assert not t.all_ready("ns", "llm")  # group 1 not yet
    t.pod_event("DELETED", pod("w", "llm", 0, node="n2", ready=True), 13.0)  # recreated later: times kept
    t.pod_event("ADDED", pod("w2", "llm", 0, node="n3", ready=True), 14.0)
    assert g.ready == 12.5
    t.pod_event("ADDED", pod("x", "other", 0, ready=True), 14.0)  # not registered: ignored
    assert ("ns", "other", 0) not in t.groups


def test_a_deleted_pod_no_longer_counts_towards_ready():
    t = Tracker()
    t.start("lws", "ns", "llm", groups=1, size=2, t0=0.0)
    t.pod_event("ADDED", pod("l", "llm", 0, node="n1", ready=True, lws=True), 1.0)
    t.pod_event("DELETED", pod("l", "llm", 0, node="n1", ready=True, lws=True), 2.0)
    t.pod_event("ADDED", pod("w", "llm", 0, node="n2", ready=True, lws=True), 3.0)
    g = t.groups[("ns", "llm", 0)]
    assert g.created == 3.0 and g.ready is None  # two pods seen, never two Ready at once
    t.pod_event("ADDED", pod("l2", "llm", 0, node="n1", ready=True, lws=True), 4.0)
    assert g.ready == 4.0 and t.all_ready("ns", "llm")


def test_admitted_is_the_first_status_groups_admitted_at_seen():
    t = Tracker()
    t.start("kubeforge", "ns", "llm", groups=2, size=2, t0=1.0)
    isvc = {"metadata": {"name": "llm", "namespace": "ns"},
            "status": {"groups": [{"index": 0, "admittedAt": "2026-11-27T00:00:01Z"}, {"index": 1}]}}
    t.service_event("MODIFIED", isvc, 1.4)
    isvc["status"]["groups"][1]["admittedAt"] = "2026-11-27T00:00:02Z"
    t.service_event("MODIFIED", isvc, 2.0)
    t.service_event("MODIFIED", isvc, 3.0)
    assert [g.since_create("admitted") for g in t.of("ns", "llm")] == [pytest.approx(0.4), 1.0]


def test_figures_percentiles_ratio_and_the_json_round_trip(tmp_path):
    t = Tracker()
    for k, (system, ready) in enumerate([("kubeforge", [2.0, 3.0, 4.0, None]), ("lws", [1.0, 2.0, 2.0, 3.0])]):
        t.start(system, "ns", system, groups=4, size=1, t0=0.0)
        for i, r in enumerate(ready):
            if r is not None:
                t.pod_event("ADDED", pod(f"{system}-{i}", system, i, node="n", ready=True), r)
    f = summary.figures(list(t.groups.values()), rounds=1, replicas=4, size=1, gpus=8, load=(2.0, 3.0), when="now")
    assert (f.kubeforge.groups, f.kubeforge.timed_out, f.kubeforge.p50, f.kubeforge.p95) == (4, 1, 3.0, 4.0)
    assert (f.lws.p50, f.lws.p95) == (2.0, 3.0) and "admitted" not in f.lws.phases
    assert f.ratio == 1.5 and f.met is True
    path = tmp_path / "lws.json"
    summary.dump(f, path)
    assert summary.load_figures(path) == (3.0, 2.0)
    (tmp_path / "other.json").write_text('{"x": 1}')
    with pytest.raises(ValueError):
        summary.load_figures(tmp_path / "other.json")


def test_no_figure_gives_no_verdict_and_a_null_in_the_json(tmp_path):
    assert summary.verdict(float("nan"), 2.0) == (None, None)
    assert summary.verdict(3.1, 2.0) == (1.55, False)
    f = summary.figures([], 1, 4, 2, 8, (1.0, 1.0), "now")
    assert math.isnan(f.kubeforge.p50) and f.ratio is None
    summary.dump(f, tmp_path / "x.json")
    assert summary.load_figures(tmp_path / "x.json") == (None, None)


def test_rounds_alternate_which_system_goes_first_and_the_defaults():
    assert round_order(3, ["kubeforge", "lws"]) == [(0, "kubeforge"), (0, "lws"), (1, "lws"), (1, "kubeforge"),
                                                    (2, "kubeforge"), (2, "lws")]
    a = parse_args([])
    assert (a.cluster, a.rounds, a.replicas, a.size, a.gpus, a.systems) == (
        "kubeforge-bench-lws", 5, 4, 2, 8, ["kubeforge", "lws"])
    with pytest.raises(SystemExit):
        parse_args(["--systems", "kueue"])


def test_bench_autoscaling_reads_the_json_into_its_live_figures(tmp_path):
    from e2e.bench.autoscaling.cli import parse_args as autoscaling_args

    t = Tracker()
    for system, ready in (("kubeforge", 1.2), ("lws", 0.8)):
        t.start(system, "ns", system, groups=1, size=1, t0=0.0)
        t.pod_event("ADDED", pod(f"{system}-0", system, 0, node="n", ready=True), ready)
    summary.dump(summary.figures(list(t.groups.values()), 1, 1, 1, 8, (1.0, 1.0), "now"), tmp_path / "lws.json")
    a = autoscaling_args(["--lws-live", str(tmp_path / "lws.json")])
    assert (a.live.group_ready_p50, a.live.lws_ready_p50) == (1.2, 0.8)
    assert autoscaling_args([]).live is None


def test_a_comma_list_of_choices_keeps_its_order_and_refuses_unknowns():
    import argparse

    from e2e.bench.lib.args import choice_list

    ap = argparse.ArgumentParser()
    assert choice_list(ap, "--systems", " lws, kubeforge ,", ("kubeforge", "lws")) == ["lws", "kubeforge"]
    for bad in ("kueue", " , "):
        with pytest.raises(SystemExit):
            choice_list(ap, "--systems", bad, ("kubeforge", "lws"))
