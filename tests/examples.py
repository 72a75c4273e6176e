"""How many examples the property tests draw: all of them in ``make test``, fewer in ``make unit``.

``make test`` (CI, ``.ci/run``) is the full suite and draws every example each test asks for.
``make unit`` is the quick loop while editing (issue 30: under 60 s on this 2-core machine); it
sets ``KUBEFORGE_TEST_EXAMPLES=quick`` and each property test then draws a quarter of its examples
(at least :data:`QUICK_FLOOR`), and the fixed-seed random walks walk a third of their seeds. The
``@example`` cases (the races found once and pinned) run in both. This is the pattern of
Hypothesis' settings profiles ("dev" vs "ci"); it lives in a helper because every test here sets
``max_examples`` explicitly, which a profile would not override.

Values: ``full`` (the default) or ``quick``; anything else is an error, so a typo cannot silently
shrink CI's suite.
"""

from __future__ import annotations

import os

QUICK_FLOOR = 10
"""The fewest examples a property test draws in the quick profile."""

_MODE = os.environ.get("KUBEFORGE_TEST_EXAMPLES", "full")
if _MODE not in ("full", "quick"):
    raise ValueError(f"KUBEFORGE_TEST_EXAMPLES={_MODE!r}: use 'full' (make test) or 'quick' (make unit)")
QUICK = _MODE == "quick"


def examples(n: int) -> int:
    """``max_examples`` for a property test that draws ``n`` in the full suite.

    >>> examples(120) if not QUICK else 120
    120
    """
    return max(QUICK_FLOOR, n // 4) if QUICK else n


def seeds(n: int) -> range:
    """The fixed seeds a deterministic random walk runs: ``range(n)``, a third of them when quick."""
    return range(max(1, n // 3) if QUICK else n)
