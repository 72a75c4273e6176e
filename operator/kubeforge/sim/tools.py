"""Where the local control plane's binaries come from.

``hack/build-tools.sh`` builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kubectl, kwok, kwokctl and helm from the Go module proxy into a cache directory keyed by
their versions (``$KUBEFORGE_CACHE`` or ``~/.cache/kubeforge``). It builds only what is
missing, so calling :func:`ensure_tools` before every use is cheap once the cache is warm.
"""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-tools.sh"
CLUSTER_TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "kwokctl")
TOOLS = CLUSTER_TOOLS + ("helm",)


class ToolsError(RuntimeError):
    """The binaries could not be built or found; the message has the failing command's output."""


@lru_cache(maxsize=1)
def ensure_tools() -> Path:
    """Build missing binaries (first run: tens of minutes on 2 cores) and return their directory.

    ``$KUBEFORGE_BIN_DIR`` short-circuits the build with a directory of prebuilt binaries.

    Raises:
        ToolsError: the build script failed or a binary is still missing afterwards.
    """
    override = os.environ.get("KUBEFORGE_BIN_DIR")
    if override:
        bin_dir = Path(override)
    else:
        if not BUILD_SCRIPT.exists():
            raise ToolsError(f"{BUILD_SCRIPT} not found: run from a kubeforge checkout or set KUBEFORGE_BIN_DIR")
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise ToolsError(f"{BUILD_SCRIPT} failed with exit code {proc.returncode} (its log is above)")
        bin_dir = Path(proc.stdout.strip().splitlines()[-1])
    missing = [t for t in CLUSTER_TOOLS if not (bin_dir / t).exists()]
    if missing:
        raise ToolsError(f"missing in {bin_dir}: {', '.join(missing)}")
    return bin_dir


def tool(name: str) -> str:
    """The absolute path of one binary (building the set first if needed).

    Raises:
        ToolsError: that binary is not in the cache.
    """
    path = ensure_tools() / name
    if not path.exists():
        raise ToolsError(f"{name} missing in {path.parent}")
    return str(path)
