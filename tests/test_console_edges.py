"""The console's keys answer while env code blocks: kill lands during a 5 s goal check."""

from __future__ import annotations

from conftest import EDGES
from console_helpers import console_app, run_screen, wait_until

from loopdeck.core.approvals import AutoApprover
from loopdeck.core.states import StopReason
from loopdeck.tui.dialogs import ConfirmKillDialog
from loopdeck.tui.panels import RunHeader

SIZE = (160, 48)


def _checking(app) -> bool:
    screen = run_screen(app)
    return screen is not None and screen.runtime.env.checks_running == 1


async def test_kill_during_a_blocking_goal_check_shows_killed_while_it_still_blocks() -> None:
    app = console_app(EDGES, "block-check", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _checking(app))
        screen = run_screen(app)
        env = screen.runtime.env
        await pilot.press("p")  # pause answers too, while the check blocks
        await wait_until(pilot, lambda: screen.runtime.control.paused)
        await pilot.press("k")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmKillDialog))
        assert env.checks_running == 1, "the dialog opened while the goal check blocked"
        await pilot.press("y")
        await wait_until(pilot, lambda: screen.view.stop_reason == "killed")
        await pilot.pause(0.1)
        header = str(screen.query_one(RunHeader).render())
        assert "killed" in header
        assert env.checks_running == 1, "killed on screen while the check is still blocking"
        assert screen.outcome is not None and screen.outcome.stop_reason is StopReason.KILLED
        assert "goal check" in (screen.outcome.stray or "")
