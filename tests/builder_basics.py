"""What the fluent builders share (tests/builders.py, tests/pod_builders.py): the test clock,
the default namespace and GPU resource, the uid counter and the API server's timestamp format.

Kept apart so that ``pod_builders`` and ``builders`` both import it and neither imports the other
back (``builders`` re-exports everything here).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

GPU = "nvidia.com/gpu"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z: every test's clock
NS = "team-a"
API = "kubeforge.io/v1alpha1"

#: One counter for every made-up uid (``job-N``, ``svc-N``, ``pool-N``, ``pod-N``).
uids = itertools.count(1)


def iso(ts: float) -> str:
    """``ts`` (unix seconds) as the RFC 3339 UTC string the API server writes, to the second."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
