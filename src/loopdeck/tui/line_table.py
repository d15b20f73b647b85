"""What the console's line-API tables share (the run's calls, the fleet's runs): their keys,
their look (a `DataTable`'s, in the theme's colors), a row's line style and the cursor kept
in view. Each draws only the rows on screen; what a row holds is its own.

A table may pin its first rows (`pinned`): they are drawn under the header whatever the
scroll, and the rows after them scroll beneath. With the view scrolled to the top nothing
differs; scrolled by `scroll_y`, line `pinned + 1 + k` shows row `scroll_y + pinned + k`."""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.color import Color, ColorParseError
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from loopdeck.tui.in_place import rescroll
from loopdeck.tui.paint_style import StylePerPaint


def _cut_inside_text(strip: Strip, edge: int) -> bool:
    """Whether cutting `strip` at `edge` cuts a word: a cell before it and one after it."""
    around = strip.crop(edge - 1, edge + 1).text
    return len(around) == 2 and not around[0].isspace() and not around[1].isspace()


def table_css(widget: str, prefix: str, overflow_x: str) -> str:
    """A `DataTable`'s look for `widget`, its parts named `prefix--header`, `--cursor` and
    `--even-row`."""
    return f"""
    {widget} {{
        background: $surface;
        color: $foreground;
        overflow-x: {overflow_x};
        overflow-y: auto;
        &:focus {{
            background-tint: $foreground 5%;
            & > .{prefix}--cursor {{
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }}
        }}
        &:dark > .{prefix}--even-row {{
            background: $surface-darken-1 40%;
        }}
        & > .{prefix}--header {{
            text-style: bold;
            background: $panel;
            color: $foreground;
        }}
        & > .{prefix}--even-row {{
            background: $surface-lighten-1 50%;
        }}
        & > .{prefix}--cursor {{
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }}
    }}
    """


class LineTable(StylePerPaint, ScrollView, can_focus=True):
    """A table of rows under one header line; `cursor_row` the selected row. A subclass
    names its parts' `PREFIX`, says how many rows it has (`row_total`) and moves the cursor
    (`move_cursor`)."""

    PREFIX: ClassVar[str] = ""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Previous row", show=False),
        Binding("down", "cursor(1)", "Next row", show=False),
        Binding("pageup", "page(-1)", "A page up", show=False),
        Binding("pagedown", "page(1)", "A page down", show=False),
        Binding("home", "jump(0)", "First row", show=False),
        Binding("end", "jump(-1)", "Last row", show=False),
    ]

    cursor_row = 0

    @property
    def row_total(self) -> int:
        raise NotImplementedError

    @property
    def pinned(self) -> int:
        """How many of the first rows are drawn whatever the scroll (none unless said)."""
        return 0

    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        raise NotImplementedError

    def watch_virtual_size(self, size: Size) -> None:
        rescroll(self, size)

    def _color(self, name: str) -> str:
        """A theme color as Rich takes it: one with alpha is blended onto the background."""
        try:
            color = Color.parse(self.app.theme_variables.get(name, ""))
        except ColorParseError:
            return ""
        if color.a < 1:
            color = self.background_colors[1] + color
        return color.hex6

    def _drawn_row(self, segments: list[Segment], index: int, scroll_x: int) -> Strip:
        """Row `index`'s segments as its line: the cursor's colors, else the stripes."""
        line_style = self.rich_style
        if index == self.cursor_row:
            line_style += self.get_component_rich_style(f"{self.PREFIX}--cursor")
            # The cursor's own colors win over a cell's (as in a DataTable's cursor row).
            strip = Strip(Segment(text, line_style) for text, _, _ in segments)
        else:
            if index % 2:
                line_style += self.get_component_rich_style(f"{self.PREFIX}--even-row")
            strip = Strip(Segment.apply_style(segments, line_style))
        return self.in_view(strip, scroll_x, line_style)

    def in_view(self, strip: Strip, scroll_x: int, style: Style) -> Strip:
        """The part of a line (a row, the header) the view shows from `scroll_x`, as wide as
        the view; cut at `view_edge`, blank after it."""
        width = self.scrollable_content_region.width
        edge = self.view_edge(scroll_x, width)
        shown = strip.crop_extend(scroll_x, edge, style)
        if scroll_x < edge < strip.cell_length and _cut_inside_text(strip, edge):
            # Text cut by the edge ends in "…": the cell goes on past it, scrolled to.
            last = strip.crop(edge - 1, edge)
            ellipsis = Strip([Segment("…", segment.style) for segment in last])
            shown = Strip.join([shown.crop(0, edge - 1 - scroll_x), ellipsis])
        return shown.extend_cell_length(width, style)

    def view_edge(self, scroll_x: int, width: int) -> int:
        """Where a line is cut on the right: the view's edge (a table may cut at a column's)."""
        return scroll_x + width

    def _rows_shown(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def _index_at(self, line: int) -> int:
        """The row drawn on `line` (1: the first under the header)."""
        pinned = self.pinned
        return line - 1 if line <= pinned else int(self.scroll_y) + line - 1

    def _lines_shown(self) -> list[tuple[int, int]]:
        """(line, row) for every row on screen: the pinned ones, then those scrolled to."""
        pinned, top, total = self.pinned, int(self.scroll_y), self.row_total
        last = min(total, top + self._rows_shown())
        scrolled = range(top + pinned, last)
        return [(i + 1, i) for i in range(min(pinned, total))] + [
            (i - top + 1, i) for i in scrolled
        ]

    def _refresh_row_line(self, line: int) -> None:
        self.refresh_lines(int(self.scroll_y) + line)  # in the view's coordinates

    def on_resize(self) -> None:
        self.call_after_refresh(self._scroll_cursor_into_view)

    def _scroll_cursor_into_view(self) -> None:
        rows_shown, pinned = self._rows_shown(), self.pinned
        if self.cursor_row < pinned:
            return  # always on screen
        top = int(self.scroll_y)
        if self.cursor_row < top + pinned:
            self.scroll_to(y=self.cursor_row - pinned, animate=False, immediate=True)
        elif self.cursor_row >= top + rows_shown:
            self.scroll_to(y=self.cursor_row - rows_shown + 1, animate=False, immediate=True)

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(row=self.cursor_row + delta)

    def action_page(self, direction: int) -> None:
        page = max(1, self._rows_shown() - self.pinned)
        self.move_cursor(row=self.cursor_row + direction * page)

    def action_jump(self, row: int) -> None:
        if row == 0 and self.pinned:  # the first row is pinned: the view goes home too
            self.scroll_to(y=0, animate=False, immediate=True)
        self.move_cursor(row=row if row >= 0 else self.row_total - 1)
