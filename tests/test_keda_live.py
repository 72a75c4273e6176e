"""The live KEDA bench's pure parts (e2e/bench/keda_live): replica-minutes from the looks taken,
attainment over all requests in trace time, the verdict against issue 28's live target, the JSON
that bench-autoscaling reads back (``--keda-live``), and the objects KEDA is given."""

from __future__ import annotations

import json
import math

import pytest

from e2e.bench.autoscaling.cli import parse_args as autoscaling_args
from e2e.bench.keda_live import objects, summary
from e2e.bench.keda_live.cli import parse_args
from e2e.bench.keda_live.summary import Sample


def test_replica_seconds_hold_each_look_until_the_next():
    s = [Sample(0.0, 1, 1, 1), Sample(0.5, 3, 1, 3), Sample(1.5, 3, 3, None), Sample(2.0, 1, 1, 1)]
    assert summary.replica_seconds(s) == pytest.approx(1 * 0.5 + 3 * 1.0 + 3 * 0.5)
    assert summary.replica_seconds(s, "asked") == pytest.approx(1 * 0.5 + 3 * 1.0)  # None counts 0
    assert summary.replica_seconds([Sample(0.0, 5, 5, 5)]) == 0.0


def test_attainment_counts_every_arrival_and_times_are_in_trace_time():
    samples = [Sample(0.0, 1, 1, 1), Sample(10.0, 2, 2, 2), Sample(20.0, 2, 2, 1), Sample(30.0, 1, 1, 2)]
    # 4 arrivals, 3 completed: TTFTs 0.1, 0.3, 0.4 wall s = 0.6, 1.8, 2.4 trace s at 6x; SLO 2 s
    f = summary.system_figures("keda", 4, [0.1, 0.3, 0.4], [0.0, 0.2, 0.3], 3, 1, samples, 6.0, 2.0)
    assert f.attainment == pytest.approx(2 / 4)
    assert f.replica_minutes == pytest.approx((1 * 10 + 2 * 10 + 2 * 10) * 6 / 60)
    assert f.asked_replica_minutes == pytest.approx((1 * 10 + 2 * 10 + 1 * 10) * 6 / 60)
    assert f.max_replicas == 2 and f.aborted == 1
    assert (f.changes, f.reversals) == (3, 2)  # 1 -> 2 (up), 2 -> 1 (down), 1 -> 2 (up)
    assert f.ttft_p50 == pytest.approx(1.8)
    assert f.timeline[0] == (0.0, 1, 1, 1) and f.timeline[1] == (60.0, 2, 2, 2)
    with pytest.raises(ValueError):
        summary.system_figures("keda", 1, [], [], 0, 0, samples, 0.0, 2.0)
    assert math.isnan(summary.system_figures("keda", 0, [], [], 0, 0, [], 6.0, 2.0).attainment)


def _sys(att: float, rep: float, aborted: int) -> summary.SystemFigures:
    return summary.SystemFigures("x", 10, 10, aborted, att, 2.0, rep, rep, 0.1, 0.2, 0.0, 2, 0, 0)


def test_the_target_wants_higher_attainment_at_no_more_replica_minutes_and_nothing_aborted():
    assert summary.verdict(_sys(0.9, 30, 0), _sys(0.8, 40, 5)) is True
    assert summary.verdict(_sys(0.9, 30, 0), _sys(0.9, 30, 0)) is True
    assert summary.verdict(_sys(0.7, 30, 0), _sys(0.8, 40, 0)) is False
    assert summary.verdict(_sys(0.9, 50, 0), _sys(0.8, 40, 0)) is False
    assert summary.verdict(_sys(0.9, 30, 3), _sys(0.8, 40, 0)) is False
    assert summary.verdict(None, _sys(0.8, 40, 0)) is None


def test_the_json_round_trips_into_bench_autoscaling(tmp_path):
    f = summary.Figures(_sys(0.9, 30.5, 0), None, None, {"trace": "t.csv"}, {"keda_version": "2.21.0"}, "now", "m")
    f.kubeforge.ttft_p99 = float("nan")
    p = tmp_path / "keda.json"
    summary.dump(f, p)
    assert json.loads(p.read_text())["kubeforge"]["ttft_p99"] is None  # NaN written as null
    assert summary.load_figures(p) == ((0.9, 30.5, 0), None)
    f.keda = _sys(0.8, 40.0, 2)
    summary.dump(f, p)
    a = autoscaling_args(["--keda-live", str(p)])
    assert a.live.kubeforge == (0.9, 30.5, 0) and a.live.keda == (0.8, 40.0, 2)
    assert a.live.group_ready_p50 is None


def test_a_file_of_another_bench_is_refused(tmp_path):
    p = tmp_path / "lws.json"
    p.write_text(json.dumps({"kubeforge": {"p50": 1.0}, "lws": {"p50": 2.0}}))
    with pytest.raises(ValueError):
        summary.load_figures(p)
    p.write_text(json.dumps({"kubeforge": {"p50": 1.0}, "keda": None}))
    with pytest.raises(ValueError):
        summary.load_figures(p)
    with pytest.raises(SystemExit):
        autoscaling_args(["--keda-live", str(p)])


def test_the_scaled_object_follows_kubeforges_live_spec():
    so = objects.scaled_object("ns", "chat", "http://127.0.0.1:9", 4, 1, 8, 1,
                               {"stabilizationWindowSeconds": 10, "maxStep": 2, "periodSeconds": 2})
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {"name": "chat"} and spec["pollingInterval"] == 1
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 8)
    trig = spec["triggers"][0]
    assert trig["type"] == "prometheus" and trig["metadata"]["threshold"] == "4"
    assert trig["metadata"]["query"] == 'sum(vllm:num_requests_waiting{namespace="ns",service="chat"})'
    down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down == {"stabilizationWindowSeconds": 10, "policies": [{"type": "Pods", "value": 2, "periodSeconds": 2}]}
    assert "scaleUp" not in spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert "advanced" not in objects.scaled_object("ns", "chat", "u", 4, 1, 8, 30, None)["spec"]


def test_the_deployment_runs_the_simulators_pods_and_the_aggregated_api_is_reached_on_loopback():
    d = objects.deployment("ns", "chat", {"spec": {"terminationGracePeriodSeconds": 0,
                                                    "containers": [{"name": "vllm", "image": "i"}]}},
                           {"fleet": "ns"})
    tpl = d["spec"]["template"]
    assert tpl["metadata"]["labels"] == {objects.SERVICE_LABEL: "chat"} == d["spec"]["selector"]["matchLabels"]
    assert tpl["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert tpl["spec"]["nodeSelector"] == {"fleet": "ns"} and tpl["spec"]["terminationGracePeriodSeconds"] == 0
    svc, api = objects.metrics_service(6443), objects.api_service(6443)
    assert svc["spec"]["type"] == "ExternalName" and svc["spec"]["externalName"] == "localhost"
    assert api["spec"]["service"] == {"name": svc["metadata"]["name"], "namespace": "keda", "port": 6443}
    assert api["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"


def test_flags():
    a = parse_args([])
    assert a.systems == ["kubeforge", "keda"] and a.cluster == "keda-live" and a.hpa_sync_period == "1s"
    assert parse_args(["--systems", "keda"]).systems == ["keda"]
    for bad in (["--systems", "hpa"], ["--compression", "0"], ["--end-min", "1"], ["--polling", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
