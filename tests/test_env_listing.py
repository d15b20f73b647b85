"""What `loopdeck run` refuses is said where an env is chosen, not after: a script whose call
names a tool the env does not have is marked refused with why (in `loopdeck envs` and the
console's chooser, which will not start it), the env's other scripts still start; a broken
scenario.toml is the folder's refusal, in one line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import notices, screen_lines, wait_until
from textual.widgets import OptionList

from loopdeck.cli import main
from loopdeck.operator.env_listing import describe_env
from loopdeck.tui import launcher
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.launcher import LauncherScreen, RefusedOption

UNKNOWN_TOOL = "unknown tool 'get_ordr'"
BAD_VALUE = "budgets.max_turns: a number, not the text 'twenty'"


def _copy(root: Path, name: str, old: str = "", new: str = "") -> Path:
    """order_support copied to `root/name`, named so, `old` replaced by `new` in its scenario."""
    folder = root / name
    shutil.copytree(SAMPLES / "order_support", folder, ignore=shutil.ignore_patterns("__py*"))
    scenario = folder / "scenario.toml"
    text = scenario.read_text().replace('name = "order_support"', f'name = "{name}"')
    assert old in text
    scenario.write_text(text.replace(old, new, 1))
    return folder


@pytest.fixture
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of envs read as the sample envs: one whose `solve` calls a tool the env does
    not have, one whose scenario.toml is broken."""
    root = tmp_path / "envs"
    _copy(root, "badtool", 'tool = "get_order"', 'tool = "get_ordr"')
    _copy(root, "broken", "max_turns = 20", 'max_turns = "twenty"')
    monkeypatch.setenv("LOOPDECK_SAMPLE_ENVS", str(root))
    return root


def test_a_script_run_refuses_is_listed_refused_with_the_reason_run_gives(
    envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = describe_env(envs / "badtool")
    assert set(listed["refused"]) == {"solve"} and "error" not in listed
    assert UNKNOWN_TOOL in listed["refused"]["solve"]
    db = str(tmp_path / "s.db")
    assert main(["run", str(envs / "badtool"), "--script", "solve", "--headless", "--db", db]) == 2
    assert listed["refused"]["solve"] in capsys.readouterr().err  # run's own words
    broken = describe_env(envs / "broken")
    assert BAD_VALUE in broken["error"] and broken["scripts"] == {}


def test_an_env_whose_code_fails_is_the_folders_refusal_not_each_scripts(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "raises")
    code = (folder / "env.py").read_text()
    failing = "def make_env(workdir, data):\n    raise OSError('no disk')\n"
    (folder / "env.py").write_text(f"{code}\n\n{failing}")
    listed = describe_env(folder)
    assert "make_env failed" in listed["error"] and "no disk" in listed["error"], listed


def test_envs_marks_the_refused_script_and_the_broken_folder_in_one_line(
    envs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    solve = next(line for line in out.splitlines() if "--script solve" in line)
    assert "refused: executor turn 1 (step 1): " + UNKNOWN_TOOL in solve, out
    assert "scenario.toml: script" not in solve  # the line names the script already
    broken = next(line for line in out.splitlines() if line.startswith("broken"))
    assert f"refused: scenario.toml: invalid scenario: {BAD_VALUE}" in broken, out
    ask = next(line for line in out.splitlines() if "--script ask " in line)
    assert "refused" not in ask, out


def _prompts(listed: OptionList) -> list[tuple[Any, str]]:
    options = [listed.get_option_at_index(i) for i in range(listed.option_count)]
    return [(option, str(getattr(option.prompt, "plain", option.prompt))) for option in options]


async def test_the_chooser_marks_what_run_refuses_and_starts_none_of_it(
    envs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns: each refused line is its name, "refused", and why on one line (cut with
    "…"); enter on it says why in full and starts nothing; the env's other scripts start."""
    monkeypatch.setattr(launcher, "litellm_module", lambda: None)  # no run starts here
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(80, 60), notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.press("n")
        await wait_until(
            pilot, lambda: isinstance(app.screen, LauncherScreen) and app.screen.listed
        )
        chooser = app.screen
        assert isinstance(chooser, LauncherScreen)
        listed = chooser.query_one(OptionList)
        prompts = _prompts(listed)
        solve = [(o, text) for o, text in prompts if re.search(r"badtool · solve\b", text)]
        assert len(solve) == 1, prompts
        option, text = solve[0]
        assert isinstance(option, RefusedOption), text
        first, why = text.split("\n")
        assert first.split()[-1] == "refused" and UNKNOWN_TOOL in why, text
        assert chooser.index_of("badtool", "solve") is None  # nothing for enter to start
        assert chooser.index_of("badtool", "ask") is not None  # its other scripts start
        broken = [(o, text) for o, text in prompts if text.strip().startswith("broken")]
        assert len(broken) == 1 and isinstance(broken[0][0], RefusedOption), prompts
        head, said = broken[0][1].split("\n")  # refused, and why in one line
        assert head.split() == ["broken", "refused"], head
        assert said.strip() == f"scenario.toml: invalid scenario: {BAD_VALUE}", said
        await pilot.pause()
        lines = screen_lines(app)
        at = next(i for i, line in enumerate(lines) if "badtool · solve  refused" in line)
        assert "executor turn 1 (step 1): unknown tool" in lines[at + 1], lines[at : at + 3]
        assert lines[at + 1].rstrip(" │").endswith("…"), lines[at + 1]  # one line, cut
        assert "badtool · typo" in lines[at + 2], lines[at : at + 3]
        listed.highlighted = next(i for i, (o, _) in enumerate(prompts) if o is option)
        await pilot.press("enter")  # on the refused line: why, in full
        await wait_until(pilot, lambda: any(UNKNOWN_TOOL in n for n in notices(app)))
        full = next(n for n in notices(app) if UNKNOWN_TOOL in n)
        assert "mark the turn invalid = true" in full, full  # the end the line cut
        assert isinstance(app.screen, LauncherScreen) and not app.local_runs


def test_listing_an_mcp_env_starts_no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing (`loopdeck envs`, the console's chooser): an `[mcp]` env's scripts are
    checked as its run starts (or by `loopdeck check`), never by starting its server to list
    it."""
    from loopdeck.mcp_env.connection import McpConnection

    started: list[str] = []

    def refused(connection: McpConnection) -> None:
        started.append(connection.name)
        raise AssertionError("a listing started an MCP server")

    monkeypatch.setattr(McpConnection, "start", refused)
    listed = describe_env(SAMPLES / "notes_mcp")
    assert started == [] and "error" not in listed, listed
    assert listed["scripts"] and listed["refused"] == {}


@pytest.mark.parametrize("columns", ["80", "160"])
def test_envs_says_an_mcp_envs_scripts_are_checked_as_its_run_starts(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """None of its scripts is refused in the listing, which does not mean they are fine: their
    calls meet the server's tools only as the run starts. Its line says so, whole at 80
    columns (its goal cut first); `--json` says it as `checked_at_start`."""
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [line.rstrip() for line in lines if "checked as a run starts" in line]
    assert [line.split()[0] for line in said] == ["notes_mcp"], lines
    assert said[0].endswith("  scripts checked as a run starts") and len(said[0]) <= int(columns)
    assert main(["envs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {env["env"] for env in listed if env.get("checked_at_start")} == {"notes_mcp"}
