"""The fleet's toast of a wait ("run X waits for your approval") says only what still waits
where the operator is not looking: none pops up over the run's own open dialog, and one shown
is taken down once its wait is decided (it stayed over the approval and after the run
stopped). The toasts' own timeout is raised here, so only a take-down removes one."""

from __future__ import annotations

from pathlib import Path

from conftest import SAMPLES
from console_helpers import notices, start_from_fleet, wait_until

from loopdeck.tui.app import ConsoleStart, LoopdeckApp
from loopdeck.tui.dialogs import ApprovalDialog
from loopdeck.tui.fleet_screen import FleetScreen

WAITS = "waits for your approval"


def _fleet(app: LoopdeckApp) -> FleetScreen:
    [fleet] = [s for s in app.screen_stack if isinstance(s, FleetScreen)]
    return fleet


async def test_no_toast_of_a_wait_over_the_runs_own_dialog(tmp_path: Path) -> None:
    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    app.NOTIFICATION_TIMEOUT = 600
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        screen = await start_from_fleet(pilot, app, str(SAMPLES / "order_support"), "solve")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        fleet = _fleet(app)
        run_id = screen.view.run_id
        # The fleet saw the run start waiting (the alert is made as it is seen).
        await wait_until(pilot, lambda: fleet.alerts.seen.get(run_id, (0,))[0] == 1)
        await pilot.pause()
        assert not [t for t in notices(app) if WAITS in t], notices(app)


async def test_a_toast_of_a_wait_is_taken_down_once_it_is_decided() -> None:
    """Two runs wait: one decided, the toast names the other; it decided too (or its run
    opened), the toast is gone."""
    from textual.app import App
    from textual.screen import Screen

    from loopdeck.operator.fleet import FleetRow
    from loopdeck.operator.fleet_alerts import Alert
    from loopdeck.tui.alert_toasts import AlertToasts

    rows = {
        r: FleetRow(run_id=r, env="e", script="s", model="m", state="awaiting_approval",
                    stop_reason=None, started_at=None, pending=1)
        for r in ("r1", "r2", "r3")
    }  # fmt: skip
    app = App()
    app.NOTIFICATION_TIMEOUT = 600
    async with app.run_test(size=(80, 24)) as pilot:
        screen: Screen[None] = Screen()
        await app.push_screen(screen)
        toasts = AlertToasts()
        toasts.show(screen, [Alert(r, f"run {r} {WAITS}") for r in ("r1", "r2")])
        toasts.show(screen, [Alert("r3", f"run r3 {WAITS}")], looked_at="r3")  # its screen open
        await pilot.pause()
        assert [t for t in notices(app) if "wait" in t] == [
            "2 runs wait for your approval (i: the inbox): r1, r2"
        ]
        rows["r1"].pending = 0  # decided
        toasts.settle(screen, rows, looked_at=None)
        await pilot.pause()
        assert [t for t in notices(app) if "wait" in t] == [f"run r2 {WAITS}"]
        toasts.settle(screen, rows, looked_at="r2")  # opened: its dialog says it
        await pilot.pause()
        assert not [t for t in notices(app) if "wait" in t]
