"""The node cache agent (issue 29) against real local servers, no cluster: models fetched from
the Hugging Face Hub stand-in (kubeforge.sim.hub) through the real huggingface_hub, verified by
its checksums, once per node however many ask at once, evicted least recently used first, and
each copy's state written to a fake API server as the ModelCacheNode status says it."""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("huggingface_hub")

from kubeforge.api import ModelCacheNodeStatus
from kubeforge.cacheagent import CacheAgent, FetchError, NodeStore, SecretMissing, Source, fetch
from kubeforge.modelcache import READY_MARKER
from kubeforge.sim.hub import HubStandIn, make_model_repo

REPO = "org/tiny-llama"
WEIGHTS = 1 << 20
TOKEN = "hf_s3cr3t-token-value"


class FakeApi:
    """The agent's three API calls on dicts; every status written is kept (validated)."""

    def __init__(self, node: str, spec: dict[str, Any], secrets: dict[tuple[str, str], dict[str, str]] | None = None):
        self.node = node
        self.obj: dict[str, Any] = {"metadata": {"name": node, "generation": 1}, "spec": spec}
        self.secrets = secrets or {}
        self.writes: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def get_node_cache(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj) if name == self.node else None

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        if (namespace, name) not in self.secrets:
            raise SecretMissing(f"Secret {namespace}/{name}: not found")
        return dict(self.secrets[(namespace, name)])

    def patch_status(self, name: str, status: dict[str, Any]) -> None:
        ModelCacheNodeStatus.model_validate(status)  # the CRD's shape
        with self.lock:
            self.writes.append(copy.deepcopy(status))
            self.obj["status"] = copy.deepcopy(status)

    def phases(self, key: str) -> list[str]:
        """The copy's phases in the order written, repeats collapsed."""
        out: list[str] = []
        for w in self.writes:
            for m in w["models"]:
                if m["key"] == key and (not out or out[-1] != m["phase"]):
                    out.append(m["phase"])
        return out

    def model(self, key: str) -> dict[str, Any]:
        return next(m for m in self.obj["status"]["models"] if m["key"] == key)


@pytest.fixture
def hub(tmp_path: Path):
    root = tmp_path / "hub"
    make_model_repo(root, REPO, WEIGHTS, shards=2)
    make_model_repo(root, "org/other", WEIGHTS // 2, shards=1)
    with HubStandIn(root) as h:
        yield h


def wanted(hub: HubStandIn, repo: str = REPO, key: str = "tiny-llama-0123456789ab", **kw) -> dict[str, Any]:
    size = sum(f.stat().st_size for f in (hub.root / repo).rglob("*") if f.is_file())
    return {"key": key, "uri": f"hf://{repo}", "revision": hub.commit(repo), "sizeBytes": size, **kw}


def served(hub: HubStandIn, repo: str = REPO) -> int:
    return sum(n for k, n in hub.served.items() if k.startswith(repo + "/"))


def test_fetch_from_the_hub_stand_in_through_huggingface_hub(hub, tmp_path):
    want = wanted(hub)
    got = fetch(Source(want["uri"], want["revision"], size_bytes=want["sizeBytes"]), tmp_path / "d", hub.url)
    assert got.bytes == want["sizeBytes"] and got.digest == want["revision"]
    files = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert files == ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                     "tokenizer.json"]  # and no .cache bookkeeping of huggingface_hub
    assert served(hub) == want["sizeBytes"]


def test_agent_fetches_verifies_and_reports_pending_downloading_ready(hub, tmp_path):
    want = wanted(hub)
    api = FakeApi("gpu-0", {"pool": "p", "hostPath": str(tmp_path / "cache"), "models": [want]})
    agent = CacheAgent("gpu-0", api, identity="agent-x", hf_endpoint=hub.url, progress_seconds=0.01)
    status = agent.sync_once()
    assert api.phases(want["key"])[0] == "Pending" and api.phases(want["key"])[-1] == "Ready"
    assert "Downloading" in api.phases(want["key"])
    m = api.model(want["key"])
    assert m["progressPercent"] == 100 and m["bytes"] == want["sizeBytes"] and m["digest"] == want["revision"]
    assert status["ready"] == 1 and status["usedBytes"] == want["sizeBytes"] and status["agent"] == "agent-x"
    assert status["observedGeneration"] == 1 and status["conditions"][0]["status"] == "True"
    copy_dir = tmp_path / "cache" / want["key"]
    assert (copy_dir / READY_MARKER).is_file() and (copy_dir / "config.json").is_file()
    agent.sync_once()  # again: found on disk, not fetched again
    assert served(hub) == want["sizeBytes"] and agent.downloads == 1


def test_a_corrupted_download_is_failed_with_a_reason_and_leaves_no_copy(hub, tmp_path):
    want = wanted(hub)
    hub.corrupt.add(f"{REPO}/model-00002-of-00002.safetensors")
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": [want]})
    CacheAgent("gpu-0", api, hf_endpoint=hub.url).sync_once()
    m = api.model(want["key"])
    assert m["phase"] == "Failed" and m["reason"] == "DigestMismatch"
    assert "model-00002-of-00002.safetensors" in m["message"]
    assert not (tmp_path / "cache" / want["key"]).exists()
    assert not any((tmp_path / "cache" / ".kubeforge" / "partial").iterdir())


def test_a_wrong_size_in_the_spec_is_failed_size_mismatch(hub, tmp_path):
    want = {**wanted(hub), "sizeBytes": 12345}
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": [want]})
    CacheAgent("gpu-0", api, hf_endpoint=hub.url).sync_once()
    assert api.model(want["key"])["reason"] == "SizeMismatch"


def test_a_failed_copy_is_retried_after_its_backoff_only(hub, tmp_path):
    want = wanted(hub)
    hub.corrupt.add(f"{REPO}/config.json")
    now = [1000.0]
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": [want]})
    agent = CacheAgent("gpu-0", api, hf_endpoint=hub.url, retry_seconds=30, clock=lambda: now[0])
    agent.sync_once()
    first = served(hub)
    agent.sync_once()  # within the backoff: not fetched again, still Failed
    assert served(hub) == first and api.model(want["key"])["phase"] == "Failed"
    hub.corrupt.clear()
    now[0] += 31
    agent.sync_once()
    assert api.model(want["key"])["phase"] == "Ready" and "reason" not in api.model(want["key"])


def test_two_concurrent_agents_on_one_node_download_once(hub, tmp_path):
    want = wanted(hub)
    spec = {"hostPath": str(tmp_path / "cache"), "models": [want]}
    apis = [FakeApi("gpu-0", spec), FakeApi("gpu-0", spec)]
    agents = [CacheAgent("gpu-0", a, hf_endpoint=hub.url) for a in apis]
    start = threading.Barrier(2)

    def go(agent: CacheAgent) -> None:
        start.wait()
        agent.sync_once()

    threads = [threading.Thread(target=go, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(a.model(want["key"])["phase"] == "Ready" for a in apis)
    assert served(hub) == want["sizeBytes"]  # the hub served the model's bytes once
    assert sorted(a.downloads for a in agents) == [0, 1]


def test_the_store_lock_makes_concurrent_requests_wait_for_one_download(tmp_path):
    store = NodeStore(tmp_path / "cache")
    calls: list[int] = []
    gate = threading.Event()

    def download(dest: Path) -> tuple[int, str | None]:
        calls.append(1)
        gate.wait(5)
        (dest / "w.bin").write_bytes(b"x" * 10)
        return 10, None

    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(store.ensure("k", "s3://b/m", download, 1.0)[1]))
               for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and sorted(results) == [False, False, False, True] and store.is_ready("k")


def test_lru_eviction_makes_room_and_never_takes_a_wanted_copy(hub, tmp_path):
    a = wanted(hub, REPO, "a-000000000000")
    b = wanted(hub, "org/other", "b-000000000000")
    now = [100.0]
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": [a]})
    agent = CacheAgent("gpu-0", api, hf_endpoint=hub.url, clock=lambda: now[0])
    agent.sync_once()
    now[0] = 200.0
    api.obj["spec"]["models"] = [b]  # a no longer wanted: kept, then evicted for b
    api.obj["spec"]["capacityBytes"] = a["sizeBytes"] + 10
    agent.sync_once()
    keys = [m["key"] for m in api.obj["status"]["models"]]
    assert keys == [b["key"]] and not (tmp_path / "cache" / a["key"]).exists()
    api.obj["spec"]["models"] = [b, a]  # both wanted, room for one: a fails DiskFull, b stays
    agent.sync_once()
    assert api.model(b["key"])["phase"] == "Ready"
    assert api.model(a["key"])["phase"] == "Failed" and api.model(a["key"])["reason"] == "DiskFull"
    cond = api.obj["status"]["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "DiskFull")


def test_an_unwanted_copy_is_kept_and_reported_until_room_is_needed(hub, tmp_path):
    a = wanted(hub)
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": [a]})
    agent = CacheAgent("gpu-0", api, hf_endpoint=hub.url)
    agent.sync_once()
    api.obj["spec"]["models"] = []
    status = CacheAgent("gpu-0", api, hf_endpoint=hub.url).sync_once()  # a restarted agent finds it on disk
    assert [m["key"] for m in status["models"]] == [a["key"]] and status["models"][0]["uri"] == a["uri"]


def test_a_private_model_uses_the_named_secret_and_never_shows_it(hub, tmp_path, caplog):
    hub.token = TOKEN
    want = wanted(hub, credentials={"namespace": "team-a", "name": "hf"})
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": [want]},
                  secrets={("team-a", "hf"): {"HF_TOKEN": TOKEN}})
    caplog.set_level(logging.DEBUG)
    CacheAgent("gpu-0", api, hf_endpoint=hub.url).sync_once()
    assert api.model(want["key"])["phase"] == "Ready"
    api.secrets[("team-a", "hf")] = {"HF_TOKEN": TOKEN + "-revoked"}
    other = wanted(hub, "org/other", "other-000000000000", credentials={"namespace": "team-a", "name": "hf"})
    api.obj["spec"]["models"] = [want, other]
    CacheAgent("gpu-0", api, hf_endpoint=hub.url).sync_once()
    assert api.model(other["key"])["phase"] == "Failed" and api.model(other["key"])["reason"] == "DownloadFailed"
    assert TOKEN not in repr(api.writes) and TOKEN not in caplog.text


def test_a_missing_secret_is_failed_secret_not_found(hub, tmp_path):
    want = wanted(hub, credentials={"namespace": "team-a", "name": "nope"})
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": [want]})
    CacheAgent("gpu-0", api, hf_endpoint=hub.url).sync_once()
    m = api.model(want["key"])
    assert (m["phase"], m["reason"]) == ("Failed", "SecretNotFound") and "team-a/nope" in m["message"]


def test_pvc_and_unknown_schemes_are_refused_with_a_reason(tmp_path):
    with pytest.raises(FetchError) as e:
        fetch(Source("pvc://claim/llama"), tmp_path)
    assert e.value.reason == "Unsupported"


def test_no_model_cache_node_yet_writes_nothing(tmp_path):
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path)})
    assert CacheAgent("gpu-1", api).sync_once() is None and api.writes == []


def test_the_status_keeps_the_wanted_copies_first_within_the_crds_limit():
    from kubeforge.cacheagent import Copy, node_status

    copies = [Copy(f"m{i:03d}", f"s3://b/m{i}", "Ready", 10, ready_at=1.0, last_used=2.0) for i in range(70)]
    status = node_status(copies, generation=3, agent="a", now=5.0)
    ModelCacheNodeStatus.model_validate(status)
    assert [m["key"] for m in status["models"]] == [f"m{i:03d}" for i in range(64)]
