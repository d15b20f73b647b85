"""The run's questions as the operator meets them in the console: over the live run, titled
by who asks, single keys for fixed choices, the kill switch reachable while typing, and
labels that say a question (not an approval) waits and which call the guard holds."""

from __future__ import annotations

import pytest
from conftest import SAMPLES
from console_helpers import console_app, finished, run_screen, screen_text, wait_until
from textual.widgets import Input

from loopdeck.caps import Cap
from loopdeck.core.approvals import AutoApprover
from loopdeck.core.states import StopReason
from loopdeck.operator import run_waits
from loopdeck.tui.calls_table import CallsTable
from loopdeck.tui.dialogs import ApprovalDialog, ConfirmKillDialog
from loopdeck.tui.panels import CallDetail, RunHeader
from loopdeck.tui.question_dialog import QuestionDialog
from loopdeck.tui.run_screen import RunScreen

ORDERS = SAMPLES / "order_support"
OUTAGE = SAMPLES / "service_outage"


def _dialog(app) -> QuestionDialog | None:
    """The question on top, once it is mounted: pushed is not yet composed (a loaded machine
    shows the gap), and its parts are what the tests read."""
    screen = app.screen
    return screen if isinstance(screen, QuestionDialog) and screen.is_mounted else None


def _text(widget) -> str:
    return str(widget.render())


async def test_the_agents_question_sits_over_the_live_run_also_after_a_resize() -> None:
    app = console_app(ORDERS, "ask-then-act", answers=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: _dialog(app) is not None)
        dialog = _dialog(app)
        assert isinstance(app.screen_stack[-2], RunScreen)  # the run is drawn beneath it
        assert "The agent asks" in _text(dialog.query_one("#answer-title"))
        for size in ((160, 48), (100, 30), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            box = dialog.query_one("#approval-box").region
            assert box.x > 0 and box.y > 0, f"{size}: the box is not centred: {box}"
            assert box.right < size[0] and box.bottom < size[1]
            keys = dialog.query_one("#answer-keys").region
            assert keys.height > 0 and keys.bottom <= box.bottom, f"{size}: keys cut"


async def test_typing_takes_letters_and_ctrl_k_still_kills() -> None:
    app = console_app(ORDERS, "ask-then-act", answers=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(
            pilot, lambda: _dialog(app) is not None and isinstance(app.screen.focused, Input)
        )
        await pilot.press("k", "s", "p")
        box = app.screen.query_one("#answer-text", Input)
        assert box.value == "ksp" and run_screen(app).running  # typed, nothing stopped
        await pilot.press("ctrl+k")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmKillDialog))
        await pilot.press("y")
        await wait_until(pilot, lambda: finished(app))
        assert run_screen(app).outcome.stop_reason is StopReason.KILLED


async def test_a_loop_question_says_a_question_waits_and_which_call_the_guard_holds() -> None:
    app = console_app(OUTAGE, "wrong-guess", approver=AutoApprover(), answers=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: _dialog(app) is not None)
        screen = run_screen(app)
        header = _text(screen.query_one(RunHeader))
        assert "1 question waiting" in header and "approval" not in header
        held = screen.view.guard_held
        assert held == "c5"
        table = screen.query_one(CallsTable)
        status = table.get_row(held)[table.columns_shown.index("status")]
        assert str(status) == "⟳ held: guard asks"
        table.move_cursor(row=table.row_count - 1)
        await pilot.pause()
        assert "held by the guard" in _text(screen.query_one(CallDetail).query_one("#detail-body"))
        assert "your say on a repeated call" in run_waits.waiting_for(screen.view)
        dialog = _dialog(app)
        assert dialog.choices == ("stop", "allow", "nudge")  # a read: allowing can run it
        await pilot.press("a")  # allowed once: it runs
        await wait_until(pilot, lambda: screen.view.calls["c5"].status.value == "executed")
        assert screen.view.guard_held != "c5"


async def test_a_budget_question_raises_the_cap_with_r_and_refuses_what_the_run_would() -> None:
    app = console_app(ORDERS, "solve", answers=True, max_turns=6)
    runtime = app.prepared.runtime
    runtime.config = runtime.config.model_copy(update={"pause_at": 0.5})
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: _dialog(app) is not None)
        dialog = _dialog(app)
        assert not dialog.query_one("#answer-text").display  # keys first, no box
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(dialog.focused, Input))
        await pilot.press("l", "o", "t", "s", "enter")
        assert "needs a number, not 'lots'" in _text(dialog.query_one("#answer-problem"))
        assert app.screen is dialog  # asked again in place
        box = dialog.query_one("#answer-text", Input)
        box.value = ""
        await pilot.press("2", "enter")  # as the run reads it: below what is used
        assert "the cap must be above 3, not 2" in _text(dialog.query_one("#answer-problem"))
        assert app.screen is dialog
        box.value = ""
        await pilot.press("4", "0", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        assert run_screen(app).view.caps[Cap.TURNS].limit == 40
        await pilot.press("a")
        await wait_until(pilot, lambda: finished(app))
        assert run_screen(app).outcome.stop_reason is StopReason.GOAL_MET


@pytest.mark.slow  # seconds: `make stress` runs it (CI too)
async def test_a_run_console_on_a_store_counts_what_waits_in_other_runs(tmp_path) -> None:
    """`loopdeck run … --db X` says "+N in other runs · i" as the fleet's run screen does."""
    from datetime import UTC, datetime

    from store_helpers import start_runner, wait_for_pending

    from loopdeck.operator.approval_queue import ApprovalQueue
    from loopdeck.operator.launch import RunOptions, prepare_run
    from loopdeck.operator.session import RunSession
    from loopdeck.tui.app import ConsoleStart, LoopdeckApp

    db = tmp_path / "s.db"
    other = start_runner(ORDERS, "solve", db, "--approve", "wait")
    try:
        await wait_for_pending(db)
        queue = ApprovalQueue()
        prepared = prepare_run(
            RunOptions(env=str(ORDERS), script="ask-then-act"), approver=queue, answerer=queue
        )
        session = RunSession.adopted(prepared, queue, location=db)
        app = LoopdeckApp(ConsoleStart.for_run(session), now=lambda: datetime.now(UTC))
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(pilot, lambda: _dialog(app) is not None)
            header = lambda: _text(run_screen(app).query_one(RunHeader))  # noqa: E731
            await wait_until(pilot, lambda: "+1 in other runs · i" in header())
            assert "1 question waiting" in header()  # its own, not counted as elsewhere
            await wait_until(pilot, lambda: isinstance(app.screen.focused, Input))
            await pilot.press("ctrl+k")  # the answer box has the focus: ctrl kills
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmKillDialog))
            await pilot.press("y")
            await wait_until(pilot, lambda: finished(app))
    finally:
        other.kill()
        other.wait()


async def test_the_budgets_panel_counts_the_wait_under_a_dialog_as_the_header_does() -> None:
    from loopdeck.tui.panels import BudgetPanel

    app = console_app(ORDERS, "ask-then-act", answers=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: _dialog(app) is not None)
        screen = run_screen(app)
        header = lambda: _text(screen.query_one(RunHeader))  # noqa: E731
        await wait_until(pilot, lambda: "waiting on you" in header())
        budgets = screen.query_one(BudgetPanel)
        await wait_until(pilot, lambda: "waiting on you" in _text(budgets))
        await pilot.press("ctrl+k", "y")
        await wait_until(pilot, lambda: finished(app))


async def test_a_run_watched_to_its_end_gets_no_unseen_stop_mark_in_the_fleet(tmp_path) -> None:
    from console_helpers import start_from_fleet

    from loopdeck.tui.app import ConsoleStart, LoopdeckApp
    from loopdeck.tui.fleet_screen import FleetScreen
    from loopdeck.tui.fleet_table import FleetTable

    app = LoopdeckApp(ConsoleStart.for_fleet(tmp_path / "s.db"))
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await start_from_fleet(pilot, app, "order_support", "escalate")
        await wait_until(pilot, lambda: screen.outcome is not None)
        await pilot.pause()
        run_id = screen.view.run_id
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        fleet = app.screen
        await wait_until(
            pilot, lambda: run_id in fleet.fleet.rows and not fleet.fleet.rows[run_id].live
        )
        assert str(fleet.query_one(FleetTable).mark(fleet.fleet.rows[run_id])) == ""


async def test_after_a_dialog_is_put_off_the_arrows_move_the_calls_selection() -> None:
    app = console_app(ORDERS, "solve")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape", "s")
        screen = run_screen(app)
        table = screen.query_one(CallsTable)
        assert screen.focused is table
        await wait_until(pilot, lambda: finished(app))
        assert table.row_count >= 2
        before = table.cursor_row
        await pilot.press("up")
        assert table.cursor_row == before - 1


async def test_the_footer_keeps_every_key_at_80_columns() -> None:
    from loopdeck.tui.keys_bar import KeysBar

    app = console_app(ORDERS, "solve")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("escape")
        await pilot.pause()
        shown = _text(run_screen(app).query_one(KeysBar))
        for key in (" s ", " k ", " p ", " q ", " w ", " t "):
            assert key in shown, f"{key.strip()} missing from {shown!r}"
        await pilot.press("k", "y")
        await wait_until(pilot, lambda: finished(app))


async def test_a_loop_question_nobody_answers_says_the_guard_acted_alone() -> None:
    app = console_app(OUTAGE, "wrong-guess", approver=AutoApprover(), answers=True)
    runtime = app.prepared.runtime
    runtime.config = runtime.config.model_copy(update={"loop_answer_s": 1.0})
    async with app.run_test(size=(160, 48)) as pilot:
        screen = run_screen(app)

        def titles() -> list[str]:
            return [e.title for e in screen.transcript.entries]

        def timed_out() -> bool:
            return any(t.startswith("no answer in time · q1") for t in titles())

        # Under load the second may pass before q1's dialog is drawn: the transcript says it
        # either way, and a dialog that was shown says it as it closes.
        await wait_until(pilot, lambda: _dialog(app) is not None or timed_out())
        dialog = _dialog(app)
        shown = dialog is not None and dialog.question_id == "q1"
        await wait_until(pilot, timed_out)
        if shown:  # it says so (and stays until left, or until the run ends: soon, here)
            said = "q1: no answer in time; the guard blocked the call and the run went on"
            await wait_until(pilot, lambda: dialog.gone_said is not None)
            assert dialog.gone_said == said
        await wait_until(pilot, lambda: _dialog(app) is None or _dialog(app).question_id != "q1")
        assert any(t.startswith("the guard stopped a repeat · q1") for t in titles())
        await wait_until(pilot, lambda: finished(app))


# Several seconds of subprocesses or console: in `make stress` (CI runs both).
@pytest.mark.slow
async def test_the_count_of_other_runs_drops_a_run_whose_runner_died(tmp_path) -> None:
    """A runner killed with its write pending would be counted forever: the count marks it
    crashed, as the fleet does, and stops counting it."""
    import signal

    from store_helpers import start_runner, wait_for_pending

    from loopdeck.operator.following import reading
    from loopdeck.operator.inbox import WaitingCount

    db = tmp_path / "s.db"
    runner = start_runner(ORDERS, "solve", db, "--approve", "wait")
    try:
        pending = await wait_for_pending(db)
        count = WaitingCount()
        async with reading(db) as store:
            await count.refresh(store)
            assert count.by_run == {pending["run_id"]: 1}
            runner.send_signal(signal.SIGKILL)
            runner.wait()
            count.crash_checked = 0.0  # look now, not a second later
            await count.refresh(store)
            assert count.by_run == {}
    finally:
        runner.kill()


async def test_every_text_box_shows_pasted_controls_escaped() -> None:
    """The answer box, the reject reason: a pasted escape or bidi character is drawn as a mark,
    never reaches the terminal, and is sent as typed."""
    from test_markup_property import raw_controls

    hostile = "\x1b[2J\x07\u202eevil\u2066x\u2069 [b]x[/]"
    app = console_app(ORDERS, "ask-then-act", answers=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(
            pilot, lambda: _dialog(app) is not None and isinstance(app.screen.focused, Input)
        )
        # pasted, after the order the script acts on (it writes for the order the answer names)
        app.screen.query_one("#answer-text", Input).value = "ORD-1042 " + hostile
        await pilot.pause(0.1)
        assert raw_controls(screen_text(app)) == []
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ApprovalDialog))
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen.focused, Input))
        app.screen.focused.value = hostile
        await pilot.pause(0.1)
        assert raw_controls(screen_text(app)) == []
        await pilot.press("enter")
        await wait_until(pilot, lambda: finished(app) or _dialog(app) is not None)
        screen = run_screen(app)
        answered = [e for e in screen.transcript.entries if e.title.startswith("answered · q1")]
        assert answered and "\\u001b[2J" in answered[0].text  # sent as typed, shown escaped
        if not finished(app):
            await pilot.press("ctrl+k", "y")
            await wait_until(pilot, lambda: finished(app))
