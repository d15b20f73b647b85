"""A text box whose pasted controls and bidi characters are shown, never obeyed by the
terminal: Textual's `Input` draws its value raw. And `typing_into`: whether the keys now go
to a text box (letters typed, not commands)."""

from __future__ import annotations

import sys

from rich.text import Text
from textual.widgets import Input

# What every text box's hint says: letters are typed there, so the run's keys take ctrl.
TYPING_KEYS = "while typing: [b]ctrl+s[/] stop  [b]ctrl+k[/] kill  [b]ctrl+q[/] quit"


class ShownInput(Input):
    """An `Input` drawing each control or bidi character as one mark, so the cursor keeps its
    place; the value itself is what was typed (or pasted)."""

    @property
    def _value(self) -> Text:
        value = self.value
        if not value.isprintable():  # the core only for text that needs it (the first frame)
            from loopdeck.core.text import visible_in_place

            value = visible_in_place(value)
        return Text(value, no_wrap=True, overflow="ignore", end="")


def typing_into(widget: object) -> bool:
    """A one-line box or a multi-line one (the arguments' editor) has the keys: letters are
    typed there, and the single-key commands wait. Textual's `TextArea` is looked up only
    once its module is loaded: no `TextArea` exists before, and the console's first frame
    does not load it."""
    if isinstance(widget, Input):
        return True
    text_area = sys.modules.get("textual.widgets._text_area")
    return text_area is not None and isinstance(widget, text_area.TextArea)
