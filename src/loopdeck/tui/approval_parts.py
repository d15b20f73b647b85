"""Parts of the approval dialog: the keys its foot says in each mode, its arguments as
shown (a file write's diff first), the box that says when its size changed, and whether the
arguments are drawn on screen now (nothing over them, nothing scrolled away): a write is
approved only once they are."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from textual.containers import Vertical
from textual.content import Content
from textual.errors import NoWidget
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from loopdeck.core.approvals import ApprovalRequest
from loopdeck.core.text import visible_json
from loopdeck.core.write_diff import CONTENT_FIELDS
from loopdeck.tui.shown import plain
from loopdeck.tui.shown_input import TYPING_KEYS

# The dialog's keys, as its foot says them in each of its modes.
KEYS = (
    "[b]a[/] approve  [b]e[/] edit  [b]g[/] grant  [b]r[/] reject with a reason  "
    "[b]esc[/] decide later"
)
TELL_KEYS = (
    "[b]a[/] approve  [b]e[/] reject and tell the agent  [b]g[/] grant  "
    "[b]r[/] reject with a reason  [b]esc[/] decide later"
)
EDIT_KEYS = (
    f"[b]ctrl+o[/] approve with these arguments   [b]esc[/] back, nothing edited\n{TYPING_KEYS}"
)
TOLD_KEYS = (
    "[b]ctrl+o[/] reject, telling the agent to run this input   [b]esc[/] back, nothing decided"
    f"\n{TYPING_KEYS}"
)
ARGS_FIRST = (
    "[b $warning]Not approved:[/] its arguments were not in view ([b]a[/] again once they are)"
)
GONE_KEYS = "[b]esc[/] close (the next write waiting is offered then)"
GRANT_KEYS = (
    "[b]↑↓[/] scope   [b]tab[/] fields, uses, for (90s, 10m)   [b]enter[/] approve and grant   "
    "[b]esc[/] back"
)


def args_shown(request: ApprovalRequest) -> Iterator[Static]:
    """The arguments; a file write's content as its diff against the working copy, `+`
    lines green, `-` lines red, the rest of the arguments below it."""
    if not request.diff:
        yield Static(plain(visible_json(request.args)))
        return
    styles = {"+": "$text-success", "-": "$text-error", "@": "$text-accent"}
    lines = [
        plain(line, "" if line.startswith(("+++", "---")) else styles.get(line[:1], ""))
        for line in request.diff.splitlines()
    ]
    yield Static(Content("\n").join(lines), classes="approval-diff")
    rest = {k: v for k, v in request.args.items() if k not in CONTENT_FIELDS}
    yield Static(plain(visible_json(rest)))


class FittingBox(Vertical):
    """A dialog's box that tells its dialog when its size changed (a toast's strip came or
    went, the terminal was resized), for the dialog to fit what it shows."""

    def __init__(self, fit: Callable[[], None], *, id: str) -> None:
        super().__init__(id=id)
        self._fit = fit

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit)  # once what is inside has its size too


def rows_drawn(screen: Screen[Any], widget: Widget) -> int:
    """How many of the widget's rows the screen draws as the widget's own now: none that
    another widget (a toast, a docked foot) covers or its container scrolled out of view."""
    region = widget.region
    drawn = 0
    for y in range(max(region.y, 0), min(region.bottom, screen.size.height)):
        try:
            drawn += screen.get_widget_at(region.x, y)[0] is widget
        except NoWidget:
            continue
    return drawn


def arguments_drawn(screen: Screen[Any], box: Widget) -> bool:
    """Whether the first lines of a dialog's arguments (`box`'s texts) are drawn as its own
    now: two, or all there are; none before the box is laid out."""
    wanted = max(1, min(2, box.virtual_size.height))
    return sum(rows_drawn(screen, text) for text in box.query(Static)) >= wanted
