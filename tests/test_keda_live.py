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


def test_kubeforge_gets_the_hpas_default_scale_up_only_when_asked_and_its_api_takes_it():
    from kubeforge.api import InferenceServiceSpec
    from kubeforge.autoscaling import AutoscalingPolicy

    from e2e.bench.autoscaling.live import SERVICE
    from e2e.bench.keda_live.run import SCALE_UP, kubeforge_spec

    before = json.dumps(SERVICE, sort_keys=True)
    spec = kubeforge_spec("pool", "http://127.0.0.1:9", "spec")
    assert "scaleUp" not in spec["autoscaling"] and spec["pools"] == ["pool"]
    assert spec["autoscaling"]["prometheusURL"] == "http://127.0.0.1:9"
    hpa = kubeforge_spec("pool", "http://127.0.0.1:9", "hpa-default")
    assert hpa["autoscaling"]["scaleUp"] == {"stabilizationWindowSeconds": 0, "maxStep": 4, "periodSeconds": 15}
    assert json.dumps(SERVICE, sort_keys=True) == before  # the shared live SERVICE is left as it was
    p = AutoscalingPolicy.from_spec(InferenceServiceSpec.model_validate(hpa))
    assert (p.scale_up_max_step, p.scale_up_period_seconds, p.scale_up_stabilization_seconds) == (4, 15.0, 0.0)
    d = AutoscalingPolicy.from_spec(InferenceServiceSpec.model_validate(spec))
    assert (d.scale_up_max_step, d.scale_up_period_seconds) == (1, 10.0)  # kubeforge's default, as before
    # the HPA's default, max(100 %, 4 pods) per 15 s, within 1..8 is 4 pods per 15 s from any count
    for n in range(1, 9):
        assert min(8, max(2 * n, n + 4)) == min(8, n + SCALE_UP["hpa-default"]["maxStep"])
    with pytest.raises(KeyError):
        kubeforge_spec("pool", "u", "percent")


def test_the_scale_up_flag():
    assert parse_args([]).kubeforge_scale_up == "spec"
    assert parse_args(["--kubeforge-scale-up", "hpa-default"]).kubeforge_scale_up == "hpa-default"
    with pytest.raises(SystemExit):
        parse_args(["--kubeforge-scale-up", "fast"])


def test_a_rise_is_timed_from_the_first_look_whose_queue_the_replicas_asked_for_cannot_carry():
    from e2e.bench.keda_live.onsets import onsets

    looks = [Sample(0.0, 1, 1, 1, 4), Sample(0.5, 1, 1, 1, 5), Sample(1.0, 1, 1, 1, 9),  # 5 > 1 x 4 x 1.1
             Sample(1.5, 1, 1, 2, 12, 9.0), Sample(2.0, 2, 2, 2, 8), Sample(2.5, 2, 2, 2, 9),  # 9 > 8.8
             Sample(3.0, 2, 2, None, 30), Sample(3.5, 5, 2, 5, 30, 30.0)]
    rises = onsets(looks, 4.0, 0.1, 6.0)
    assert [(o.need, o.asked, o.lag, o.before, o.after, o.queue, o.seen) for o in rises] == [
        (3.0, 9.0, 6.0, 1, 2, 5, 9.0), (9.0, 21.0, 12.0, 2, 5, 12, 30.0)]  # 12 > 2 x 4.4 already at the rise
    # a blip the replicas could carry again within the patience is forgotten; a dip shorter is not
    blip = [Sample(0.0, 1, 1, 1, 6)] + [Sample(0.5 * i, 1, 1, 1, 2) for i in range(1, 6)] + [Sample(3.0, 2, 2, 2, 2)]
    assert onsets(blip, 4.0, 0.1, 6.0) == []
    dip = [Sample(0.0, 1, 1, 1, 6), Sample(0.5, 1, 1, 1, 2), Sample(1.0, 1, 1, 1, 7), Sample(1.5, 2, 2, 2, 7)]
    assert [o.lag for o in onsets(dip, 4.0, 0.1, 6.0)] == [9.0]
    assert onsets([Sample(0.0, 1, 1, 1), Sample(1.0, 2, 2, 2)], 4.0, 0.1, 6.0) == []  # no queue read


def test_kubeforges_decision_cadence_from_its_counter():
    from e2e.bench.keda_live.onsets import poll_cadence

    looks = [Sample(0.5 * i, 1, 1, 1, 0, None, float(d)) for i, d in enumerate([10, 10, 11, 11, 11, 12, 13, 13])]
    assert poll_cadence(looks) == {"decisions": 3.0, "seconds": 3.5, "mean_interval_s": round(3.5 / 3, 3),
                                   "longest_gap_s": 1.5}
    assert poll_cadence([Sample(0.0, 1, 1, 1)]) is None
    assert poll_cadence([Sample(0.0, 1, 1, 1, 0, None, 5.0), Sample(1.0, 1, 1, 1, 0, None, 5.0)])["mean_interval_s"] is None


def test_the_figures_carry_the_rises_and_the_json_keeps_them(tmp_path):
    looks = [Sample(0.0, 1, 1, 1, 0, 0.0, 0.0), Sample(0.5, 1, 1, 1, 6, 0.0, 1.0), Sample(1.0, 2, 2, 2, 6, 6.0, 2.0)]
    f = summary.system_figures("kubeforge", 1, [0.1], [0.0], 1, 0, looks, 6.0, 2.0)
    assert [o["lag"] for o in f.onsets] == [3.0] and f.polls["decisions"] == 2.0
    assert f.looks[1] == (3.0, 1, 1, 1, 6, 0.0, 1.0)
    summary.dump(summary.Figures(f, None, None, {}, {}, "now", "m"), tmp_path / "f.json")
    data = json.loads((tmp_path / "f.json").read_text())
    assert data["kubeforge"]["onsets"][0]["before"] == 1 and data["kubeforge"]["polls"]["seconds"] == 1.0


def test_the_slo_mode_flag_sets_the_attainments_target_on_the_wall_clock():
    a = parse_args([])
    assert a.kubeforge_mode == "queue" and a.slo is None  # the default runs as before
    s = parse_args(["--kubeforge-mode", "slo"]).slo
    # 2 s of trace time at 6x is 0.333 s of the simulator's (wall) clock; the API's 60 s window, 10 s
    assert s == {"timeToFirstTokenSeconds": 0.333333, "percentile": 99, "windowSeconds": 10}
    s = parse_args(["--kubeforge-mode", "slo", "--compression", "2", "--ttft", "1", "--slo-percentile", "90"]).slo
    assert s == {"timeToFirstTokenSeconds": 0.5, "percentile": 90, "windowSeconds": 30}
    assert parse_args(["--kubeforge-mode", "slo", "--compression", "12"]).slo["windowSeconds"] == 10  # the API's least
    for bad in (["--kubeforge-mode", "latency"], ["--kubeforge-mode", "slo", "--slo-percentile", "100"],
                ["--slo-window", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_the_slo_target_is_the_one_the_attainment_is_judged_by():
    from e2e.bench.keda_live.run import slo_spec

    s = slo_spec(2.0, 6.0)
    wall = s["timeToFirstTokenSeconds"]
    # the simulator's TTFTs (wall s) at the target and just above it, judged in trace time
    f = summary.system_figures("kubeforge", 2, [wall, wall * 1.001], [0.0, 0.0], 2, 0,
                               [Sample(0, 1, 1, 1), Sample(1, 1, 1, 1)], 6.0, 2.0)
    assert f.attainment == 0.5
    with pytest.raises(ValueError):
        slo_spec(0.0, 6.0)


def test_kubeforges_slo_spec_drops_the_queue_target_and_its_api_takes_it():
    from kubeforge.api import InferenceServiceSpec
    from kubeforge.autoscaling import AutoscalingPolicy

    from e2e.bench.autoscaling.live import SERVICE
    from e2e.bench.keda_live.run import kubeforge_spec, slo_spec

    before = json.dumps(SERVICE, sort_keys=True)
    spec = kubeforge_spec("pool", "http://127.0.0.1:9", "spec", slo_spec(2.0, 6.0))
    auto = spec["autoscaling"]
    assert "targetPerReplica" not in auto  # the API refuses it beside slo (CEL rule)
    assert auto["metric"] == "VLLMWaiting" and auto["pollingIntervalSeconds"] == 1
    assert auto["scaleDown"] == SERVICE["autoscaling"]["scaleDown"] and spec["maxReplicas"] == 8
    p = AutoscalingPolicy.from_spec(InferenceServiceSpec.model_validate(spec))
    assert p.slo is not None and p.slo.ttft_seconds * 6 == pytest.approx(2.0, abs=1e-5)
    assert (p.slo.percentile, p.slo.window_seconds, p.slo.itl_seconds) == (99, 10, None)
    assert json.dumps(SERVICE, sort_keys=True) == before
    assert "slo" not in kubeforge_spec("pool", "u")["autoscaling"]


def test_kubeforges_decision_sentences_are_kept_when_they_change():
    from e2e.bench.keda_live.run import note_conditions

    notes: list = []
    conds = [{"type": "ScalingActive", "message": "the queue model needs 3"}, {"type": "Ready", "message": "x"},
             {"type": "SLOMet", "message": "p99 time to first token 0.5s (target 0.333s)"}]
    note_conditions(notes, conds)
    note_conditions(notes, conds)
    note_conditions(notes, [])
    assert [m for _, m in notes] == ["ScalingActive: the queue model needs 3 | SLOMet: p99 time to first token 0.5s "
                                     "(target 0.333s)"]


def test_attainment_by_arrival_bins_where_the_misses_are():
    assert summary.by_arrival([0.0, 10.0, 31.0, 95.0], [0.0, 31.0]) == [(0.0, 2, 1), (30.0, 1, 1), (60.0, 0, 0),
                                                                         (90.0, 1, 0)]
    assert summary.by_arrival([], []) == []
    with pytest.raises(ValueError):
        summary.by_arrival([1.0], [], 0)
