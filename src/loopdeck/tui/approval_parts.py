"""Parts of the approval dialog: the keys its foot says in each mode, its arguments as
shown (a file write's diff first), the box that says when its size changed, and whether the
arguments are drawn on screen now (nothing over them, nothing scrolled away): a write is
approved only once they are."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from textual.binding import Binding, BindingType
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

# The foot's words for the dialog's main keys, by binding id. The foot says them in the
# order of the dialog's bindings, as the keys line below it does (`main_keys`).
MAIN_WORDS = {
    "approval.approve": "approve",
    "approval.reject": "reject with a reason",
    "approval.edit": "edit",
    "approval.tell": "reject and tell the agent",
    "approval.grant": "grant",
    "approval.close": "decide later",
}
# The dialog's keys, as its foot says them in each of its other modes.
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


def main_keys(bindings: Iterable[BindingType], not_editable: bool) -> str:
    """The foot's keys while nothing is open in place, in the order of the dialog's
    `bindings`; `e` as the one of edit and tell that applies."""
    left_out = "approval.edit" if not_editable else "approval.tell"
    return "  ".join(
        f"[b]{'esc' if b.key == 'escape' else b.key}[/] {MAIN_WORDS[b.id]}"
        for b in bindings
        if isinstance(b, Binding) and b.id in MAIN_WORDS and b.id != left_out
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
