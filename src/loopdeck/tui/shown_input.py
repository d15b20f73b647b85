"""A text box whose pasted controls and bidi characters are shown, never obeyed by the
terminal: Textual's `Input` draws its value raw."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Input


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
