"""A widget's style, worked out once per paint rather than once per line.

`rich_style` walks the widget's ancestors and adds up their colors and text styles (about
15 us here; Textual caches component styles, not this). Textual's `RichLog` asks for it once
or twice per line it renders and the calls table once per row: in a runaway that is most of
the ~25 lines those two render per frame. Within one `render_lines` nothing can change a
style (the paint is one synchronous pass), so a widget that mixes in `StylePerPaint` works it
out once per pass; outside a pass (a key, a style change, a hover) every ask walks the tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

if TYPE_CHECKING:
    from textual.widget import Widget

    _Mixin = Widget
else:
    # Not a DOMNode itself: Textual follows a widget's first DOMNode base for its CSS (its
    # DEFAULT_CSS and type names), and that must stay the widget class it is mixed into.
    _Mixin = object


class StylePerPaint(_Mixin):
    """Mixed in before the widget class: `class TranscriptLog(StylePerPaint, RichLog)`."""

    _style_this_paint: Style | None = None
    _painting = False

    def render_lines(self, crop: Region) -> list[Strip]:
        self._painting = True
        try:
            return super().render_lines(crop)
        finally:
            self._painting = False
            self._style_this_paint = None

    @property
    def rich_style(self) -> Style:
        if not self._painting:
            return super().rich_style
        style = self._style_this_paint
        if style is None:
            style = self._style_this_paint = super().rich_style
        return style
