"""The public traces kubeforge ships as package data (``kubeforge/data/traces/``).

The demo, the tests and the benchmarks replay them; ``kubeforge/data/traces/README.md`` says
where each comes from, its licence (CC BY 4.0) and the credit to give. They travel with the
package (a clone, an editable install or a wheel), so nothing outside the repository is read.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["ALIBABA_PODS", "AZURE_CODE", "trace_path", "trace_names"]

ALIBABA_PODS = "alibaba-openb-pods-2023.csv"
"""Alibaba clusterdata cluster-trace-gpu-v2023, ``openb_pod_list_default.csv``: 8,152 tasks
(``num_gpu``, ``qos``, creation and deletion times); the training, preemption and NVL72 benches'
job mix."""
AZURE_CODE = "azure-llm-inference-code-2023.csv"
"""Azure LLM inference trace 2023 (code): 8,818 requests over 57 minutes (``TIMESTAMP,
ContextTokens, GeneratedTokens``); the demo's burst, the autoscaling and serving benches."""


def _folder() -> Path:
    return Path(str(files("kubeforge").joinpath("data", "traces")))


def trace_names() -> list[str]:
    """The shipped trace files' names (``*.csv``), sorted."""
    return sorted(p.name for p in _folder().glob("*.csv"))


def trace_path(name: str) -> Path:
    """The path of a shipped trace, e.g. ``trace_path(AZURE_CODE)``.

    Args:
        name: A file name among :func:`trace_names` (:data:`ALIBABA_PODS`, :data:`AZURE_CODE`).

    Returns:
        The file's path inside the installed package (it exists: kubeforge is never imported
        from a zip).

    Raises:
        FileNotFoundError: ``name`` is not a shipped trace.
    """
    path = _folder() / name
    if path.name != name or not path.is_file():
        raise FileNotFoundError(f"no shipped trace {name!r} in {_folder()}; shipped: {', '.join(trace_names())}")
    return path
