"""A panel repainted by the lines that changed, not whole.

Textual repaints every line of a widget when its content or its border's title is set, and
each repainted line costs its border, padding and colors (about 70 us a line here). In a
runaway most of a panel's lines read the same from frame to frame: the State panel's two
counts, the Budgets' figures, the Call panel's status and time (its title is its only other
change). A widget that mixes in `LinesRefresh` can have the refresh that such a change asks
for narrowed to the rows that changed (`rows_only`); Textual keeps the others' painted lines.
`paint` and `title` (`panels`) say which rows: lines compared with their styles, only where a
line is a row (no line wraps, none is added or taken away), else the whole widget as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from textual.content import Content
from textual.geometry import Region

if TYPE_CHECKING:
    from textual.widget import Widget

    _Mixin = Widget
else:
    # Not a DOMNode itself: Textual follows a widget's first DOMNode base for its CSS.
    _Mixin = object

Line = tuple[str, tuple[Any, ...]]  # a line's text and its styles' spans


class LinesRefresh(_Mixin):
    """Mixed in before the widget class: `class StateMachinePanel(LinesRefresh, Static)`."""

    _rows_only: tuple[Region, ...] | None = None

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False, recompose: bool = False
    ) -> Any:
        only = self._rows_only
        if only is not None and not regions and repaint and not (layout or recompose):
            regions = only
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


@contextmanager
def rows_only(widget: Widget, rows: Sequence[int] | None) -> Iterator[None]:
    """Within it, a whole refresh of `widget` repaints only these rows of it (its outer rows,
    a border's too); None, or a widget that does not mix in `LinesRefresh`: the whole."""
    if rows is None or not isinstance(widget, LinesRefresh) or not widget.outer_size:
        yield
        return
    top, _, _, left = widget.styles.gutter
    width = widget.outer_size.width
    widget._rows_only = tuple(Region(-left, row - top, width, 1) for row in rows)
    try:
        yield
    finally:
        widget._rows_only = None


def lines_of(content: Content) -> list[Line]:
    return [(line.plain, tuple(line.spans)) for line in content.split("\n")]


def changed_rows(widget: Widget, before: list[Line] | None, after: list[Line]) -> list[int] | None:
    """The outer rows of `widget` whose line changed from `before` to `after`; None when a row
    is not a line (a line added, taken away, wrapped or with a tab): all of them changed."""
    width = widget.content_size.width
    if before is None or len(before) != len(after) or not width:
        return None
    for (old, _), (new, _) in zip(before, after, strict=True):
        if "\t" in old + new or cell_len(old) > width or cell_len(new) > width:
            return None
    top = widget.styles.gutter.top
    return [top + y for y, (old, new) in enumerate(zip(before, after, strict=True)) if old != new]


def border_row(widget: Widget, bottom: bool) -> list[int]:
    """The row of its border title (or, `bottom`, its subtitle)."""
    return [widget.outer_size.height - 1 if bottom else 0]
