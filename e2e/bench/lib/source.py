"""The repository root and the kubeforge code a bench drives.

``--operator-src DIR`` (or ``$KUBEFORGE_OPERATOR_SRC``) makes a cluster bench drive another
source tree's operator, CRDs and sim (an export of a commit: ``git archive HEAD operator crds
hack | tar -x -C DIR``). :func:`reexec_for_operator_src` runs first in the bench's
``__main__``: when that tree is not the one ``kubeforge`` would be imported from, the process
starts again with ``DIR/operator`` at the head of ``PYTHONPATH``, so this process and every
child it starts (the operator, the sim's helpers) import kubeforge from there. No ``sys.path``
edit.

Imports nothing of kubeforge.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "crds_dir", "describe_source", "operator_src", "reexec_for_operator_src", "source_root"]

ROOT = Path(__file__).resolve().parents[3]
"""The repository root (``e2e/bench/lib/source.py`` is three folders down)."""
ENV = "KUBEFORGE_OPERATOR_SRC"
_ACTIVE = "KUBEFORGE_OPERATOR_SRC_ACTIVE"


def operator_src(argv: list[str] | None = None) -> str | None:
    """``--operator-src`` from ``argv`` (default ``sys.argv[1:]``), else ``$KUBEFORGE_OPERATOR_SRC``."""
    args = sys.argv[1:] if argv is None else argv
    for i, a in enumerate(args):
        if a == "--operator-src" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--operator-src="):
            return a.split("=", 1)[1]
    return os.environ.get(ENV)


def source_root(argv: list[str] | None = None) -> Path:
    """The tree whose operator, CRDs and sim the bench drives: ``--operator-src`` or :data:`ROOT`."""
    return Path(operator_src(argv) or ROOT).resolve()


def crds_dir(argv: list[str] | None = None) -> Path:
    """The CRDs the bench applies: ``<source root>/crds``."""
    return source_root(argv) / "crds"


def reexec_for_operator_src(module: str, argv: list[str] | None = None) -> None:
    """Start ``python -m module argv...`` again with ``<source root>/operator`` first on
    ``PYTHONPATH`` when ``kubeforge`` would not be imported from there; return otherwise.

    Call it before anything imports kubeforge (``find_spec`` of a top-level package does not
    import it).

    Raises:
        SystemExit: the restarted process still does not import kubeforge from there.
    """
    src = source_root(argv)
    if src == ROOT.resolve():
        return
    want = (src / "operator").resolve()
    spec = importlib.util.find_spec("kubeforge")
    origin = Path(spec.origin).resolve() if spec and spec.origin else None
    if origin is not None and want in origin.parents:
        return
    if os.environ.get(_ACTIVE) == str(want):
        raise SystemExit(f"--operator-src {src}: kubeforge still imports from {origin}, not {want}")
    env = {**os.environ, _ACTIVE: str(want),
           "PYTHONPATH": os.pathsep.join(p for p in (str(want), os.environ.get("PYTHONPATH")) if p)}
    args = sys.argv[1:] if argv is None else argv
    os.execve(sys.executable, [sys.executable, "-m", module, *args], env)


def describe_source(argv: list[str] | None = None) -> str:
    """Where the kubeforge code comes from: the working tree's commit (and whether it has edits
    under operator/), or the ``--operator-src`` directory (and its ``SOURCE`` file, if any)."""
    src = source_root(argv)
    if src != ROOT.resolve():
        note = (src / "SOURCE").read_text().strip() if (src / "SOURCE").exists() else ""
        return f"{src} (--operator-src{': ' + note if note else ''})"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "operator"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return f"working tree at {head}" + (" with uncommitted changes under operator/" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "working tree"
