"""The traces the benches replay: the copies kubeforge ships (``kubeforge.sim.traces``), a
``--trace`` flag that takes another file of the same format (a longer trace, say), and the
credit each bench prints.

``$KUBEFORGE_TRACES`` names a directory that replaces the shipped one for the defaults.
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from kubeforge.sim.traces import ALIBABA_PODS, AZURE_CODE, trace_path

__all__ = ["ALIBABA_CREDIT", "ALIBABA_PODS", "AZURE_CODE", "AZURE_CREDIT", "add_trace_arg", "check_trace",
           "default_trace", "gpu_tasks", "trace_credit", "trace_label"]

ALIBABA_CREDIT = ('Trace: Alibaba clusterdata cluster-trace-gpu-v2023 (openb_pod_list_default.csv), CC BY 4.0; '
                  'Weng et al., "Beware of Fragmentation", USENIX ATC 2023.')
AZURE_CREDIT = ('Trace: Azure LLM inference trace 2023 (code), AzurePublicDataset, CC BY 4.0; Patel et al., '
                '"Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024.')


_LABELS = {AZURE_CODE: ("the Azure LLM inference trace (code)", AZURE_CREDIT),
           ALIBABA_PODS: ("the Alibaba GPU pod trace", ALIBABA_CREDIT)}


def trace_label(path: Path) -> str:
    """What a bench calls the trace in its output: the shipped trace's name when the file is
    one of them (by file name), else ``trace <file name>``: names come from the input."""
    known = _LABELS.get(Path(path).name)
    return known[0] if known else f"trace {Path(path).name}"


def trace_credit(path: Path) -> str:
    """The credit line to print for the trace at ``path``: the shipped trace's, or a line
    naming the file given (whose credit is its source's)."""
    known = _LABELS.get(Path(path).name)
    return known[1] if known else f"Trace: {path} (given with --trace; credit its source as its licence asks)."


def default_trace(name: str) -> Path:
    """``$KUBEFORGE_TRACES/<name>`` when that is set, else the shipped copy (:func:`trace_path`)."""
    env = os.environ.get("KUBEFORGE_TRACES")
    return Path(env) / name if env else trace_path(name)


def add_trace_arg(ap: argparse.ArgumentParser, name: str, what: str) -> None:
    """``--trace FILE`` (a :class:`~pathlib.Path`), by default :func:`default_trace` of ``name``."""
    ap.add_argument("--trace", type=Path, default=default_trace(name),
                    help=f"{what} CSV (default: the copy shipped in kubeforge/data/traces/{name}, or "
                         f"$KUBEFORGE_TRACES/{name}); a longer trace of the same columns works too")


def check_trace(ap: argparse.ArgumentParser, path: Path) -> None:
    """Stop with a usage error when ``path`` is not a file."""
    if not Path(path).is_file():
        ap.error(f"--trace {path} not found (set --trace or $KUBEFORGE_TRACES)")


def gpu_tasks(trace: Path) -> list[dict[str, str]]:
    """The Alibaba pod trace's rows that ask for GPUs (``num_gpu`` > 0), in the file's order."""
    with open(trace, newline="") as f:
        return [r for r in csv.DictReader(f) if int(r["num_gpu"]) > 0]
