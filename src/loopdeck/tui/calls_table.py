"""The calls table: one row per proposed call, drawn only where the screen shows it.

The rows are the view's own call records (the view keeps the newest MAX_CALL_ROWS); the
table holds their order and a strip per row it has drawn. A frame costs the rows on screen,
whatever the run's length: a runaway's thousandth call costs what its first did.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip

from loopdeck.core.outcome import CallRecord
from loopdeck.core.text import short_args, visible
from loopdeck.operator.runview import RunView
from loopdeck.tui.call_status import GUARD_HELD_LOOK, STATUS_LOOK, status_label
from loopdeck.tui.in_place import grows_in_place
from loopdeck.tui.line_table import LineTable, table_css

COLUMNS = ("#", "rnd", "tool", "arguments", "fingerprint", "state", "risk", "status", "ms")

# The room each column but the arguments takes, with one space either side; the longest
# status and a time with retries fit theirs. Narrow terminals drop the columns the Call
# panel shows anyway, never the status or the time.
COLUMN_ROOM = {"#": 8, "rnd": 5, "tool": 18, "fingerprint": 13, "state": 10, "risk": 7}
COLUMN_ROOM |= {"status": 22, "ms": 12, "arguments": 2}
DROPPED_FIRST = ("state", "rnd", "fingerprint", "risk")
MIN_ARGS_WIDTH = 16
MIN_TOOL_ROOM = 10  # then the tool's name gives way to the arguments
SCROLLBAR = 2
RIGHT_ALIGNED = frozenset({"rnd", "ms"})


def format_duration(duration_ms: float | None) -> str:
    return "" if duration_ms is None else f"{duration_ms:,.0f}"


class CallsTable(LineTable):
    """The run's calls, newest last. The cursor follows the newest row while it is on it."""

    PREFIX = "calls-table"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "calls-table--header",
        "calls-table--cursor",
        "calls-table--even-row",
    }
    DEFAULT_CSS = table_css("CallsTable", "calls-table", overflow_x="hidden")

    class Highlighted(Message):
        """The cursor moved to another call (None: the table is empty)."""

        def __init__(self, table: CallsTable, call_id: str | None) -> None:
            super().__init__()
            self.table = table
            self.call_id = call_id

        @property
        def control(self) -> CallsTable:
            return self.table

    virtual_size = grows_in_place()  # a new row moves the scrollbar, not the screen
    args_width = 34
    tool_room = COLUMN_ROOM["tool"]
    columns_shown: tuple[str, ...] = COLUMNS
    guard_held: str | None = None  # the call the guard holds while it asks the operator

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._keys: list[str] = []
        self._rows: dict[str, CallRecord] = {}
        self._cells: dict[str, list[Text]] = {}
        self._strips: dict[str, list[Segment]] = {}
        self.cursor_row = 0
        self._highlighted: str | None = None

    # -- what the screen asks --------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def cursor_key(self) -> str | None:
        return self._keys[self.cursor_row] if self._keys else None

    @property
    def at_newest(self) -> bool:
        """The cursor is on the newest row, and follows each new one."""
        return self.cursor_row >= len(self._keys) - 1

    def get_row(self, call_id: str) -> list[Text]:
        return self._row_cells(call_id)

    # -- the rows --------------------------------------------------------------------------
    def sync(self, view: RunView) -> None:
        """Take the rows the view marked changed: their drawings are dropped, the order is
        the view's. Cheap: nothing is drawn until the row is on screen."""
        if not view.changed_calls:
            return
        follow = self.at_newest
        shown = self.cursor_key
        for call_id in view.changed_calls:  # changed, or let go by the view
            self._cells.pop(call_id, None)
            self._strips.pop(call_id, None)
        view.changed_calls.clear()
        self.guard_held = view.guard_held
        self._rows = view.calls
        self._keys = list(view.calls)
        if follow or shown is None or shown not in self._rows:
            self.cursor_row = max(0, len(self._keys) - 1)
        else:
            self.cursor_row = self._keys.index(shown)  # the cursor stays on its call
        self._resize()
        self._scroll_cursor_into_view()
        self._announce()
        self.refresh()

    def clear(self) -> None:
        self._keys, self._rows = [], {}
        self._cells.clear()
        self._strips.clear()
        self.cursor_row = 0
        self._resize()
        self._announce()
        self.refresh()

    def restyle(self, view: RunView) -> None:
        """Colors or columns changed: every row is drawn again when next shown."""
        self._cells.clear()
        self._strips.clear()
        view.changed_calls.update(view.calls)
        self.sync(view)
        self.refresh()

    def fit(self, view: RunView) -> None:
        """Columns and the arguments' width follow the terminal; redrawn when they change."""
        if not self.size.width:
            return
        layout = self._layout_for(self.size.width)
        if layout != (self.columns_shown, self.args_width, self.tool_room):
            self.columns_shown, self.args_width, self.tool_room = layout
            self.restyle(view)

    def _layout_for(self, width: int) -> tuple[tuple[str, ...], int, int]:
        """The columns shown, the arguments' width and the tool's room at `width`."""
        shown = list(COLUMNS)  # the room left of `width` with the scrollbar's kept aside
        room = width - SCROLLBAR - sum(COLUMN_ROOM[c] for c in shown)
        for column in DROPPED_FIRST:
            if room >= MIN_ARGS_WIDTH:
                break
            shown.remove(column)
            room += COLUMN_ROOM[column]
        tool_room = COLUMN_ROOM["tool"]
        if room < MIN_ARGS_WIDTH:
            given = min(MIN_ARGS_WIDTH - room, tool_room - MIN_TOOL_ROOM)
            tool_room, room = tool_room - given, room + given
        return tuple(shown), max(MIN_ARGS_WIDTH, room), tool_room

    def _width_of(self, column: str) -> int:
        if column == "arguments":
            return self.args_width + 2
        return self.tool_room if column == "tool" else COLUMN_ROOM[column]

    def _resize(self) -> None:
        width = sum(self._width_of(c) for c in self.columns_shown)
        self.virtual_size = Size(width, len(self._keys) + 1)

    # -- drawing ---------------------------------------------------------------------------
    def _row_cells(self, call_id: str) -> list[Text]:
        cells = self._cells.get(call_id)
        if cells is None:
            cells = self._cells[call_id] = self._make_cells(self._rows[call_id])
        return cells

    def _make_cells(self, row: CallRecord) -> list[Text]:
        label, var = status_label(row), STATUS_LOOK[row.status][1]
        if row.call_id == self.guard_held:  # not running: the guard holds it, asking you
            label, var = GUARD_HELD_LOOK
        duration = format_duration(row.duration_ms)
        if row.retries:
            duration += f" ↻{row.retries}"
        # Plain text, never markup: an argument like "[b]" is shown as typed.
        cells: dict[str, Any] = {
            "#": row.call_id,
            "rnd": str(row.round),
            "tool": visible(row.tool),
            "arguments": short_args(row.args, self.args_width),
            "fingerprint": row.fingerprint[:8],
            "state": row.state_hash[:8],
            "risk": Text(row.risk, style=self._color(f"risk-{row.risk}")),
            "status": Text(label, style=f"bold {self._color(var)}"),
            "ms": duration,
        }
        return [
            cell if isinstance(cell, Text) else Text(cell)
            for cell in (cells[column] for column in self.columns_shown)
        ]

    def _segments(self, texts: list[Text], base: Style) -> list[Segment]:
        segments: list[Segment] = []
        for column, text in zip(self.columns_shown, texts, strict=True):
            room = self._width_of(column) - 2
            plain = text.plain
            if len(plain) > room:
                plain = plain[: max(0, room - 1)] + "…"
            pad = " " * (room - len(plain))
            cell = f"{pad}{plain}" if column in RIGHT_ALIGNED else f"{plain}{pad}"
            style = base + Style.parse(str(text.style)) if text.style else base
            segments += [Segment(" ", base), Segment(cell, style), Segment(" ", base)]
        return segments

    def _row_segments(self, call_id: str) -> list[Segment]:
        segments = self._strips.get(call_id)
        if segments is None:
            texts = self._row_cells(call_id)
            segments = self._strips[call_id] = self._segments(texts, Style())
        return segments

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y == 0:
            header = self.get_component_rich_style("calls-table--header")
            texts = [Text(column) for column in self.columns_shown]
            strip = Strip(self._segments(texts, Style()))
            return strip.apply_style(base + header).crop_extend(scroll_x, scroll_x + width, base)
        index = scroll_y + y - 1
        if index >= len(self._keys):
            return Strip.blank(width, base)
        return self._drawn_row(self._row_segments(self._keys[index]), index, scroll_x)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    # -- the cursor ------------------------------------------------------------------------
    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        if not self._keys:
            return
        self.cursor_row = max(0, min(row, len(self._keys) - 1))
        self._scroll_cursor_into_view()
        self._announce()
        self.refresh()

    def _announce(self) -> None:
        key = self.cursor_key
        if key != self._highlighted:
            self._highlighted = key
            self.post_message(self.Highlighted(self, key))

    @property
    def row_total(self) -> int:
        return len(self._keys)

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self.move_cursor(row=int(self.scroll_y) + event.y - 1)
