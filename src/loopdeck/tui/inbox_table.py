"""The inbox's list at the width it has, never scrolled sideways: what an operator decides by
(when it expires, the run, the call, the tool, what it is: a write's plan step, a question's
words) always in view. What gives way, in order, while what it is would have fewer than
`WHAT_ROOM` cells: the env/script column (the entry in full below names it), then the tool's
and the call's names cut with "…" down to a floor; what it is takes the rest, cut with "…"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.cells import cell_len
from rich.text import Text

from loopdeck.core.text import visible
from loopdeck.operator.inbox import InboxEntry, PendingOutcome, PendingQuestion
from loopdeck.tui.panels import countdown_text
from loopdeck.tui.shown import cell

COLUMNS = ("expires", "run", "env/script", "call", "tool", "what")
PAD = 2  # a DataTable cell's padding: one cell each side
WHAT_ROOM = 16  # the fewest cells of what an entry is worth keeping the others whole for
# Each step: a column and the width it is cut to (0: left out).
GIVE_WAY = (("env/script", 0), ("tool", 16), ("call", 12), ("tool", 12), ("call", 8))


def expiry(entry: InboxEntry, now: datetime) -> str:
    """A write's time left (or "expired"); what a question or an unknown outcome is."""
    if isinstance(entry, PendingQuestion):
        return "question"
    if isinstance(entry, PendingOutcome):
        return "outcome?"
    left = (entry.expires - now).total_seconds()
    return "expired" if left <= 0 else countdown_text(left)


def entry_cells(entry: InboxEntry, when: str) -> dict[str, str]:
    """One entry's cells as text: `when` is its expiry as the list says it (a countdown,
    "question", "outcome?", a decision on its way)."""
    if isinstance(entry, PendingQuestion):
        what = entry.question
    elif isinstance(entry, PendingOutcome):
        what = "outcome unknown: did it take effect?"
    else:
        what = entry.plan_step
    return {
        "expires": when, "run": entry.run_id, "env/script": entry.env, "call": entry.call_id,
        "tool": entry.tool, "what": " ".join(what.split()),
    }  # fmt: skip


@dataclass(frozen=True)
class Layout:
    """The columns shown, in order, each with its width in cells."""

    widths: tuple[tuple[str, int], ...]

    def cells(self, row: dict[str, str]) -> list[Text]:
        return [cell(row[name], width=width) for name, width in self.widths]


def layout(rows: Sequence[dict[str, str]], width: int) -> Layout:
    """The columns for `rows` in `width` cells (the list's inside, scrollbar excluded)."""
    wanted = {
        name: max((cell_len(visible(row[name])) for row in rows), default=0) for name in COLUMNS
    }
    widths = {name: max(cell_len(name), wanted[name]) for name in COLUMNS}
    widths["what"] = 0

    def left() -> int:  # what is left for what an entry is
        shown = [name for name, size in widths.items() if size or name == "what"]
        return width - sum(widths.values()) - PAD * len(shown)

    for name, cut in GIVE_WAY:
        if left() >= min(WHAT_ROOM, wanted["what"]):
            break
        widths[name] = min(widths[name], cut) if cut else 0
    widths["what"] = max(cell_len("what"), min(wanted["what"], left()))
    return Layout(tuple((name, size) for name, size in widths.items() if size))
