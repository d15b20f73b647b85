"""Nothing crashes the console unsaid (issue 38): an action that raises is said and the
console goes on; a console that fails leaves non-zero."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import SAMPLES
from console_helpers import console_app, notices, run_screen, wait_until

from loopdeck.cli.runs import after_console
from loopdeck.core.approvals import AutoApprover
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.run_screen import RunScreen

SIZE = (160, 48)


def _toasts(app: Any) -> list[str]:
    return notices(app)


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """The app may be closing (no pilot to pause on): the condition is polled on the loop."""
    waited = 0.0
    while not condition():
        assert waited < timeout, "condition not reached in time"
        await asyncio.sleep(0.05)
        waited += 0.05


async def test_an_action_that_raises_is_said_and_the_console_goes_on(monkeypatch) -> None:
    def broken(self: RunScreen) -> None:
        raise RuntimeError("transcript broke")

    monkeypatch.setattr(RunScreen, "action_transcript", broken)
    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: run_screen(app) is not None)
        await pilot.press("t")
        said = "the action transcript failed: RuntimeError: transcript broke"
        await wait_until(pilot, lambda: any(said in t for t in _toasts(app)))
        assert app.is_running and app.return_code is None
        screen = run_screen(app)
        await wait_until(pilot, lambda: screen.outcome is not None)  # the run went on
        assert screen.outcome.stop_reason.value == "goal_met"


def test_a_console_that_failed_leaves_non_zero() -> None:
    """Textual ends a console it cannot go on with `return_code` 1 and `run()` returning
    None: that was an exit 0."""
    app = LoopdeckApp(ConsoleStart.for_fleet(Path("unused.db")))
    app._return_code = 1  # as Textual sets it when the app fails
    assert after_console(app, None) == 1
