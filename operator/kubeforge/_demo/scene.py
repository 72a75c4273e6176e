"""What the demo applies and checks (the examples, the objects' names, its waits), its progress
line, and what it returns (:class:`DemoResult`). Light: the standard library only, so that
:mod:`kubeforge.demo` re-exports these at import time."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CHAT", "EXAMPLES", "LARGE", "NAMESPACE", "POOL", "POOL_AGREE_SECONDS", "PROGRESS_SECONDS", "SETTLE_SECONDS",
           "TRAINING_JOBS", "DemoResult", "restart_clock", "say"]

NAMESPACE = "default"
POOL = "h100"
TRAINING_JOBS = ("llama-pretrain", "finetune")
LARGE = "llama-405b"
CHAT = "llama-chat"
EXAMPLES = ("gpupool-h100.yaml", "trainingjob-llama-pretrain.yaml", "trainingjob-finetune.yaml",
            "inferenceservice-llama-405b.yaml", "demo/inferenceservice-llama-chat.yaml")
"""What the demo applies, from examples/ (the services get ``autoscaling.prometheusURL`` set to
the local Prometheus)."""
POOL_AGREE_SECONDS = 30.0
"""Longest wait for the pool's status to agree with the pods before a pool table is printed, s."""
SETTLE_SECONDS = 60.0
"""Longest wait after the burst for the chat service to come back to ``minReplicas``, s."""
PROGRESS_SECONDS = 20.0
"""Longest wait for every training job's progress and ETA in its status before they are printed, s."""


_T0 = [time.monotonic()]


def restart_clock(t0: float) -> None:
    """Count :func:`say`'s seconds from ``t0`` (``time.monotonic()``: the demo's start)."""
    _T0[0] = t0


def say(msg: str) -> None:
    """A progress line on stderr, with the seconds since the demo started."""
    print(f"[demo {time.monotonic() - _T0[0]:5.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclass
class DemoResult:
    """What :func:`kubeforge.demo.demo` did, for callers that check it (the cluster test).

    Attributes:
        rc: The process exit code: 0 when everything was placed, the pool agreed with the pods,
            the chat service scaled up and came back down, and no Warning Event appeared.
        problems: Why ``rc`` is 1, one line each.
        pool_tables: The pool tables printed (after placement, at the end), as lines.
        warnings: Warning Events seen during the demo (``reason: message``).
        plot: The PNG written, and ``panels`` the number of panels drawn in it.
        peak_replicas: The most replicas the chat service asked for (status.desiredReplicas).
        seconds: The demo's wall time.
        progress: Each training job's ``status.progress`` at the end (its rank 0 reported it
            through the status endpoint).
    """

    rc: int = 1
    problems: list[str] = field(default_factory=list)
    pool_tables: list[list[str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plot: Path | None = None
    panels: int = 0
    peak_replicas: int = 0
    seconds: float = 0.0
    progress: dict[str, dict] = field(default_factory=dict)
