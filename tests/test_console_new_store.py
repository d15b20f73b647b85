"""`loopdeck console --db PATH` where nothing is: the store is made there, its folder too, as
`loopdeck run` makes it (both record runs there: the console's `n` starts them), never
silently: the fleet says it made a new, empty store, as `serve` does. A store that is there
is opened with nothing said."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from console_helpers import notices, wait_until

from loopdeck.cli import main, runs
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.fleet_screen import FleetScreen


def _opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """What each console `loopdeck console` opens would say as it opens (it is not run)."""
    said: list[tuple[str, ...]] = []

    def run(app: LoopdeckApp, *args: Any, **kwargs: Any) -> int:
        said.append(app.said_at_start)
        return 0

    monkeypatch.setattr(runs, "no_terminal", lambda command: None)  # pytest's streams are not
    monkeypatch.setattr(LoopdeckApp, "run", run)
    return said


async def _run_opens(location: Path) -> None:
    """The store as `loopdeck run` opens it (`RunSession.opened`), then closed."""
    async with RunSession(location).opened():
        pass


def test_run_and_console_make_a_missing_folder_alike_and_the_console_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = tmp_path / "no" / "such" / "runs.db"
    asyncio.run(_run_opens(ran))
    assert ran.is_file()  # `run` makes the folder: by design (store/files.py)
    said = _opened(monkeypatch)
    opened = tmp_path / "not" / "there" / "s.db"
    assert main(["console", "--db", str(opened)]) == 0
    assert opened.is_file()  # the console agrees
    assert said == [(f"no store was at {opened}: made a new, empty one (its folder too)",)]
    assert main(["console", "--db", str(opened)]) == 0
    assert said[-1] == ()  # there now: nothing to say
    capsys.readouterr()


async def test_the_fleet_says_the_store_it_made(tmp_path: Path) -> None:
    words = f"no store was at {tmp_path / 's.db'}: made a new, empty one"
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db", said=(words,)))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await wait_until(pilot, lambda: words in notices(app))
