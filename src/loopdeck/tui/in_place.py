"""Scroll views whose content grows in place: a new row moves their scrollbar, not the screen.

Textual's `virtual_size` asks for a layout pass when it changes, and a layout pass reflows
and repaints the whole screen. For the calls table and the transcript panel the stylesheet
fixes their size (`1fr`, their container's height), so more rows or longer lines change only
their scroll range: during a runaway that was a whole-screen layout on every frame that
brought a new call (a third of a LiteLLM runaway's frames), for what a scrollbar shows.

A widget that declares `virtual_size = grows_in_place()` and calls `rescroll` from its
`watch_virtual_size` gets what the layout pass would have done for it (its scrollbars and
scroll offsets, `Widget._scroll_update`) and a repaint. Where its own size depends on its
content (an `auto` width or height) it asks for the layout pass as before; so does a change
that shows or hides a scrollbar (`show_vertical_scrollbar` is a layout reactive).
"""

from __future__ import annotations

from textual.geometry import Size
from textual.reactive import Reactive
from textual.widget import Widget


def grows_in_place() -> Reactive[Size]:
    return Reactive(Size(0, 0), layout=False)


def rescroll(widget: Widget, size: Size) -> None:
    styles = widget.styles
    if styles.is_auto_width or styles.is_auto_height:
        widget.refresh(layout=True)
    elif widget.container_size:  # laid out already; the first layout sets the scrollbars
        widget._scroll_update(size)
