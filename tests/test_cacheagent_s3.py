"""The node cache agent's s3:// and gs:// path (issue 29) against a real local S3-compatible
server, moto's server mode on loopback (from a virtual environment of its own, see
kubeforge.sim.objectstore): the MinIO SDK lists and fetches the model's objects with the keys of
the named Secret, the listing digest pins it, and no key shows in a status or a log."""

from __future__ import annotations

import io
import logging

import pytest

pytest.importorskip("minio")

from minio import Minio  # noqa: E402

from kubeforge.cacheagent import CacheAgent, FetchError, Source, fetch  # noqa: E402
from kubeforge.modelcache import listing_digest  # noqa: E402
from kubeforge.sim.objectstore import MotoServer, ObjectStoreError, ensure_moto  # noqa: E402
from test_cacheagent import FakeApi  # noqa: E402

pytestmark = pytest.mark.system  # moto's server runs from its own venv, made from PyPI on first use

ACCESS, SECRET = "AKIAKUBEFORGETEST", "s3cr3t-kubeforge-key"
FILES = {"config.json": b'{"model_type": "llama"}', "weights/model.safetensors": bytes(range(256)) * 2048}


@pytest.fixture(scope="module")
def s3():
    try:
        server = MotoServer(ensure_moto()).start()
    except ObjectStoreError as e:
        pytest.skip(f"no local S3 server: {e}")
    host = server.url.split("://", 1)[1]
    client = Minio(host, access_key=ACCESS, secret_key=SECRET, secure=False, region="us-east-1")
    client.make_bucket("models")
    for name, data in FILES.items():
        client.put_object("models", f"llama/{name}", io.BytesIO(data), len(data))
    yield {"url": server.url, "client": client}
    server.stop()


def secret(s3) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": s3["url"], "AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1"}


def digest(s3) -> str:
    objs = s3["client"].list_objects("models", prefix="llama/", recursive=True)
    return listing_digest((o.object_name[len("llama/"):], o.size, o.etag) for o in objs)


def test_fetch_s3_with_the_listing_digest(s3, tmp_path):
    size = sum(len(d) for d in FILES.values())
    got = fetch(Source("s3://models/llama", digest=digest(s3), size_bytes=size, secret=secret(s3)), tmp_path)
    assert got.bytes == size and got.digest == digest(s3)
    assert {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == FILES


def test_a_digest_that_does_not_match_the_listing_is_refused_before_download(s3, tmp_path):
    with pytest.raises(FetchError) as e:
        fetch(Source("s3://models/llama", digest="sha256:" + "0" * 64, secret=secret(s3)), tmp_path)
    assert e.value.reason == "DigestMismatch" and not any(tmp_path.iterdir())


def test_an_empty_prefix_is_not_found(s3, tmp_path):
    with pytest.raises(FetchError) as e:
        fetch(Source("s3://models/nothing-here", secret=secret(s3)), tmp_path)
    assert e.value.reason == "NotFound"


def test_agent_fetches_s3_and_gs_with_the_secret_and_never_shows_it(s3, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    ref = {"namespace": "team-a", "name": "store"}
    models = [{"key": "llama-s3-000000000000", "uri": "s3://models/llama", "digest": digest(s3), "credentials": ref},
              {"key": "llama-gs-000000000000", "uri": "gs://models/llama", "credentials": ref}]
    api = FakeApi("gpu-0", {"hostPath": str(tmp_path / "cache"), "models": models},
                  secrets={("team-a", "store"): secret(s3)})
    status = CacheAgent("gpu-0", api).sync_once()
    assert [(m["phase"], m["digest"]) for m in status["models"]] == [("Ready", digest(s3))] * 2
    assert (tmp_path / "cache" / "llama-s3-000000000000" / "weights" / "model.safetensors").read_bytes() == \
        FILES["weights/model.safetensors"]
    api.secrets[("team-a", "store")] = {**secret(s3), "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}  # nothing there
    api.obj["spec"]["models"].append({"key": "other-000000000000", "uri": "s3://models/llama", "credentials": ref,
                                      "revision": None})
    CacheAgent("gpu-0", api).sync_once()
    assert api.model("other-000000000000")["reason"] == "DownloadFailed"
    assert SECRET not in repr(api.writes) and SECRET not in caplog.text


def test_an_unreachable_oci_registry_is_failed_download_failed(tmp_path, monkeypatch):
    """No OCI registry installs from a package registry here: only the error path of the ORAS
    glue is tested (its retries' sleeps, 2 minutes in all, skipped)."""
    pytest.importorskip("oras.client")  # first: oras.decorator alone is a circular import
    import oras.decorator as decorator
    monkeypatch.setattr(decorator.time, "sleep", lambda s: None)
    with pytest.raises(FetchError) as e:
        fetch(Source("oci://127.0.0.1:9/models/llama@sha256:" + "a" * 64, secret={"password": "pw-s3cr3t"}), tmp_path)
    assert e.value.reason == "DownloadFailed" and "pw-s3cr3t" not in str(e.value)
