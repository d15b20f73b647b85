"""The calls table: one row per proposed call, updated in place, bounded in size."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from loopdeck.core.events import CallStatus
from loopdeck.core.outcome import CallRecord
from loopdeck.core.text import short_args, visible
from loopdeck.operator.runview import RunView

STATUS_LOOK: dict[CallStatus, tuple[str, str]] = {
    CallStatus.PROPOSED: ("running", "primary"),
    CallStatus.RUNNING: ("running", "primary"),
    CallStatus.PENDING_APPROVAL: ("⚠ pending approval", "warning"),
    CallStatus.EXECUTED: ("executed", "success"),
    CallStatus.FAILED: ("failed", "error"),
    CallStatus.BLOCKED_REPEAT: ("⟳ blocked as repeat", "repeat-mark"),
    CallStatus.REJECTED: ("rejected", "error"),
    CallStatus.REFUSED_DUPLICATE: ("refused duplicate", "warning"),
    CallStatus.WITHDRAWN: ("withdrawn", "foreground-muted"),
    CallStatus.INTERRUPTED: ("interrupted", "error"),
    CallStatus.SKIPPED: ("skipped", "foreground-muted"),
    CallStatus.SKIPPED_AFTER_TRIP: ("skipped after repeat", "foreground-muted"),
    CallStatus.OUTCOME_UNKNOWN: ("? outcome unknown", "error"),
}

COLUMNS = ("#", "rnd", "tool", "arguments", "fingerprint", "state", "risk", "status", "ms")


# The room each column but the arguments takes at most, with its cell padding; narrow
# terminals drop the columns the Call panel shows anyway, never the status or the time.
COLUMN_ROOM = {"#": 6, "rnd": 5, "tool": 18, "fingerprint": 13, "state": 10, "risk": 7}
COLUMN_ROOM |= {"status": 22, "ms": 10, "arguments": 2}
DROPPED_FIRST = ("state", "rnd", "fingerprint")
MIN_ARGS_WIDTH = 16


def format_duration(duration_ms: float | None) -> str:
    return "" if duration_ms is None else f"{duration_ms:,.0f}"


class CallsTable(DataTable[Any]):
    """Columns grow to fit their values as rows arrive: a status or a time is never cut."""

    args_width = 34
    columns_shown: tuple[str, ...] = COLUMNS

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self._add_columns()

    def _add_columns(self) -> None:
        for column in self.columns_shown:
            self.add_column(column, key=column)

    def _layout_for(self, width: int) -> tuple[tuple[str, ...], int]:
        shown = list(COLUMNS)
        room = width - 4 - sum(COLUMN_ROOM[c] for c in shown)
        for column in DROPPED_FIRST:
            if room >= MIN_ARGS_WIDTH:
                break
            shown.remove(column)
            room += COLUMN_ROOM[column]
        return tuple(shown), max(MIN_ARGS_WIDTH, room)

    def fit(self, view: RunView) -> None:
        """Columns and the arguments' width follow the terminal; rebuilt when they change."""
        if not self.size.width:
            return
        shown, args_width = self._layout_for(self.size.width)
        if (shown, args_width) != (self.columns_shown, self.args_width):
            self.columns_shown, self.args_width = shown, args_width
            self.restyle(view)

    def _color(self, name: str) -> str:
        return self.app.theme_variables.get(name, "")

    def _cells(self, row: CallRecord) -> list[Any]:
        label, var = STATUS_LOOK[row.status]
        status = Text(label, style=f"bold {self._color(var)}")
        risk = Text(row.risk, style=self._color(f"risk-{row.risk}"))
        duration = format_duration(row.duration_ms)
        if row.retries:
            duration += f" ↻{row.retries}"
        cells = {
            "#": row.call_id,
            "rnd": str(row.round),
            "tool": visible(row.tool),
            "arguments": short_args(row.args, self.args_width),
            "fingerprint": row.fingerprint[:8],
            "state": row.state_hash[:8],
            "risk": risk,
            "status": status,
            "ms": duration,
        }
        # Plain text, never markup: an argument like "[b]" is shown as typed, and a cell is
        # not parsed again each time the table draws or measures it.
        return [
            cell if isinstance(cell, Text) else Text(str(cell))
            for cell in (cells[column] for column in self.columns_shown)
        ]

    def sync(self, view: RunView) -> None:
        """Apply the rows the view marked changed since the last sync.

        Rows the view dropped stay until the table holds half as many again as the view,
        then the table is rebuilt once: removing rows one by one costs a re-index each.
        """
        if not view.changed_calls:
            return
        follow = self.cursor_row >= self.row_count - 1
        changed = sorted(view.changed_calls, key=lambda c: int(c.lstrip("c") or 0))
        view.changed_calls.clear()
        if self.row_count + len(changed) > len(view.calls) + view.max_call_rows // 2:
            self.clear()
            for kept in view.calls.values():
                self.add_row(*self._cells(kept), key=kept.call_id)
        else:
            for call_id in changed:
                row = view.calls.get(call_id)
                if row is None:
                    continue
                cells = self._cells(row)
                if call_id in self.rows:
                    for column, value in zip(self.columns_shown, cells, strict=True):
                        self.update_cell(call_id, column, value, update_width=True)
                else:
                    self.add_row(*cells, key=call_id)
        if follow and self.row_count:
            self.move_cursor(row=self.row_count - 1, animate=False)

    def restyle(self, view: RunView) -> None:
        self.clear(columns=True)
        self._add_columns()
        view.changed_calls.update(view.calls)
        self.sync(view)
