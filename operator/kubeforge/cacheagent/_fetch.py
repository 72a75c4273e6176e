"""Fetching one model into a folder, one maintained library a scheme, and verifying it: glue only.

* ``hf://ORG/REPO`` at a commit: ``huggingface_hub.snapshot_download`` (the Hub, or the endpoint
  in ``HF_ENDPOINT`` / the agent's ``--hf-endpoint``), token ``HF_TOKEN``;
* ``s3://BUCKET/PREFIX``: the MinIO Python SDK (an S3 client: AWS S3, MinIO, Ceph, moto...) at
  ``AWS_ENDPOINT_URL`` (default AWS), keys ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``;
* ``gs://BUCKET/PREFIX``: the same client against Cloud Storage's S3-compatible XML API
  (``storage.googleapis.com``, HMAC keys in the same two variables);
* ``oci://REGISTRY/REPO@sha256:...``: ORAS (``oras`` on PyPI), ``username`` / ``password``.

Verification: the size (``sizeBytes`` when given, and each object's listed size), the S3 / GCS
listing digest (``digest``), the OCI manifest's digest and every layer's SHA-256. A failure raises
:class:`FetchError` with a reason (CamelCase) and a message that never holds a credential.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlparse

from kubeforge.modelcache import listing_digest

GCS_ENDPOINT = "https://storage.googleapis.com"


class FetchError(Exception):
    """A download or its check failed: ``reason`` (CamelCase), the message (no secret in it)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Source:
    """What to fetch: the ModelCacheNode spec's entry, and the Secret's data (decoded)."""

    uri: str
    revision: str | None = None
    digest: str | None = None
    size_bytes: int | None = None
    secret: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Fetched:
    """A verified copy: its size on disk and the digest checked (or the hf commit)."""

    bytes: int
    digest: str | None


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when absent); files removed while it counts (a
    download renaming its temporary files) are skipped."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name), follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def _scrub(text: str, secret: Mapping[str, str]) -> str:
    for value in secret.values():
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text[:900]


def fetch(source: Source, dest: Path, hf_endpoint: str | None = None,
          progress: Callable[[int], None] | None = None) -> Fetched:
    """Fetch ``source`` into the empty folder ``dest`` and verify it.

    Raises:
        FetchError: ``Unsupported``, ``DownloadFailed``, ``SizeMismatch``, ``DigestMismatch``.
    """
    scheme = source.uri.split("://", 1)[0]
    try:
        if scheme == "hf":
            got = _fetch_hf(source, dest, hf_endpoint)
        elif scheme in ("s3", "gs"):
            got = _fetch_s3(source, dest, progress)
        elif scheme == "oci":
            got = _fetch_oci(source, dest)
        else:
            raise FetchError("Unsupported", f"{scheme}:// sources are not cached (pvc:// is mounted directly)")
    except FetchError:
        raise
    except ImportError as e:  # the scheme's library is not installed in this image
        raise FetchError("SchemeUnavailable", f"{scheme}:// needs the Python package {e.name!r}") from None
    except Exception as e:  # the libraries' own errors: their type and a scrubbed message
        raise FetchError("DownloadFailed", _scrub(f"{type(e).__name__}: {e}", source.secret)) from None
    if source.size_bytes is not None and got.bytes != source.size_bytes:
        raise FetchError("SizeMismatch", f"{got.bytes} bytes fetched, spec.model.sizeBytes says {source.size_bytes}")
    return got


def _fetch_hf(source: Source, dest: Path, endpoint: str | None) -> Fetched:
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    repo = source.uri.split("://", 1)[1].strip("/")
    token = source.secret.get("HF_TOKEN") or False
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    snapshot_download(repo, revision=source.revision, local_dir=str(dest), token=token, endpoint=endpoint)
    # every file against the Hub's tree at that commit: LFS files by SHA-256, the rest by git blob id
    check = HfApi(endpoint=endpoint).verify_repo_checksums(repo, revision=source.revision, local_dir=dest, token=token)
    if check.mismatches:
        bad = check.mismatches[0]
        raise FetchError("DigestMismatch", f"{bad['path']}: {bad['algorithm']} {bad['actual'][:16]}..., the Hub "
                         f"lists {bad['expected'][:16]}... ({len(check.mismatches)} file(s) differ)")
    if check.missing_paths:
        raise FetchError("DownloadFailed", f"{len(check.missing_paths)} file(s) of the repository not downloaded, "
                         f"e.g. {check.missing_paths[0]}")
    meta = dest / ".cache"
    if meta.is_dir():  # huggingface_hub's bookkeeping of local_dir downloads, not the model's
        import shutil
        shutil.rmtree(meta)
    return Fetched(folder_bytes(dest), source.revision)


def _s3_client(source: Source, scheme: str) -> Any:
    from minio import Minio

    env = {**os.environ, **source.secret}
    endpoint = env.get("AWS_ENDPOINT_URL") or (GCS_ENDPOINT if scheme == "gs" else "https://s3.amazonaws.com")
    url = urlparse(endpoint)
    return Minio(url.netloc, access_key=env.get("AWS_ACCESS_KEY_ID"), secret_key=env.get("AWS_SECRET_ACCESS_KEY"),
                 secure=url.scheme == "https", region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"))


def _fetch_s3(source: Source, dest: Path, progress: Callable[[int], None] | None) -> Fetched:
    scheme, rest = source.uri.split("://", 1)
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    client = _s3_client(source, scheme)
    objects = [o for o in client.list_objects(bucket, prefix=prefix + "/" if prefix else "", recursive=True)
               if not o.is_dir]
    if not objects:
        raise FetchError("NotFound", f"no object under {source.uri}")
    listing = [(o.object_name[len(prefix) + 1 if prefix else 0:], int(o.size or 0), o.etag or "") for o in objects]
    digest = listing_digest(listing)
    if source.digest and digest != source.digest:
        raise FetchError("DigestMismatch", f"the objects under {source.uri} list as {digest}, not {source.digest}")
    done = 0
    for o, (rel, size, _) in zip(objects, listing):
        client.fget_object(bucket, o.object_name, str(dest / rel))
        got = (dest / rel).stat().st_size
        if got != size:
            raise FetchError("SizeMismatch", f"{rel}: {got} bytes fetched, {size} listed")
        _check_etag(dest / rel, rel, o.etag or "")
        done += got
        if progress is not None:
            progress(done)
    return Fetched(done, digest)


def _check_etag(path: Path, rel: str, etag: str) -> None:
    """An object uploaded in one part has its MD5 as ETag (S3, GCS's XML API, MinIO): compare.
    A multipart ETag (``<hex>-<parts>``) is no content hash; the size and listing cover it."""
    etag = etag.strip('"')
    if len(etag) != 32 or any(c not in "0123456789abcdef" for c in etag):
        return
    md5 = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            md5.update(block)
    if md5.hexdigest() != etag:
        raise FetchError("DigestMismatch", f"{rel}: MD5 {md5.hexdigest()}, the store's ETag is {etag}")


def _fetch_oci(source: Source, dest: Path) -> Fetched:
    import oras.client

    ref = source.uri.split("://", 1)[1]
    if "@" not in ref and source.digest:
        ref = f"{ref}@{source.digest}"
    want = ref.split("@", 1)[1]
    host = ref.split("/", 1)[0]
    insecure = host.startswith(("127.0.0.1", "localhost"))
    client = oras.client.OrasClient(hostname=host, insecure=insecure, tls_verify=not insecure)
    if source.secret.get("username"):
        client.login(username=source.secret["username"], password=source.secret.get("password", ""),
                     hostname=host, insecure=insecure)
    manifest = client.get_manifest(ref)  # fetched by digest: the registry serves that manifest or none
    client.pull(target=ref, outdir=str(dest))
    for layer in manifest.get("layers") or []:
        title = (layer.get("annotations") or {}).get("org.opencontainers.image.title")
        path = dest / title if title else None
        if path is None or not path.is_file():
            raise FetchError("DownloadFailed", f"layer {layer.get('digest')} has no file in the pull")
        sha = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        if sha != layer.get("digest"):
            raise FetchError("DigestMismatch", f"{title}: {sha}, the manifest says {layer.get('digest')}")
    return Fetched(folder_bytes(dest), want)
