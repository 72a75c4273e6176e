"""Figures written as JSON by the live benches (``--json FILE``), for another command to read."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

__all__ = ["dump_figures", "without_nan"]


def without_nan(x: Any) -> Any:
    """``x`` with every float NaN replaced by None, recursively through dicts, lists and tuples
    (tuples come back as lists): JSON has no NaN."""
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {k: without_nan(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [without_nan(v) for v in x]
    return x


def dump_figures(figures: Any, path: Path | str) -> None:
    """Write the dataclass ``figures`` to ``path`` as indented JSON, NaN written as null."""
    Path(path).write_text(json.dumps(without_nan(asdict(figures)), indent=1) + "\n")
