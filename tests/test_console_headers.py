"""The console's one-line words at 80 columns: the fleet's header cut with `…`, never left on a
dangling `·`; a run's header joins only the fields it knows; the chooser's toast for an env
folder it cannot list shows the file it names, from its first line."""

from __future__ import annotations

import shutil
from typing import Any

from conftest import SAMPLES
from console_helpers import console_app, finished, screen_lines, wait_until
from textual.app import App, ComposeResult
from textual.widgets import Input

from loopdeck.core import AutoApprover
from loopdeck.operator.runview import RunView
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.launcher import LauncherScreen
from loopdeck.tui.panels import RunHeader


async def test_the_fleets_header_is_cut_with_an_ellipsis_not_a_dot(tmp_path) -> None:
    store = tmp_path.joinpath(*["a-folder-with-a-long-name"] * 3) / "store.db"
    store.parent.mkdir(parents=True)
    app = LoopdeckApp(ConsoleStart.for_fleet(store))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.pause()
        header = screen_lines(app)[0].rstrip()
        assert "n starts a run" in header and header.endswith("…"), header


class HeaderHost(App[None]):
    def compose(self) -> ComposeResult:
        yield RunHeader()


async def test_a_run_header_before_the_first_event_joins_no_empty_field() -> None:
    app = HeaderHost()
    async with app.run_test(size=(120, 5)) as pilot:
        header = app.query_one(RunHeader)
        header.show(RunView(), 0.0, 0.0, 0)
        await pilot.pause()
        said = screen_lines(app)[0].rstrip()
        assert "run starting… · loopdeck" in said and "·  ·" not in said, said
        view = RunView()
        view.run_id, view.env, view.model = "r1", "order_support", "scripted"
        header.show(view, 0.0, 0.0, 0)
        await pilot.pause()
        said = screen_lines(app)[0].rstrip()
        assert said.endswith("run r1 · order_support · scripted · loopdeck"), said


async def test_the_choosers_toast_names_the_file_from_its_first_line(tmp_path) -> None:
    folder = tmp_path.joinpath(*["my-environments-in-a-deep-folder"] * 8, "broken_env")
    shutil.copytree(SAMPLES / "order_support", folder, ignore=shutil.ignore_patterns("__py*"))
    toml = folder / "scenario.toml"
    toml.write_text(toml.read_text().replace("\ngoal = ", "\ngoall = "))
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen))
        chooser: Any = app.screen
        await pilot.press("slash")
        box = chooser.query_one("#launcher-path", Input)
        await wait_until(pilot, lambda: chooser.focused is box)
        box.value = str(folder)
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(chooser.query("Toast")))
        await pilot.pause()
        toast = chooser.query_one("Toast")
        assert chooser.region.contains_region(toast.region), toast.region  # nothing cut
        said = str(toast.render())
        assert "scenario.toml: invalid scenario" in said.replace("\n", "")
        assert "goal: Field required" in said and "goall" in said
        assert said.count("broken_env") == 1  # the folder said once, in the file's path


async def test_a_run_header_too_long_for_80_columns_is_cut_with_an_ellipsis() -> None:
    app = console_app(SAMPLES / "order_support", "solve", approver=AutoApprover())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause()
        header = screen_lines(app)[0].rstrip()
        assert "order_support/solve" in header and header.endswith("…"), header
