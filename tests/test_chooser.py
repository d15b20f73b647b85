"""The chooser (`n` on the fleet), every path twice in a row: a sample env's script, an env
folder of one's own named in the path box, and the path box read again (`/` or tab, then
enter). The console stays up and a run starts each time one is chosen."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import screen_lines, wait_until
from textual.pilot import Pilot
from textual.widgets import Input, OptionList

from loopdeck.operator.env_listing import CHECKED_AT_START, list_envs
from loopdeck.operator.launch import TOUR
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.launcher import LauncherScreen

SIZE = (120, 40)


def _text(option: Any) -> str:
    prompt = option.prompt
    return str(getattr(prompt, "plain", prompt))


def _lines(listed: OptionList) -> list[str]:
    return [_text(listed.get_option_at_index(i)) for i in range(listed.option_count)]


def _index_of(listed: OptionList, env: str, script: str) -> int:
    """The enabled option that names `env · script` (by what it shows, not by its id)."""
    for i in range(listed.option_count):
        option = listed.get_option_at_index(i)
        said = re.compile(rf"\b{re.escape(env)} · {re.escape(script)}(\s|$)", re.MULTILINE)
        if not option.disabled and said.search(_text(option)):
            return i
    raise AssertionError(f"no option for {env} · {script}: {_lines(listed)}")


async def _chooser(pilot: Pilot[Any], app: LoopdeckApp) -> LauncherScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
    await pilot.press("n")
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, LauncherScreen) and app.screen.listed,
    )
    screen = app.screen
    assert isinstance(screen, LauncherScreen)
    return screen


async def _started(pilot: Pilot[Any], app: LoopdeckApp, count: int) -> None:
    """The `count`th run of this console started, its screen up; then back to the fleet."""
    await wait_until(pilot, lambda: len(app.local_runs) == count)
    await wait_until(pilot, lambda: not isinstance(app.screen, (LauncherScreen, FleetScreen)))
    await pilot.press("escape")
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))


async def _read_folder(pilot: Pilot[Any], chooser: LauncherScreen, key: str, path: Path) -> None:
    """`key` (slash or tab) to the path box, `path` typed there if it is empty, enter."""
    box = chooser.query_one("#launcher-path", Input)
    await pilot.press(key)
    await wait_until(pilot, lambda: chooser.focused is box)
    if not box.value:
        box.value = str(path)
    await pilot.press("enter")
    listed = chooser.query_one(OptionList)
    await wait_until(pilot, lambda: chooser.focused is listed)


def _folder_scripts(listed: OptionList, folder: Path) -> list[str]:
    """The lines listed for `folder`: under its heading (which names its path), above the
    tour's."""
    lines = _lines(listed)
    heading = next(i for i, line in enumerate(lines) if str(folder) in line)
    tour = next(i for i, line in enumerate(lines) if line.startswith("Start here"))
    return lines[heading + 1 : tour]


async def test_a_sample_script_starts_twice_in_a_row(tmp_path) -> None:
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        for count in (1, 2):
            chooser = await _chooser(pilot, app)
            listed = chooser.query_one(OptionList)
            listed.highlighted = _index_of(listed, "order_support", "escalate")
            await pilot.press("enter")
            await _started(pilot, app, count)
        assert app.is_running
        assert [p.runtime.config.script for p in app.prepared_runs] == ["escalate", "escalate"]


async def _folder_read_twice_and_started(
    pilot: Pilot[Any], app: LoopdeckApp, desk: Path, key: str, count: int
) -> None:
    chooser = await _chooser(pilot, app)
    listed = chooser.query_one(OptionList)
    await _read_folder(pilot, chooser, "slash", desk)
    once = _lines(listed)
    await _read_folder(pilot, chooser, key, desk)  # the same folder again
    assert _lines(listed) == once
    assert sum("escalate" in line for line in _folder_scripts(listed, desk)) == 1
    first = listed.highlighted  # the folder's first script, at the top
    assert first is not None and _lines(listed)[first] == _folder_scripts(listed, desk)[0]
    listed.highlighted = _index_of(listed, "order_support", "escalate")  # the folder's
    await pilot.press("enter")
    await _started(pilot, app, count)


@pytest.mark.slow  # two runs started from the console: seconds (make stress)
@pytest.mark.parametrize("key", ["slash", "tab"])
async def test_an_env_folder_read_twice_is_listed_once_and_starts(tmp_path, key: str) -> None:
    desk = tmp_path / "mydesk"
    shutil.copytree(SAMPLES / "order_support", desk, ignore=shutil.ignore_patterns("__py*"))
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        for count in (1, 2):
            await _folder_read_twice_and_started(pilot, app, desk, key, count)
        assert app.is_running
        assert [p.env_dir.path for p in app.prepared_runs] == [desk, desk]


async def test_a_folder_read_again_after_it_changed_shows_its_new_scripts(tmp_path) -> None:
    desk = tmp_path / "mydesk"
    shutil.copytree(SAMPLES / "order_support", desk, ignore=shutil.ignore_patterns("__py*"))
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        chooser = await _chooser(pilot, app)
        listed = chooser.query_one(OptionList)
        await _read_folder(pilot, chooser, "slash", desk)
        before = _lines(listed)
        toml = desk / "scenario.toml"
        toml.write_text(toml.read_text().replace("[scripts.escalate]", "[scripts.hand-over]"))
        toml.write_text(toml.read_text().replace("scripts.escalate.", "scripts.hand-over."))
        await _read_folder(pilot, chooser, "slash", desk)
        await wait_until(pilot, lambda: _lines(listed) != before)
        shown = "\n".join(_lines(listed))
        assert "hand-over" in shown and len(_lines(listed)) == len(before)
        listed.highlighted = _index_of(listed, "order_support", "hand-over")
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(app.local_runs))
        assert app.prepared_runs[-1].runtime.config.script == "hand-over"
        assert app.prepared_runs[-1].env_dir.path == desk


async def test_the_chooser_opens_on_the_tour_then_every_other_sample_script_once(
    tmp_path,
) -> None:
    samples = {Path(env["path"]).name: env for env in list_envs()}
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=SIZE) as pilot:
        chooser = await _chooser(pilot, app)
        listed = chooser.query_one(OptionList)
        lines = _lines(listed)
        assert lines[0].startswith("Start here")
        more = next(i for i, line in enumerate(lines) if line.startswith("More scripts"))
        assert len(lines[1:more]) == len(TOUR)
        for stop, line in zip(TOUR, lines[1:more], strict=True):
            first, about, *checked = line.split("\n")  # an [mcp] env's: checked at start
            assert [c.strip() for c in checked] == ([CHECKED_AT_START] if checked else [])
            assert first.split() == [*stop.shows.split(), stop.env, "·", stop.script]
            assert about.strip() == samples[stop.env]["scripts"][stop.script]
        assert listed.highlighted == 1  # the tour's first stop
        listed_pairs = [re.sub(r"\s+", " ", line.split("\n")[0]).strip() for line in lines]
        for name, env in samples.items():
            for script in env["scripts"]:
                shown = [pair for pair in listed_pairs if pair.endswith(f"{name} · {script}")]
                assert len(shown) == 1, (name, script, shown)


async def test_an_mcp_envs_scripts_say_they_are_checked_as_a_run_starts(tmp_path) -> None:
    """As `loopdeck envs` says it: an `[mcp]` env's scripts (its tools listed only as its
    server starts) say so in the chooser, under each, whole on an 80x24 screen; a Python
    env's say nothing of it."""
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(80, 24)) as pilot:
        chooser = await _chooser(pilot, app)
        listed = chooser.query_one(OptionList)
        for script in ("solve", "invalid-args"):
            listed.highlighted = _index_of(listed, "notes_mcp", script)
            await pilot.pause()
            shown = [line.strip(" │▇▄▁") for line in screen_lines(app)]
            at = next(i for i, line in enumerate(shown) if line.endswith(f"notes_mcp · {script}"))
            assert shown[at + 2] == CHECKED_AT_START, shown[at : at + 3]
        checked = [line for line in _lines(listed) if CHECKED_AT_START in line]
        assert checked and all("notes_mcp · " in line for line in checked)
        assert CHECKED_AT_START not in _text(listed.get_option_at_index(1))  # order_support's


async def test_the_keys_answer_while_the_envs_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the sample envs (each scenario parsed, its env code and scripts checked) is off
    the loop: "reading envs…" meanwhile, and the path box reads a folder of one's own; the
    samples then listed under it, its script still the one chosen."""
    from loopdeck.tui import launcher

    release, reading = threading.Event(), threading.Event()

    def slow_listing() -> list[dict[str, Any]]:
        reading.set()
        release.wait(30)  # a bound for the old code, which read them on the loop
        return list_envs()

    monkeypatch.setattr(launcher, "list_envs", slow_listing)
    desk = tmp_path / "mydesk"
    shutil.copytree(SAMPLES / "order_support", desk, ignore=shutil.ignore_patterns("__py*"))
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
            await pilot.press("n")
            await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen))
            chooser = app.screen
            assert isinstance(chooser, LauncherScreen)
            listed = chooser.query_one(OptionList)
            await wait_until(pilot, lambda: _reading(listed))
            assert reading.is_set() and not chooser.listed
            await _read_folder(pilot, chooser, "slash", desk)  # keys answered meanwhile
            lines = _lines(listed)
            assert lines[-1].strip() == "reading envs…" and "Start here" not in "".join(lines)
            mine = listed.highlighted
            assert mine is not None and _lines(listed)[mine] == _folder_scripts_only(listed)[0]
            release.set()
            await wait_until(pilot, lambda: chooser.listed)
            assert not _reading(listed)
            assert _index_of(listed, "service_outage", "solve") is not None  # the samples
            assert _lines(listed)[listed.highlighted or 0] == _folder_scripts(listed, desk)[0]
    finally:
        release.set()


def _reading(listed: OptionList) -> bool:
    return "reading envs…" in [line.strip() for line in _lines(listed)]


def _folder_scripts_only(listed: OptionList) -> list[str]:
    """The lines of the one folder listed while no sample is: under its heading."""
    lines = _lines(listed)
    return [line for line in lines[1:] if line and not line.strip().startswith("reading")]
