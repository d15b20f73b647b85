"""The tables `loopdeck runs` and `loopdeck pending` print, at the terminal's width.

Ids and times are never cut: they are what `attach`, `approve` and a reader's eye take. When
the table is wider than the terminal, the least useful columns give way, in a stated order:
a time is written shorter, a column is dropped, free text (a write's arguments) ends in "…".
Everything is in `--json`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from loopdeck.core.text import visible
from loopdeck.operator import records

RUN_COLUMNS = (
    "run_id", "env", "script", "model", "state", "stop_reason", "started_at", "tokens",
    "cost_usd", "runner",
)  # fmt: skip
GAP = 2  # each column's share of the table's edges and gaps (`_table`'s box and padding)


@dataclass(frozen=True)
class Column:
    header: str
    cells: tuple[str, ...]
    keep: bool = False  # an id or a time: never cut
    cut: int = 0  # free text that may end in "…": the fewest cells worth showing of it

    @property
    def widest(self) -> int:
        return max(cell_len(visible(cell)) for cell in (self.header, *self.cells))

    @property
    def least(self) -> int:
        return min(self.widest, self.cut) if self.cut else self.widest


# What gives way, in order: (the column's header, what it becomes; None: it is dropped).
GiveWay = Sequence[tuple[str, Column | None]]


def fitted(title: Text | str, columns: list[Column], give_way: GiveWay, width: int) -> Table:
    """The table of `columns` as wide as `width` allows, each step of `give_way` taken only
    while the table is still too wide."""
    shown = list(columns)
    for header, shorter in give_way:
        if _least_width(shown) <= width:
            break
        at = next((i for i, column in enumerate(shown) if column.header == header), None)
        if at is None:
            continue
        if shorter is None:
            del shown[at]
        else:
            shown[at] = shorter
    return _table(title, shown, width)


def _least_width(columns: list[Column]) -> int:
    return sum(column.least + GAP for column in columns)


def _table(title: Text | str, columns: list[Column], width: int) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    fits = _least_width(columns) <= width
    room = width - sum(column.widest + GAP for column in columns if not column.cut)
    free = [column for column in columns if column.cut]
    for column in columns:
        if column.cut:  # what is left, shared
            shown = max(column.least, min(column.widest, room // len(free) - GAP))
            table.add_column(column.header, width=shown if fits else None, no_wrap=True)
        elif column.keep:
            table.add_column(column.header, no_wrap=True, min_width=column.widest)
        else:  # as wide as its widest cell; once nothing else gives way, folded, never cut
            table.add_column(column.header, width=column.widest if fits else None, overflow="fold")
    for row in zip(*(column.cells for column in columns), strict=True):
        table.add_row(*(Text(visible(cell)) for cell in row))  # never markup
    return table


# -- `loopdeck runs` ----------------------------------------------------------------------------
def runs_table(title: Text | str, runs: list[dict[str, Any]], width: int) -> Table:
    """Every run, newest first. Giving way: the outcome-unknown column (dropped while empty,
    else headed "outcome?"), the runner, the stop's header, the start to the minute, cost,
    tokens, model, a paused run's underlying state, env and script in one column (cut short
    when it must be), then that column."""
    cells = {name: tuple(_cell(run, name) for run in runs) for name in RUN_COLUMNS}
    unknown = tuple(", ".join(run["outcome_unknown"]) or "-" for run in runs)
    columns = [Column(name, cells[name], keep=name in ("run_id", "started_at"))
               for name in RUN_COLUMNS]  # fmt: skip
    columns.append(Column("outcome unknown", unknown))
    started = tuple(_short_time(run["started_at"], "%m-%d %H:%M") for run in runs)
    env_script = tuple(f"{run['env']}/{run['script'] or '-'}" for run in runs)
    states = tuple("paused" if run["paused"] else cells["state"][i] for i, run in enumerate(runs))
    empty = all(cell == "-" for cell in unknown)
    give_way: list[tuple[str, Column | None]] = [
        ("outcome unknown", None if empty else Column("outcome?", unknown)),
        ("runner", None),
        ("stop_reason", Column("stop", cells["stop_reason"])),
        ("started_at", Column("started", started, keep=True)),
        ("cost_usd", None), ("tokens", None), ("model", None),
        ("state", Column("state", states)),
        ("env", Column("env/script", env_script, cut=12)), ("script", None),
        ("env/script", None),
    ]  # fmt: skip
    return fitted(title, columns, give_way, width)


def _cell(run: dict[str, Any], column: str) -> str:
    """One cell of `loopdeck runs`' table, "-" where the store has nothing."""
    if column == "state" and run["paused"]:
        return f"paused ({run['state']})"
    if column == "started_at":
        return records.local_time(run["started_at"])
    if column == "runner":
        return f"{run['host']}:{run['pid']}" if run["host"] else "-"
    value = run[column]
    if value is None:
        return "-"
    if column == "cost_usd":
        return f"{value:.4f}"
    if column == "tokens":
        return f"{value:,}"
    return str(value)


def _short_time(stamp: str | None, form: str) -> str:
    """A stored UTC time in the reader's local time, shorter than `local_time`'s."""
    if not stamp:
        return "-"
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime(form)
    except ValueError:
        return stamp


def _clock(stamp: str) -> str:
    """A time soon (an expiry) in local time to the second, its day too when not today."""
    try:
        when = datetime.fromisoformat(stamp).astimezone()
    except ValueError:
        return stamp
    today = when.date() == datetime.now(when.tzinfo).date()
    return when.strftime("%H:%M:%S" if today else "%m-%d %H:%M:%S")


# -- `loopdeck pending` -------------------------------------------------------------------------
def pending_table(pending: list[dict[str, Any]], width: int) -> Table:
    """The writes waiting for approval. Giving way: the expiry in local time (its day only
    when not today), the arguments cut short ("…"), then dropped."""

    def expiry(item: dict[str, Any], when: str) -> str:
        return f"expired at {when}" if item["expired"] else when

    full = tuple(expiry(item, item["expires_at"]) for item in pending)
    short = tuple(expiry(item, _clock(item["expires_at"])) for item in pending)
    columns = [
        Column("run_id", tuple(item["run_id"] for item in pending), keep=True),
        Column("call_id", tuple(item["call_id"] for item in pending), keep=True),
        Column("tool", tuple(item["tool"] for item in pending)),
        Column("args", tuple(json.dumps(item["args"]) for item in pending), cut=12),
        Column("expires_at", full, keep=True),
    ]
    give_way = [("expires_at", Column("expires", short, keep=True)), ("args", None)]
    return fitted("writes waiting for approval", columns, give_way, width)
