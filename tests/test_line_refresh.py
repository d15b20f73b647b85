"""Panels repainted by the lines that changed (`tui/line_refresh.py`): only those rows are
painted again, and what the screen shows is what a whole repaint would show."""

from __future__ import annotations

from typing import Any

import pytest
from console_helpers import counted_frames, run_screen, wait_until
from test_console_layout import runaway_app
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widget import Widget

from loopdeck.core.states import RunState
from loopdeck.operator.runview import RunView
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.panels import BudgetPanel, CallDetail, PlanPanel, RunHeader, StateMachinePanel


class StatesApp(App[None]):
    CSS = "StateMachinePanel { height: 14; border: round white; }"

    def compose(self) -> ComposeResult:
        yield StateMachinePanel()


def repainted_rows(widget: Widget) -> set[int]:
    return set(widget._styles_cache._dirty_lines)


async def test_a_count_that_changed_repaints_its_row_and_a_title_its_border() -> None:
    app = StatesApp()
    async with app.run_test() as pilot:
        panel = app.query_one(StateMachinePanel)
        view = RunView(run_id="r")
        view.state = RunState.DECIDING
        view.entries = {RunState.PLANNING: 1, RunState.DECIDING: 4, RunState.EXECUTING: 3}
        view.transitions = 8
        panel.show(view)
        await pilot.pause()
        assert not repainted_rows(panel)
        view.entries[RunState.EXECUTING] = 4  # its line is the 6th state, under the border
        panel.show(view)
        assert repainted_rows(panel) == {6}
        await pilot.pause()
        view.transitions = 9  # the subtitle: the bottom border only
        panel.show(view)
        assert repainted_rows(panel) == {13}
        await pilot.pause()
        view.state = RunState.EXECUTING  # the lit line moves: both lines
        panel.show(view)
        assert repainted_rows(panel) == {3, 6}
        await pilot.pause()
        assert "▶ executing" in panel._painted  # type: ignore[attr-defined]
        painted, whole = painted_and_whole(panel)
        assert painted == whole


def painted_and_whole(widget: Widget) -> tuple[list[Any], list[Any]]:
    """The widget's lines as painted (its cached rows kept) and as a whole repaint gives them."""
    crop = Region(0, 0, *widget.outer_size)
    painted = [list(strip) for strip in widget.render_lines(crop)]
    widget._styles_cache.clear()
    return painted, [list(strip) for strip in widget.render_lines(crop)]


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_a_runaways_panels_read_as_if_repainted_whole() -> None:
    app, _ = runaway_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = run_screen(app)
        assert screen is not None
        frames = counted_frames(screen)
        table = screen.query_one(CallsTable)
        await wait_until(pilot, lambda: table.row_count > 3)
        panels = [screen.query_one(kind) for kind in (StateMachinePanel, BudgetPanel, PlanPanel)]
        panels += [screen.query_one(RunHeader), screen.query_one(CallDetail)]
        panels.append(screen.query_one("#detail-body"))
        for _ in range(4):
            seen = len(frames)
            await wait_until(pilot, lambda seen=seen: len(frames) > seen)
            await pilot.pause()
            for panel in panels:
                painted, whole = painted_and_whole(panel)
                assert painted == whole, f"{panel}: a row kept that changed"
        screen.link.kill(by="operator")  # on the runs' loop, as the console sends it
        await wait_until(pilot, lambda: screen.outcome is not None)
        await pilot.pause()
        for panel in panels:
            painted, whole = painted_and_whole(panel)
            assert painted == whole, f"{panel}: a row kept that changed"
