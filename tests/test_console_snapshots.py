"""Snapshots of the main screen mid-run, the approval dialog and the final screen, per theme.

The clock is frozen at the run's start and call durations are masked: both differ per run.
"""

import pytest
from conftest import SAMPLES
from console_helpers import console_app, finished, wait_until

from loopdeck.tui import calls_table
from loopdeck.tui.dialogs import ApprovalDialog

SIZE = (160, 48)
THEMES = ["dark", "light"]


@pytest.fixture(autouse=True)
def _masked_durations(monkeypatch):
    monkeypatch.setattr(calls_table, "format_duration", lambda ms: "" if ms is None else "·")


def _app(theme):
    return console_app(SAMPLES / "order_support", "solve", theme=theme, frozen=True)


@pytest.mark.parametrize("theme", THEMES)
def test_approval_dialog(snap_compare, theme) -> None:
    app = _app(theme)

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("theme", THEMES)
def test_main_screen_mid_run_with_a_pending_write(snap_compare, theme) -> None:
    app = _app(theme)

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("theme", THEMES)
def test_final_screen(snap_compare, theme) -> None:
    app = _app(theme)

    async def run_before(pilot) -> None:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
