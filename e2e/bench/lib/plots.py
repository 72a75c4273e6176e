"""matplotlib for the benches' PNGs, when it is installed (``pip install -e '.[bench]'``)."""

from __future__ import annotations

from typing import Any

__all__ = ["NO_MATPLOTLIB", "pyplot"]

NO_MATPLOTLIB = "matplotlib not installed (pip install -e '.[bench]')"


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend (files only, no display), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
