"""The column tables the benches print: a label column, then one right-aligned column per
phase (or case), every cell a string the bench formatted."""

from __future__ import annotations

from typing import Iterable

__all__ = ["Columns"]


class Columns:
    """Prints a header and rows of a table with a ``label_w``-wide label and ``col_w``-wide
    cells, each line indented by ``indent``.

    Example: ``t = Columns(["baseline", "kubeforge"], 44, 22); t.header(); t.row("placed", ["3", "4"])``.
    """

    def __init__(self, names: Iterable[str], label_w: int, col_w: int, indent: str = "  ") -> None:
        self.names, self.label_w, self.col_w, self.indent = list(names), label_w, col_w, indent

    def header(self) -> None:
        """The column names above the cells (an empty label)."""
        print(f"{self.indent}{'':{self.label_w}}" + "".join(f"{n:>{self.col_w}}" for n in self.names))

    def row(self, label: str, cells: Iterable[str]) -> None:
        """One row: ``label``, then ``cells`` in the columns' order."""
        print(f"{self.indent}{label:{self.label_w}}" + "".join(f"{c:>{self.col_w}}" for c in cells))
