"""The fleet's table: every run of the store, drawn only where the screen shows it.

The screen hands over the runs in their order (`show`): the fleet's own `Order`, kept by
what changed (`operator/fleet_order.py`), or the list a filter kept. The table reads it by
index and, for each row it has drawn, keeps its cells and their segments, made again only
when what the row shows changed (its look). A frame costs the rows on screen whatever the
fleet's size, and so does a refresh: the cursor's run is found by bisection, the lines on
screen compared with what they were drawn as. A column is as wide as its widest cell made so
far, within its cap, so only rows that were drawn (or matched by the filter) are ever
measured: a thousand live runs are never re-measured as a `DataTable` would.

The runs that need the operator lead the order and are pinned under the header (up to half
the rows shown): however far down the cursor or the view is, what waits for you is on screen.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from datetime import datetime
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.strip import Strip

from loopdeck.operator.fleet import FleetRow, waiting_text
from loopdeck.operator.fleet_order import Listed, Order, listing
from loopdeck.tui.in_place import grows_in_place
from loopdeck.tui.line_table import LineTable, table_css
from loopdeck.tui.panels import elapsed_text
from loopdeck.tui.shown import visible

# What waits for you, the state and the stop next to the run id: on screen at 80 columns,
# the others scroll.
COLUMNS = ("", "run", "waiting", "state", "stop", "env/script", "model", "closest budget",
           "last finding", "age", "runner", "last move")  # fmt: skip
# The most a column takes (a longer cell ends in "…"): the longest state and stop fit theirs.
COLUMN_CAP = {"": 1, "run": 24, "state": 17, "stop": 16, "env/script": 32, "model": 28}
COLUMN_CAP |= {"waiting": 24, "closest budget": 32, "last finding": 60, "age": 10}
COLUMN_CAP |= {"runner": 28, "last move": 72}
PADDING = 1  # a space either side of each cell, as a DataTable's

Look = tuple[object, ...]


class FleetTable(LineTable):
    """The fleet's runs in the screen's order; the cursor stays on its run as they move."""

    PREFIX = "fleet-table"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "fleet-table--header",
        "fleet-table--cursor",
        "fleet-table--even-row",
    }
    DEFAULT_CSS = table_css("FleetTable", "fleet-table", overflow_x="auto")

    virtual_size = grows_in_place()  # more runs move the scrollbar, not the screen

    def __init__(
        self,
        *,
        id: str | None = None,
        classes: str | None = None,
        seen_runs: Set[str] = frozenset(),
    ) -> None:
        """`seen_runs`: the runs the operator has looked at (the console's, as they grow): no
        other stopped run is marked unseen (●)."""
        super().__init__(id=id, classes=classes)
        self.seen_runs = seen_runs
        self._rows: Order[FleetRow] | Listed[FleetRow] = Listed([])
        self._cells: dict[str, tuple[Look, list[Text]]] = {}
        self._strips: dict[str, list[Segment]] = {}
        self._said: dict[str, tuple[Look, str]] = {}
        self._drawn: dict[int, tuple[str, Look, bool]] = {}  # what each index was drawn as
        self._widths = {column: max(1, len(column)) for column in COLUMNS}
        self._widths_grew = False
        self._now: datetime | None = None
        self._leading = 0  # how many of the first rows need the operator
        self._count = 0  # how many rows were listed, and the cursor's run, as last shown
        self._cursor_run: str | None = None
        self.cursor_row = 0

    # -- what the screen asks --------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._rows)

    @property
    def run_ids(self) -> list[str]:
        """The runs listed, in their order on screen."""
        return [row.run_id for row in self._rows]

    @property
    def cursor_run(self) -> str | None:
        return self.row_at(self.cursor_row).run_id if self._rows else None

    @property
    def rows_shown(self) -> int:
        """How many rows the table has room to show at once (under its header)."""
        return self._rows_shown()

    @property
    def pinned(self) -> int:
        """The leading runs that need the operator, drawn whatever the scroll: as many as
        half the rows shown take (the rest of them scroll first in line)."""
        return min(self._leading, self.rows_shown // 2)

    def row_at(self, index: int) -> FleetRow:
        """The run listed at `index`, in the order on screen."""
        row: FleetRow = self._rows[index]
        return row

    def drawn_as_now(self, index: int) -> bool:
        """The line of the row at `index` was last drawn as that row looks now (the same run,
        look and cursor): it needs no drawing."""
        row = self._rows[index]
        look = self._look(row, self._age(row))
        return self._drawn.get(index) == (row.run_id, look, index == self.cursor_row)

    def get_row_index(self, run_id: str) -> int:
        index = self._rows.index_of(run_id)
        if index is None:
            raise KeyError(f"run {run_id} is not listed")
        return index

    def get_row(self, run_id: str) -> list[Text]:
        """The run's cells as they are drawn."""
        return self._cells_of(self._rows[self.get_row_index(run_id)])

    def said(self, row: FleetRow, now: datetime) -> str:
        """The row's cells as of `now` in one plain text in lower case, for the filter: what
        the operator reads. Made again only when the row's look changed."""
        self._now = now
        cells = self._cells_of(row)
        look = self._cells[row.run_id][0]
        known = self._said.get(row.run_id)
        if known is not None and known[0] is look:
            return known[1]
        text = " ".join(cell.plain for cell in cells).lower()
        self._said[row.run_id] = (look, text)
        return text

    def column_ends(self) -> dict[str, int]:
        """Where each column ends, in cells from the table's left edge."""
        ends, x = {}, 0
        for column in COLUMNS:
            x += self._widths[column] + 2 * PADDING
            ends[column] = x
        return ends

    def view_edge(self, scroll_x: int, width: int) -> int:
        """Where the view cuts: after the last column it shows whole, or inside the next one
        when that column's name fits (its cells then end in "…" at the edge: at 80 columns,
        env/script); a column whose very name would be cut is left out until scrolled to. No
        column fitting (one wider than the view), the view's edge."""
        right = scroll_x + width
        edge = None
        for column, end in self.column_ends().items():
            if end - PADDING <= scroll_x:
                continue  # scrolled past
            if end - PADDING <= right:  # its text ends in view (its last padding may be cut)
                edge = min(end, right)
                continue
            start = end - self._widths[column] - PADDING
            if start + cell_len(column) <= right:
                return right  # its name fits: shown cut
            break
        return right if edge is None else edge

    # -- the rows --------------------------------------------------------------------------
    def show(self, rows: Sequence[FleetRow], now: datetime) -> None:
        """These runs, in this order, as of `now`. The cursor keeps its run when the run is
        still listed, else its place. Nothing is drawn here: the rows on screen are, next
        frame. Handed the fleet's `Order`, it costs the lines on screen, not the runs."""
        # The fleet's order is one object, moved by the fleet: what it was is what was noted.
        kept, place, count, pinned = self._cursor_run, self.cursor_row, self._count, self.pinned
        self._now = now
        self._rows = listed = listing(rows)
        self._leading = listed.leading
        at = None if kept is None else listed.index_of(kept)
        if at is not None:
            self.cursor_row = at
        self.cursor_row = max(0, min(self.cursor_row, len(rows) - 1))
        self._count, self._cursor_run = len(rows), self.cursor_run
        self._resize()
        top = int(self.scroll_y)
        if self.cursor_row != place:  # its run moved: kept in view (else the view stays put)
            self._scroll_cursor_into_view()
        if len(rows) != count or int(self.scroll_y) != top or self.pinned != pinned:
            self.refresh()
        else:
            self._refresh_changed()

    def _refresh_changed(self) -> None:
        """Only the lines on screen whose run, look or cursor changed are drawn again."""
        for line, index in self._lines_shown():
            if not self.drawn_as_now(index):
                self._refresh_row_line(line)

    def mark(self, row: FleetRow) -> Text:
        """Why the run wants a look: ⚠ an approval or a question, ⏸ paused, ● stopped and not
        yet seen."""
        need = row.needs_operator
        if need in ("approval", "question"):
            return Text("⚠", style=f"bold {self._color('warning')}")
        if need == "paused":
            return Text("⏸", style=f"bold {self._color('warning')}")
        if not row.live and row.run_id not in self.seen_runs and row.started_at is not None:
            return Text("●", style=self._color("accent"))
        return Text("")

    def _look(self, row: FleetRow, age: str) -> Look:
        """Everything a row's cells are made of: the same look, the same cells."""
        projected = None if row.projected_s is None else elapsed_text(row.projected_s)
        return (age, row.needs_operator, row.live, row.run_id in self.seen_runs, row.state,
                row.paused, row.stop_reason, row.env, row.script, row.model, row.pending,
                row.questions, row.closest, row.closest_fraction >= 0.8, projected,
                row.last_finding, row.where, row.started_at is None, row.shown_state,
                row.move)  # fmt: skip

    def _age(self, row: FleetRow) -> str:
        return elapsed_text(row.age_s(self._now)) if self._now is not None else ""

    def _cells_of(self, row: FleetRow) -> list[Text]:
        age = self._age(row)
        look = self._look(row, age)
        made = self._cells.get(row.run_id)
        if made is not None and made[0] == look:
            return made[1]
        cells = self.make_cells(row, age)
        self._cells[row.run_id] = (look, cells)
        self._strips.pop(row.run_id, None)
        for column, text in zip(COLUMNS, cells, strict=True):
            width = min(COLUMN_CAP[column], cell_len(text.plain))
            if width > self._widths[column]:
                self._widths[column] = width
                self._widths_grew = True
        return cells

    def make_cells(self, row: FleetRow, age: str) -> list[Text]:
        """The row's cells made anew (`get_row` gives them as drawn, made again only when
        the row's look changed)."""
        # Plain text, never markup: a run id or a finding like "[b]" is shown as written.
        closest = row.closest
        if closest and row.projected_s is not None and row.spending:  # no cap comes to a wait
            closest += f" · cap in {elapsed_text(row.projected_s)}"
        budget_style = self._color("error") if row.closest_fraction >= 0.8 else ""
        stop_style = self._color("success" if row.stop_reason == "goal_met" else "error")
        return [
            self.mark(row),
            Text(visible(row.run_id)),
            Text(waiting_text(row.approvals, row.questions)),
            Text(visible(row.shown_state)),
            Text(visible(row.stop_reason or ""), style=stop_style),
            Text(visible(f"{row.env}/{row.script}")),
            Text(visible(row.model)),
            Text(visible(closest), style=budget_style),
            Text(visible(row.last_finding[:60])),
            Text(age),
            Text(visible(row.where)),
            Text(visible(row.move)),
        ]

    def _resize(self) -> None:
        width = sum(self._widths.values()) + 2 * PADDING * len(COLUMNS)
        self.virtual_size = Size(width, len(self._rows) + 1)

    # -- drawing ---------------------------------------------------------------------------
    def _segments(self, texts: list[Text]) -> list[Segment]:
        """One segment per run of cells in one style: a frame's cost is per segment."""
        segments: list[Segment] = []
        pieces: list[str] = []
        style: Style | None = None
        pad = " " * PADDING
        for column, text in zip(COLUMNS, texts, strict=True):
            room, plain = self._widths[column], text.plain
            if cell_len(plain) > room:
                plain = set_cell_size(plain, max(0, room - 1)) + "…"
            cell_style = Style.parse(str(text.style)) if text.style else None
            if cell_style != style and pieces:
                segments.append(Segment("".join(pieces), style))
                pieces = []
            style = cell_style  # on the padding too: a color or bold shows on no space
            pieces.append(f"{pad}{set_cell_size(plain, room)}{pad}")
        segments.append(Segment("".join(pieces), style))
        return segments

    def _row_segments(self, row: FleetRow) -> list[Segment]:
        texts = self._cells_of(row)  # drops the row's segments when its look changed
        segments = self._strips.get(row.run_id)
        if segments is None:
            segments = self._strips[row.run_id] = self._segments(texts)
        return segments

    def render_lines(self, crop: Region) -> list[Strip]:
        lines = super().render_lines(crop)
        if self._widths_grew:  # a wider cell came on screen: every row is drawn again
            self._widths_grew = False
            self._strips.clear()
            self.call_later(self._regrow)
        return lines

    def _regrow(self) -> None:
        self._resize()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x = self.scroll_offset.x
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y == 0:
            header = self.get_component_rich_style("fleet-table--header")
            strip = Strip(self._segments([Text(column) for column in COLUMNS]))
            return self.in_view(strip.apply_style(base + header), scroll_x, base)
        index = self._index_at(y)
        if index >= len(self._rows):
            return Strip.blank(width, base)
        row = self._rows[index]
        segments = self._row_segments(row)
        self._drawn[index] = (row.run_id, self._cells[row.run_id][0], index == self.cursor_row)
        return self._drawn_row(segments, index, scroll_x)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cells.clear()  # the marks' and cells' colors are the theme's
        self._strips.clear()

    # -- the cursor ------------------------------------------------------------------------
    def move_cursor(self, *, row: int, animate: bool = False) -> None:
        if not self._rows:
            return
        self.cursor_row = max(0, min(row, len(self._rows) - 1))
        self._cursor_run = self.cursor_run
        top = int(self.scroll_y)
        self._scroll_cursor_into_view()
        if int(self.scroll_y) != top:
            self.refresh()
        else:
            self._refresh_changed()  # the cursor's old line and its new one

    @property
    def row_total(self) -> int:
        return len(self._rows)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)  # inside the border and padding
        if offset is not None and offset.y >= 1:
            self.move_cursor(row=self._index_at(offset.y))
