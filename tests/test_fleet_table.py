"""The fleet's table at a thousand runs: only the rows on screen are drawn, the cursor keeps
its run as the order moves, and outside text is shown as written."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from console_helpers import screen_text, wait_until
from textual import on
from textual.app import App, ComposeResult

from loopdeck.operator.fleet import FleetRow
from loopdeck.tui.console_messages import RunChosen
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.fleet_table import COLUMNS, FleetTable
from loopdeck.tui.shared_state import SharedState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SIZE = (120, 30)


def _row(i: int, **fields: Any) -> FleetRow:
    values: dict[str, Any] = dict(
        run_id=f"run{i:04d}", env=f"env{i % 7}", script="solve", model="scripted",
        state="deciding", stop_reason=None, started_at=NOW - timedelta(seconds=i),
        runner=f"host{i % 10}:{1000 + i}",
    )  # fmt: skip
    return FleetRow(**(values | fields))


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield FleetTable(id="fleet-table")


class FleetApp(App[None]):
    """The fleet screen on an empty store, its rows put in by the test; a run it asks to open
    (`RunChosen`) noted."""

    def __init__(self, db: Path) -> None:
        super().__init__()
        self.db = db
        self.opened: list[tuple[str, bool]] = []
        self.seen_runs: set[str] = set()

    def on_mount(self) -> None:
        self.push_screen(FleetScreen(self.db, lambda: NOW, SharedState(seen_runs=self.seen_runs)))

    @on(RunChosen)
    def open_run(self, chosen: RunChosen) -> None:
        self.opened.append((chosen.run_id, chosen.live))


async def _fleet_screen(pilot: Any, app: FleetApp, rows: list[FleetRow]) -> FleetScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
    fleet = app.screen
    assert isinstance(fleet, FleetScreen)
    await wait_until(pilot, lambda: fleet.fleet.counter != -1)  # the store read once
    fleet.fleet.rows = {row.run_id: row for row in rows}
    fleet.render_fleet()
    await pilot.pause()
    return fleet


async def test_a_thousand_runs_draw_only_the_rows_on_screen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    drawn: list[int] = []
    make_cells, render_line = FleetTable.make_cells, FleetTable.render_line

    def counted_cells(self: FleetTable, row: FleetRow, age: str) -> Any:
        made.append(row.run_id)
        return make_cells(self, row, age)

    def counted_line(self: FleetTable, y: int) -> Any:
        drawn.append(y)
        return render_line(self, y)

    monkeypatch.setattr(FleetTable, "make_cells", counted_cells)
    monkeypatch.setattr(FleetTable, "render_line", counted_line)
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(FleetTable)
        rows = [_row(i) for i in range(1000)]
        table.show(rows, NOW)
        await pilot.pause()
        height = table.size.height
        assert table.row_count == 1000 and 0 < len(set(made)) <= height
        assert "run0000" in screen_text(app) and "run0999" not in screen_text(app)
        made.clear()
        drawn.clear()
        table.show(list(reversed(rows)), NOW + timedelta(seconds=1))  # a refresh, a new order
        await pilot.pause()
        assert 0 < len(made) <= height and len(drawn) <= 2 * height
        drawn.clear()
        table.show(list(reversed(rows)), NOW + timedelta(seconds=1))  # nothing changed
        await pilot.pause()
        assert [y for y in drawn if y] == []
        # the cursor kept its run (now last) in view: change the second row on screen
        second = rows[999 - (int(table.scroll_y) + 1)]
        second.closest, second.closest_fraction = "tokens 90%", 0.9
        table.show(list(reversed(rows)), NOW + timedelta(seconds=1))
        await pilot.pause()
        assert [y for y in drawn if y] == [2] and "tokens 90%" in screen_text(app)
        await pilot.press("home")
        assert table.cursor_run == "run0999" and "run0999" in screen_text(app)


async def test_the_cursor_keeps_its_run_when_the_rows_reorder() -> None:
    app = TableApp()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(FleetTable)
        a, b, c = (_row(i) for i in range(3))
        table.show([a, b, c], NOW)
        table.focus()
        await pilot.press("down")
        assert table.cursor_run == b.run_id
        table.show([c, a, b], NOW)
        assert (table.cursor_row, table.cursor_run) == (2, b.run_id)
        table.show([c, a], NOW)  # its run gone: the cursor keeps its place
        assert table.cursor_run == a.run_id
        table.show([], NOW)
        assert table.cursor_run is None and table.row_count == 0


async def test_a_new_run_that_needs_you_comes_first_and_the_cursor_stays(tmp_path) -> None:
    app = FleetApp(tmp_path / "s.db")
    async with app.run_test(size=SIZE) as pilot:
        fleet = await _fleet_screen(pilot, app, [_row(i) for i in range(50)])
        table = fleet.query_one(FleetTable)
        await pilot.press("down", "down")
        assert table.cursor_run == "run0002"
        waiting = _row(50, state="awaiting_approval", pending=1)
        fleet.fleet.rows[waiting.run_id] = waiting
        fleet.render_fleet()
        assert table.run_ids[0] == "run0050" and table.cursor_run == "run0002"
        await pilot.press("pagedown")
        assert table.cursor_row > 3
        await pilot.press("home")
        assert table.cursor_run == "run0050"


async def test_the_filter_and_the_sort_reorder_the_table(tmp_path) -> None:
    rows = [_row(0, env="beta"), _row(1, env="alpha", state="stopped", stop_reason="goal_met")]
    rows.append(_row(2, env="gamma", state="awaiting_approval", pending=1))
    rows.append(_row(3, env="delta"))
    app = FleetApp(tmp_path / "s.db")
    async with app.run_test(size=SIZE) as pilot:
        fleet = await _fleet_screen(pilot, app, rows)
        table = fleet.query_one(FleetTable)
        # in every order the run that needs you comes first (and is pinned in view)
        assert table.run_ids == ["run0002", "run0000", "run0003", "run0001"]  # live, stopped
        await pilot.press("s")
        assert table.run_ids == ["run0002", "run0000", "run0001", "run0003"]  # newest first
        await pilot.press("s")
        assert table.run_ids == ["run0002", "run0001", "run0000", "run0003"]  # by env
        await pilot.press("slash", *"goal_")
        await wait_until(pilot, lambda: table.run_ids == ["run0001"])
        await pilot.press("escape")
        await wait_until(pilot, lambda: table.row_count == 4)


async def test_enter_opens_the_selected_run(tmp_path) -> None:
    rows = [_row(i) for i in range(5)]
    rows[3].state, rows[3].stop_reason = "stopped", "killed"
    app = FleetApp(tmp_path / "s.db")
    async with app.run_test(size=SIZE) as pilot:
        fleet = await _fleet_screen(pilot, app, rows)
        table = fleet.query_one(FleetTable)
        table.move_cursor(row=table.get_row_index("run0003"))
        await pilot.press("enter")
        assert app.opened == [("run0003", False)] and "run0003" in app.seen_runs
        assert str(table.mark(rows[3])) == ""  # looked at: no more unseen-stop mark


async def test_markup_looking_text_is_shown_as_written(tmp_path) -> None:
    hostile = _row(0, env="[0", script="[bold]x[/bold]", model="[red]m", last_finding="a [b]")
    hostile.run_id = "[b]run"
    app = FleetApp(tmp_path / "s.db")
    async with app.run_test(size=(160, 30)) as pilot:
        fleet = await _fleet_screen(pilot, app, [hostile])
        table = fleet.query_one(FleetTable)
        cells = [text.plain for text in table.get_row("[b]run")]
        assert cells[1:2] + cells[5:7] == ["[b]run", "[0/[bold]x[/bold]", "[red]m"]
        shown = screen_text(app)
        for words in ("[b]run", "[0/[bold]x[/bold]", "[red]m", "a [b]"):
            assert words in shown


async def test_a_click_selects_the_run_under_it(tmp_path) -> None:
    app = FleetApp(tmp_path / "s.db")
    async with app.run_test(size=SIZE) as pilot:
        fleet = await _fleet_screen(pilot, app, [_row(i) for i in range(5)])
        table = fleet.query_one(FleetTable)
        # the table's border and the header line above the first run
        await pilot.click(table, offset=(5, table.content_offset.y + 1 + 3))
        assert table.cursor_run == "run0003"


@pytest.mark.parametrize("width", [60, 72, 90, 100, 117])
async def test_a_column_the_view_would_cut_is_left_out_until_scrolled_to(width: int) -> None:
    app = TableApp()
    async with app.run_test(size=(width, 10)) as pilot:
        table = app.query_one(FleetTable)
        table.show([_row(i, last_finding="pass") for i in range(3)], NOW)
        await pilot.pause()
        header = screen_text(app).splitlines()[0]
        shown = [word for word in re.split(r"\s{2,}", header.strip())]
        assert shown and all(word in COLUMNS for word in shown), header  # each named whole
        hidden = COLUMNS[len(shown) + 1 :]  # the first column is the mark, named ""
        assert hidden, header  # at these widths the table is wider than the view
        table.scroll_to(x=table.max_scroll_x, animate=False)
        await pilot.pause()
        assert hidden[-1] in screen_text(app).splitlines()[0]  # scrolled to, shown


async def test_a_column_whose_name_fits_is_shown_cut_with_an_ellipsis() -> None:
    """At 60 columns env/script's name fits and its values do not: they end in "…" at the
    view's edge (never a value cut without a sign), and scrolled to, they show whole."""
    app = TableApp()
    async with app.run_test(size=(60, 10)) as pilot:
        table = app.query_one(FleetTable)
        rows = [_row(i, env="service_outage", script="slow-rollout") for i in range(2)]
        table.show(rows, NOW)
        await pilot.pause()
        header, first = screen_text(app).splitlines()[:2]
        assert header.rstrip().endswith("env/script"), header
        value = first.split()[-1]
        assert value.endswith("…") and "service_outage/slow-rollout".startswith(value[:-1]), first
        table.scroll_to(x=table.column_ends()["stop"], animate=False)  # env/script first
        await pilot.pause()
        assert "service_outage/slow-rollout" in screen_text(app).splitlines()[1]
