"""A local stand-in for the Hugging Face Hub: serves a folder of model repositories to
``huggingface_hub`` (``HF_ENDPOINT`` or ``endpoint=`` pointed at it) on loopback, so the node
agent's real download path runs in tests and the demo with no network (issue 29).

Layout: ``ROOT/ORG/REPO/<files>``; every repository has one commit, the SHA-1 of its files' names
and contents (:func:`repo_commit`), so a model is pinned by a revision the way a real one is.
What it answers (what ``huggingface_hub.snapshot_download`` and ``hf_hub_download`` ask):

* ``GET /api/models/ORG/REPO/revision/REV`` (REV: the commit or ``main``): ``id``, ``sha`` and
  ``siblings`` (``rfilename``, ``size``); ``GET /api/models/ORG/REPO/tree/REV``: the files (``path``,
  ``size``, ``oid``; weights as LFS files with their SHA-256);
* ``HEAD`` / ``GET /ORG/REPO/resolve/REV/PATH``: the file, with ``X-Repo-Commit``, ``ETag`` (its
  SHA-256, as the Hub gives LFS files) and ``Content-Length``; ``Range`` is honoured;
* 401 when a token is configured and the request's ``Authorization: Bearer`` differs; 404 for an
  unknown repository, revision or file. It counts the bytes it served per file (``served``).

Run alone: ``python -m kubeforge.sim.hub --root DIR --port 8765``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["HubStandIn", "make_model_repo", "repo_commit"]


def repo_commit(repo: Path) -> str:
    """The repository's one commit: SHA-1 over its files' relative names and contents, sorted."""
    h = hashlib.sha1()
    for f in sorted(p for p in repo.rglob("*") if p.is_file()):
        h.update(f.relative_to(repo).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def make_model_repo(root: Path, repo_id: str, weights_bytes: int = 1 << 20, shards: int = 2) -> str:
    """Write a small model repository (config.json, tokenizer.json and ``shards`` weight files of
    ``weights_bytes`` in all, deterministic bytes) under ``root/repo_id``; returns its commit."""
    repo = root / repo_id
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (repo / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    per = max(1, weights_bytes // shards)
    for i in range(shards):
        block = hashlib.sha256(f"{repo_id}/{i}".encode()).digest()
        data = (block * (per // len(block) + 1))[:per]
        (repo / f"model-{i + 1:05d}-of-{shards:05d}.safetensors").write_bytes(data)
    return repo_commit(repo)


def _tree_entry(repo: Path, f: Path) -> dict[str, Any]:
    """One file of ``GET /api/models/ORG/REPO/tree/REV``: weights as LFS files (their SHA-256)."""
    data = f.read_bytes()
    entry: dict[str, Any] = {"type": "file", "path": f.relative_to(repo).as_posix(), "size": len(data),
                             "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
    if f.suffix == ".safetensors":
        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return entry


class _Handler(BaseHTTPRequestHandler):
    hub: "HubStandIn"

    def log_message(self, *args: Any) -> None:  # quiet
        return

    def _authorized(self) -> bool:
        token = self.hub.token
        return token is None or self.headers.get("Authorization") == f"Bearer {token}"

    def _json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _repo(self, repo_id: str, rev: str) -> tuple[Path, str] | None:
        repo = self.hub.root / repo_id
        if not repo.is_dir():
            return None
        commit = self.hub.commit(repo_id)
        return (repo, commit) if rev in (commit, "main") else None

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if not self._authorized():
            return self._json(401, {"error": "Invalid credentials"})
        path = self.path.split("?", 1)[0]
        m = re.match(r"^/api/models/(.+?)/revision/([^/]+)$", path)
        if m:
            found = self._repo(m[1], m[2])
            if found is None:
                return self._json(404, {"error": "Repository or revision not found"})
            repo, commit = found
            files = sorted(p for p in repo.rglob("*") if p.is_file())
            return self._json(200, {"id": m[1], "modelId": m[1], "sha": commit, "private": self.hub.token is not None,
                                    "siblings": [{"rfilename": f.relative_to(repo).as_posix(), "size": f.stat().st_size}
                                                 for f in files]})
        m = re.match(r"^/api/models/(.+?)/tree/([^/]+)$", path)
        if m:
            found = self._repo(m[1], m[2])
            if found is None:
                return self._json(404, {"error": "Repository or revision not found"})
            return self._json(200, [_tree_entry(found[0], f) for f in sorted(found[0].rglob("*")) if f.is_file()])
        m = re.match(r"^/(.+?)/resolve/([^/]+)/(.+)$", path)
        if not m or (found := self._repo(m[1], m[2])) is None or not (found[0] / m[3]).is_file():
            return self._json(404, {"error": "Entry not found"})
        self._file(found[0] / m[3], found[1])

    do_HEAD = do_GET

    def _file(self, path: Path, commit: str) -> None:
        data = path.read_bytes()
        start, end, code = 0, len(data), 200
        rng = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if rng:
            start, end, code = int(rng[1]), (int(rng[2]) + 1 if rng[2] else len(data)), 206
        self.send_response(code)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(end - start))
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if self.command == "GET":
            key = path.relative_to(self.hub.root).as_posix()
            body = data[start:end]
            if key in self.hub.corrupt and body:  # the listing keeps the true checksums
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            self.wfile.write(body)
            with self.hub.lock:
                self.hub.served[key] = self.hub.served.get(key, 0) + end - start


class HubStandIn:
    """The hub on ``127.0.0.1:port`` (0: any free port) in a thread; ``url`` is its endpoint.

    Attributes:
        root: The repositories' folder.
        token: The bearer token it asks for, or None (public).
        served: Bytes served per file (``ORG/REPO/PATH``).
        corrupt: Files (``ORG/REPO/PATH``) served with their first byte flipped while the API
            still lists their true size and checksums: a download corrupted on the way.
    """

    def __init__(self, root: Path, port: int = 0, token: str | None = None) -> None:
        self.root, self.token = Path(root), token
        self.served: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.lock = threading.Lock()
        self._commits: dict[str, str] = {}
        handler = type("Handler", (_Handler,), {"hub": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._thread = threading.Thread(target=self.server.serve_forever, name="hub-stand-in", daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def commit(self, repo_id: str) -> str:
        """The repository's commit (computed once)."""
        with self.lock:
            if repo_id not in self._commits:
                self._commits[repo_id] = repo_commit(self.root / repo_id)
            return self._commits[repo_id]

    def start(self) -> "HubStandIn":
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "HubStandIn":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> None:
    """``python -m kubeforge.sim.hub --root DIR [--port N] [--make ORG/REPO]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--make", action="append", default=[], help="write a small model repository ORG/REPO first")
    a = ap.parse_args()
    for repo in a.make:
        print(repo, make_model_repo(a.root, repo))
    hub = HubStandIn(a.root, a.port)
    print(f"serving {a.root} at {hub.url}", flush=True)
    hub.server.serve_forever()


if __name__ == "__main__":
    main()
