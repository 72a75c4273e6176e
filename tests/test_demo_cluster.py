"""``kubeforge demo`` end to end (issue 19), on its own local cluster: the demo applies its
examples to namespace ``default`` with a GPUPool selecting every H100 node, so it cannot share
the session's cluster with the other tests' fleets.

The demo entry point runs with a shortened burst (8 s: the trace's peak included), then the
test reads the cluster itself and checks what the demo printed and drew:

- the pool table printed at the end agrees with where the pods hold GPUs now (every NVLink
  domain, every IB block, the pool), and the table printed after placement agrees too (the
  chat service is back at zero, the rest does not move);
- the chat service scaled above its minimum (Scaled Events, the printed summary) and came back
  down to it, with no group left;
- each 405B group's pods are inside one NVLink domain, the status says the same nodes;
- no Warning Event;
- the model-cache step: one replica Cached on the node keeping the model warm, one Cold on
  another, each node's copies and the pool's Models column printed, the step's objects gone;
- the PNG exists, is a PNG, has a sane size and names both panels, and the figure had 2 panels.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct

import pytest

from conftest import ROOT, TEST_CLUSTER

pytestmark = pytest.mark.cluster

NAME = f"{TEST_CLUSTER}-demo"
CLIQUE, BLOCK = "nvidia.com/gpu.clique", "cloud.google.com/gce-topology-block"


def png_facts(data: bytes) -> tuple[int, int, dict[str, str]]:
    """(width, height, tEXt chunks) of a PNG; raises AssertionError when it is not one."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    i, size, text = 8, None, {}
    while i + 8 <= len(data):
        (length,), kind = struct.unpack(">I", data[i:i + 4]), data[i + 4:i + 8]
        body = data[i + 8:i + 8 + length]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"IEND":
            break
        i += 12 + length
    assert size is not None, "no IHDR chunk"
    return size[0], size[1], text


def tables(text: str) -> list[dict[tuple[str, str], int]]:
    """Each printed pool table as {(level, domain): allocated}."""
    from kubeforge._demo.report import POOL_ROW

    out, cur = [], None
    for line in text.splitlines():
        if line.startswith("GPUs per domain, pool"):
            cur = {}
            out.append(cur)
        elif cur is not None and (m := re.match(POOL_ROW, line)):
            cur[(m["level"], m["domain"])] = int(m["allocated"])
        elif cur is not None and not line.startswith("  "):
            cur = None
    return out


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    from kubeforge.demo import demo, stop_operator
    from kubeforge.sim.cluster import Cluster

    out_dir = tmp_path_factory.mktemp("demo-output")
    c = Cluster(NAME)
    c.down(log=lambda m: print(f"[cluster] {m}"))
    buf = io.StringIO()
    try:
        res = demo(NAME, ROOT / "examples" / "fleet-h100.yaml", timeout=120, burst_seconds=8, out_dir=out_dir, out=buf)
        print(buf.getvalue())
        yield c, res, buf.getvalue(), out_dir
    finally:
        stop_operator(c)
        if not os.environ.get("KUBEFORGE_KEEP_CLUSTER"):
            c.down(log=lambda m: print(f"[cluster] {m}"))


def get(c, *args: str) -> dict:
    return json.loads(c.kubectl("get", *args, "-o", "json").stdout)


@pytest.mark.timeout(300)
def test_the_demo_places_scales_and_draws_what_the_cluster_shows(demo_run):
    from kubeforge.objects import pod_requests

    c, res, text, out_dir = demo_run
    assert res.rc == 0, f"{res.problems}\n{text[-3000:]}"
    # every training job shows its progress and ETA, reported through the status endpoint, and a
    # job whose ranks all run is printed Running (issue 27)
    for job in ("llama-pretrain", "finetune"):
        assert res.progress[job].get("eta") and res.progress[job].get("percent") is not None, res.progress
        assert re.search(rf"TrainingJob {job}: .* phase Running", text), text
    assert "  progress: step " in text and "ETA unknown" not in text and "phase Pending" not in text

    # the printed pool tables agree with where the pods hold GPUs
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in get(c, "nodes")["items"]}
    pods = [p for p in get(c, "pods", "-n", "default")["items"]
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")]
    held: dict[tuple[str, str], int] = {}
    for p in pods:
        gpus = pod_requests(p["spec"]).get("nvidia.com/gpu", 0)
        node = labels[p["spec"]["nodeName"]]
        for key in (("nvlink", node[CLIQUE]), ("block", node[BLOCK]), ("pool", "h100")):
            held[key] = held.get(key, 0) + gpus
    printed = tables(text)
    assert len(printed) == 2, text
    for table in printed:  # after placement and at the end the chat service is at zero
        assert len([k for k in table if k[0] == "nvlink"]) == 8 and table[("pool", "h100")] == 80, table
        assert table == {k: held.get(k, 0) for k in table}, (table, held)

    # the chat service went above minReplicas 0 and came back down
    st = get(c, "inferenceservice", "llama-chat")["status"]
    assert st["desiredReplicas"] == 0 and not st.get("groups"), st
    scaled = [e["message"] for e in get(c, "events", "--field-selector", "involvedObject.name=llama-chat")["items"]
              if e["reason"] == "Scaled"]
    ups = [int(m.group(2)) for s in scaled if (m := re.match(r"replicas (\d+) -> (\d+)", s)) and int(m[2]) > int(m[1])]
    downs = [s for s in scaled if re.match(r"replicas \d+ -> 0\b", s)]
    assert ups and max(ups) > 0 and downs, scaled
    assert res.peak_replicas == max(ups) and f"llama-chat went 0 -> {res.peak_replicas} -> 0 replicas" in text

    # each 405B group inside one NVLink domain, its pods where the status says
    big = get(c, "inferenceservice", "llama-405b")["status"]
    assert len(big["groups"]) == 2 and big["readyReplicas"] == 2
    for g in big["groups"]:
        mine = sorted((p for p in pods if p["metadata"]["labels"].get("kubeforge.io/inference-service") == "llama-405b"
                       and p["metadata"]["labels"].get("kubeforge.io/group-index") == str(g["index"])),
                      key=lambda p: p["metadata"]["labels"]["kubeforge.io/worker-index"])
        assert [p["spec"]["nodeName"] for p in mine] == g["nodes"] and len(mine) == 2
        assert len({labels[n][CLIQUE] for n in g["nodes"]}) == 1, g
        assert f"group {g['index']}: nvlink {labels[g['nodes'][0]][CLIQUE]}" in text

    assert res.warnings == [] and "Warning Events during the demo: none" in text

    # a model kept warm on one node of a small pool, one replica started Cached there and one Cold
    # on another (whose agent then fetched its copy), the pool's Models column, the modelled start
    # times of a 70B model (kubeforge.sim.weights), and nothing of the step left (issue 29)
    reps = re.findall(r"replica \d: node (\S+), weights (Cached|Cold) \(Loaded\); modelled start of a 70B model "
                      r"(\d+) s", text)
    assert sorted(r[1] for r in reps) == ["Cached", "Cold"] and len({r[0] for r in reps}) == 2, text
    warm, cold = (next(r for r in reps if r[1] == src) for src in ("Cached", "Cold"))
    assert f"keepWarm copy Ready on {warm[0]} " in text and (warm[2], cold[2]) == ("174", "456"), (warm, cold)
    assert re.search(rf"ModelCacheNode {warm[0]}: tiny-llama Ready \(wanted: (Placed, KeepWarm|KeepWarm, Placed)\)",
                     text), text
    assert f"ModelCacheNode {cold[0]}: tiny-llama Ready (wanted: Placed)" in text
    assert re.search(r"^  h100-models\s+3\s+24\s+8\s+16\s.*tiny-llama 2/3", text, re.M), text
    assert "kwok runs no engine" in text and "Warning Events during the step: none" in text
    assert not get(c, "modelcachenodes")["items"]
    assert [p["metadata"]["name"] for p in get(c, "gpupools")["items"]] == ["h100"]
    assert c.kubectl("get", "inferenceservice", "tiny-llama", "--ignore-not-found").stdout == ""

    # the picture: a PNG of a sane size naming both panels, drawn with 2 panels
    png = out_dir / "demo.png"
    assert res.plot == png and png.exists() and str(png) in text
    width, height, meta = png_facts(png.read_bytes())
    assert width >= 800 and height >= 500, (width, height)
    assert "GPUs allocated per NVLink domain" in meta["Description"] and "replicas and queue" in meta["Description"]
    assert res.panels == 2
    samples = json.loads((out_dir / "timeline.json").read_text())["samples"]
    assert max(s["desired"] or 0 for s in samples) == res.peak_replicas
