"""The chooser keeps what was typed in it: a script of one's own env folder that fails to
start (its folder's policy.toml is no TOML: found only as the run is prepared) is said in a
toast, and `n` opens the chooser again with the path still in its box and that script chosen,
its folder read again: once the env is mended, enter starts it."""

from __future__ import annotations

import shutil
from typing import Any

from conftest import SAMPLES
from console_helpers import notices, wait_until
from textual.pilot import Pilot
from textual.widgets import Input, OptionList

from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.launcher import LauncherScreen, ScriptOption

BROKEN = "broken on purpose ["  # not TOML


def chosen(chooser: LauncherScreen) -> tuple[str, str] | None:
    listed = chooser.query_one(OptionList)
    if listed.highlighted is None:
        return None
    option = listed.get_option_at_index(listed.highlighted)
    return (option.choice.path, option.choice.script) if isinstance(option, ScriptOption) else None


async def opened(pilot: Pilot[Any], app: LoopdeckApp) -> LauncherScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
    await pilot.press("n")
    await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen) and app.screen.listed)
    assert isinstance(app.screen, LauncherScreen)
    return app.screen


async def test_a_failed_start_keeps_the_path_and_the_script_for_enter_again(tmp_path) -> None:
    desk = tmp_path / "m1"
    shutil.copytree(SAMPLES / "order_support", desk, ignore=shutil.ignore_patterns("__py*"))
    policy = desk / "policy.toml"
    policy.write_text(BROKEN)
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        chooser = await opened(pilot, app)
        await pilot.press("slash")
        box = chooser.query_one("#launcher-path", Input)
        await wait_until(pilot, lambda: chooser.focused is box)
        box.value = str(desk)
        await pilot.press("enter")
        await wait_until(pilot, lambda: chooser.index_of(str(desk), "solve") is not None)
        listed = chooser.query_one(OptionList)
        listed.highlighted = chooser.index_of(str(desk), "solve")
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("policy.toml: not TOML" in n for n in notices(app)))
        assert app.is_running  # said, the console kept (it crashed on a policy file)
        assert not app.local_runs

        again = await opened(pilot, app)  # the same path, the same script, read again
        assert again.query_one("#launcher-path", Input).value == str(desk)
        await wait_until(pilot, lambda: chosen(again) == (str(desk), "solve"))
        assert again.focused is again.query_one(OptionList)

        policy.unlink()  # mended; enter again
        await pilot.press("escape")  # left without starting: still kept
        again = await opened(pilot, app)
        await wait_until(pilot, lambda: chosen(again) == (str(desk), "solve"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(app.local_runs) == 1)
        assert app.prepared_runs[-1].runtime.config.script == "solve"
        assert app.prepared_runs[-1].env_dir.path == desk

        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape", "escape")  # started: the path stays typed, nothing chosen
        chooser = await opened(pilot, app)
        assert chooser.query_one("#launcher-path", Input).value == str(desk)
        await pilot.pause()
        assert chosen(chooser) is not None and chosen(chooser) != (str(desk), "solve")
