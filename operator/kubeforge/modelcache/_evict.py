"""Making room in a node's cache: least recently used first, never a copy anyone wants. Pure;
the agent calls it before a download and deletes what it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Held:
    """A copy on the node's disk.

    Attributes:
        key: Its key.
        bytes: Its size on disk.
        last_used: Unix seconds the spec last wanted it (0: never).
        wanted: The spec wants it now (never evicted).
    """

    key: str
    bytes: int
    last_used: float
    wanted: bool


def choose_evictions(held: Sequence[Held], capacity: int | None, need: int) -> list[str] | None:
    """The copies to delete so that ``need`` more bytes fit within ``capacity``: none when they
    fit already, else unwanted copies least recently used first (ties by key) until they fit; None
    when even deleting every unwanted copy leaves too little room (the download fails with
    DiskFull; nothing is deleted for it).

    Args:
        held: The copies on the node.
        capacity: The cache's limit in bytes (None: no limit of ours).
        need: Bytes the next copy takes (its expected size; 0 when unknown).
    """
    if capacity is None:
        return []
    used = sum(h.bytes for h in held)
    if used + need <= capacity:
        return []
    out: list[str] = []
    for h in sorted((h for h in held if not h.wanted), key=lambda h: (h.last_used, h.key)):
        out.append(h.key)
        used -= h.bytes
        if used + need <= capacity:
            return out
    return None
