"""Percentiles, as the benches have always computed them (two definitions; each bench keeps its own).

- :func:`pct`: nearest rank with the rank rounded, ``s[round(q / 100 * (n - 1))]`` (the
  training, memory and claim figures);
- :func:`percentile`: nearest rank, ``s[ceil(q / 100 * n) - 1]``, the model-server simulator's
  (:func:`kubeforge.sim.modelserver.percentile`; the autoscaling and serving figures).

Both give NaN for no values.
"""

from __future__ import annotations

from kubeforge.sim.modelserver import percentile

__all__ = ["pct", "percentile"]


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ``values``, the rank rounded; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * (len(s) - 1)))))
    return s[k]
