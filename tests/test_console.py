"""The console driven as a person would: keys in, the runtime's outcome asserted."""

import pytest
from conftest import HARNESS, SAMPLES
from console_helpers import console_app, finished, run_screen, start_from_fleet, wait_until
from textual.widgets import Input

from loopdeck.core.approvals import AutoApprover
from loopdeck.core.events import CallStatus
from loopdeck.core.states import StopReason
from loopdeck.tui.approval_offers import ApprovalsChanged
from loopdeck.tui.dialogs import ApprovalDialog, ConfirmKillDialog
from loopdeck.tui.panels import RunHeader

SIZE = (160, 48)


def _dialog_open(app) -> bool:
    return isinstance(app.screen, ApprovalDialog)


async def test_approve_in_the_dialog_meets_the_goal() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog_open(app))
        assert app.screen.request.tool == "update_delivery_address"
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        outcome = run_screen(app).outcome
        assert outcome.stop_reason is StopReason.GOAL_MET
        update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
        assert update.status is CallStatus.EXECUTED
        assert "GOAL_MET" in str(run_screen(app).query_one("#states").render())


async def test_reject_with_a_reason_reaches_the_model() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog_open(app))
        await pilot.press("r")
        # the reason is typed in the approval itself, below the arguments it rejects
        await wait_until(pilot, lambda: isinstance(app.screen.focused, Input))
        assert app.screen.query_one("#approval-args").display
        await pilot.press(*"ask the customer first")
        await pilot.press("enter")
        await wait_until(pilot, lambda: finished(app))
        outcome = run_screen(app).outcome
        update = next(c for c in outcome.calls if c.tool == "update_delivery_address")
        assert update.status is CallStatus.REJECTED
        assert update.result["error"]["message"] == "ask the customer first"
        assert outcome.stop_reason is not StopReason.GOAL_MET


async def test_escape_leaves_the_call_pending_and_w_reopens_it() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog_open(app))
        await pilot.press("escape")
        screen = run_screen(app)
        await wait_until(pilot, lambda: app.screen is screen)
        screen.post_message(ApprovalsChanged())  # what the queue's next change sends
        await pilot.pause()
        assert app.screen is screen  # not reopened by itself
        assert "1 approval waiting" in str(screen.query_one(RunHeader).render())
        assert screen.outcome is None
        await pilot.press("w")
        await wait_until(pilot, lambda: _dialog_open(app))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.GOAL_MET


async def test_stop_after_current_tools_ends_cancelled() -> None:
    app = console_app(HARNESS, "slow-long", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        screen = None

        def slow_running() -> bool:
            nonlocal screen
            screen = run_screen(app)
            records = screen.runtime.calls.records if screen else []
            return bool(records) and records[0].status is CallStatus.RUNNING

        await wait_until(pilot, slow_running)
        await pilot.press("s")
        await wait_until(pilot, lambda: finished(app))
        outcome = screen.outcome
        assert outcome.stop_reason is StopReason.CANCELLED
        assert [c.status for c in outcome.calls] == [CallStatus.EXECUTED]
        assert "by console" in outcome.detail


async def test_kill_now_asks_first_then_ends_killed() -> None:
    app = console_app(HARNESS, "slow-long", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot,
            lambda: run_screen(app) is not None and bool(run_screen(app).runtime.calls.records),
        )
        await pilot.press("k")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmKillDialog))
        await pilot.press("y")
        await wait_until(pilot, lambda: finished(app))
        outcome = run_screen(app).outcome
        assert outcome.stop_reason is StopReason.KILLED
        assert outcome.calls[0].status is CallStatus.INTERRUPTED
        assert run_screen(app).runtime.env.slow_finished == 0  # cancelled, not run to its end


async def test_kill_can_be_called_off() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog_open(app))
        await pilot.press("escape")
        await pilot.press("k")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmKillDialog))
        await pilot.press("n")
        await pilot.press("w")
        await wait_until(pilot, lambda: _dialog_open(app))
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert run_screen(app).outcome.stop_reason is StopReason.GOAL_MET


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_pause_holds_the_loop_and_resume_releases_it() -> None:
    app = console_app(
        HARNESS,
        "poll",
        approver=AutoApprover(),
        max_tool_calls=100000,
        max_turns=100000,
        max_tokens=10**12,
        max_cost=10**6,
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(
            pilot, lambda: run_screen(app) is not None and run_screen(app).runtime.ledger.turns > 3
        )
        screen = run_screen(app)
        await pilot.press("p")
        # Parked at its checkpoint: the pause holds the agent's clock, and no turn starts
        # however many times the console's loop turns over.
        await wait_until(pilot, lambda: screen.runtime.ledger.held == "paused")
        held = screen.runtime.ledger.turns
        for _ in range(20):
            await pilot.pause()
        assert screen.runtime.ledger.turns == held and screen.runtime.ledger.held == "paused"
        assert "PAUSED" in str(screen.query_one("#states").render())
        await pilot.press("p")
        await wait_until(pilot, lambda: screen.runtime.ledger.turns > held + 3)
        await pilot.press("s")
        await wait_until(pilot, lambda: finished(app))
        assert screen.outcome.stop_reason is StopReason.CANCELLED


async def test_stop_withdraws_a_pending_approval_and_closes_the_dialog() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog_open(app))
        await pilot.press("s")
        await wait_until(pilot, lambda: finished(app))
        screen = run_screen(app)
        assert screen.outcome.stop_reason is StopReason.CANCELLED
        assert app.screen is screen
        update = next(c for c in screen.outcome.calls if c.tool == "update_delivery_address")
        assert update.status is CallStatus.WITHDRAWN


async def test_final_screen_stays_until_q() -> None:
    app = console_app(SAMPLES / "service_outage", "loop", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause(0.2)
        screen = run_screen(app)
        assert app.screen is screen and app.is_running
        assert "STALLED" in str(screen.query_one("#states").render())
        assert "STALLED" in str(screen.query_one("#findings-body").render())
        await pilot.press("q")
    # a finished run: q leaves at once, exit 0, and says how the run ended
    assert app.return_value == 0
    assert app.farewell.startswith("run run0test0001 · stalled · replay: loopdeck replay")


async def test_selecting_a_row_shows_arguments_and_result() -> None:
    app = console_app(SAMPLES / "service_outage", "solve", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause(0.1)
        table = run_screen(app).query_one("#calls")
        table.focus()
        table.move_cursor(row=1)
        await pilot.pause(0.1)
        panel = run_screen(app).query_one("#detail")
        detail = str(run_screen(app).query_one("#detail-body").render())
        assert "set_config" in panel.border_title
        assert "orders-db-v2" in detail and '"ok": true' in detail


async def test_broken_theme_is_reported_and_default_used(tmp_path) -> None:
    from conftest import ROOT

    for name in ("dark.toml", "light.toml"):
        (tmp_path / name).write_text((ROOT / "themes" / name).read_text())
    (tmp_path / "broken.toml").write_text('name = "loopdeck-broken"\nprimary = "not-a-color"\n')
    app = console_app(SAMPLES / "order_support", "ask")
    app.themes_folder = tmp_path
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        assert app.theme == "loopdeck-dark"
        assert any("broken.toml" in p for p in app.theme_problems)


async def test_theme_flag_and_palette_command_switch_themes() -> None:
    app = console_app(SAMPLES / "order_support", "ask", theme="light")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        assert app.theme == "loopdeck-light"
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert {"theme: loopdeck-dark", "theme: loopdeck-light"} <= set(commands)
        commands["theme: loopdeck-dark"].callback()
        await pilot.pause(0.05)
        assert app.theme == "loopdeck-dark"


async def test_run_commands_are_in_the_palette() -> None:
    app = console_app(SAMPLES / "order_support", "solve")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: _dialog_open(app))
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"run: stop after current tools", "run: kill now", "run: pause / resume"} <= titles
        assert "approvals: open pending" in titles


async def test_launcher_lists_envs_and_enter_starts_a_run() -> None:
    from loopdeck.tui.app import LoopdeckApp

    app = LoopdeckApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await start_from_fleet(pilot, app, "order_support", "escalate")
        await wait_until(pilot, lambda: screen.outcome is not None)
        assert screen.outcome.stop_reason is StopReason.HANDOFF


async def test_earlier_rounds_plans_are_reachable() -> None:
    app = console_app(SAMPLES / "service_outage", "wrong-guess", approver=AutoApprover())
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.pause(0.1)
        plan = run_screen(app).query_one("#plan")
        assert "round 2 of 2" in plan.border_title
        assert "Read the status again" in str(plan.render())
        await pilot.press("left_square_bracket")
        assert "round 1 of 2" in plan.border_title
        assert "Scale to 3 replicas" in str(plan.render())
        await pilot.press("right_square_bracket")
        assert "round 2 of 2" in plan.border_title
