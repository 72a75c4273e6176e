"""Command-line helpers shared by the benches."""

from __future__ import annotations

import argparse
from typing import Iterable

__all__ = ["choice_list"]


def choice_list(ap: argparse.ArgumentParser, flag: str, text: str, allowed: Iterable[str]) -> list[str]:
    """The comma-separated ``text`` of option ``flag`` as a list (blanks dropped, order kept);
    exits through ``ap.error`` when it names nothing or something not in ``allowed``."""
    allowed = list(allowed)
    items = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in items if p not in allowed]
    if bad or not items:
        ap.error(f"{flag}: unknown {bad or 'none given'}; choose among {', '.join(allowed)}")
    return items
