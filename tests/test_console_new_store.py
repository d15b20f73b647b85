"""`loopdeck console --db PATH` where nothing is: the store is made there, its folder too, as
`loopdeck run` makes it (both record runs there: the console's `n` starts them), never
silently: the fleet says it made a new, empty store, as `serve` does. A store that is there
is opened with nothing said."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from console_helpers import notices, run_screen, wait_until
from textual.widget import Widget

from loopdeck.cli import main, runs
from loopdeck.core.approvals import request_for
from loopdeck.operator.session import RunSession
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.shown import toast


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


def _driven(monkeypatch: pytest.MonkeyPatch, until: Any) -> list[list[str]]:
    """Each console `loopdeck run` opens, driven until `until(app)`: the toasts it then held."""
    held: list[list[str]] = []

    def run(app: LoopdeckApp, *args: Any, **kwargs: Any) -> int:
        async def drive() -> None:
            async with app.run_test(size=(100, 30), notifications=True) as pilot:
                await wait_until(pilot, lambda: until(app))
                held.append(notices(app))

        asyncio.run(drive())
        return 0

    monkeypatch.setattr(runs, "no_terminal", lambda command: None)
    monkeypatch.setattr(LoopdeckApp, "run", run)
    return held


def test_a_console_run_says_the_store_it_made_as_the_console_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    made = tmp_path / "not" / "there" / "runs.db"
    words = runs.made_store(made)
    assert words == (f"no store was at {made}: made a new, empty one (its folder too)",)
    said = lambda app: words[0] in notices(app)  # noqa: E731
    # The run's screen mounted (its `on_mount` done): leaving the app as the screen was
    # pushed raced its mounting (a loaded CI saw on_mount find no panel).
    mounted = lambda app: getattr(run_screen(app), "is_mounted", False)  # noqa: E731
    # The first run's toast is waited for; the second run (`held` has the first's) says none.
    held = _driven(monkeypatch, lambda app: mounted(app) and (said(app) or len(held) > 0))
    assert main(["run", "service_outage", "--script", "solve", "--db", str(made)]) == 0
    assert made.is_file()
    assert held[-1] == list(words)
    assert main(["run", "service_outage", "--script", "solve", "--db", str(made)]) == 0
    assert not any("no store was at" in notice for notice in held[-1])  # said before its screen
    capsys.readouterr()


def test_a_console_run_that_cannot_start_says_the_store_it_made_on_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    made = tmp_path / "runs.db"
    _driven(monkeypatch, lambda app: app.launch_error is not None)
    assert main(["run", "service_outage", "--script", "nope", "--db", str(made)]) == 2
    err = capsys.readouterr().err
    assert f"loopdeck: no store was at {made}: made a new, empty one\n" in err
    assert "'nope'" in err


def drawn_toasts(app: LoopdeckApp) -> list[str]:
    """The toasts drawn now: those of the top screen, and of any screen under it that shows
    through (a dialog's), whose rack is displayed."""
    return [
        str(toast.render())
        for screen in app.screen_stack
        if screen.is_current
        for toast in screen.query("Toast")
        if all(node.display for node in toast.ancestors_with_self if isinstance(node, Widget))
    ]


async def test_a_toast_is_drawn_once_over_a_dialog(tmp_path: Path) -> None:
    """The store's toast, then an approval dialog over the screen: the dialog's strip says
    it; the screen showing through the dialog says it no more (it did, cut, beside the
    panels); once the dialog is gone, the screen says it again."""
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    words = f"no store was at {tmp_path / 's.db'}: made a new, empty one"
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        toast(app, words, title="store", timeout=3600)  # as `tell_store_made`, kept up
        await wait_until(pilot, lambda: drawn_toasts(app) == [f"store\n{words}"])
        app.push_screen(ApprovalDialog(_request(), 1, "write", lambda: datetime.now(UTC)))
        await wait_until(pilot, lambda: bool(app.screen.query("Toast")))
        assert isinstance(app.screen, ApprovalDialog)
        assert drawn_toasts(app) == [f"store\n{words}"]
        await pilot.press("escape")  # decided later
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        await wait_until(pilot, lambda: drawn_toasts(app) == [f"store\n{words}"])


def _request() -> Any:
    return request_for(
        run_id="r1", call_id="c1", tool="update_delivery_address",
        args={"order_id": "ORD-1042"}, state_hash="s1", fingerprint="f1",
        plan_step="3. Update the address", ttl_s=300, rationale="why",
    )  # fmt: skip
