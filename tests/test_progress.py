"""The pure side of worker reports (kubeforge.progress): payloads, the fold, tokens, buckets."""

from __future__ import annotations

import base64
import json

import pytest

from kubeforge.progress import (
    KUBEFLOW, MAX_BODY_BYTES, AuthError, Buckets, CheckpointReport, Report, ReportError, TokenBucket, bearer,
    checkpoint_status, identity_from_review, merge_reports, metric_text, parse_report, precheck, progress_status,
    stamp, stamp_ms, status_path,
)

T0 = 1_800_000_000.0


def body(obj) -> bytes:
    return json.dumps(obj).encode()


# --- payloads ------------------------------------------------------------------------------


def test_kubeforge_payload_normalized():
    r = parse_report(body({"step": 120, "totalSteps": 1000, "metrics": {"loss": 0.25, "tokens_per_second": 5000},
                           "checkpoint": {"step": 100, "path": "/ck/step-100", "time": "2027-01-15T08:00:00+01:00"}}),
                     kubeflow_path=False, received=T0, reporter="job-worker-0-0", attempt=2)
    assert (r.step, r.total_steps, r.percent, r.remaining_seconds) == (120, 1000, None, None)
    assert r.checkpoint == CheckpointReport(100, "/ck/step-100", "2027-01-15T07:00:00Z")
    assert r.metrics == (("loss", "0.25"), ("tokens_per_second", "5000"))
    assert (r.reporter, r.attempt, r.received) == ("job-worker-0-0", 2, T0)


def test_checkpoint_without_time_gets_the_acceptance_time():
    r = parse_report(body({"checkpoint": {"step": 20, "path": "/ck/step-20"}}), kubeflow_path=False, received=T0)
    assert r.checkpoint.time == stamp(T0)


@pytest.mark.parametrize("kubeflow_path", [True, False])
def test_kubeflow_payload_accepted_unchanged_on_either_path(kubeflow_path):
    # what the Kubeflow SDK's update_runtime_status sends (lastUpdatedTime from isoformat())
    payload = {"trainerStatus": {"progressPercentage": 45, "estimatedRemainingSeconds": 795,
                                 "metrics": [{"name": "loss", "value": "0.2347"}, {"name": "currentEpoch", "value": "2"}],
                                 "lastUpdatedTime": "2025-01-23T10:30:45.123456+00:00"}}
    r = parse_report(body(payload), kubeflow_path=kubeflow_path, received=T0)
    assert (r.source, r.percent, r.remaining_seconds, r.step) == (KUBEFLOW, 45.0, 795.0, None)
    assert r.metrics == (("loss", "0.2347"), ("currentEpoch", "2"))


@pytest.mark.parametrize("raw,code,words", [
    (b"{", 400, "not a JSON object"),
    (b"[1, 2]", 400, "not a JSON object"),
    (b'{"metrics": {"loss": NaN}}', 422, "metrics.loss: Input should be a finite number"),
    (b'{"metrics": {"loss": 1e400}}', 422, "metrics.loss: Input should be a finite number"),
    (b"x" * (MAX_BODY_BYTES + 1), 413, "at most 16384"),
    (body({}), 422, "empty report"),
    (body({"step": "10"}), 422, "step: Input should be a valid integer"),
    (body({"step": True}), 422, "step"),
    (body({"step": -1}), 422, "step: Input should be greater than or equal to 0"),
    (body({"step": 5, "totalSteps": 4}), 422, "beyond totalSteps 4"),
    (body({"stepp": 5}), 422, "stepp: Extra inputs are not permitted"),
    (body({"metrics": {"bad name": 1}}), 422, "metrics.bad name"),
    (body({"metrics": {"loss": "0.3"}}), 422, "metrics.loss"),
    (body({"metrics": {f"m{i}": i for i in range(17)}}), 422, "metrics"),
    (body({"checkpoint": {"step": 1}}), 422, "checkpoint.path: Field required"),
    (body({"checkpoint": {"step": 1, "path": "x", "time": 12}}), 422, "RFC 3339"),
    (body({"checkpoint": {"step": 1, "path": "x", "time": "2027-01-01T00:00:00"}}), 422, "time zone"),
    (body({"checkpoint": {"step": 1, "path": "x" * 4097}}), 422, "checkpoint.path"),
    (body({"trainerStatus": {}}), 422, "empty report"),
    (body({"trainerStatus": {"progressPercentage": 101}}), 422, "trainerStatus.progressPercentage"),
    (body({"trainerStatus": {"estimatedRemainingSeconds": -1}}), 422, "estimatedRemainingSeconds"),
    (body({"trainerStatus": {"metrics": [{"name": "a", "value": 1}]}}), 422, "trainerStatus.metrics.0.value"),
    (body({"trainerStatus": {"metrics": [{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]}}), 422, "twice"),
    (body({"trainerStatus": {"progress": 3}}), 422, "trainerStatus.progress: Extra inputs"),
])
def test_refusals_name_the_field(raw, code, words):
    with pytest.raises(ReportError) as e:
        parse_report(raw, kubeflow_path=False, received=T0)
    assert e.value.code == code
    assert words in e.value.message


def test_kubeflow_path_takes_only_kubeflow_payload():
    with pytest.raises(ReportError) as e:
        parse_report(body({"step": 3}), kubeflow_path=True, received=T0)
    assert e.value.code == 422 and "trainerStatus: Field required" in e.value.message


@pytest.mark.parametrize("value,text", [(3, "3"), (3.0, "3"), (0.1, "0.1"), (1e20, "1e+20"), (-2.5, "-2.5")])
def test_metric_text(value, text):
    assert metric_text(value) == text


def test_status_paths():
    assert status_path("ns", "j") == "/apis/kubeforge.io/v1alpha1/namespaces/ns/trainingjobs/j/status"
    assert status_path("ns", "j", kubeflow=True) == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/j/status"


# --- merging reports between two writes ----------------------------------------------------


def R(received=T0, **kw) -> Report:
    return Report(received=received, reporter=kw.pop("reporter", "p0"), **kw)


def ck(step: int) -> CheckpointReport:
    return CheckpointReport(step, f"/ck/step-{step}", stamp(T0))


@pytest.mark.parametrize("older,newer,expect", [
    (None, R(step=5), R(step=5)),
    # progress from the newer, checkpoint kept from the older
    (R(step=5, checkpoint=ck(5)), R(T0 + 1, step=7), R(T0 + 1, step=7, checkpoint=ck(5))),
    # a newer checkpoint wins; an older one never replaces it
    (R(checkpoint=ck(40)), R(T0 + 1, checkpoint=ck(20), step=21), R(T0 + 1, step=21, checkpoint=ck(40))),
    # fields the newer lacks stay
    (R(step=5, total_steps=100), R(T0 + 1, metrics=(("loss", "1"),)),
     R(T0 + 1, step=5, total_steps=100, metrics=(("loss", "1"),))),
    # metrics by name, the newer first
    (R(metrics=(("loss", "2"), ("eval_loss", "3"))), R(T0 + 1, metrics=(("loss", "1"),)),
     R(T0 + 1, metrics=(("loss", "1"), ("eval_loss", "3")))),
    # a later attempt starts over but its checkpoint still competes
    (R(step=90, attempt=0, checkpoint=ck(80)), R(T0 + 1, step=3, attempt=1),
     R(T0 + 1, step=3, attempt=1, checkpoint=ck(80))),
    # a late report of an earlier attempt changes nothing but a newer checkpoint
    (R(step=3, attempt=1), R(T0 + 1, step=95, attempt=0, checkpoint=ck(90)), R(step=3, attempt=1, checkpoint=ck(90))),
])
def test_merge_reports(older, newer, expect):
    assert merge_reports(older, newer) == expect


# --- the fold into status --------------------------------------------------------------------


def written(step=None, total=None, percent=None, at=T0, eta=None, metrics=()):
    return {"step": step, "totalSteps": total, "percent": percent, "eta": eta, "lastReportTime": stamp_ms(at),
            "reporter": "p0", "metrics": [{"name": n, "value": v} for n, v in metrics]}


@pytest.mark.parametrize("old,rep,percent,eta", [
    # first report: percent from steps, no rate yet
    (None, R(step=10, total_steps=100), 10.0, None),
    # 20 steps in 20 s, 70 left: 70 s
    (written(10, 100, at=T0), R(T0 + 20, step=30), 30.0, T0 + 90),
    # reported seconds win over the rate
    (written(10, 100, at=T0), R(T0 + 20, step=30, remaining_seconds=5.0), 30.0, T0 + 25),
    # a resume from an older checkpoint: no rate, ETA unknown
    (written(50, 100, at=T0, eta=stamp(T0 + 50)), R(T0 + 20, step=30), 30.0, None),
    # stood still: unknown
    (written(50, 100, at=T0, eta=stamp(T0 + 50)), R(T0 + 20, step=50), 50.0, None),
    # two samples too close: the previous ETA stays
    (written(50, 100, at=T0, eta=stamp(T0 + 50)), R(T0 + 0.5, step=51), 51.0, T0 + 50),
    # Kubeflow: percent only; rate from percent
    (written(percent=20.0, at=T0), R(T0 + 10, percent=30.0, source=KUBEFLOW), 30.0, T0 + 80),
    # done: the ETA is now
    (written(90, 100, at=T0), R(T0 + 10, step=100), 100.0, T0 + 10),
    # totalSteps unknown: no percent, no ETA
    (written(10, at=T0), R(T0 + 10, step=20), None, None),
    # absurd rate: capped at ten years
    (written(1, 10**9, at=T0), R(T0 + 1000, step=2), 0.0, T0 + 1000 + 10 * 365 * 86400.0),
])
def test_progress_status_percent_and_eta(old, rep, percent, eta):
    p = progress_status(old, rep)
    assert p["percent"] == percent
    assert p["eta"] == (stamp(eta) if eta is not None else None)
    assert p["lastReportTime"] == stamp_ms(rep.received)
    assert set(p) == {"step", "totalSteps", "percent", "eta", "lastReportTime", "reporter", "metrics"}


def test_progress_status_keeps_total_and_merges_metrics_by_name():
    old = written(10, 100, metrics=(("eval_loss", "0.9"), ("loss", "1.0")))
    p = progress_status(old, R(T0 + 30, step=40, metrics=(("loss", "0.5"), ("lr", "0.001"))))
    assert p["totalSteps"] == 100 and p["step"] == 40
    assert p["metrics"] == [{"name": "eval_loss", "value": "0.9"}, {"name": "loss", "value": "0.5"},
                            {"name": "lr", "value": "0.001"}]


def test_progress_status_keeps_at_most_16_metrics_the_reported_first():
    old = written(metrics=tuple((f"old{i:02d}", "1") for i in range(16)))
    p = progress_status(old, R(T0 + 30, metrics=tuple((f"new{i}", "2") for i in range(4))))
    names = [m["name"] for m in p["metrics"]]
    assert len(names) == 16 and {f"new{i}" for i in range(4)} <= set(names)


@pytest.mark.parametrize("last,reported,expect", [
    (None, None, None),
    (None, ck(20), {"step": 20, "path": "/ck/step-20", "time": stamp(T0)}),
    ({"step": 10, "path": "/ck/step-10"}, ck(20), {"step": 20, "path": "/ck/step-20", "time": stamp(T0)}),
    ({"step": 20, "path": "/ck/step-20"}, ck(20), None),   # the same: nothing to write
    ({"step": 40, "path": "/ck/step-40"}, ck(20), None),   # older than the termination message's: kept
])
def test_checkpoint_only_moves_forward(last, reported, expect):
    assert checkpoint_status(last, reported) == expect


# --- tokens ---------------------------------------------------------------------------------


def jwt(claims) -> str:
    def enc(o):
        return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()
    return f"{enc({'alg': 'RS256'})}.{enc(claims)}.sig"


def claims(ns="team-a", aud=("kubeforge.io",), exp=T0 + 3600, pod=True):
    k8s = {"namespace": ns, "serviceaccount": {"name": "default", "uid": "u"}}
    if pod:
        k8s["pod"] = {"name": "j-worker-0-0", "uid": "pu"}
    return {"aud": list(aud), "exp": exp, "kubernetes.io": k8s, "sub": f"system:serviceaccount:{ns}:default"}


@pytest.mark.parametrize("header,code", [(None, 401), ("", 401), ("Basic abc", 401), ("Bearer ", 401)])
def test_bearer_refusals(header, code):
    with pytest.raises(AuthError) as e:
        bearer(header)
    assert e.value.code == code


@pytest.mark.parametrize("token,code,words", [
    ("not-a-jwt", 401, "not a JWT"),
    (jwt(claims(aud=("https://kubernetes.default.svc",))), 401, "audience"),
    (jwt(claims(exp=T0 - 1)), 401, "expired"),
    (jwt(claims(pod=False)), 401, "not bound to a pod"),
    (jwt(claims(ns="team-b")), 403, "namespace 'team-b'"),
])
def test_precheck_refuses_without_a_token_review(token, code, words):
    with pytest.raises(AuthError) as e:
        precheck(token, "team-a", "kubeforge.io", T0)
    assert e.value.code == code and words in e.value.message


def test_precheck_passes_a_well_formed_token():
    assert precheck(jwt(claims()), "team-a", "kubeforge.io", T0)["kubernetes.io"]["pod"]["name"] == "j-worker-0-0"


def review(authenticated=True, user="system:serviceaccount:team-a:default", pod="j-worker-0-0", aud=("kubeforge.io",)):
    extra = {"authentication.kubernetes.io/pod-name": [pod], "authentication.kubernetes.io/pod-uid": ["pu"]} if pod else {}
    return {"authenticated": authenticated, "user": {"username": user, "extra": extra}, "audiences": list(aud),
            **({} if authenticated else {"error": "token has been invalidated"})}


@pytest.mark.parametrize("status,code,words", [
    (review(authenticated=False), 401, "invalidated"),
    (review(aud=("other",)), 401, "audience"),
    (review(user="alice"), 403, "not a ServiceAccount"),
    (review(user="system:serviceaccount:team-b:default"), 403, "team-b/default may not report"),
    (review(pod=None), 403, "not bound to a pod"),
])
def test_identity_from_review_refusals(status, code, words):
    with pytest.raises(AuthError) as e:
        identity_from_review(status, "team-a", "kubeforge.io")
    assert e.value.code == code and words in e.value.message


def test_identity_from_review():
    who = identity_from_review(review(), "team-a", "kubeforge.io", expires=T0)
    assert (who.namespace, who.service_account, who.pod, who.pod_uid, who.expires) == (
        "team-a", "default", "j-worker-0-0", "pu", T0)


# --- token buckets ---------------------------------------------------------------------------


def test_bucket_burst_then_rate():
    b = TokenBucket(rate=1.0, burst=3)
    assert [b.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(0.0) == pytest.approx(1.0)
    assert b.take(0.5) == pytest.approx(0.5)
    assert b.take(1.0) == 0.0
    assert b.take(100.0) == 0.0 and b.tokens == pytest.approx(2.0)  # refilled to the burst, one taken


def test_buckets_are_per_key_and_bounded():
    bs = Buckets(rate=0.1, burst=1, max_keys=2)
    assert bs.take("a", 0.0) == 0.0 and bs.take("a", 0.0) > 0
    assert bs.take("b", 0.0) == 0.0  # another job is not slowed by a's flood
    bs.take("c", 0.0)
    assert len(bs) == 2  # "a", the least recently used, went first
    assert bs.take("a", 0.0) == 0.0


