"""The tables `loopdeck runs` and `loopdeck pending` print, at the terminal's width.

Ids and times are never cut: they are what `attach`, `approve` and a reader's eye take. When
the table is wider than the terminal, the least useful columns give way, in a stated order:
a time is written shorter (never without its seconds), a column is dropped, free text ends in
"…" (a write's arguments fold onto lines of their own instead: they are what an operator
approves), and what names a run (its env and script) folds onto a second line rather than go.
Everything is in `--json`.

A table that fits has its rows written here, a line each, exactly as Rich would lay them out
(`Drawn`; Rich still draws its title, header and edges): Rich's layout of each cell cost
0.7 ms a row, most of `loopdeck runs` at 1,000 runs. A table that does not fit, or a cell
with a line break or a tab, is Rich's own (`tests/test_cli_table_rows.py` holds the two
the same).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from loopdeck.core.text import capped, visible
from loopdeck.operator import records
from loopdeck.operator.records import PendingWrite, RunEntry

RUN_COLUMNS = (
    "run_id", "env", "script", "model", "state", "stop_reason", "started_at", "tokens",
    "cost_usd", "runner",
)  # fmt: skip
ARGS_SHOWN = 600  # characters of a pending write's arguments `pending` shows
GAP = 2  # each column's share of the table's edges and gaps (`_table`'s box and padding)


@dataclass(frozen=True)
class Column:
    header: str
    cells: tuple[str, ...]
    keep: bool = False  # an id or a time: never cut
    cut: int = 0  # free text that may end in "…": the fewest cells worth showing of it
    wraps: bool = False  # free text folded onto more lines where it is wider, never cut
    # Each cell on lines of its own where it is wider than its column ("env/", "script"):
    # folded, never cut; the column no narrower than its widest line.
    folds: tuple[tuple[str, ...], ...] = ()

    @cached_property
    def shown(self) -> tuple[str, ...]:
        """Its cells as the terminal shows them (`visible`), each made once."""
        return _shown(self.cells)

    @cached_property
    def sizes(self) -> tuple[int, ...]:
        """Each shown cell's width in the terminal's cells."""
        return _sizes(self.shown)

    @cached_property  # measured once: the table's fitting asks it at every step
    def widest(self) -> int:
        return max((cell_len(visible(self.header)), *self.sizes))

    @cached_property
    def least(self) -> int:
        if self.folds:
            return min(self.widest, max(size for sizes in self.fold_sizes for size in sizes))
        return min(self.widest, self.cut) if self.cut else self.widest

    @cached_property
    def folded(self) -> tuple[tuple[str, ...], ...]:
        """Each cell's lines when it folds, as the terminal shows them."""
        return tuple(_shown(lines) for lines in self.folds)

    @cached_property
    def fold_sizes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(_sizes(lines) for lines in self.folded)

    def at(self, width: int) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
        """Its cells at `width`: each on one line, or folded where it is wider (a fold
        column), with each line's width."""
        if not self.folds:
            return self.shown, tuple((size,) for size in self.sizes)
        cells: list[str] = []
        sizes: list[tuple[int, ...]] = []
        for cell, size, lines, line_sizes in zip(
            self.shown, self.sizes, self.folded, self.fold_sizes, strict=True
        ):
            folds = size > width
            cells.append("\n".join(lines) if folds else cell)
            sizes.append(line_sizes if folds else (size,))
        return tuple(cells), tuple(sizes)


def _shown(cells: tuple[str, ...]) -> tuple[str, ...]:
    made: dict[str, str] = {}  # a listing repeats its envs, states and models
    return tuple(
        made[cell] if cell in made else made.setdefault(cell, visible(cell)) for cell in cells
    )


def _sizes(cells: tuple[str, ...]) -> tuple[int, ...]:
    measured: dict[str, int] = {}
    return tuple(
        measured[cell] if cell in measured else measured.setdefault(cell, cell_len(cell))
        for cell in cells
    )


# What gives way, in order: (the column's header, what it becomes; None: it is dropped).
GiveWay = Sequence[tuple[str, Column | None]]


def fitted(
    title: Text | str, columns: list[Column], give_way: GiveWay, width: int
) -> RenderableType:
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


def _table(title: Text | str, columns: list[Column], width: int) -> RenderableType:
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    fits = _least_width(columns) <= width
    free = [column for column in columns if column.cut or column.folds]
    room = width - sum(column.widest + GAP for column in columns if column not in free)
    widths = []
    for column in columns:
        if column in free:  # what is left, shared
            shown = max(column.least, min(column.widest, room // len(free) - GAP))
            cuts = bool(column.cut) and not column.wraps
            table.add_column(
                column.header, width=shown if fits else None, no_wrap=cuts,
                overflow="ellipsis" if cuts else "fold",
            )  # fmt: skip
        elif column.keep:
            shown = column.widest
            table.add_column(column.header, no_wrap=True, min_width=column.widest)
        else:  # as wide as its widest cell; once nothing else gives way, folded, never cut
            shown = column.widest
            table.add_column(column.header, width=column.widest if fits else None, overflow="fold")
        widths.append(shown)
    laid = [column.at(shown) for column, shown in zip(columns, widths, strict=True)]
    rows = list(zip(*(cells for cells, _ in laid), strict=True))
    folds = any(size > shown for column, shown in zip(columns, widths, strict=True)
                if column.wraps for size in column.sizes)  # fmt: skip
    if fits and not folds and not any(_breaks(c) for column in columns for c in column.shown):
        sizes = zip(*(sizes for _, sizes in laid), strict=True)
        return Drawn(
            table,
            [line for row, size in zip(rows, sizes, strict=True)
             for line in _lines(row, size, widths)],
        )  # fmt: skip
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # never markup
    return table


def _breaks(cell: str) -> bool:
    """A cell Rich would lay out on more than one line, or with its tabs expanded."""
    return "\n" in cell or "\t" in cell


def _lines(cells: Sequence[str], sizes: Sequence[tuple[int, ...]], widths: list[int]) -> list[str]:
    """One row of a table that fits, as Rich draws it (`SIMPLE_HEAD`, no padding at the edges,
    padding collapsed): each cell at its column's width, cut with "…" where its column is
    narrower, two spaces between columns, one at each edge; a folded cell's lines one under
    the other, the other cells' columns blank beside them."""
    parts = [
        cell.split("\n") if len(size) > 1 else [cell]
        for cell, size in zip(cells, sizes, strict=True)
    ]
    height = max(len(size) for size in sizes)
    drawn = []
    for at in range(height):
        shown = []
        for lines, line_sizes, width in zip(parts, sizes, widths, strict=True):
            cell, size = (lines[at], line_sizes[at]) if at < len(lines) else ("", 0)
            if size > width:
                cut = Text(cell)
                cut.truncate(width, overflow="ellipsis")
                cell, size = cut.plain, cut.cell_len
            shown.append(cell + " " * (width - size))
        drawn.append(" " + "  ".join(shown) + " ")
    return drawn


@dataclass(frozen=True)
class Drawn:
    """A table that fits the terminal with a row a line: Rich draws its title, header and
    edges (`head`, the same table with no rows, so each column has the width it would have
    with them) and the rows are written between them, as Rich would write them, at a
    hundredth of the cost (0.7 ms a row through Rich's own layout of each cell)."""

    head: Table
    rows: list[str]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.head, options, pad=False, new_lines=False)
        for line in lines[:-1]:  # the title, the header and its rule
            yield from line
            yield Segment.line()
        for row in self.rows:
            yield Segment(row)
            yield Segment.line()
        yield from lines[-1]  # the bottom edge
        yield Segment.line()


# -- `loopdeck runs` ----------------------------------------------------------------------------
def runs_table(title: Text | str, runs: Sequence[RunEntry], width: int) -> RenderableType:
    """Every run, newest first. Giving way: the outcome-unknown column (dropped while empty,
    else headed "outcome?"), the runner, the stop's header, the start (its time of day when
    today, to the second), cost, tokens, model, a paused (parked, queued) run's underlying
    state, env and script in one column, an ended run's state said by its stop ("goal_met"),
    env and script folded onto two lines, then the unknown outcomes' ids cut short (`pending`
    lists them whole). The run's id, its state, its start and which env and script it is
    never go."""
    cells = {name: tuple(_cell(run, name) for run in runs) for name in RUN_COLUMNS}
    unknown = tuple(", ".join(run.outcome_unknown) or "-" for run in runs)
    columns = [Column(name, cells[name], keep=name in ("run_id", "started_at"))
               for name in RUN_COLUMNS]  # fmt: skip
    columns.append(Column("outcome unknown", unknown))
    started = tuple(short_clock(run.started_at) for run in runs)
    env_script = tuple(f"{run.env}/{run.script or '-'}" for run in runs)
    folds = tuple((f"{run.env}/", run.script or "-") for run in runs)
    states = tuple(run.shown_state for run in runs)
    ended = tuple(
        run.stop_reason if not run.live and run.stop_reason else run.shown_state for run in runs
    )
    empty = all(cell == "-" for cell in unknown)
    give_way: list[tuple[str, Column | None]] = [
        ("outcome unknown", None if empty else Column("outcome?", unknown)),
        ("runner", None),
        ("stop_reason", Column("stop", cells["stop_reason"])),
        ("started_at", Column("started", started, keep=True)),
        ("cost_usd", None), ("tokens", None), ("model", None),
        ("state", Column("state", states)),
        ("env", Column("env/script", env_script)), ("script", None),
        ("state", Column("state/stop", ended)), ("stop", None),
        ("env/script", Column("env/script", env_script, folds=folds)),
        ("outcome?", Column("outcome?", unknown, cut=8)),
    ]  # fmt: skip
    return fitted(title, columns, give_way, width)


def _cell(run: RunEntry, column: str) -> str:
    """One cell of `loopdeck runs`' table, "-" where the store has nothing."""
    if column == "state":
        shown = run.shown_state  # beside it what the run does: paused, parked as such
        under = "paused" if run.paused and shown != "paused" else run.state
        return shown if shown == under else f"{shown} ({under})"
    if column == "started_at":
        return records.local_time(run.started_at)
    if column == "runner":
        return run.runner
    value = getattr(run, column)
    if value is None and column in ("cost_usd", "tokens") and run.started_at:
        return "unknown"  # a model call that did not say it: never 0
    if value is None:
        return "-"
    if column == "cost_usd":
        return f"{value:.4f}"
    if column == "tokens":
        return f"{value:,}"
    return str(value)


def short_clock(stamp: str | None) -> str:
    """A stored UTC time where room is short: in local time to the second, its day too when
    not today (a start in `runs`, an expiry in `pending`)."""
    if not stamp:
        return "-"
    try:
        when = datetime.fromisoformat(stamp).astimezone()
    except ValueError:
        return stamp
    today = when.date() == datetime.now(when.tzinfo).date()
    return when.strftime("%H:%M:%S" if today else "%m-%d %H:%M:%S")


# -- `loopdeck pending` -------------------------------------------------------------------------
def pending_table(pending: Sequence[PendingWrite], now: datetime, width: int) -> RenderableType:
    """The writes waiting for approval, each expiry in local time, one form at every width:
    its time of day to the second, its day too when not today (`--json` has the stored UTC
    times). The arguments, what is approved, fold onto more lines where they are wider than
    their column (up to `ARGS_SHOWN` characters, then the truncation mark: `--json` has them
    whole); where the table cannot fit them beside the rest, they are dropped. A write a
    policy's rule sent to the operator says which rule asked (and why, where it fits)."""

    def expiry(item: PendingWrite) -> str:
        when = short_clock(item.expires.isoformat())
        return f"expired at {when}" if item.expired(now) else when

    columns = [
        Column("run_id", tuple(item.run_id for item in pending), keep=True),
        Column("call_id", tuple(item.call_id for item in pending), keep=True),
        Column("tool", tuple(item.tool for item in pending)),
        Column(
            "args",
            tuple(capped(json.dumps(item.args), ARGS_SHOWN) for item in pending),
            cut=12,
            wraps=True,
        ),
        Column("expires", tuple(expiry(item) for item in pending), keep=True),
    ]
    give_way: list[tuple[str, Column | None]] = [("args", None)]
    if any(item.asked_by for item in pending):
        asked = tuple(asked_by_words(item.asked_by) for item in pending)
        rules = tuple(asked_by_words(item.asked_by, why=False) for item in pending)
        columns.insert(3, Column("asked by", asked, wraps=True))
        give_way.insert(0, ("asked by", Column("asked by", rules, wraps=True)))
    return fitted("writes waiting for approval", columns, give_way, width)


def asked_by_words(asked_by: dict[str, Any] | None, *, why: bool = True) -> str:
    """Which rule sent a write to the operator (`rule notes (run): its message`); "" none."""
    if not asked_by:
        return ""
    from loopdeck.core.decided_by import DecidedBy  # pydantic: never for `loopdeck runs`

    by = DecidedBy.model_validate(asked_by)
    said = f"rule {by.rule_id} ({by.level})" if by.who == "rule" else by.words()
    return f"{said}: {by.why}" if why and by.why else said
