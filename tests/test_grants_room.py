"""The Grants panel where the screen has room for it: on a cramped screen (80x24) the Calls
title counts the active grants instead, and on a short one (100x30) it lists the latest; the
run screen never grows past the terminal (it scrolled whole, its header out of view)."""

from __future__ import annotations

from pathlib import Path

import pytest
from console_helpers import console_app, grant_any_arguments, run_screen, wait_until

from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.grants_panel import GrantsPanel

DECISIONS = Path(__file__).parent / "envs" / "console_decisions"


@pytest.mark.parametrize(("size", "listed"), [((80, 24), False), ((100, 30), True)])
async def test_a_grant_is_said_where_the_screen_has_room(size: tuple[int, int], listed: bool):
    app = console_app(DECISIONS, "revoke")
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        dialog = app.screen
        assert isinstance(dialog, ApprovalDialog)
        screen = run_screen(app)
        await grant_any_arguments(pilot, dialog)
        await wait_until(pilot, lambda: screen.view.tool_running == "hold" and app.screen is screen)
        await wait_until(pilot, lambda: bool(screen.view.grants.of_run(screen.view.run_id)))
        await pilot.pause()
        panel = screen.query_one(GrantsPanel)
        calls_title = str(screen.query_one("#calls").border_title)
        assert panel.display is listed
        assert ("1 grant · G" in calls_title) is not listed, calls_title
        assert screen.max_scroll_y == 0  # everything on screen: nothing scrolled out
        screen.runtime.env.let_go()
