"""Where the peers' binaries and manifests are: ``hack/build-peers.sh`` (cached by version)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "hack" / "build-peers.sh"
BUILD_HINT = ("the peers (Kueue, JobSet, LeaderWorkerSet) are not built: run `make peers` "
              "(bash hack/build-peers.sh; once, about 30 min on 2 shared cores, cached in ~/.cache/kubeforge)")
"""One line saying how to build the peers, printed by whatever skips them."""


class PeersError(RuntimeError):
    """The peers could not be built, started or reached; the message says which and why."""


def peers_bin() -> Path | None:
    """The directory of the built peers (binaries ``kueue``, ``jobset``, ``lws`` and their
    ``manifests/``), or None when they are not built yet. Builds nothing."""
    proc = subprocess.run(["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return Path(proc.stdout.strip().splitlines()[-1])


def build_peers() -> Path:
    """Build what is missing (tens of minutes the first time; its log goes to stderr) and
    return the directory.

    Raises:
        PeersError: the build script failed.
    """
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PeersError(f"{BUILD_SCRIPT} failed with exit code {proc.returncode} (its log is above)")
    return Path(proc.stdout.strip().splitlines()[-1])
