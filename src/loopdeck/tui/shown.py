"""Text from outside (the model, a tool, an env, a user, a path) on screen: never markup.

Loopdeck's own markup goes in a template; outside text only in its `$name` slots, which
Textual fills after the template is parsed, so no value is read as a tag (an unclosed `[0`,
a `[/]`, a trailing backslash before a tag: `rich.markup.escape` misses all of them). Each
value passes `visible` on the way: its controls and bidi characters are shown as escapes.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.text import Text
from textual.app import App
from textual.content import Content
from textual.notifications import SeverityLevel
from textual.widget import Widget


def visible(text: str) -> str:
    """`core.text.visible`, imported only for text that needs it: the console's first frame
    (the fleet, `PreparingScreen`) is drawn before the core is loaded."""
    if text.isprintable():
        return text
    from loopdeck.core.text import visible as shown

    return shown(text)


def markup(template: str, **values: object) -> Content:
    """`template` is loopdeck's markup; `values` fill its `$name` (or `${name}`) slots as
    plain text. A `$` in the template that names no value stays as it is."""
    return Content.from_markup(template, **{name: visible(str(v)) for name, v in values.items()})


def plain(text: str, style: str = "") -> Content:
    """One outside string, styled as a whole (a border title, a dialog's body)."""
    return Content.styled(visible(text), style) if style else Content(visible(text))


def cell(text: str, style: str = "", width: int | None = None) -> Text:
    """A table cell: Textual reads a `str` cell of a `DataTable` as Rich markup. Past
    `width` cells it is cut, ending in "…"."""
    shown = visible(text)
    if width is not None and cell_len(shown) > width:
        shown = set_cell_size(shown, width - 1) + "…"
    return Text(shown, style=style)


NOT_TAKEN = "already decided, or its asking ended"
"""Why the store refused a decision (it says no more than that it was not taken)."""


def toast(
    node: App[Any] | Widget,
    message: str,
    *,
    title: str = "",
    severity: SeverityLevel = "information",
    timeout: float | None = None,
) -> None:
    """`notify` with an outside message and title: shown as written, never as markup."""
    node.notify(
        visible(message), title=visible(title), severity=severity, timeout=timeout, markup=False
    )
