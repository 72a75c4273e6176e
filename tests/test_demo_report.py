"""The demo's pure parts (issue 19): what pods hold against a GPUPool status, the printed pool
table (read back by the cluster test), Events collapsed per reason, and the two-panel PNG."""

from __future__ import annotations

import re
import struct

import pytest

from kubeforge._demo.ledger import disagreements, holdings
from kubeforge._demo.report import POOL_ROW, pool_table
from kubeforge._demo.serving import event_lines


def pod(name: str, node: str | None, gpus: int, job: str | None = None, svc: str | None = None,
        phase: str = "Running") -> dict:
    labels = {"kubeforge.io/job-name": job} if job else {"kubeforge.io/inference-service": svc} if svc else {}
    return {"metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


NODES = {"nvlink": {"a-0": "nvl-a", "a-1": "nvl-a", "b-0": "nvl-b"}, "block": {"a-0": "ib0", "a-1": "ib0", "b-0": "ib0"}}


def status(a: int, b: int, workloads: list[dict]) -> dict:
    dom = lambda lv, n, x, cap: {"level": lv, "name": n, "nodes": cap // 8, "gpus": {"allocated": x, "free": cap - x, "allocatable": cap}}  # noqa: E731
    return {"domains": [dom("nvlink", "nvl-a", a, 16), dom("nvlink", "nvl-b", b, 8), dom("block", "ib0", a + b, 24)],
            "gpus": {"allocated": a + b, "free": 24 - a - b, "allocatable": 24}, "nodes": {"total": 3},
            "workloads": workloads}


PODS = [pod("t-0", "a-0", 8, job="train"), pod("t-1", "a-1", 8, job="train"), pod("s-0", "b-0", 1, svc="chat"),
        pod("pending", None, 8, job="other"), pod("done", "b-0", 8, job="old", phase="Succeeded")]
LISTED = [{"kind": "TrainingJob", "namespace": "default", "name": "train", "gpus": 16},
          {"kind": "InferenceService", "namespace": "default", "name": "chat", "gpus": 1}]


def test_only_bound_pods_that_are_not_terminal_hold_gpus():
    held = holdings(PODS)
    assert [(h.pod, h.node, h.gpus, h.workload[0]) for h in held] == [
        ("t-0", "a-0", 8, "TrainingJob"), ("t-1", "a-1", 8, "TrainingJob"), ("s-0", "b-0", 1, "InferenceService")]


def test_a_status_agrees_only_when_every_domain_total_and_workload_matches_the_pods():
    held = holdings(PODS)
    assert disagreements(status(16, 1, LISTED), held, NODES, [("TrainingJob", "default", "train")]) == []
    stale = disagreements(status(0, 0, []), held, NODES, [("TrainingJob", "default", "train")])
    assert "nvlink nvl-a: status 0 allocated, pods hold 16" in stale
    assert "pool: status 0 allocated, pods hold 17" in stale
    assert "TrainingJob default/train: not in status.workloads yet" in stale
    wrong = disagreements(status(16, 1, LISTED[:1] + [{**LISTED[1], "gpus": 2}]), held, NODES)
    assert wrong == ["InferenceService default/chat: status 2 GPUs, pods hold 1"]
    early = disagreements(status(16, 1, LISTED + [{**LISTED[0], "name": "admitted"}]), held, NODES)
    assert early == ["TrainingJob default/admitted: status 16 GPUs, pods hold 0"]


def test_the_pool_table_rows_read_back_and_name_who_holds_the_gpus():
    lines = pool_table("p", status(16, 1, LISTED), holdings(PODS), NODES)
    rows = {(m["level"], m["domain"]): (int(m["allocated"]), int(m["free"]), int(m["allocatable"]))
            for line in lines if (m := re.match(POOL_ROW, line))}
    assert rows == {("nvlink", "nvl-a"): (16, 0, 16), ("nvlink", "nvl-b"): (1, 7, 8), ("block", "ib0"): (17, 7, 24),
                    ("pool", "p"): (17, 7, 24)}
    assert lines[1].endswith("train 16") and lines[3].endswith("train 16, chat 1")


def test_events_about_single_groups_seen_at_once_are_one_line_others_each_their_own():
    evs = [{"type": "Normal", "reason": "Admitted", "message": f"group {i} placed"} for i in range(3)]
    evs.insert(1, {"type": "Normal", "reason": "Scaled", "message": "replicas 0 -> 3: queue 12"})
    evs.append({"type": "Normal", "reason": "Scaled", "message": "replicas 3 -> 8: queue 40"})
    assert event_lines(1.5, evs) == ["    +1.5s  Normal Admitted x3: group 0 placed",
                                     "    +1.5s  Normal Scaled: replicas 0 -> 3: queue 12",
                                     "    +1.5s  Normal Scaled: replicas 3 -> 8: queue 40"]
    assert len(event_lines(0, [{"type": "Normal", "reason": "R", "message": "x" * 500}], width=80)[0]) == 80


def test_the_picture_is_a_png_with_two_panels(tmp_path):
    pytest.importorskip("matplotlib")
    from kubeforge._demo.plot import PANELS, plot
    from kubeforge._demo.timeline import Sample, Timeline

    tl = Timeline(burst=(2.0, 6.0))
    tl.samples = [Sample(t=t, domains={"nvl-a": 8 * min(t, 4), "nvl-b": 0}, desired=min(t, 3), ready=min(t, 2),
                         groups=min(t, 3), metric=float(t), waiting=10 - t, running=t) for t in range(10)]
    path = tmp_path / "sub" / "demo.png"
    assert plot(tl, path) == 2
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1100, 750)
    assert " | ".join(PANELS).encode() in data


def test_every_manifest_the_demo_applies_is_valid_for_its_kind():
    import yaml

    from kubeforge import api
    from kubeforge.demo import EXAMPLES
    from kubeforge.sim.tools import REPO_ROOT

    kinds = {"GPUPool": api.GPUPool, "TrainingJob": api.TrainingJob, "InferenceService": api.InferenceService}
    seen = []
    for f in EXAMPLES:
        for doc in yaml.safe_load_all((REPO_ROOT / "examples" / f).read_text()):
            kinds[doc["kind"]].model_validate(doc)
            seen.append(doc["metadata"]["name"])
    assert seen == ["h100", "llama-pretrain", "finetune", "llama-405b", "llama-chat"]
