"""`o` on a run of this console that has ended, its outcome unknown: the word is recorded in
the store as `loopdeck resolve` records it (the run's own connection closed with the run), and
the run screen shows the call as the operator said."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import SAMPLES
from console_helpers import notices, run_screen, wait_until
from textual.pilot import Pilot

from loopdeck.core.events import CallStatus
from loopdeck.store.opening import open_store
from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.console_start import start_local
from loopdeck.tui.decision_dialogs import OutcomeDialog
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.fleet_screen import FleetScreen
from loopdeck.tui.run_screen import RunScreen

SIZE = (120, 40)


def _said(app: LoopdeckApp) -> list[str]:
    return notices(app)


async def _approve(pilot: Pilot[Any], app: LoopdeckApp, call_id: str) -> None:
    def asked() -> bool:
        return isinstance(app.screen, ApprovalDialog) and app.screen.request.call_id == call_id

    await wait_until(pilot, asked)
    await pilot.press("a")


async def _ended_with_an_unknown_outcome(pilot: Pilot[Any], app: LoopdeckApp) -> RunScreen:
    """order_support's `unknown-outcome` from the fleet, both writes approved, run to its end:
    c2 (the customer's mail) is left unknown."""
    await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
    start_local(app, str(SAMPLES / "order_support"), "unknown-outcome")
    await _approve(pilot, app, "c2")
    await _approve(pilot, app, "c3")
    await wait_until(pilot, lambda: (s := run_screen(app)) is not None and s.outcome is not None)
    screen = run_screen(app)
    assert screen is not None and screen.outcome is not None
    assert screen.outcome.stop_reason.value == "goal_met"
    assert screen.view.unknown == {"c2": "notify_customer"}
    await wait_until(pilot, lambda: app.screen is screen)
    return screen


@pytest.mark.parametrize(("key", "status", "outcome"), [
    ("y", CallStatus.EXECUTED, "executed"),
    ("n", CallStatus.FAILED, "failed"),
])  # fmt: skip
async def test_o_on_an_ended_run_records_the_word_and_shows_it(
    tmp_path, key: str, status: CallStatus, outcome: str
) -> None:
    db = tmp_path / "s.db"
    app = LoopdeckApp(ConsoleStart.for_fleet(db))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        screen = await _ended_with_an_unknown_outcome(pilot, app)
        assert "1 outcome unknown · o" in str(screen.query_one("#calls").border_title)
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, OutcomeDialog))
        await pilot.press(key)
        await wait_until(pilot, lambda: not screen.view.unknown)
        assert screen.view.calls["c2"].status is status
        assert "by console" in screen.view.decided["c2"].split("; ")[-1]
        await wait_until(pilot, lambda: any(m.startswith("c2: ") for m in _said(app)))
        assert not any("failed" in m or "not recorded" in m for m in _said(app)), _said(app)
        await wait_until(pilot, lambda: not screen.check_action("outcome", ()))
        assert "outcome unknown" not in str(screen.query_one("#calls").border_title)
        assert app.is_running
        run_id = screen.view.run_id
    store = await open_store(db)
    try:
        rows = await store.fetchall(
            "SELECT outcome FROM approvals WHERE run_id = ? AND call_id = 'c2'", (run_id,)
        )
        assert [row["outcome"] for row in rows] == [outcome]
        events = await store.fetchall(
            "SELECT body FROM events WHERE run_id = ? AND kind = 'outcome_resolved'", (run_id,)
        )
        [said] = [json.loads(row["body"]) for row in events]
        assert (said["call_id"], said["applied"], said["by"]) == ("c2", key == "y", "console")
    finally:
        await store.close()
