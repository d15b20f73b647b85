"""One line per performance target: the figure, its reference, the ratio and PASS/FAIL."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    target: str
    figure: str
    reference: str
    ratio: float
    goal: str  # e.g. "<= 1.5x" or ">= 2x"

    @property
    def passed(self) -> bool:
        op, _, bound = self.goal.partition(" ")
        limit = float(bound.rstrip("x"))
        return self.ratio <= limit if op == "<=" else self.ratio >= limit


def print_table(rows: list[Row]) -> None:
    widths = [max(len(getattr(r, f)) for r in rows) for f in ("target", "figure", "reference")]
    head = ("target", "figure", "reference")
    print()
    print(
        f"{head[0]:<{widths[0]}}  {head[1]:<{widths[1]}}  {head[2]:<{widths[2]}}  "
        f"{'ratio':>7}  {'goal':<8}  result"
    )
    for row in rows:
        print(
            f"{row.target:<{widths[0]}}  {row.figure:<{widths[1]}}  {row.reference:<{widths[2]}}  "
            f"{row.ratio:>6.2f}x  {row.goal:<8}  {'PASS' if row.passed else 'FAIL'}"
        )
